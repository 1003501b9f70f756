package process

import (
	"path/filepath"
	"strings"
	"testing"
	"time"

	v1 "kiln.dev/kiln/api/v1"
	"kiln.dev/kiln/internal/fault"
	"kiln.dev/kiln/internal/store"
)

// TestFaultPoints kills kilnd at named fault points (docs/faults.md) in the
// middle of a create, restarts it, and checks from the sim's step journal
// and the store that the operation still ends Succeeded and that no step
// done before the kill ran again: only the step in flight runs twice.
func TestFaultPoints(t *testing.T) {
	tests := []struct {
		name  string
		fault string
		// inFlight is the step the kill interrupts; twice is whether the
		// journal shows it started in both processes (a kill before its
		// BeforeStep hook ran shows it once).
		inFlight string
		twice    bool
	}{
		// A step's checkpoint marks the next step Running too: the
		// next claimer takes that step up as one in flight whose work
		// had not begun.
		{name: "after a checkpoint", fault: "step.ensure-network.after-checkpoint", inFlight: "ensure-load-balancer", twice: false},
		{name: "before a checkpoint", fault: "step.ensure-worker-machines.before-checkpoint", inFlight: "ensure-worker-machines", twice: true},
		{name: "after a step started", fault: "step.ensure-load-balancer.after-start", inFlight: "ensure-load-balancer", twice: false},
		{name: "after a provider call", fault: "provider.EnsureMachine.after:2", inFlight: "ensure-worker-machines", twice: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			forEachStore(t, func(t *testing.T, storeFlags []string, open func() store.Store, data string) {
				testFaultPoint(t, storeFlags, open, data, tt.fault, tt.inFlight, tt.twice)
			})
		})
	}
}

func testFaultPoint(t *testing.T, storeFlags []string, open func() store.Store, data, point, inFlight string, twice bool) {
	ctx := t.Context()
	journal := filepath.Join(data, "sim-journal")
	args := append([]string{"--dev", "--data-dir", data, "--sim-journal", journal, "--lease-ttl", "3s", "--lease-heartbeat", "1s"}, storeFlags...)

	first := startKilnd(t, "kilnd-armed", []string{fault.Env + "=" + point}, args...)
	c := first.Client(readToken(t, data))
	_, id, putErr := c.PutCluster(ctx, "default", simCluster("faulty", 20*time.Millisecond, 2), "")
	select {
	case <-first.Done():
	case <-time.After(60 * time.Second):
		t.Fatalf("kilnd did not die at fault point %s in 60s (PUT: %v); log:\n%s", point, putErr, first.LogText())
	}
	if putErr != nil {
		// On a busy machine the worker may reach the fault point before
		// the PUT's answer is written: the operation it began is the
		// cluster's.
		id = currentOperation(t, open(), putErr)
	}
	if !strings.Contains(first.LogText(), "kiln fault: point ") {
		t.Fatalf("kilnd exited without reaching fault point %s; log:\n%s", point, first.LogText())
	}
	atCrash := readOperations(t, open(), []string{id})[id]
	firstPID := first.Cmd.Process.Pid

	second := startKilnd(t, "kilnd-after", nil, args...)
	c = second.Client(readToken(t, data))
	op := waitTerminal(t, ctx, c, []string{id})[id]
	if op.Status != v1.OpSucceeded {
		t.Fatalf("operation %s: %s %+v; want Succeeded", id, op.Status, op.Error)
	}

	runs := map[string][]int{} // step -> pids of its attempts, in journal order
	for _, e := range readJournal(t, journal) {
		runs[e.Step] = append(runs[e.Step], e.PID)
	}
	secondPID := second.Cmd.Process.Pid
	for i, s := range op.Properties.Steps {
		if !stepDone(s.State) {
			t.Errorf("step %s: %s, want done", s.Name, s.State)
		}
		b := atCrash.Steps[i]
		pids := runs[s.Name]
		switch {
		case s.State == v1.StepSkipped:
			// The sim's journal still records the attempt.
		case stepDone(b.State):
			if len(pids) != 1 || pids[0] != firstPID {
				t.Errorf("step %s was done before the kill but ran in pids %v (killed %d, restarted %d)", s.Name, pids, firstPID, secondPID)
			}
			if s.Attempts != b.Attempts {
				t.Errorf("step %s was done before the kill: attempts %d -> %d", s.Name, b.Attempts, s.Attempts)
			}
		case s.Name == inFlight:
			want := []int{secondPID}
			if twice {
				want = []int{firstPID, secondPID}
			}
			if !equalInts(pids, want) {
				t.Errorf("step %s was in flight at the kill: ran in pids %v, want %v (killed %d, restarted %d)", s.Name, pids, want, firstPID, secondPID)
			}
			if b.State != v1.StepRunning || s.Attempts != b.Attempts+1 {
				t.Errorf("step %s in flight: %s with %d attempts at the kill, %d after; want Running and one more", s.Name, b.State, b.Attempts, s.Attempts)
			}
		default:
			if len(pids) != 1 || pids[0] != secondPID {
				t.Errorf("step %s started after the kill but ran in pids %v (killed %d, restarted %d)", s.Name, pids, firstPID, secondPID)
			}
		}
	}
}

func equalInts(a, b []int) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// currentOperation is the operation of cluster default/faulty, which a PUT
// that got no answer (putErr) began; none fails the test with putErr.
func currentOperation(t *testing.T, st store.Store, putErr error) string {
	t.Helper()
	defer st.Close()
	cl, err := st.GetCluster(t.Context(), store.Key{Project: "default", Name: "faulty"})
	if err != nil || cl.Status.CurrentOperation == "" {
		t.Fatalf("PUT cluster: %v; and no operation was recorded (%v)", putErr, err)
	}
	t.Logf("PUT cluster got no answer (%v): kilnd died first; its operation is %s", putErr, cl.Status.CurrentOperation)
	return cl.Status.CurrentOperation
}
