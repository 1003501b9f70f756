package worker_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cenkalti/backoff/v5"
	"github.com/google/uuid"
	"github.com/prometheus/client_golang/prometheus"

	v1 "kiln.dev/kiln/api/v1"
	"kiln.dev/kiln/internal/plan"
	"kiln.dev/kiln/internal/provider"
	"kiln.dev/kiln/internal/provider/sim"
	"kiln.dev/kiln/internal/store"
	"kiln.dev/kiln/internal/store/sqlite"
	"kiln.dev/kiln/internal/store/sqlstore"
	"kiln.dev/kiln/internal/worker"
	"kiln.dev/kiln/test/waitfor"
)

// clock is a store clock tests can move forward.
type clock struct{ offset atomic.Int64 }

func (c *clock) now() time.Time          { return time.Now().Add(time.Duration(c.offset.Load())) }
func (c *clock) advance(d time.Duration) { c.offset.Add(int64(d)) }
func logger(t *testing.T) *slog.Logger   { return slog.New(slog.NewTextHandler(t.Output(), nil)) }
func quiet() *slog.Logger                { return slog.New(slog.NewTextHandler(io.Discard, nil)) }
func key(name string) store.Key          { return store.Key{Project: "p", Name: name} }
func openStore(t *testing.T, c *clock) store.Store {
	t.Helper()
	st, err := sqlite.Open(t.Context(), filepath.Join(t.TempDir(), "kiln.db"), sqlstore.WithClock(c.now))
	if err != nil {
		t.Fatalf("open store: %v", err)
	}
	t.Cleanup(func() { st.Close() })
	if err := st.PutProject(t.Context(), &v1.Project{Name: "p", ID: "/v1/projects/p"}, store.Cond{}); err != nil {
		t.Fatal(err)
	}
	return st
}

// create begins a create operation on cluster name, as the frontend does.
func create(t *testing.T, st store.Store, name string, labels map[string]string) string {
	t.Helper()
	id, err := uuid.NewV7()
	if err != nil {
		t.Fatal(err)
	}
	op := &store.Operation{ID: id.String(), Project: "p", Cluster: name, Kind: v1.KindCreate,
		Status: v1.OpInProgress, StartTime: time.Now(), Steps: plan.PendingSteps(v1.KindCreate)}
	cl := &store.Cluster{Project: "p", Name: name, Spec: v1.ClusterSpec{
		Provider: "sim", ControlPlane: v1.ControlPlane{Size: 1},
		WorkerPools: []v1.WorkerPool{{Name: "default", Size: 1}}, Labels: labels,
	}, Status: v1.ClusterStatus{ProvisioningState: v1.StateCreating, CurrentOperation: op.ID}}
	if err := st.BeginOperation(t.Context(), cl, op, store.Cond{}); err != nil {
		t.Fatalf("begin operation: %v", err)
	}
	return op.ID
}

// start runs w until the test ends or the returned stop is called; stop
// waits for Run to return.
func start(t *testing.T, w *worker.Worker) (stop func()) {
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			select {
			case err := <-done:
				if err != nil {
					t.Errorf("worker Run: %v", err)
				}
			case <-time.After(20 * time.Second):
				t.Errorf("worker did not stop")
			}
		})
	}
	t.Cleanup(stop)
	return stop
}

// overlapDetector wraps a Runner and records any cluster run by two jobs at
// once.
type overlapDetector struct {
	next    worker.Runner
	mu      sync.Mutex
	running map[string]string
	overlap []string
	runs    atomic.Int64
}

func (d *overlapDetector) Run(ctx context.Context, cl *store.Cluster) error {
	k := cl.Key().String()
	d.mu.Lock()
	if other, ok := d.running[k]; ok {
		d.overlap = append(d.overlap, fmt.Sprintf("%s run by %s while %s ran it", k, cl.Lease.Owner, other))
	}
	d.running[k] = cl.Lease.Owner
	d.mu.Unlock()
	d.runs.Add(1)
	defer func() {
		d.mu.Lock()
		delete(d.running, k)
		d.mu.Unlock()
	}()
	return d.next.Run(ctx, cl)
}

