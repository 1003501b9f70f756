package bench

import (
	"context"
	"crypto/x509"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"sync"
	"testing"
	"time"

	v1 "kiln.dev/kiln/api/v1"
	"kiln.dev/kiln/test/waitfor"
)

// Agent fan-in (issue 9, benchmark 4): many agent sessions, real websocket
// connections on loopback from this process, heartbeating to one kilnd.
// Measured: kilnd's resident memory and CPU with every session up, and each
// heartbeat's round trip (sent → kilnd's answer received), against the
// same round trip to an echo server in this process (echo_test.go).

// fanIn says how big a fan-in run is.
type fanIn struct {
	agents     int
	perCluster int           // nodes per edge cluster
	interval   time.Duration // kilnd's --heartbeat-interval: agents heartbeat at it
	window     time.Duration // measured, once every session is up
	refWindow  time.Duration // of the reference
}

// fanInResult is what a run measured.
type fanInResult struct {
	d        *daemon
	clusters []string
	fleet    *fleetStats // kilnd's sessions
	ref      *fleetStats // the echo server's
	before   procSample  // kilnd's, with the nodes registered and no session open
	up, end  procSample  // kilnd's, when every session was up and at the window's end
	agents   []*simAgent
	stop     context.CancelFunc // stops the heartbeats
	beats    sync.WaitGroup
}

const benchProject = "default"

// runFanIn starts kilnd, makes the clusters and registers their nodes,
// measures the reference, opens every session and measures the window.
// The sessions keep heartbeating until finish or closeAll.
func runFanIn(t testing.TB, cfg fanIn) *fanInResult {
	t.Helper()
	r := &fanInResult{d: startKilnd(t, "--heartbeat-interval", cfg.interval.String()), fleet: &fleetStats{}, ref: &fleetStats{}}
	t.Cleanup(func() { r.closeAll() }) // before kilnd is killed (cleanups run last first)

	began := time.Now()
	acts := r.makeClusters(t, (cfg.agents+cfg.perCluster-1)/cfg.perCluster)
	ids := r.registerNodes(t, acts, cfg)
	t.Logf("agent fan-in setup: %d clusters and %d nodes registered in %s", len(acts), len(ids), time.Since(began).Round(time.Second))

	r.reference(t, ids, cfg)

	var err error
	if r.before, err = sampleProc(r.d.Cmd.Process.Pid); err != nil {
		t.Fatal(err)
	}
	began = time.Now()
	r.openSessions(t, ids, []byte(acts[0].Credentials.ControllerCA), cfg)
	waitStarted(t, r.fleet, len(ids), 10*time.Minute)
	t.Logf("agent fan-in setup: %d sessions open in %s", len(r.agents), time.Since(began).Round(time.Second))

	pid := r.d.Cmd.Process.Pid
	if r.up, err = sampleProc(pid); err != nil {
		t.Fatal(err)
	}
	r.fleet.from.Store(time.Now().UnixNano())
	saved := r.d.profileCPU(t, "fanin", cfg.window)
	measure(cfg.window)
	saved()
	r.d.profileMemory(t, "fanin")
	r.fleet.to.Store(time.Now().UnixNano())
	if r.end, err = sampleProc(pid); err != nil {
		t.Fatal(err)
	}
	return r
}

// measure waits out a measurement window: the benchmark measures time, it
// does not wait for a condition.
func measure(d time.Duration) { time.Sleep(d) }

