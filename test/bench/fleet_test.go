package bench

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/sync/errgroup"

	"kiln.dev/kiln/api/client"
	v1 "kiln.dev/kiln/api/v1"
	"kiln.dev/kiln/internal/plan"
)

// waveClients is how many clients create clusters at once (issue 9).
const waveClients = 32

// simSpec is a cluster of 1 control plane and 2 workers on the sim provider
// (zero step latency in --dev).
func simSpec(name string) *v1.Cluster {
	return &v1.Cluster{Name: name, Spec: v1.ClusterSpec{
		Provider:     "sim",
		ControlPlane: v1.ControlPlane{Size: 1},
		WorkerPools:  []v1.WorkerPool{{Name: "default", Size: 2}},
	}}
}

// waveResult is what one wave measured.
type waveResult struct {
	clusters int
	accepted time.Duration // first PUT to the last one answered
	done     time.Duration // first PUT to the last operation Succeeded
}

// wave creates n clusters named prefix-0… through the API with clients
// concurrent clients, each creating its share and then waiting for its
// operations, and returns when all of them Succeeded. Any other end fails
// the benchmark.
func wave(ctx context.Context, t testing.TB, api *client.Client, prefix string, n, clients int) waveResult {
	t.Helper()
	start := time.Now()
	var (
		mu       sync.Mutex
		accepted time.Time
	)
	g, ctx := errgroup.WithContext(ctx)
	for c := range clients {
		g.Go(func() error {
			var ops []string
			for i := c; i < n; i += clients {
				_, op, err := api.CreateCluster(ctx, "default", simSpec(fmt.Sprintf("%s-%d", prefix, i)))
				if err != nil {
					return fmt.Errorf("create %s-%d: %w", prefix, i, err)
				}
				ops = append(ops, op)
			}
			mu.Lock()
			if now := time.Now(); now.After(accepted) {
				accepted = now
			}
			mu.Unlock()
			for _, id := range ops {
				op, err := api.WaitOperation(ctx, id, nil)
				if err != nil {
					return fmt.Errorf("wait for operation %s: %w", id, err)
				}
				if op.Status != v1.OpSucceeded {
					return fmt.Errorf("operation %s: %s %+v", id, op.Status, op.Error)
				}
			}
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		t.Fatal(err)
	}
	return waveResult{clusters: n, accepted: accepted.Sub(start), done: time.Since(start)}
}

// fleetSizes are the wave sizes of BenchmarkFleetWave: KILN_BENCH_FLEET, a
// comma-separated list, or 1,000 then 10,000 (issue 9).
func fleetSizes(t testing.TB) []int { return sizesFrom(t, "KILN_BENCH_FLEET", []int{1000, 10000}) }

// sizesFrom reads the comma-separated sizes in environment variable name,
// or def when it is not set.
func sizesFrom(t testing.TB, name string, def []int) []int {
	s := os.Getenv(name)
	if s == "" {
		return def
	}
	var sizes []int
	for f := range strings.SplitSeq(s, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 1 {
			t.Fatalf("%s=%q: want sizes like 1000,10000", name, s)
		}
		sizes = append(sizes, n)
	}
	return sizes
}

// idleWindow is how long BenchmarkFleetWave samples kilnd's CPU once every
// cluster is Succeeded and nothing else happens (after idleSettle).
const (
	idleSettle = 10 * time.Second
	idleWindow = 30 * time.Second
)

// BenchmarkFleetWave is benchmark 1 (and 6) of issue 9: a fresh kilnd
// (SQLite, sim provider) per size, a wave of that many 1+2 clusters from 32
// clients through the HTTP API until all are Succeeded, kilnd's memory
// after it, and then its CPU while those clusters sit idle. Targets: 1,000
// under 60 s, 10,000 under 10 minutes, idle under 5% of a core at 10,000.
// Run with -benchtime 1x.
func BenchmarkFleetWave(b *testing.B) {
	for _, n := range fleetSizes(b) {
		b.Run(strconv.Itoa(n), func(b *testing.B) {
			for b.Loop() {
				k := startKilnd(b, strings.Fields(os.Getenv("KILN_BENCH_KILND_ARGS"))...)
				pid := k.Cmd.Process.Pid
				saved := k.profileCPU(b, fmt.Sprintf("wave-%d", n), 25*time.Second)
				r := wave(b.Context(), b, k.API, "wave", n, waveClients)
				saved()
				after, err := sampleProc(pid)
				if err != nil {
					b.Fatal(err)
				}
				time.Sleep(idleSettle) // a measurement's settling time, not a wait for a condition
				saved = k.profileCPU(b, fmt.Sprintf("idle-%d", n), idleWindow)
				idle := measureIdle(b, pid, idleWindow)
				saved()
				if profileDir != "" {
					if err := k.saveProfile("heap", filepath.Join(profileDir, fmt.Sprintf("heap-%d.pprof", n))); err != nil {
						b.Errorf("heap profile: %v", err)
					}
				}
				sizes, err := storeSize(b.Context(), filepath.Join(k.Dir, "kiln.db"))
				if err != nil {
					b.Fatal(err)
				}
				table, perCl := perCluster(sizes, n)
				b.ReportMetric(perCl/1024, "store-KiB/cluster")
				b.ReportMetric(r.done.Seconds(), "s-to-succeeded")
				b.ReportMetric(float64(n)/r.done.Seconds(), "clusters/s")
				b.ReportMetric(float64(n)/r.accepted.Seconds(), "creates-accepted/s")
				b.ReportMetric(mib(after.RSS), "kilnd-rss-MiB")
				b.ReportMetric(mib(after.PeakRSS), "kilnd-peak-rss-MiB")
				b.ReportMetric(100*idle, "idle-cpu-%")
				b.Logf("fleet wave %d: all Succeeded in %s (creates accepted in %s); kilnd RSS %.0f MiB (peak %.0f MiB); idle CPU %.2f%% of a core over %s",
					n, r.done.Round(time.Millisecond), r.accepted.Round(time.Millisecond), mib(after.RSS), mib(after.PeakRSS), 100*idle, idleWindow)
				// After the summary: a benchmark's log is cut after some lines.
				b.Logf("kilnd's store after the wave of %d, by table:\n%s", n, table)
			}
		})
	}
}

// measureIdle returns the share of a core process pid used over the next
// window.
func measureIdle(t testing.TB, pid int, window time.Duration) float64 {
	t.Helper()
	a, err := sampleProc(pid)
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(window) // the measurement window
	b, err := sampleProc(pid)
	if err != nil {
		t.Fatal(err)
	}
	return cpuShare(a, b)
}

// TestFleetWaveSmall runs the fleet wave's code on 24 clusters from 4
// clients: every cluster must end Succeeded with its 3 nodes READY, and the
// samples of kilnd must be readable.
func TestFleetWaveSmall(t *testing.T) {
	k := startKilnd(t)
	r := wave(t.Context(), t, k.API, "small", 24, 4)
	if r.accepted <= 0 || r.done < r.accepted {
		t.Errorf("wave times: accepted %s, done %s", r.accepted, r.done)
	}
	cls, err := k.API.ListClusters(t.Context(), "default")
	if err != nil {
		t.Fatal(err)
	}
	if len(cls) != 24 {
		t.Fatalf("%d clusters listed, want 24", len(cls))
	}
	for _, cl := range cls {
		if cl.Status.ProvisioningState != v1.StateSucceeded {
			t.Errorf("cluster %s is %s, want Succeeded", cl.Name, cl.Status.ProvisioningState)
		}
	}
	nodes, err := k.API.ListNodes(t.Context(), "default", "small-7")
	if err != nil {
		t.Fatal(err)
	}
	ready := 0
	for _, n := range nodes {
		if n.State == v1.NodeReady {
			ready++
		}
	}
	if ready != 3 {
		t.Errorf("small-7 has %d READY nodes of %d, want 3", ready, len(nodes))
	}
	s, err := sampleProc(k.Cmd.Process.Pid)
	if err != nil {
		t.Fatal(err)
	}
	if s.RSS <= 0 || s.PeakRSS < s.RSS || s.CPU <= 0 {
		t.Errorf("kilnd sample: %+v", s)
	}

	// The store's size by table: a row per cluster, per operation, three
	// nodes each, and the events of their steps.
	sizes, err := storeSize(t.Context(), filepath.Join(k.Dir, "kiln.db"))
	if err != nil {
		t.Fatal(err)
	}
	rows := map[string]int64{}
	for _, ts := range sizes {
		rows[ts.Table] = ts.Rows
		if ts.Rows > 0 && ts.Bytes <= 0 {
			t.Errorf("table %s: %d rows in %d bytes", ts.Table, ts.Rows, ts.Bytes)
		}
	}
	for table, want := range map[string]int64{"clusters": 24, "operations": 24, "nodes": 72} {
		if rows[table] != want {
			t.Errorf("%s: %d rows, want %d", table, rows[table], want)
		}
	}
	if rows["events"] < 24*int64(len(plan.Steps(v1.KindCreate))) {
		t.Errorf("events: %d rows, want at least one a step of each create", rows["events"])
	}
	table, perCl := perCluster(sizes, 24)
	if perCl <= 0 || !strings.Contains(table, "clusters") {
		t.Errorf("per cluster: %.0f bytes\n%s", perCl, table)
	}
	t.Logf("store after 24 clusters:\n%s", table)
}
