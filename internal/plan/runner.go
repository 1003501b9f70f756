package plan

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"runtime/debug"
	"strings"
	"sync"
	"time"

	"github.com/cenkalti/backoff/v5"
	"github.com/prometheus/client_golang/prometheus"

	v1 "kiln.dev/kiln/api/v1"
	"kiln.dev/kiln/internal/failure"
	"kiln.dev/kiln/internal/fault"
	"kiln.dev/kiln/internal/plan/profile"
	"kiln.dev/kiln/internal/plan/step"
	"kiln.dev/kiln/internal/provider"
	"kiln.dev/kiln/internal/snapshots"
	"kiln.dev/kiln/internal/store"
	"kiln.dev/kiln/internal/trust"
	"kiln.dev/kiln/internal/validate/dynamic"
)

// StepHook is an optional capability of a provider: BeforeStep is called
// before every attempt of every step, and its error is treated as the
// step's. The sim provider uses it to inject faults.
type StepHook interface {
	BeforeStep(ctx context.Context, c provider.Cluster, step string) error
}

// Options configure a Runner. Store and Providers are required.
type Options struct {
	Store     Store
	Providers provider.Registry
	Logger    *slog.Logger // default: slog.Default()

	// MaxAttempts bounds the attempts of one step within one run before a
	// retryable error fails the operation. Default 8.
	MaxAttempts int
	// MaxDequeues is how many claims without progress an operation gets
	// before it fails with DequeueLimitExceeded. Default 5.
	MaxDequeues int
	// NewBackOff returns the wait between attempts of a step. Default:
	// exponential from 1s, capped at 30s.
	NewBackOff func() backoff.BackOff
	// NodeTimeout bounds how long a step waits for nodes to reach a state
	// before it fails with a retryable Timeout. Default 20m.
	NodeTimeout time.Duration
	// Diagnose, when set, gathers and keeps a diagnostics bundle of a
	// cluster whose operation opID just failed (package diagnose), with
	// the cluster's API when it has one; it returns the bundle's id.
	Diagnose func(ctx context.Context, cl *store.Cluster, opID, reason string, kube KubeReader) (string, error)
	// ComponentCertificateTTL, when set, is the lifetime of the Kubernetes
	// certificates node installs issue, instead of the cluster's
	// spec.certificateTTLDays: a test setting (kilnd
	// --component-cert-ttl), for certificates that expire in minutes.
	ComponentCertificateTTL time.Duration
	// AgentLost is how long a step waiting for an instruction's result
	// lets the node's agent go without a heartbeat before it fails,
	// retryable, naming the node and what it was doing. Default 30s (six
	// heartbeats).
	AgentLost time.Duration
	// NodePoll is how often a waiting step looks at the nodes. Default 250ms.
	NodePoll time.Duration
	// Now is the clock for step and operation times. Default time.Now.
	Now func() time.Time
	// Agents wakes agent sessions when an instruction is issued; optional.
	Agents Agents
	// Bootstrap gives the bootstrap data the plan hands providers with
	// each machine (provider.MachineSpec.Bootstrap); nil hands none, and a
	// provider whose machines run an agent refuses to make one.
	Bootstrap Bootstrapper
	// InstructionPoll is how often a step waiting for an instruction's
	// result reads it. Default 250ms.
	InstructionPoll time.Duration
	// CancelPoll is how often a running operation reads whether someone
	// asked to cancel it, for the steps that wait; between steps it is
	// read every time. Default 1s.
	CancelPoll time.Duration
	// Drain tells runs that their process is stopping; kilnd passes its
	// worker's. The zero Drain never says so: a run then ends only when
	// it is done or its context is cancelled.
	Drain Drain
	// Packs applies the packs of cluster profiles (package packs); nil
	// records a profile version as applied without applying anything.
	Packs profile.PackApplier
	// Snapshots keeps backups' etcd snapshots; nil refuses backups and
	// restores.
	Snapshots *snapshots.Vault
	// Registerer, when set, gets the operations' metrics (metrics.go):
	// kiln_operation_duration_seconds and kiln_operation_failures_total.
	Registerer prometheus.Registerer
}