func TestTwoWorkersNeverRunTheSameCluster(t *testing.T) {
	st := openStore(t, &clock{})
	const clusters = 8
	var ops []string
	for i := range clusters {
		// A little latency per step, and a retried step, keep runs long enough to overlap.
		ops = append(ops, create(t, st, fmt.Sprintf("c%d", i), map[string]string{
			sim.LabelStepLatency: "2ms", sim.LabelFailStep: plan.StepEnsureNetwork, sim.LabelFailTimes: "1"}))
	}
	runner := plan.NewRunner(plan.Options{
		Store: st, Providers: provider.Registry{"sim": sim.New()}, Logger: quiet(),
		NewBackOff: func() backoff.BackOff { return backoff.NewConstantBackOff(time.Millisecond) },
	})
	det := &overlapDetector{next: runner, running: map[string]string{}}
	reg := prometheus.NewRegistry()
	for _, owner := range []string{"a", "b"} {
		start(t, worker.New(worker.Options{Store: st, Runner: det, Owner: owner, Poll: 5 * time.Millisecond,
			Concurrency: 3, Logger: quiet(), Registerer: reg}))
	}
	waitfor.Cond(t, "every operation to succeed", 20*time.Second, func() (bool, error) {
		for _, id := range ops {
			op, err := st.GetOperation(t.Context(), id)
			if err != nil || op.Status != v1.OpSucceeded {
				return false, nil
			}
		}
		return true, nil
	})
	det.mu.Lock()
	defer det.mu.Unlock()
	if len(det.overlap) > 0 {
		t.Errorf("clusters run concurrently:\n%v", det.overlap)
	}
	if got := gauge(t, reg, "kiln_worker_claims_total"); got < clusters {
		t.Errorf("kiln_worker_claims_total = %v, want at least %d", got, clusters)
	}
}

// blocker is a Runner that blocks until its context ends, or until release
// is closed, and reports what happened.
type blocker struct {
	started chan *store.Cluster
	release chan struct{}
	ended   chan error // context.Cause when cancelled, nil when released
}

func newBlocker() *blocker {
	return &blocker{started: make(chan *store.Cluster, 10), release: make(chan struct{}), ended: make(chan error, 10)}
}

func (b *blocker) Run(ctx context.Context, cl *store.Cluster) error {
	b.started <- cl
	select {
	case <-ctx.Done():
		b.ended <- context.Cause(ctx)
		return ctx.Err()
	case <-b.release:
		b.ended <- nil
		return nil
	}
}

func recv[T any](t *testing.T, what string, c <-chan T) T {
	t.Helper()
	select {
	case v := <-c:
		return v
	case <-time.After(20 * time.Second):
		t.Fatalf("timed out waiting for %s", what)
		panic("unreachable")
	}
}

func TestLeaseLossCancelsRun(t *testing.T) {
	clk := &clock{}
	st := openStore(t, clk)
	create(t, st, "c", nil)
	b := newBlocker()
	reg := prometheus.NewRegistry()
	start(t, worker.New(worker.Options{Store: st, Runner: b, Owner: "a", LeaseTTL: 300 * time.Millisecond,
		Heartbeat: 20 * time.Millisecond, Poll: 5 * time.Millisecond, Logger: logger(t), Registerer: reg}))
	recv(t, "the run to start", b.started)

	// Past the lease's expiry, another owner may claim it.
	clk.advance(time.Hour)
	thief, err := st.ClaimCluster(t.Context(), "thief", time.Minute)
	if err != nil {
		t.Fatalf("claim after expiry: %v", err)
	}
	if cause := recv(t, "the run to be cancelled", b.ended); !errors.Is(cause, worker.ErrLeaseLost) {
		t.Fatalf("run ended with cause %v, want ErrLeaseLost", cause)
	}
	waitfor.Cond(t, "the lost lease to be counted", 20*time.Second, func() (bool, error) { return gauge(t, reg, "kiln_worker_leases_lost_total") == 1, nil })
	// The worker must not have released the thief's lease.
	if err := st.RenewLease(t.Context(), thief.Key(), thief.Lease.Fence(), time.Minute); err != nil {
		t.Errorf("the thief lost its lease: %v", err)
	}
}

