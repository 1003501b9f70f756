package plan_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	v1 "kiln.dev/kiln/api/v1"
	"kiln.dev/kiln/internal/plan"
	"kiln.dev/kiln/internal/provider"
	"kiln.dev/kiln/internal/provider/sim"
)

// An update that grows the control plane makes the new control-plane
// machines and installs them (install-control-plane, one at a time) before
// the workers; the nodes that were there are left as they are.
func TestControlPlaneGrows(t *testing.T) {
	e := newEnv(t)
	e.begin("c", v1.KindCreate, spec(1, nil))
	e.runOnce(e.runner())

	for _, size := range []int{3, 5} {
		grown := spec(1, nil)
		grown.ControlPlane.Size = size
		op := e.begin("c", v1.KindUpdate, grown)
		e.runOnce(e.runner())
		got := e.op(op.ID)
		if got.Status != v1.OpSucceeded {
			t.Fatalf("grow to %d: %s %+v", size, got.Status, got.Error)
		}
		if s := stepStates(got)[plan.StepInstallControlPlane]; s != v1.StepSucceeded {
			t.Errorf("grow to %d: install-control-plane %s", size, s)
		}
		want := map[string]string{"c-default-0": "worker/default/READY"}
		for i := range size {
			want["c-cp-"+string(rune('0'+i))] = "control-plane//READY"
		}
		if diff := cmp.Diff(want, e.nodes("c")); diff != "" {
			t.Errorf("nodes after growing to %d (-want +got):\n%s", size, diff)
		}
		if n := e.counts("c"); n != [3]int{size, 1, size + 1} {
			t.Errorf("node counts after growing to %d = %+v", size, n)
		}
	}
}

// growTo5 makes cluster c with one worker and grows its control plane to 5.
func growTo5(t *testing.T, e *env, r *plan.Runner) {
	t.Helper()
	e.begin("c", v1.KindCreate, spec(1, nil))
	e.runOnce(r)
	grown := spec(1, nil)
	grown.ControlPlane.Size = 5
	op := e.begin("c", v1.KindUpdate, grown)
	e.runOnce(r)
	if got := e.op(op.ID); got.Status != v1.OpSucceeded {
		t.Fatalf("grow to 5: %s %+v", got.Status, got.Error)
	}
}

// An update that shrinks the control plane removes the nodes beyond its
// size, highest number first, never the first; the step's message names
// them in that order and an event says the control plane shrank. The sim
// has no etcd, so its message says no member was removed.
func TestControlPlaneShrinks(t *testing.T) {
	e := newEnv(t)
	r := e.runner()
	growTo5(t, e, r)

	for _, tt := range []struct {
		size    int
		removed string
	}{{3, "c-cp-4, c-cp-3"}, {1, "c-cp-2, c-cp-1"}} {
		smaller := spec(1, nil)
		smaller.ControlPlane.Size = tt.size
		op := e.begin("c", v1.KindUpdate, smaller)
		e.runOnce(r)
		got := e.op(op.ID)
		if got.Status != v1.OpSucceeded {
			t.Fatalf("shrink to %d: %s %+v", tt.size, got.Status, got.Error)
		}
		if s := stepStates(got)[plan.StepShrinkControlPlane]; s != v1.StepSucceeded {
			t.Errorf("shrink to %d: shrink-control-plane %s", tt.size, s)
		}
		want := "removed one at a time, highest number first: " + tt.removed +
			"; no etcd member removed and nothing drained: the sim provider's machines run no Kubernetes"
		if msg := stepMessage(got, plan.StepShrinkControlPlane); msg != want {
			t.Errorf("shrink to %d: message %q, want %q", tt.size, msg, want)
		}
		nodes := map[string]string{"c-default-0": "worker/default/READY"}
		machines := []string{"c-default-0"}
		for i := range tt.size {
			name := "c-cp-" + string(rune('0'+i))
			nodes[name] = "control-plane//READY"
			machines = append(machines, name)
		}
		if diff := cmp.Diff(nodes, e.nodes("c")); diff != "" {
			t.Errorf("nodes after shrinking to %d (-want +got):\n%s", tt.size, diff)
		}
		if diff := cmp.Diff(machines, e.machines("c"), cmpopts.SortSlices(func(a, b string) bool { return a < b })); diff != "" {
			t.Errorf("machines after shrinking to %d (-want +got):\n%s", tt.size, diff)
		}
		if n := e.counts("c"); n != [3]int{tt.size, 1, tt.size + 1} {
			t.Errorf("node counts after shrinking to %d = %+v", tt.size, n)
		}
	}
	var shrank []string
	for _, ev := range e.events("c") {
		if ev.Reason == "ControlPlaneShrank" {
			shrank = append(shrank, ev.Message)
		}
	}
	want := []string{"the control plane shrank to 3 nodes: c-cp-4, c-cp-3 removed", "the control plane shrank to 1 node: c-cp-2, c-cp-1 removed"}
	if diff := cmp.Diff(want, shrank, cmpopts.SortSlices(func(a, b string) bool { return a < b })); diff != "" {
		t.Errorf("ControlPlaneShrank events (-want +got):\n%s", diff)
	}

	// Nothing beyond the size: the step is skipped.
	op := e.begin("c", v1.KindUpdate, spec(2, nil))
	e.runOnce(r)
	if s := stepStates(e.op(op.ID))[plan.StepShrinkControlPlane]; s != v1.StepSkipped {
		t.Errorf("an update that keeps the size: shrink-control-plane %s, want Skipped", s)
	}
}

