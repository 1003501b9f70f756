package process

import (
	"fmt"
	"syscall"
	"testing"
	"time"

	v1 "kiln.dev/kiln/api/v1"
	"kiln.dev/kiln/internal/store"
	"kiln.dev/kiln/test/waitfor"
)

// TestKillMidPlanResumes kills kilnd with SIGKILL while several clusters are
// half-way through their create plans, restarts it on the same data dir, and
// checks that every operation ends exactly once, Succeeded, with each step run
// to completion once after the crash: the step in flight at the kill may run
// a second time, nothing else.
func TestKillMidPlanResumes(t *testing.T) {
	forEachStore(t, testKillMidPlan)
}

func testKillMidPlan(t *testing.T, storeFlags []string, open func() store.Store, data string) {
	ctx := t.Context()
	args := append([]string{"--dev", "--data-dir", data, "--lease-ttl", "3s", "--lease-heartbeat", "1s"}, storeFlags...)

	first := startKilnd(t, "kilnd-before", nil, args...)
	c := first.Client(readToken(t, data))

	const clusters = 4
	var ids []string
	for i := range clusters {
		_, id, err := c.PutCluster(ctx, "default", simCluster(fmt.Sprintf("crash-%d", i), 300*time.Millisecond, 2), "")
		if err != nil {
			t.Fatalf("create cluster %d: %v", i, err)
		}
		ids = append(ids, id)
	}

	// Kill once every plan is well under way and none has finished.
	waitfor.Cond(t, "every plan to pass its third step", 60*time.Second, func() (bool, error) {
		for _, id := range ids {
			op, err := c.GetOperation(ctx, id)
			if err != nil {
				return false, err
			}
			if v1.Terminal(op.Status) {
				return false, fmt.Errorf("operation %s ended before the kill; make steps slower", id)
			}
			if succeeded(op.Properties.Steps) < 3 {
				return false, nil
			}
		}
		return true, nil
	})
	first.Kill(syscall.SIGKILL)

	// What the store holds at the moment of the crash.
	atCrash := readOperations(t, open(), ids)

	second := startKilnd(t, "kilnd-after", nil, args...)
	c = second.Client(readToken(t, data))
	final := waitTerminal(t, ctx, c, ids)

	inFlight := 0
	for _, id := range ids {
		before, after := atCrash[id], final[id]
		if after.Status != v1.OpSucceeded {
			t.Errorf("operation %s: status %s, error %+v; want Succeeded", id, after.Status, after.Error)
			continue
		}
		if len(after.Properties.Steps) != len(before.Steps) {
			t.Fatalf("operation %s: %d steps after restart, %d before", id, len(after.Properties.Steps), len(before.Steps))
		}
		reruns := 0
		for i, s := range after.Properties.Steps {
			b := before.Steps[i]
			if !stepDone(s.State) {
				t.Errorf("operation %s step %s: state %s, want Succeeded or Skipped", id, s.Name, s.State)
			}
			switch {
			case stepDone(b.State):
				// Done before the crash: must not have run again.
				if s.Attempts != b.Attempts || !s.EndTime.Equal(*b.EndTime) {
					t.Errorf("operation %s step %s ran again after the crash: attempts %d -> %d", id, s.Name, b.Attempts, s.Attempts)
				}
			case b.State == v1.StepRunning:
				// In flight at the kill: runs once more.
				if s.Attempts != b.Attempts+1 {
					t.Errorf("operation %s step %s was in flight: attempts %d -> %d, want %d", id, s.Name, b.Attempts, s.Attempts, b.Attempts+1)
				}
				reruns++
				inFlight++
			default:
				if s.Attempts != 1 {
					t.Errorf("operation %s step %s started after the crash: attempts %d, want 1", id, s.Name, s.Attempts)
				}
			}
		}
		if reruns > 1 {
			t.Errorf("operation %s: %d steps in flight at the kill, want at most 1", id, reruns)
		}

		cl, err := c.GetCluster(ctx, "default", clusterName(before))
		if err != nil {
			t.Fatal(err)
		}
		if cl.Status.ProvisioningState != v1.StateSucceeded || cl.Status.CurrentOperation != id {
			t.Errorf("cluster %s: state %s, operation %s; want Succeeded, %s", cl.Name, cl.Status.ProvisioningState, cl.Status.CurrentOperation, id)
		}
		if n := countEndEvents(t, c, clusterName(before), id); n != 1 {
			t.Errorf("operation %s ended %d times in the cluster's events, want once", id, n)
		}
	}
	if inFlight == 0 {
		t.Error("no step was in flight at the kill: the test did not exercise resuming a step")
	}
}

func succeeded(steps []v1.Step) int {
	n := 0
	for _, s := range steps {
		if stepDone(s.State) {
			n++
		}
	}
	return n
}

func stepDone(state string) bool { return state == v1.StepSucceeded || state == v1.StepSkipped }

func clusterName(op *store.Operation) string { return op.Cluster }

// readOperations reads the operations from the (crashed) process's store.
func readOperations(t *testing.T, st store.Store, ids []string) map[string]*store.Operation {
	t.Helper()
	defer st.Close()
	ops := map[string]*store.Operation{}
	for _, id := range ids {
		op, err := st.GetOperation(t.Context(), id)
		if err != nil {
			t.Fatal(err)
		}
		ops[id] = op
	}
	return ops
}