// TestLeaseTakeoverCounted: a worker claiming a lease whose holder died
// (it expired, never released) counts a takeover; a fresh claim does not.
func TestLeaseTakeoverCounted(t *testing.T) {
	clk := &clock{}
	st := openStore(t, clk)
	create(t, st, "orphan", nil)
	if _, err := st.ClaimCluster(t.Context(), "dead", time.Minute); err != nil {
		t.Fatal(err)
	}
	clk.advance(time.Hour)
	create(t, st, "fresh", nil)
	b := newBlocker()
	reg := prometheus.NewRegistry()
	start(t, worker.New(worker.Options{Store: st, Runner: b, Owner: "a", Poll: 5 * time.Millisecond,
		Logger: logger(t), Registerer: reg}))
	recv(t, "the first run to start", b.started)
	recv(t, "the second run to start", b.started)
	if got := gauge(t, reg, "kiln_worker_lease_takeovers_total"); got != 1 {
		t.Errorf("kiln_worker_lease_takeovers_total = %v, want 1 (the dead holder's lease, not the fresh one)", got)
	}
	close(b.release)
}

func TestDrainHandsLeasesBack(t *testing.T) {
	st := openStore(t, &clock{})
	create(t, st, "c", nil)
	b := newBlocker()
	stop := start(t, worker.New(worker.Options{Store: st, Runner: b, Owner: "a", Poll: 5 * time.Millisecond,
		DrainTimeout: 50 * time.Millisecond, Logger: logger(t)}))
	recv(t, "the run to start", b.started)

	stop() // returns when Run has returned
	if cause := recv(t, "the run to be cancelled", b.ended); !errors.Is(cause, worker.ErrDrainTimeout) {
		t.Fatalf("run ended with cause %v, want ErrDrainTimeout", cause)
	}
	cl, err := st.ClaimCluster(t.Context(), "b", time.Minute)
	if err != nil {
		t.Fatalf("claim right after drain: %v; the lease was not handed back", err)
	}
	if cl.Name != "c" {
		t.Errorf("claimed %s", cl.Key())
	}
}

func TestDrainLetsRunsFinish(t *testing.T) {
	st := openStore(t, &clock{})
	create(t, st, "c", nil)
	b := newBlocker()
	ctx, cancel := context.WithCancel(t.Context())
	w := worker.New(worker.Options{Store: st, Runner: b, Owner: "a", Poll: 5 * time.Millisecond,
		DrainTimeout: time.Minute, Logger: logger(t)})
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	recv(t, "the run to start", b.started)

	cancel()
	select {
	case <-done:
		t.Fatal("Run returned while a job was still running")
	case <-time.After(20 * time.Millisecond):
	}
	close(b.release)
	if cause := recv(t, "the run to end", b.ended); cause != nil {
		t.Fatalf("run was cancelled (%v); it should have been let finish", cause)
	}
	if err := recv(t, "Run to return", done); err != nil {
		t.Fatal(err)
	}
	if len(b.started) != 0 {
		t.Errorf("the worker claimed again while draining")
	}
}

// safePointRunner stops at its "safe point" when its worker drains.
type safePointRunner struct{ started chan struct{} }

func (r safePointRunner) Run(ctx context.Context, cl *store.Cluster) error {
	r.started <- struct{}{}
	select {
	case <-worker.Draining(ctx):
		return worker.ErrDraining
	case <-ctx.Done():
		return ctx.Err()
	}
}

