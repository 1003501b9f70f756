// Package worker is the backend's lease loop: it claims clusters that have
// work, runs each under its own context while a heartbeat renews the lease,
// and hands leases back when a run ends or the process drains.
package worker

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"kiln.dev/kiln/internal/store"
)

// Store is what the worker needs of the store.
type Store interface {
	ClaimCluster(ctx context.Context, owner string, ttl time.Duration) (*store.Cluster, error)
	RenewLease(ctx context.Context, k store.Key, f store.Fence, ttl time.Duration) error
	ReleaseLease(ctx context.Context, k store.Key, f store.Fence) error
}

// Runner carries out a claimed cluster's work. ctx is cancelled when the
// lease is lost or the drain timeout passes; Run must then return promptly
// without writing. The worker releases the lease when Run returns.
type Runner interface {
	Run(ctx context.Context, cl *store.Cluster) error
}

// ErrLeaseLost is the cause of a run's context when its lease was lost.
var ErrLeaseLost = errors.New("lease lost")

// ErrDrainTimeout is the cause of a run's context when the worker drained
// and the run did not finish within the drain timeout.
var ErrDrainTimeout = errors.New("drain timeout")

// ErrDraining is what a Runner returns when it stopped at a safe point
// because its worker drains (Draining): the lease goes back at once, for
// another process to carry on from there.
var ErrDraining = errors.New("stopped at a safe point: the worker drains")

type drainingKey struct{}

// Draining is closed when the worker running ctx's job starts draining (its
// process is stopping). A Runner should then stop at its next safe point
// (between steps) and return ErrDraining: its lease is handed back at once,
// instead of when the run ends or the drain timeout cancels it. Outside a
// worker's job it is nil, which never closes.
func Draining(ctx context.Context) <-chan struct{} {
	ch, _ := ctx.Value(drainingKey{}).(<-chan struct{})
	return ch
}

// DefaultConcurrency is how many clusters a worker runs at once unless
// told otherwise: a run mostly waits (machines, nodes, Kubernetes), so
// many share a process; on 2 cores 32 keep a wave of sim clusters
// CPU-bound (docs/benchmarks.md).
const DefaultConcurrency = 32

// Options configure a Worker. Store and Runner are required.
type Options struct {
	Store  Store
	Runner Runner
	// Owner names this process in leases; unique per process. Default:
	// hostname-pid-random.
	Owner string
	// LeaseTTL is how long a claim or renewal holds a lease. Default 15s.
	LeaseTTL time.Duration
	// Heartbeat is how often a held lease is renewed. Default 5s; it is
	// lowered to a quarter of LeaseTTL when above a third of it.
	Heartbeat time.Duration
	// Poll is the wait after a claim found nothing, plus up to half again
	// of jitter. Default 500ms.
	Poll time.Duration
	// Concurrency is how many leases the worker holds at once.
	// DefaultConcurrency when zero.
	Concurrency int
	// DrainTimeout is how long running jobs get to finish after Run's
	// context is cancelled. Default 30s.
	DrainTimeout time.Duration
	Logger       *slog.Logger // default: slog.Default()
	// Registerer, when set, gets the worker's metrics:
	// kiln_worker_leases_held, kiln_worker_claims_total and
	// kiln_worker_leases_lost_total.
	Registerer prometheus.Registerer
}

// Worker is the lease loop. Use New.
type Worker struct {
	opts Options
	log  *slog.Logger
	m    *metrics
	wake chan struct{} // capacity 1: a Wake while busy is not lost
}

// New returns a Worker with opts, defaults filled in.
func New(opts Options) *Worker {
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	if opts.Owner == "" {
		opts.Owner = DefaultOwner()
	}
	if opts.LeaseTTL <= 0 {
		opts.LeaseTTL = 15 * time.Second
	}
	if opts.Heartbeat <= 0 {
		opts.Heartbeat = 5 * time.Second
	}
	if opts.Heartbeat > opts.LeaseTTL/3 {
		h := opts.LeaseTTL / 4
		opts.Logger.Warn("heartbeat must be at most a third of the lease; lowering it", "heartbeat", opts.Heartbeat, "leaseTTL", opts.LeaseTTL, "now", h)
		opts.Heartbeat = h
	}
	if opts.Poll <= 0 {
		opts.Poll = 500 * time.Millisecond
	}
	if opts.Concurrency <= 0 {
		opts.Concurrency = DefaultConcurrency
	}
	if opts.DrainTimeout <= 0 {
		opts.DrainTimeout = 30 * time.Second
	}
	log := opts.Logger.With("owner", opts.Owner)
	return &Worker{opts: opts, log: log, m: newMetrics(opts.Registerer, log), wake: make(chan struct{}, 1)}
}

// DefaultOwner returns hostname-pid-random.
func DefaultOwner() string {
	host, err := os.Hostname()
	if err != nil {
		host = "unknown"
	}
	return fmt.Sprintf("%s-%d-%08x", host, os.Getpid(), rand.Uint32())
}

// Owner returns the name this worker claims leases with.
func (w *Worker) Owner() string { return w.opts.Owner }