// stallingDelete is the sim, with the delete of one machine hanging until
// its context ends (the worker dies in it) the first time.
type stallingDelete struct {
	*sim.Sim
	machine string
	stalled chan struct{}
	once    sync.Once
}

func (p *stallingDelete) DeleteMachine(ctx context.Context, c provider.Cluster, name string) error {
	stall := false
	if name == p.machine {
		p.once.Do(func() { stall = true })
	}
	if stall {
		close(p.stalled)
		<-ctx.Done()
		return ctx.Err()
	}
	return p.Sim.DeleteMachine(ctx, c, name)
}

// TestControlPlaneShrinkResumes: a worker that dies in the middle of
// shrink-control-plane (deleting c-cp-3's machine, c-cp-4 removed) leaves
// the step's checkpoint to the next, which deletes c-cp-3's machine and
// names both nodes removed.
func TestControlPlaneShrinkResumes(t *testing.T) {
	e := newEnv(t)
	p := &stallingDelete{Sim: e.sim, machine: "c-cp-3", stalled: make(chan struct{})}
	e.reg["sim"] = p
	growTo5(t, e, e.runner())

	smaller := spec(1, nil)
	smaller.ControlPlane.Size = 3
	op := e.begin("c", v1.KindUpdate, smaller)
	first := e.claim("first")
	ctx, kill := context.WithCancel(t.Context())
	errc := make(chan error, 1)
	go func() { errc <- e.runner().Run(ctx, first) }()
	select {
	case <-p.stalled:
	case err := <-errc:
		t.Fatalf("the first run ended (%v) before deleting c-cp-3", err)
	case <-time.After(10 * time.Second):
		t.Fatal("the first run did not delete c-cp-3 within 10s")
	}
	if got := e.op(op.ID).Checkpoints[plan.StepShrinkControlPlane]["c-cp-4"]; got != "removed" {
		t.Errorf("the stored checkpoint has c-cp-4 %q while the step runs; want removed", got)
	}
	kill()
	<-errc
	if err := e.st.ReleaseLease(t.Context(), first.Key(), first.Lease.Fence()); err != nil {
		t.Fatal(err)
	}

	e.runOnce(e.runner())
	got := e.op(op.ID)
	if got.Status != v1.OpSucceeded {
		t.Fatalf("operation %s %+v; want Succeeded", got.Status, got.Error)
	}
	want := "removed one at a time, highest number first: c-cp-4, c-cp-3; no etcd member removed and nothing drained: the sim provider's machines run no Kubernetes"
	if msg := stepMessage(got, plan.StepShrinkControlPlane); msg != want {
		t.Errorf("message %q, want %q", msg, want)
	}
	if diff := cmp.Diff([]string{"c-cp-0", "c-cp-1", "c-cp-2", "c-default-0"}, e.machines("c"), cmpopts.SortSlices(func(a, b string) bool { return a < b })); diff != "" {
		t.Errorf("machines (-want +got):\n%s", diff)
	}
	if n := attempts(got)[plan.StepShrinkControlPlane]; n != 2 {
		t.Errorf("shrink-control-plane ran %d attempts; want 2", n)
	}
}