// makeClusters creates n edge clusters (manual approval: nothing installs)
// and returns their activation material.
func (r *fanInResult) makeClusters(t testing.TB, n int) []*v1.Activation {
	t.Helper()
	ctx := context.Background()
	ops := make([]string, n)
	for i := range n {
		name := fmt.Sprintf("fan-%03d", i)
		_, op, err := r.d.API.CreateCluster(ctx, benchProject, &v1.Cluster{Name: name, Spec: v1.ClusterSpec{
			Provider: "edge", NodeApproval: "manual", ControlPlane: v1.ControlPlane{Size: 1, Dedicated: true}}})
		if err != nil {
			t.Fatalf("create cluster %s: %v", name, err)
		}
		r.clusters, ops[i] = append(r.clusters, name), op
	}
	acts := make([]*v1.Activation, n)
	for i, id := range ops {
		op, err := r.d.API.WaitOperation(ctx, id, nil)
		if err != nil {
			t.Fatalf("wait for the create of %s: %v", r.clusters[i], err)
		}
		if op.Status != v1.StateSucceeded {
			t.Fatalf("create of %s: %s %+v", r.clusters[i], op.Status, op.Error)
		}
		if acts[i], err = r.d.API.ReissueActivation(ctx, benchProject, r.clusters[i]); err != nil {
			t.Fatalf("activation of %s: %v", r.clusters[i], err)
		}
	}
	return acts
}