// Run claims and runs clusters until ctx is cancelled, then drains: it stops
// claiming at once, tells running jobs (Draining), gives them DrainTimeout
// to reach a safe point or finish, cancels the rest and releases their
// leases. It returns nil when every job is done.
func (w *Worker) Run(ctx context.Context) error {
	// Jobs outlive ctx by up to DrainTimeout; Draining tells them ctx ended.
	jobs, stopJobs := context.WithCancelCause(context.WithValue(context.WithoutCancel(ctx), drainingKey{}, ctx.Done()))
	defer stopJobs(nil)
	slots := make(chan struct{}, w.opts.Concurrency)
	var wg sync.WaitGroup
	w.log.Info("worker started", "concurrency", w.opts.Concurrency, "leaseTTL", w.opts.LeaseTTL, "heartbeat", w.opts.Heartbeat)

	for {
		select {
		case slots <- struct{}{}:
		case <-ctx.Done():
		}
		if ctx.Err() != nil {
			break
		}
		cl, err := w.claim(ctx)
		if err != nil {
			<-slots
			if !errors.Is(err, store.ErrNoWork) {
				w.log.Error("claim failed", "err", err)
			}
			if w.pause(ctx) != nil {
				break
			}
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() { <-slots }()
			w.job(jobs, cl)
		}()
	}

	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	running := len(slots)
	w.log.Info("draining", "jobs", running, "timeout", w.opts.DrainTimeout)
	t := time.NewTimer(w.opts.DrainTimeout)
	defer t.Stop()
	select {
	case <-done:
	case <-t.C:
		w.log.Warn("drain timeout passed; cancelling running jobs", "jobs", len(slots))
		stopJobs(ErrDrainTimeout)
		<-done
	}
	w.log.Info("worker stopped")
	return nil
}

// claim takes one lease. The claim itself is not cancelled with ctx, so its
// outcome is known; a lease won while draining is handed back at once.
func (w *Worker) claim(ctx context.Context) (*store.Cluster, error) {
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), w.opts.LeaseTTL)
	defer cancel()
	cl, err := w.opts.Store.ClaimCluster(cctx, w.opts.Owner, w.opts.LeaseTTL)
	if err != nil {
		return nil, err
	}
	w.m.claims.Inc()
	if cl.Lease.TakenFrom != "" {
		w.m.takeovers.Inc()
		w.log.Warn("took over a lease that expired with its holder", "cluster", cl.Key().String(), "from", cl.Lease.TakenFrom)
	}
	if ctx.Err() != nil {
		w.release(cl, w.log.With("cluster", cl.Key().String()))
		return nil, ctx.Err()
	}
	return cl, nil
}

// Wake makes an idle worker claim at once instead of at the end of its poll
// interval: the frontend in the same process calls it when it records a new
// operation. It never blocks.
func (w *Worker) Wake() {
	select {
	case w.wake <- struct{}{}:
	default:
	}
}

// pause waits Poll plus jitter, a Wake, or until ctx is done.
func (w *Worker) pause(ctx context.Context) error {
	d := w.opts.Poll + rand.N(w.opts.Poll/2+1)
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-w.wake:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// job runs one claimed cluster under its own context, renewing the lease
// every Heartbeat, and releases the lease when the run returns.
func (w *Worker) job(parent context.Context, cl *store.Cluster) {
	log := w.log.With("cluster", cl.Key().String(), "operation", cl.Status.CurrentOperation)
	w.m.held.Inc()
	defer w.m.held.Dec()
	ctx, cancel := context.WithCancelCause(parent)
	defer cancel(nil)
	hbDone := make(chan struct{})
	go func() {
		defer close(hbDone)
		w.heartbeat(ctx, cancel, cl, log)
	}()

	log.Info("running claimed cluster", "token", cl.Lease.Token, "claims", cl.Dequeues)
	start := time.Now()
	err := w.opts.Runner.Run(ctx, cl)
	cause := context.Cause(ctx)
	cancel(nil)
	<-hbDone
	switch {
	case errors.Is(cause, ErrLeaseLost):
		// Someone else holds the lease; there is nothing to release.
		log.Warn("run stopped: lease lost", "err", err)
		return
	case errors.Is(err, ErrDraining):
		log.Info("run stopped at a safe point to drain; handing the lease back")
	case err != nil && ctx.Err() != nil:
		log.Info("run stopped", "cause", cause)
	case err != nil:
		log.Error("run failed; releasing the lease for another attempt", "err", err)
	default:
		log.Info("run done", "duration", time.Since(start).Round(time.Millisecond))
	}
	w.release(cl, log)
}

// release hands the lease back. ErrLeaseLost means it was already released
// (FinishOperation does that) or taken.
func (w *Worker) release(cl *store.Cluster, log *slog.Logger) {
	ctx, cancel := context.WithTimeout(context.Background(), w.opts.LeaseTTL)
	defer cancel()
	err := w.opts.Store.ReleaseLease(ctx, cl.Key(), cl.Lease.Fence())
	if err != nil && !errors.Is(err, store.ErrLeaseLost) {
		log.Warn("could not release lease; it will expire", "err", err)
	}
}

// heartbeat renews the lease every Heartbeat until ctx is done. It cancels
// the run with ErrLeaseLost when a renewal says the lease is gone, or when
// no renewal has succeeded for a whole LeaseTTL (the lease may have
// expired and been claimed by another worker).
func (w *Worker) heartbeat(ctx context.Context, cancel context.CancelCauseFunc, cl *store.Cluster, log *slog.Logger) {
	t := time.NewTicker(w.opts.Heartbeat)
	defer t.Stop()
	renewed := time.Now()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		rctx, rcancel := context.WithTimeout(ctx, w.opts.Heartbeat)
		err := w.opts.Store.RenewLease(rctx, cl.Key(), cl.Lease.Fence(), w.opts.LeaseTTL)
		rcancel()
		switch {
		case err == nil:
			renewed = time.Now()
		case ctx.Err() != nil:
			return
		case errors.Is(err, store.ErrLeaseLost):
			w.m.lost.Inc()
			cancel(ErrLeaseLost)
			return
		case time.Since(renewed) >= w.opts.LeaseTTL:
			log.Error("lease not renewed for a whole TTL; stopping the run", "err", err)
			w.m.lost.Inc()
			cancel(ErrLeaseLost)
			return
		default:
			log.Warn("lease renewal failed; retrying at the next heartbeat", "err", err)
		}
	}
}
