package agent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/cenkalti/backoff/v5"

	v1 "kiln.dev/kiln/api/v1"
	"kiln.dev/kiln/internal/agent/journal"
	"kiln.dev/kiln/internal/agent/state"
)

// Defaults of RunOptions.
const (
	DefaultHeartbeatInterval = 5 * time.Second
	DefaultMaxBackoff        = 10 * time.Second
	// journalRetention is how long acknowledged journal entries are kept.
	journalRetention = 24 * time.Hour
)

// RunOptions say how to run. DataDir is required and must hold a joined
// state (Join).
type RunOptions struct {
	DataDir string
	// Executor runs instructions; NoDistribution when nil.
	Executor Executor
	// HeartbeatInterval is used until the controller's welcome says
	// otherwise; DefaultHeartbeatInterval when zero.
	HeartbeatInterval time.Duration
	// Root is the host's root for prechecks and facts; "" means "/".
	Root string
	// Hostname, PrivateRoot and NoContainers are as in JoinOptions.
	Hostname     string
	PrivateRoot  bool
	NoContainers bool
	// BindAddress, when set, is the local address connections come from.
	BindAddress string
	// Prechecks, when set, replaces precheck.Run (tests).
	Prechecks func(ctx context.Context) []v1.PrecheckResult
	// MaxBackoff caps the wait between reconnects; DefaultMaxBackoff when
	// zero.
	MaxBackoff time.Duration
	Logger     *slog.Logger
	// Now is the agent's clock, for everything it times and stamps and
	// for the time-skew precheck; nil means time.Now.
	Now func() time.Time
	// Notices, when set, is asked every NoticePoll (DefaultNoticePoll when
	// zero) whether the cloud will take the machine away (spotnotice); a
	// notice is sent to the controller at once and again while it stands.
	Notices    func(ctx context.Context) (*v1.Interruption, error)
	NoticePoll time.Duration
}

// DefaultNoticePoll is how often the agent asks for a notice (AWS gives
// two minutes).
const DefaultNoticePoll = 5 * time.Second

// noticeRepeat is how often a standing notice is sent again (a session
// may have broken after it was taken from the outbox).
const noticeRepeat = 30 * time.Second

// Run holds the node's session until ctx ends, reconnecting with backoff,
// and runs the instructions it receives one at a time, in order. It returns
// nil when ctx ends, and an error wrapping ErrRefused when the controller
// refuses the session (an expired certificate: join again).
func Run(ctx context.Context, o RunOptions) error {
	if o.Executor == nil {
		o.Executor = NoDistribution{}
	}
	if o.HeartbeatInterval <= 0 {
		o.HeartbeatInterval = DefaultHeartbeatInterval
	}
	if o.MaxBackoff <= 0 {
		o.MaxBackoff = DefaultMaxBackoff
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	st, err := state.Load(o.DataDir)
	if err != nil {
		return fmt.Errorf("run: %w", err)
	}
	// Again at every start: a crash after a renewal was saved may have left the
	// files of the certificate before.
	if err := st.WriteTLSFiles(o.DataDir); err != nil {
		return fmt.Errorf("run: %w", err)
	}
	j, err := journal.Open(o.DataDir, o.Now)
	if err != nil {
		return fmt.Errorf("run: %w", err)
	}
	if err := j.Prune(o.Now().Add(-journalRetention)); err != nil {
		o.Logger.Warn("prune journal", "err", err)
	}
	out := newOutbox(o.Now)
	r := &runner{
		opts:    o,
		j:       j,
		out:     out,
		log:     forwarding(o.Logger, out).With("cluster", st.Cluster, "node", st.Node),
		queue:   make(chan v1.Instruction, 256),
		running: map[string]bool{},
	}
	if err := r.setIdentity(st); err != nil {
		return fmt.Errorf("run: %w", err)
	}
	return r.run(ctx)
}

func (o RunOptions) host() host {
	return host{root: o.Root, hostname: o.Hostname, bind: o.BindAddress, private: o.PrivateRoot, noContainers: o.NoContainers, dataDir: o.DataDir,
		now: o.Now}
}

type runner struct {
	opts  RunOptions
	j     *journal.Journal
	out   *outbox
	log   *slog.Logger
	queue chan v1.Instruction

	prechecks []v1.PrecheckResult

	mu      sync.Mutex
	running map[string]bool // queued or executing in this process

	idMu  sync.Mutex
	st    *state.State // the node's identity: renewal replaces it
	renew renewal
}

// checkHost runs the host prechecks (RunOptions.Prechecks in tests).
func (r *runner) checkHost(ctx context.Context) ([]v1.PrecheckResult, error) {
	if r.opts.Prechecks != nil {
		return r.opts.Prechecks(ctx), nil
	}
	id := r.identity()
	client, err := httpClient(id.ControllerCA, r.opts.BindAddress, nil)
	if err != nil {
		return nil, err
	}
	return r.opts.host().prechecks(ctx, id.Controller, client), nil
}

func (r *runner) run(ctx context.Context) error {
	checks, err := r.checkHost(ctx)
	if err != nil {
		return fmt.Errorf("run: %w", err)
	}
	r.prechecks = checks
	var wg sync.WaitGroup
	defer wg.Wait()
	ectx, stop := context.WithCancel(ctx)
	defer stop()
	wg.Go(func() { r.execute(ectx) })
	if r.opts.Notices != nil {
		wg.Go(func() { r.watchNotices(ectx) })
	}

	b := &backoff.ExponentialBackOff{
		InitialInterval:     200 * time.Millisecond,
		RandomizationFactor: 0.3,
		Multiplier:          2,
		MaxInterval:         r.opts.MaxBackoff,
	}
	b.Reset()
	for {
		connected, err := r.session(ctx)
		if ctx.Err() != nil {
			return nil
		}
		if errors.Is(err, ErrRefused) {
			r.log.Error("session refused", "err", err)
			return fmt.Errorf("run: %w", err)
		}
		if connected {
			b.Reset()
		}
		if errors.Is(err, errRenewed) {
			r.log.Info("connecting with the renewed certificate")
			continue
		}
		wait := b.NextBackOff()
		r.log.Info("session lost: reconnecting", "err", err, "in", wait.Round(time.Millisecond))
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(wait):
		}
	}
}

