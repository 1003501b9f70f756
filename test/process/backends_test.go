package process

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"kiln.dev/kiln/api/client"
	v1 "kiln.dev/kiln/api/v1"
	"kiln.dev/kiln/internal/provider/sim"
	"kiln.dev/kiln/internal/store"
)

// TestTwoBackendsOneStore runs one frontend and two backend processes on one
// store (SQLite, and PostgreSQL when there is one). Both backends work, and
// each cluster is worked by one backend at a time: the sim's journal of step
// attempts (written by every process) never shows two processes in the same
// cluster at once, and every step of every plan ran exactly once.
func TestTwoBackendsOneStore(t *testing.T) {
	forEachStore(t, testTwoBackends)
}

func testTwoBackends(t *testing.T, storeFlags []string, _ func() store.Store, data string) {
	ctx := t.Context()
	journal := filepath.Join(data, "sim-journal")
	common := append([]string{"--data-dir", data, "--sim", "--sim-journal", journal}, storeFlags...)
	backend := append([]string{"--role", "backend", "--concurrency", "2", "--lease-ttl", "3s", "--lease-heartbeat", "1s"}, common...)

	fe := startKilnd(t, "frontend", nil, append([]string{"--role", "frontend"}, common...)...)
	startKilnd(t, "backend-1", nil, backend...)
	startKilnd(t, "backend-2", nil, backend...)

	c := fe.Client(readToken(t, data))
	if _, err := c.PutProject(ctx, &v1.Project{Name: "team"}); err != nil {
		t.Fatal(err)
	}
	const clusters = 6
	var ids []string
	for i := range clusters {
		_, id, err := c.PutCluster(ctx, "team", simCluster(fmt.Sprintf("shared-%d", i), 100*time.Millisecond, 1), "")
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, id)
	}
	for id, op := range waitTerminal(t, ctx, c, ids) {
		if op.Status != v1.OpSucceeded {
			t.Errorf("operation %s: %s %+v", id, op.Status, op.Error)
		}
	}

	entries := readJournal(t, journal)
	pids := map[int]bool{}
	byCluster := map[string][]sim.JournalEntry{}
	for _, e := range entries {
		pids[e.PID] = true
		byCluster[e.Cluster] = append(byCluster[e.Cluster], e)
	}
	if len(pids) != 2 {
		t.Errorf("step attempts came from %d processes, want both backends", len(pids))
	}
	if len(byCluster) != clusters {
		t.Errorf("journal names %d clusters, want %d", len(byCluster), clusters)
	}
	for cl, es := range byCluster {
		slices.SortFunc(es, func(a, b sim.JournalEntry) int { return a.Start.Compare(b.Start) })
		seen := map[string]int{}
		for i, e := range es {
			seen[e.Step]++
			if i > 0 && es[i-1].PID != e.PID && e.Start.Before(es[i-1].End) {
				t.Errorf("cluster %s: step %s in pid %d started before step %s in pid %d ended", cl, e.Step, e.PID, es[i-1].Step, es[i-1].PID)
			}
		}
		for step, n := range seen {
			if n != 1 {
				t.Errorf("cluster %s: step %s ran %d times, want once", cl, step, n)
			}
		}
	}
}

func readJournal(t *testing.T, path string) []sim.JournalEntry {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []sim.JournalEntry
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		var e sim.JournalEntry
		if err := json.Unmarshal(sc.Bytes(), &e); err != nil {
			t.Fatalf("journal line %q: %v", sc.Text(), err)
		}
		out = append(out, e)
	}
	return out
}

// countEndEvents counts the events that say operation id ended.
func countEndEvents(t *testing.T, c *client.Client, cluster, id string) int {
	t.Helper()
	events, err := c.ListEvents(t.Context(), "default", cluster)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, e := range events {
		if e.Operation == id && (e.Reason == "OperationSucceeded" || e.Reason == "OperationFailed") {
			n++
		}
	}
	return n
}