// Drain is how a run learns that the process running it is stopping.
// Signal returns a channel that is closed when the run under ctx should
// stop at its next safe point (between steps); the run then returns Err,
// which tells its caller to hand the lease back at once (when Err is nil
// the run returns an error of its own). A nil Signal, or a nil channel,
// never closes.
type Drain struct {
	Signal func(ctx context.Context) <-chan struct{}
	Err    error
}

// errDraining is what a run returns when it stopped to drain and its
// Drain named no error of its own.
var errDraining = errors.New("stopped at a safe point: the process drains")

// draining is the channel closed when the run under ctx should stop.
func (d Drain) draining(ctx context.Context) <-chan struct{} {
	if d.Signal == nil {
		return nil
	}
	return d.Signal(ctx)
}

// Runner carries out a claimed cluster's current operation, step by step.
// Its Run is what kilnd's worker calls with each cluster it claims.
type Runner struct {
	opts    Options
	log     *slog.Logger
	checker *dynamic.Checker
	m       *metrics
}

// NewRunner returns a Runner with opts, defaults filled in.
func NewRunner(opts Options) *Runner {
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	if opts.MaxAttempts <= 0 {
		opts.MaxAttempts = 8
	}
	if opts.MaxDequeues <= 0 {
		opts.MaxDequeues = 5
	}
	if opts.NewBackOff == nil {
		opts.NewBackOff = func() backoff.BackOff {
			b := backoff.NewExponentialBackOff()
			b.InitialInterval = time.Second
			b.MaxInterval = 30 * time.Second
			return b
		}
	}
	if opts.NodeTimeout <= 0 {
		opts.NodeTimeout = 20 * time.Minute
	}
	if opts.NodePoll <= 0 {
		opts.NodePoll = 250 * time.Millisecond
	}
	if opts.AgentLost <= 0 {
		opts.AgentLost = 30 * time.Second
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.InstructionPoll <= 0 {
		opts.InstructionPoll = 250 * time.Millisecond
	}
	if opts.CancelPoll <= 0 {
		opts.CancelPoll = time.Second
	}
	if opts.Drain.Err == nil {
		opts.Drain.Err = errDraining
	}
	return &Runner{opts: opts, log: opts.Logger,
		checker: &dynamic.Checker{Store: opts.Store, Providers: opts.Providers},
		m:       newMetrics(opts.Registerer, opts.Logger)}
}

// run is one Run of one claimed cluster.
type run struct {
	r     *Runner
	cl    *store.Cluster
	op    *store.Operation
	fence store.Fence
	p     provider.Provider
	pools provider.Pools   // p's pools, when they are groups the cloud names machines of; else nil
	stops provider.Stopper // p as a Stopper (hibernation); nil when it cannot stop machines
	pc    provider.Cluster
	log   *slog.Logger
	step  string // the step running now
	note  string // what the running step's message says when it succeeds
	// retried counts the calls the provider's client retried on its own
	// during the running step's attempts (provider.CallRetries).
	retried int

	// The store, a view per capability the steps use (store.go); every
	// write is fenced with fence.
	ops          OperationStore
	nodeRecords  NodeStore // adds an event for each node change (nodeEvents)
	instructions InstructionStore
	secrets      trust.SecretStore
	events       EventStore

	// progressMu guards progress and the saves a step's own goroutines
	// make (Progress, its provider's checkpoint).
	progressMu sync.Mutex
	progress   map[string]string // node -> what it is doing, in the running step's message

	// canceled is closed once the run noticed a request to cancel its
	// operation (cancelReq); it stops at its next safe point.
	canceled   chan struct{}
	cancelOnce sync.Once
	cancelReq  *v1.CancelRequest
}

// Run carries out cl's current operation with the lease cl was claimed with.
// It returns nil when the operation reached a terminal state (Succeeded or
// Failed, written in one FinishOperation), ctx.Err() when ctx was cancelled
// (lease lost or drain; nothing more is written), and another error when a
// store write failed; the next claimer then resumes at the step in flight.
func (r *Runner) Run(ctx context.Context, cl *store.Cluster) error {
	log := r.log.With("cluster", cl.Key().String(), "operation", cl.Status.CurrentOperation)
	op, err := r.opts.Store.GetOperation(ctx, cl.Status.CurrentOperation)
	switch {
	case errors.Is(err, store.ErrNotFound):
		return r.orphaned(ctx, log, cl, "its operation record is missing")
	case err != nil:
		return fmt.Errorf("get operation %q: %w", cl.Status.CurrentOperation, err)
	case v1.Terminal(op.Status):
		return r.orphaned(ctx, log, cl, "its operation has already ended")
	}
	x := &run{
		r: r, cl: cl, op: op, fence: cl.Lease.Fence(), log: log,
		pc:       provider.Cluster{Project: cl.Project, Name: cl.Name, UID: cl.UID, Spec: cl.Spec},
		canceled: make(chan struct{}),
	}
	st := r.opts.Store
	// The provider reaches its cloud with the account's credentials.
	a, err := store.FindCloudAccount(ctx, st, cl.Project, cl.Spec.CloudAccount)
	if err != nil {
		return err
	}
	if a != nil {
		x.pc.Account = &provider.Account{Name: a.Name, Credentials: a.Credentials}
	}
	x.ops, x.instructions, x.secrets, x.events = finishObserver{OperationStore: st, m: r.m}, st, st, st
	x.nodeRecords = nodeEvents{NodeStore: st, x: x}
	return x.execute(ctx)
}

// orphaned fails a cluster that is in progress without an operation to run,
// so that it stops being claimed. Nothing else can finish it.
func (r *Runner) orphaned(ctx context.Context, log *slog.Logger, cl *store.Cluster, why string) error {
	log.Error("cluster is in progress but "+why+"; marking it Failed", "state", cl.Status.ProvisioningState)
	cl.Status.FailedProvisioningState = cl.Status.ProvisioningState
	cl.Status.ProvisioningState = v1.StateFailed
	cl.Status.LastError = &v1.StatusError{Code: v1.CodeInternal, Message: "the operation could not be continued; retry it"}
	cl.Status.UpdatedAt = r.opts.Now().UTC()
	f := cl.Lease.Fence()
	if err := r.opts.Store.PutClusterStatus(ctx, cl, store.Cond{Fence: &f}); err != nil {
		return fmt.Errorf("mark orphaned cluster failed: %w", err)
	}
	return nil
}

func (x *run) execute(ctx context.Context) error {
	if len(x.op.Steps) == 0 {
		names := StepsFor(x.op.Kind, x.hostsJoin())
		if x.attached() {
			names = AttachedSteps(x.op.Kind)
		}
		for _, name := range names {
			x.op.Steps = append(x.op.Steps, v1.Step{Name: name, State: v1.StepPending})
		}
		if x.op.Steps == nil {
			return x.fail(ctx, -1, failure.Terminal(v1.CodeInternal, "unknown operation kind %q", x.op.Kind))
		}
		x.log.Info("filling in the operation's steps", "kind", x.op.Kind, "steps", len(x.op.Steps))
		if err := x.save(ctx, false); err != nil {
			return err
		}
	}
	current := x.nextStep()
	if x.cl.Dequeues > x.r.opts.MaxDequeues {
		return x.fail(ctx, current, failure.Terminal(v1.CodeDequeueLimit,
			"the operation made no progress after %d attempts", x.cl.Dequeues-1))
	}
	p, err := x.r.opts.Providers.Get(x.cl.Spec.Provider)
	if err != nil {
		return x.fail(ctx, current, &failure.Error{
			Code:    v1.CodeInvalidParameter,
			Message: fmt.Sprintf("provider %q is not available; available: %s", x.cl.Spec.Provider, strings.Join(x.r.opts.Providers.Names(), ", ")),
			Target:  "spec.provider",
			Err:     err,
		})
	}
	x.p, x.pools, x.stops = faultPoints(p), poolsOf(p), stopperOf(p)

	if current >= 0 && x.op.Steps[current].Attempts == 0 && (current == 0 || x.op.RetryOf != "") {
		x.log.Info("starting operation", "kind", x.op.Kind, "claims", x.cl.Dequeues, "retryOf", x.op.RetryOf, "force", x.op.Force)
		msg := fmt.Sprintf("%s operation started", x.op.Kind)
		if x.op.RetryOf != "" {
			msg = fmt.Sprintf("%s operation started: a retry of operation %s, from step %s", x.op.Kind, x.op.RetryOf, x.op.Steps[current].Name)
		}
		if x.forcing() {
			msg += "; forced: provider errors are ignored and what may be left behind is listed at the end"
		}
		x.event(ctx, "Normal", "OperationStarted", msg)
	} else if current >= 0 {
		x.log.Info("resuming operation", "kind", x.op.Kind, "step", x.op.Steps[current].Name, "claims", x.cl.Dequeues)
		x.event(ctx, "Normal", "OperationResumed", fmt.Sprintf("%s operation resumed at step %s", x.op.Kind, x.op.Steps[current].Name))
	}

	if x.op.CancelRequested != nil {
		x.noticeCancel(x.op.CancelRequested)
	}
	stop := x.watchCancel(ctx)
	defer stop()
	// started: the step was marked Running by the previous step's
	// checkpoint, which checked for a drain and brought any cancel
	// request with its write.
	started := false
	for i := range x.op.Steps {
		if done(x.op.Steps[i].State) {
			continue
		}
		if !started {
			if err := x.between(ctx); err != nil {
				return err
			}
		}
		if x.canceling() {
			// The step's work has not begun.
			return x.cancel(ctx, i, false)
		}
		fe, next, err := x.runStep(ctx, i, started)
		if err != nil {
			return err
		}
		if fe != nil && errors.Is(fe, step.ErrCancelRequested) {
			return x.cancel(ctx, i, true)
		}
		if fe != nil {
			return x.fail(ctx, i, fe)
		}
		started = next
	}
	return x.succeed(ctx)
}

func done(state string) bool { return state == v1.StepSucceeded || state == v1.StepSkipped }

// nextStep is the index of the first step not done, or -1.
func (x *run) nextStep() int {
	for i, s := range x.op.Steps {
		if !done(s.State) {
			return i
		}
	}
	return -1
}

// between is what runs between two steps, the first safe point: a
// draining worker hands the lease back here (its Drain's error), and a
// cancel requested is noticed (canceling says so after it).
func (x *run) between(ctx context.Context) error {
	if err := x.drained(ctx); err != nil {
		return err
	}
	return x.pollCancel(ctx)
}

// drained is the Drain's error when this process drains.
func (x *run) drained(ctx context.Context) error {
	select {
	case <-x.r.opts.Drain.draining(ctx):
		x.log.Info("stopping before the next step: this process drains", "after", x.step)
		return x.r.opts.Drain.Err
	default:
		return nil
	}
}

// start marks step s Running, its attempts one more, and returns its
// StepStarted event (first of an attempt at it in this run) or nil.
func (x *run) start(s *v1.Step, at time.Time, first bool) *store.Event {
	s.State, s.StartTime, s.EndTime = v1.StepRunning, &at, nil
	s.Attempts++
	if !first {
		return nil
	}
	msg := "step " + s.Name + " started"
	if s.Attempts > 1 {
		msg += fmt.Sprintf(" (attempt %d)", s.Attempts)
	}
	return x.newEvent("Normal", "StepStarted", msg)
}

// runStep runs step i until it succeeds, fails terminally, runs out of
// attempts or ctx ends. It returns the terminal failure, not yet recorded,
// or an error when the run must stop without writing anything more.
// started says the previous step's checkpoint marked it Running already;
// the bool returned says its own checkpoint marked the next step Running
// (the run goes on with it at once: one write between two steps, not two).
func (x *run) runStep(ctx context.Context, i int, started bool) (*failure.Error, bool, error) {
	s := &x.op.Steps[i]
	log := x.log.With("step", s.Name)
	fn := x.stepFunc(s.Name)
	if f := x.forceStep(s.Name); f != nil {
		fn = f
	}
	x.step = s.Name
	x.progressMu.Lock()
	x.progress, x.note, x.retried = nil, "", 0 // each step shows its own nodes
	x.progressMu.Unlock()
	if fn == nil {
		return failure.Terminal(v1.CodeInternal, "the plan has no step named %q", s.Name), false, nil
	}
	b := x.r.opts.NewBackOff()
	b.Reset()
	for try := 1; ; try++ {
		if !started || try > 1 {
			var events []*store.Event
			if ev := x.start(s, x.r.opts.Now().UTC(), try == 1); ev != nil {
				events = append(events, ev)
			}
			if err := x.save(ctx, false, events...); err != nil {
				return nil, false, err
			}
		}
		start := *s.StartTime
		log.Info("running step", "attempt", s.Attempts)
		fault.Hit("step." + s.Name + ".after-start")
		err := x.attempt(ctx, log, s.Name, fn)
		if ctx.Err() != nil {
			log.Info("step interrupted", "cause", context.Cause(ctx))
			return nil, false, ctx.Err()
		}
		if errors.Is(err, step.ErrCancelRequested) {
			log.Info("step stopped at a safe point: cancel requested")
			return canceledFailure(), false, nil
		}
		var skip *step.SkipError
		if err == nil || errors.As(err, &skip) {
			end := x.r.opts.Now().UTC()
			s.State, s.EndTime, s.Message = v1.StepSucceeded, &end, x.note
			x.dropCheckpoint(s.Name) // saved with the step's end below
			if x.retried > 0 {
				// What the provider's client absorbed (throttling, transient
				// errors) is not an attempt of the step, but is shown.
				retried := fmt.Sprintf("%d provider calls retried after throttling or transient errors", x.retried)
				s.Message = strings.TrimPrefix(x.note+"; "+retried, "; ")
			}
			if n := len(s.FailedAttempts); n > 0 && s.Message == "" {
				s.Message = fmt.Sprintf("succeeded at attempt %d, after %d failed (the last: %s)", s.Attempts, n, s.FailedAttempts[n-1].Message)
			}
			if skip != nil {
				s.State, s.Message = v1.StepSkipped, skip.Reason
			}
			log.Info("step done", "state", s.State, "duration", end.Sub(start))
			msg := fmt.Sprintf("step %s %s in %s", s.Name, strings.ToLower(s.State), end.Sub(start).Round(time.Millisecond))
			if skip != nil {
				msg = fmt.Sprintf("step %s skipped: %s", s.Name, skip.Reason)
			}
			events := []*store.Event{x.newEvent("Normal", "Step"+s.State, msg)}
			// The checkpoint starts the next step too unless this
			// process drains (it stops after the checkpoint) or a
			// cancel was noticed; the checkpoint itself brings a cancel
			// requested since (save), and execute honours it before
			// the next step's work begins.
			var (
				next  bool
				drain error
			)
			if j := i + 1; j < len(x.op.Steps) && !done(x.op.Steps[j].State) {
				drain = x.drained(ctx)
				if next = drain == nil && !x.canceling(); next {
					events = append(events, x.start(&x.op.Steps[j], end, true))
				}
			}
			fault.Hit("step." + s.Name + ".before-checkpoint")
			if err := x.save(ctx, true, events...); err != nil {
				return nil, false, err
			}
			fault.Hit("step." + s.Name + ".after-checkpoint")
			return nil, next, drain
		}
		fe := failure.From(err)
		if !fe.Retryable {
			if x.forcing() {
				return nil, false, x.ignore(ctx, i, fe)
			}
			return fe, false, nil
		}
		if try >= x.r.opts.MaxAttempts {
			fe = &failure.Error{
				Code:      fe.Code,
				Message:   fmt.Sprintf("step %s failed after %d attempts: %s", s.Name, try, fe.Message),
				Target:    fe.Target,
				Retryable: true,
				Err:       fe,
			}
			if x.forcing() {
				return nil, false, x.ignore(ctx, i, fe)
			}
			return fe, false, nil
		}
		wait := b.NextBackOff()
		if wait == backoff.Stop {
			if x.forcing() {
				return nil, false, x.ignore(ctx, i, fe)
			}
			return fe, false, nil
		}
		s.FailedAttempts = append(s.FailedAttempts, v1.Attempt{StartTime: start, EndTime: x.r.opts.Now().UTC(), Message: fe.Message})
		if n := len(s.FailedAttempts); n > v1.MaxFailedAttempts {
			s.FailedAttempts = s.FailedAttempts[n-v1.MaxFailedAttempts:]
		}
		s.Message = fmt.Sprintf("attempt %d failed: %s; retrying in %s", s.Attempts, fe.Message, wait.Round(time.Millisecond))
		log.Warn("step failed; retrying", "attempt", s.Attempts, "code", fe.Code, "retryIn", wait, "err", err)
		retrying := x.newEvent("Warning", "StepRetrying", fmt.Sprintf("step %s: %s", s.Name, s.Message))
		if err := x.save(ctx, false, retrying); err != nil {
			return nil, false, err
		}
		if err := x.pause(ctx, wait); errors.Is(err, step.ErrCancelRequested) {
			log.Info("step stopped while backing off: cancel requested")
			return canceledFailure(), false, nil
		} else if err != nil {
			log.Info("step interrupted while backing off", "cause", context.Cause(ctx))
			return nil, false, err
		}
	}
}

// attempt runs the provider's step hook, if any, then the step. A panic is
// turned into a terminal Internal error.
func (x *run) attempt(ctx context.Context, log *slog.Logger, name string, fn func(context.Context) error) (err error) {
	defer func() {
		if v := recover(); v != nil {
			log.Error("step panicked", "panic", v, "stack", string(debug.Stack()))
			err = &failure.Error{Code: v1.CodeInternal, Message: "an internal error occurred", Err: fmt.Errorf("panic: %v", v)}
		}
	}()
	ctx, retried := provider.WithCallRetries(ctx)
	ctx = provider.WithCheckpoint(ctx, checkpoint{x: x, step: name})
	defer func() {
		if n := retried.Count(); n > 0 {
			log.Info("the provider's client retried calls on its own", "calls", n)
			x.retried += n
		}
	}()
	if h, ok := x.p.(StepHook); ok {
		// The hook runs before the step does anything, so a cancel may
		// stop it (the sim's injected latency and hangs wait here).
		hctx, stop := x.cancelable(ctx)
		err := h.BeforeStep(hctx, x.pc, name)
		stop()
		if err != nil {
			if context.Cause(hctx) == step.ErrCancelRequested && ctx.Err() == nil {
				return step.ErrCancelRequested
			}
			return err
		}
	}
	return fn(ctx)
}

// save checkpoints the operation with events, what the step did, in one
// transaction. The store answers with the operation's cancel request, if
// one was made: the run notices it.
func (x *run) save(ctx context.Context, progress bool, events ...*store.Event) error {
	if err := x.ops.SaveOperation(ctx, x.op, x.fence, progress, events...); err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		return fmt.Errorf("save operation: %w", err)
	}
	if x.op.CancelRequested != nil {
		x.noticeCancel(x.op.CancelRequested)
	}
	return nil
}

// newEvent is an event of this run's cluster (by its uid: a late event
// never lands on a cluster created later under its name) and operation.
func (x *run) newEvent(typ, reason, msg string) *store.Event {
	return &store.Event{Project: x.cl.Project, Cluster: x.cl.Name, ClusterUID: x.cl.UID,
		Event: v1.Event{Type: typ, Reason: reason, Message: msg, Operation: x.op.ID}}
}

// event appends to the cluster's timeline. Events are best effort: a
// failure is logged and the operation goes on.
func (x *run) event(ctx context.Context, typ, reason, msg string) {
	if ctx.Err() != nil {
		return
	}
	if err := x.events.AppendEvent(ctx, x.newEvent(typ, reason, msg)); err != nil {
		x.log.Warn("could not append event", "reason", reason, "err", err)
	}
}