// offer takes an instruction from the controller: a known result is sent
// again, an instruction running here is left alone, any other (new, or
// started before a crash) is queued.
func (r *runner) offer(in v1.Instruction) {
	log := r.log.With("instruction", in.ID)
	e, ok, err := r.j.Get(in.ID)
	if err != nil {
		log.Error("read journal", "err", err)
		return
	}
	if ok && e.Result != nil {
		log.Info("instruction already done: sending its result again")
		r.out.push(v1.AgentMessage{Type: v1.AgentResult, Result: e.Result})
		return
	}
	r.mu.Lock()
	if r.running[in.ID] {
		r.mu.Unlock()
		return
	}
	r.running[in.ID] = true
	r.mu.Unlock()
	if ok {
		log.Info("instruction was started before a restart and has no result: running it again", "attempts", e.Attempts)
	}
	r.queue <- in
}

// execute runs queued instructions one at a time until ctx ends.
func (r *runner) execute(ctx context.Context) {
	for {
		var in v1.Instruction
		select {
		case <-ctx.Done():
			return
		case in = <-r.queue:
		}
		r.executeOne(ctx, in)
	}
}

func (r *runner) executeOne(ctx context.Context, in v1.Instruction) {
	log := r.log.With("instruction", in.ID)
	defer func() {
		r.mu.Lock()
		delete(r.running, in.ID)
		r.mu.Unlock()
	}()
	if _, err := r.j.Start(in); err != nil {
		// Not recorded as started: not run. The controller sends it again
		// at the next session.
		log.Error("journal: record start", "err", err)
		return
	}
	log.Info("running instruction", "kind", in.Kind)
	rep := &reporter{out: r.out, id: in.ID, run: r}
	err := r.opts.Executor.Execute(ctx, in, rep)
	if ctx.Err() != nil {
		// Stopped mid-way: no result; it runs again after a restart.
		log.Info("instruction interrupted", "err", err)
		return
	}
	res := v1.InstructionResult{Instruction: in.ID, State: v1.StepSucceeded}
	if data := rep.resultData(); err == nil && len(data) > 0 && !json.Valid(data) {
		// It could be neither journaled nor sent.
		err = fmt.Errorf("instruction %s (%s): the executor's result data is not JSON", in.ID, in.Kind)
	}
	if err != nil {
		res.State, res.Message, res.Retryable = v1.StepFailed, err.Error(), errors.Is(err, ErrRetryable)
		log.Warn("instruction failed", "err", err)
	} else {
		res.Data = rep.resultData()
		log.Info("instruction succeeded")
	}
	if err := r.j.Finish(res); err != nil {
		log.Error("journal: record result", "err", err)
		return
	}
	r.out.push(v1.AgentMessage{Type: v1.AgentResult, Result: &res})
}

// watchNotices asks for the cloud's notice every NoticePoll and sends it
// to the controller when it first appears, and every noticeRepeat while
// it stands.
func (r *runner) watchNotices(ctx context.Context) {
	poll := r.opts.NoticePoll
	if poll <= 0 {
		poll = DefaultNoticePoll
	}
	t := time.NewTicker(poll)
	defer t.Stop()
	var standing *v1.Interruption
	var sent time.Time
	failing := false
	for {
		n, err := r.opts.Notices(ctx)
		switch {
		case err != nil && !failing:
			r.log.Warn("could not ask for the cloud's interruption notice; trying again", "err", err)
			failing = true
		case err == nil:
			failing = false
		}
		now := r.opts.Now()
		if n != nil {
			if standing == nil || !standing.At.Equal(n.At) || standing.Action != n.Action {
				n.Noticed = now.UTC()
				standing, sent = n, time.Time{}
				r.log.Warn("the cloud will take this machine away", "kind", n.Kind, "action", n.Action, "at", n.At)
			}
			if now.Sub(sent) >= noticeRepeat {
				notice := *standing
				r.out.push(v1.AgentMessage{Type: v1.AgentNotice, Notice: &notice})
				sent = now
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}