// TestDrainingRunStopsAtASafePoint: a draining worker tells its runs
// (Draining); one that stops at a safe point has its lease handed back
// then, long before the drain timeout.
func TestDrainingRunStopsAtASafePoint(t *testing.T) {
	if worker.Draining(t.Context()) != nil {
		t.Fatal("Draining outside a worker's job is not nil")
	}
	st := openStore(t, &clock{})
	create(t, st, "c", nil)
	r := safePointRunner{started: make(chan struct{}, 1)}
	ctx, cancel := context.WithCancel(t.Context())
	w := worker.New(worker.Options{Store: st, Runner: r, Owner: "a", Poll: 5 * time.Millisecond,
		DrainTimeout: time.Hour, Logger: logger(t)})
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	recv(t, "the run to start", r.started)

	cancel()
	if err := recv(t, "Run to return (not after the hour-long drain timeout)", done); err != nil {
		t.Fatal(err)
	}
	if _, err := st.ClaimCluster(t.Context(), "b", time.Minute); err != nil {
		t.Fatalf("claim right after the drain: %v; the lease was not handed back", err)
	}
}

// countingStore counts lease renewals.
type countingStore struct {
	worker.Store
	renewals atomic.Int64
}

func (c *countingStore) RenewLease(ctx context.Context, k store.Key, f store.Fence, ttl time.Duration) error {
	err := c.Store.RenewLease(ctx, k, f, ttl)
	if err == nil {
		c.renewals.Add(1)
	}
	return err
}

func TestHeartbeatIsClamped(t *testing.T) {
	// A heartbeat above a third of the TTL would let the lease expire
	// between renewals under load; New lowers it. With a 60ms TTL and a
	// requested 1m heartbeat, renewals happen only if it was lowered.
	st := openStore(t, &clock{})
	create(t, st, "c", nil)
	cs := &countingStore{Store: st}
	b := newBlocker()
	start(t, worker.New(worker.Options{Store: cs, Runner: b, Owner: "a", LeaseTTL: 60 * time.Millisecond,
		Heartbeat: time.Minute, Poll: 5 * time.Millisecond, Logger: logger(t)}))
	recv(t, "the run to start", b.started)
	// Six renewals span more than the TTL.
	waitfor.Cond(t, "six renewals", 20*time.Second, func() (bool, error) { return cs.renewals.Load() >= 6, nil })
	if _, err := st.ClaimCluster(t.Context(), "b", time.Minute); !errors.Is(err, store.ErrNoWork) {
		t.Fatalf("another owner could claim a held lease: %v", err)
	}
	close(b.release)
}

// gauge reads a counter or gauge from reg.
func gauge(t *testing.T, reg *prometheus.Registry, name string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			if c := m.GetCounter(); c != nil {
				return c.GetValue()
			}
			if g := m.GetGauge(); g != nil {
				return g.GetValue()
			}
		}
	}
	return 0
}

// emptyClaims counts claims that found nothing.
type emptyClaims struct {
	store.Store
	n atomic.Int64
}

func (s *emptyClaims) ClaimCluster(ctx context.Context, owner string, ttl time.Duration) (*store.Cluster, error) {
	cl, err := s.Store.ClaimCluster(ctx, owner, ttl)
	if errors.Is(err, store.ErrNoWork) {
		s.n.Add(1)
	}
	return cl, err
}

func TestWakeClaimsAtOnce(t *testing.T) {
	st := &emptyClaims{Store: openStore(t, &clock{})}
	b := newBlocker()
	w := worker.New(worker.Options{Store: st, Runner: b, Owner: "a", Poll: time.Hour, Logger: quiet()})
	start(t, w)
	// The worker found nothing and now idles for an hour...
	waitfor.Cond(t, "an empty claim", 20*time.Second, func() (bool, error) { return st.n.Load() > 0, nil })
	create(t, st, "c", nil)
	// ...unless woken.
	w.Wake()
	if cl := recv(t, "the woken worker to run the new cluster", b.started); cl.Name != "c" {
		t.Fatalf("ran %s, want c", cl.Name)
	}
	close(b.release)
}
