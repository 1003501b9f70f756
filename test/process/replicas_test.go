package process

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"syscall"
	"testing"
	"time"

	v1 "kiln.dev/kiln/api/v1"
	"kiln.dev/kiln/internal/store/postgres/pgtest"
	"kiln.dev/kiln/test/kilndtest"
	"kiln.dev/kiln/test/waitfor"
)

// TestReplicasWakeEachOther: on PostgreSQL, replicas hear each other's
// writes (LISTEN/NOTIFY) instead of polling for them. Every process here
// polls once an hour and leases last an hour, so the only ways the
// operation can end are the notifications: the frontend's new operation
// wakes an idle backend, and a backend stopped with SIGTERM hands its lease
// back at once, which wakes the other backend to carry on from the next
// step. Each step runs exactly once.
func TestReplicasWakeEachOther(t *testing.T) {
	if os.Getenv("KILN_TEST_POSTGRES") == "" {
		t.Skip("SKIPPED: KILN_TEST_POSTGRES is not set (the notifications between replicas are PostgreSQL's)")
	}
	// Without the notifications nothing would happen for an hour: give up
	// long before.
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()
	data := t.TempDir()
	journal := filepath.Join(data, "sim-journal")
	common := []string{"--data-dir", data, "--store", pgtest.FreshDB(t), "--sim", "--sim-journal", journal, "--poll", "1h"}
	backend := append([]string{"--role", "backend", "--lease-ttl", "1h", "--lease-heartbeat", "5s"}, common...)
	fe := startKilnd(t, "frontend", nil, append([]string{"--role", "frontend"}, common...)...)
	backends := []*kilndtest.Kilnd{startKilnd(t, "backend-1", nil, backend...), startKilnd(t, "backend-2", nil, backend...)}
	defer func() {
		if t.Failed() {
			for i, k := range append([]*kilndtest.Kilnd{fe}, backends...) {
				t.Logf("log of process %d (pid %d):\n%s", i, k.Cmd.Process.Pid, k.LogText())
			}
		}
	}()

	c := fe.Client(readToken(t, data))
	if _, err := c.PutProject(ctx, &v1.Project{Name: "team"}); err != nil {
		t.Fatal(err)
	}
	_, id, err := c.PutCluster(ctx, "team", simCluster("woken", 700*time.Millisecond, 2), "")
	if err != nil {
		t.Fatal(err)
	}
	// The first step attempts show which backend holds the lease.
	var first int
	waitfor.Cond(t, "a backend to start the operation", 2*time.Minute, func() (bool, error) {
		if _, err := os.Stat(journal); err != nil {
			return false, nil
		}
		entries := readJournal(t, journal)
		if len(entries) < 2 {
			return false, nil
		}
		first = entries[0].PID
		return true, nil
	})
	i := slices.IndexFunc(backends, func(k *kilndtest.Kilnd) bool { return k.Cmd.Process.Pid == first })
	if i < 0 {
		t.Fatalf("the journal's first step ran in pid %d, which is neither backend", first)
	}
	backends[i].Kill(syscall.SIGTERM)
	t.Logf("SIGTERM to %s (pid %d)", []string{"backend-1", "backend-2"}[i], first)

	op := waitTerminal(t, ctx, c, []string{id})[id]
	if op.Status != v1.OpSucceeded {
		t.Fatalf("operation %s: %s %+v", id, op.Status, op.Error)
	}
	other := backends[1-i].Cmd.Process.Pid
	seen := map[string]int{}
	byPID := map[int]int{}
	for _, e := range readJournal(t, journal) {
		seen[e.Step]++
		byPID[e.PID]++
		if e.PID != first && e.PID != other {
			t.Errorf("step %s ran in pid %d, neither backend", e.Step, e.PID)
		}
	}
	for step, n := range seen {
		if n != 1 {
			t.Errorf("step %s ran %d times, want once", step, n)
		}
	}
	if len(seen) != len(op.Properties.Steps) {
		t.Errorf("the journal has %d steps, the operation %d", len(seen), len(op.Properties.Steps))
	}
	if byPID[other] == 0 {
		t.Errorf("the backend that was not stopped ran no step: %v", byPID)
	}
	t.Logf("steps by pid: %v (stopped %d)", byPID, first)
}