// registerNodes registers cfg.agents nodes, perCluster in each cluster, a
// few at a time (registration checks a PBKDF2 passphrase: it is CPU-bound
// in kilnd).
func (r *fanInResult) registerNodes(t testing.TB, acts []*v1.Activation, cfg fanIn) []agentIdentity {
	t.Helper()
	parallel := 4 * runtime.GOMAXPROCS(0)
	reg, err := newRegistrar(acts[0].Credentials.Controller, []byte(acts[0].Credentials.ControllerCA), parallel)
	if err != nil {
		t.Fatal(err)
	}
	ids := make([]agentIdentity, cfg.agents)
	err = forEach(cfg.agents, parallel, func(i int) error {
		c := i / cfg.perCluster
		var err error
		ids[i], err = reg.register(context.Background(), acts[c], fmt.Sprintf("%s-n%05d", r.clusters[c], i))
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return ids
}

// reference measures the echo server's round trip at kilnd's message rate
// (interval/agents) with at most 500 connections.
func (r *fanInResult) reference(t testing.TB, ids []agentIdentity, cfg fanIn) {
	t.Helper()
	n := min(len(ids), 500)
	interval := cfg.interval * time.Duration(n) / time.Duration(len(ids))
	e := startEcho(t, interval)
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(e.CACert)
	agents := make([]*simAgent, n)
	err := forEach(n, 32, func(i int) (err error) {
		agents[i], err = dialAgent(context.Background(), ids[i], e.URL, roots, r.ref)
		return err
	})
	if err != nil {
		t.Fatalf("reference: %v", err)
	}
	ctx, stop := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	epoch := time.Now()
	for i, a := range agents {
		wg.Go(func() { a.heartbeat(ctx, epoch, interval*time.Duration(i)/time.Duration(n), interval) })
	}
	r.ref.from.Store(time.Now().UnixNano())
	measure(cfg.refWindow)
	r.ref.to.Store(time.Now().UnixNano())
	stop()
	wg.Wait()
	waitAnswered(t, r.ref, "the reference's heartbeats", time.Minute)
	for _, a := range agents {
		a.close()
	}
}

// openSessions opens a session per node, a few at a time, each sending
// facts, prechecks and a first heartbeat, then heartbeating every interval
// at its own phase: the fleet's heartbeats spread evenly over the interval.
func (r *fanInResult) openSessions(t testing.TB, ids []agentIdentity, controllerCA []byte, cfg fanIn) {
	t.Helper()
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(controllerCA)
	ctx, stop := context.WithCancel(context.Background())
	r.stop = stop
	epoch := time.Now()
	r.agents = make([]*simAgent, len(ids))
	err := forEach(len(ids), 32, func(i int) error {
		a, err := dialAgent(ctx, ids[i], "", roots, r.fleet)
		if err != nil {
			return err
		}
		r.agents[i] = a
		if err := a.start(); err != nil {
			return fmt.Errorf("session of %s: %w", a.id.node, err)
		}
		r.beats.Go(func() { a.heartbeat(ctx, epoch, cfg.interval*time.Duration(i)/time.Duration(len(ids)), cfg.interval) })
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// finish stops the heartbeats (the sessions stay open).
func (r *fanInResult) finish() {
	if r.stop == nil {
		return
	}
	r.stop()
	r.beats.Wait()
	r.stop = nil
}

// closeAll stops the heartbeats and closes the sessions.
func (r *fanInResult) closeAll() {
	r.finish()
	for _, a := range r.agents {
		if a != nil {
			a.close()
		}
	}
	r.agents = nil
}

// waitStarted waits until the first heartbeat of n sessions was answered.
func waitStarted(t testing.TB, f *fleetStats, n int, timeout time.Duration) {
	t.Helper()
	waitfor.Cond(t, fmt.Sprintf("the first heartbeat of %d sessions answered", n), timeout, func() (bool, error) {
		return f.started.Load() >= int64(n), f.sessionsLost()
	})
}

// waitAnswered waits until every heartbeat sent so far was answered.
func waitAnswered(t testing.TB, f *fleetStats, what string, timeout time.Duration) {
	t.Helper()
	waitfor.Cond(t, what, timeout, func() (bool, error) {
		return f.answered.Load() >= f.sent.Load(), f.sessionsLost()
	})
}

// sessionsLost is an error once a session ended.
func (f *fleetStats) sessionsLost() error {
	if n := f.lost.Load(); n > 0 {
		return fmt.Errorf("%d sessions ended", n)
	}
	return nil
}

// forEach calls f(0) … f(n-1), parallel at once, and returns the first
// error (the calls not started yet are skipped).
func forEach(n, parallel int, f func(i int) error) error {
	var (
		wg    sync.WaitGroup
		mu    sync.Mutex
		first error
	)
	next := make(chan int)
	for range min(n, parallel) {
		wg.Go(func() {
			for i := range next {
				if err := f(i); err != nil {
					mu.Lock()
					if first == nil {
						first = err
					}
					mu.Unlock()
				}
			}
		})
	}
	for i := range n {
		mu.Lock()
		failed := first != nil
		mu.Unlock()
		if failed {
			break
		}
		next <- i
	}
	close(next)
	wg.Wait()
	return first
}

func envInt(name string, def int) int {
	if v, err := strconv.Atoi(os.Getenv(name)); err == nil && v > 0 {
		return v
	}
	return def
}

// BenchmarkAgentFanIn: for each size of KILN_BENCH_AGENTS (a
// comma-separated list; default 1,000 then 10,000, so the cost's growth
// shows), that many sessions, 100 nodes per edge cluster, heartbeating
// every 10 s for a 60 s window (KILN_BENCH_FANIN_WINDOW seconds), each size
// against a kilnd of its own. Targets: kilnd under 1 GiB resident,
// heartbeat round trip p99 under 50 ms. Run with -benchtime 1x.
func BenchmarkAgentFanIn(b *testing.B) {
	for _, n := range sizesFrom(b, "KILN_BENCH_AGENTS", []int{1000, 10000}) {
		b.Run(strconv.Itoa(n), func(b *testing.B) {
			cfg := fanIn{
				agents:     n,
				perCluster: 100,
				interval:   10 * time.Second,
				window:     time.Duration(envInt("KILN_BENCH_FANIN_WINDOW", 60)) * time.Second,
				refWindow:  10 * time.Second,
			}
			for range b.N {
				r := runFanIn(b, cfg)
				r.finish()
				// The answers to the window's last heartbeats, for the count. Not
				// waitfor.Cond: answers still missing after 2 minutes are part of
				// the result the report gives, not a failure of the benchmark.
				deadline := time.Now().Add(2 * time.Minute)
				for r.fleet.answered.Load() < r.fleet.sent.Load() && time.Now().Before(deadline) {
					time.Sleep(50 * time.Millisecond)
				}
				report(b, r, cfg)
				r.closeAll()
			}
		})
	}
}

func report(b *testing.B, r *fanInResult, cfg fanIn) {
	p50, p99 := r.fleet.rtt.percentile(50), r.fleet.rtt.percentile(99)
	rp50, rp99 := r.ref.rtt.percentile(50), r.ref.rtt.percentile(99)
	cpu := cpuShare(r.up, r.end)
	b.ReportMetric(float64(r.fleet.welcomed.Load()), "sessions")
	b.ReportMetric(float64(r.fleet.windowSent.Load()-int64(r.fleet.rtt.count())), "unanswered")
	b.ReportMetric(ms(p50), "heartbeat-p50-ms")
	b.ReportMetric(ms(p99), "heartbeat-p99-ms")
	b.ReportMetric(mib(r.end.RSS), "kilnd-rss-MiB")
	perSession := float64(r.end.RSS-r.before.RSS) / 1024 / float64(max(r.fleet.welcomed.Load(), 1))
	b.ReportMetric(perSession, "kilnd-KiB/session")
	b.ReportMetric(mib(r.end.PeakRSS), "kilnd-peak-rss-MiB")
	b.ReportMetric(cpu, "kilnd-cpu-cores")
	b.ReportMetric(ms(rp99), "ref-p99-ms")
	if rp99 > 0 {
		b.ReportMetric(float64(p99)/float64(rp99), "p99/ref")
	}
	b.Logf("agent fan-in: %d sessions, %d heartbeats answered of %d sent in %s (every %s): round trip p50 %.1f ms p99 %.1f ms (target under 50 ms); "+
		"kilnd RSS %.0f MiB before the sessions, %.0f MiB with every session up, %.0f MiB after the window (%.1f KiB a session), peak %.0f MiB (target under 1 GiB), CPU %.2f cores; "+
		"reference (echo server, %d heartbeats): p50 %.2f ms p99 %.2f ms; p99 %.1f× the reference",
		r.fleet.welcomed.Load(), r.fleet.rtt.count(), r.fleet.windowSent.Load(), cfg.window, cfg.interval, ms(p50), ms(p99),
		mib(r.before.RSS), mib(r.up.RSS), mib(r.end.RSS), perSession, mib(r.end.PeakRSS), cpu,
		r.ref.rtt.count(), ms(rp50), ms(rp99), float64(p99)/float64(max(rp99, 1)))
}

// TestAgentFanInSmall runs the fan-in at a small scale: every session is
// welcomed, every heartbeat answered, and the nodes are DISCOVERED (manual
// approval, passing prechecks) with a heartbeat recorded.
func TestAgentFanInSmall(t *testing.T) {
	cfg := fanIn{agents: 50, perCluster: 20, interval: time.Second, window: 2 * time.Second, refWindow: time.Second}
	r := runFanIn(t, cfg)
	if got := r.fleet.welcomed.Load(); got != int64(cfg.agents) {
		t.Errorf("%d sessions welcomed, want %d", got, cfg.agents)
	}
	for _, name := range r.clusters {
		nodes, err := r.d.API.ListNodes(context.Background(), benchProject, name)
		if err != nil {
			t.Fatal(err)
		}
		want := cfg.perCluster // every cluster but the last is full
		if name == r.clusters[len(r.clusters)-1] {
			want = cfg.agents - cfg.perCluster*(len(r.clusters)-1)
		}
		if len(nodes) != want {
			t.Errorf("cluster %s has %d nodes, want %d", name, len(nodes), want)
		}
		for _, n := range nodes {
			if n.State != v1.NodeDiscovered || n.LastHeartbeat == nil {
				t.Errorf("node %s: %s %q, last heartbeat %v; want DISCOVERED with a heartbeat", n.Name, n.State, n.Message, n.LastHeartbeat)
			}
		}
	}
	r.finish()
	waitAnswered(t, r.fleet, "every heartbeat's answer", time.Minute)
	if r.fleet.rtt.count() == 0 || r.ref.rtt.count() == 0 {
		t.Errorf("measured %d heartbeats of kilnd and %d of the reference, want some of each", r.fleet.rtt.count(), r.ref.rtt.count())
	}
	if lost := r.fleet.lost.Load(); lost > 0 {
		t.Errorf("%d sessions ended before the test closed them", lost)
	}
	t.Logf("%d heartbeats sent, all answered; %d measured: p50 %s p99 %s (reference p99 %s)", r.fleet.sent.Load(),
		r.fleet.rtt.count(), r.fleet.rtt.percentile(50), r.fleet.rtt.percentile(99), r.ref.rtt.percentile(99))
	r.closeAll()
}
