package plan_test

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	v1 "kiln.dev/kiln/api/v1"
	"kiln.dev/kiln/internal/plan"
	"kiln.dev/kiln/internal/provider"
	"kiln.dev/kiln/internal/store"
)

// A repair replaces the worker that stayed NOT_READY past its pool's
// unhealthyTimeout with a new machine of the same name, and leaves the
// others as they are.
func TestRepairReplacesUnhealthyWorkers(t *testing.T) {
	e := newEnv(t)
	sp := spec(3, nil)
	sp.WorkerPools[0].UnhealthyTimeout = "1m"
	e.begin("c", v1.KindCreate, sp)
	e.runOnce(e.runner())
	before := machineIDs(e)

	k := store.Key{Project: project, Name: "c"}
	n, err := e.st.GetNode(t.Context(), k, "c-default-1")
	if err != nil {
		t.Fatal(err)
	}
	beat := time.Now().Add(-2 * time.Minute)
	n.State, n.LastHeartbeat = v1.NodeNotReady, &beat
	if err := e.st.PutNode(t.Context(), n, store.Cond{}); err != nil {
		t.Fatal(err)
	}
	op := e.begin("c", v1.KindRepair, sp)
	e.runOnce(e.runner())

	got := e.op(op.ID)
	if got.Status != v1.OpSucceeded {
		t.Fatalf("repair %s %+v", got.Status, got.Error)
	}
	if m := stepMessage(got, plan.StepReplaceUnhealthyNodes); m != "removed unhealthy: c-default-1" {
		t.Errorf("step message %q", m)
	}
	after := machineIDs(e)
	if after["c-default-1"] == "" || after["c-default-1"] == before["c-default-1"] {
		t.Errorf("c-default-1's machine %q, was %q: want a new one", after["c-default-1"], before["c-default-1"])
	}
	for _, name := range []string{"c-cp-0", "c-default-0", "c-default-2"} {
		if after[name] != before[name] {
			t.Errorf("healthy %s was replaced: %q -> %q", name, before[name], after[name])
		}
	}
	want := map[string]string{"c-cp-0": "control-plane//READY", "c-default-0": "worker/default/READY",
		"c-default-1": "worker/default/READY", "c-default-2": "worker/default/READY"}
	if diff := cmp.Diff(want, e.nodes("c")); diff != "" {
		t.Errorf("nodes after repair (-want +got):\n%s", diff)
	}

	// Nothing unhealthy any more: a repair skips its first step.
	op = e.begin("c", v1.KindRepair, sp)
	e.runOnce(e.runner())
	if s := stepStates(e.op(op.ID))[plan.StepReplaceUnhealthyNodes]; s != v1.StepSkipped {
		t.Errorf("a repair of a healthy cluster: %s", s)
	}
}

func machineIDs(e *env) map[string]string {
	e.t.Helper()
	ms, err := e.sim.ListMachines(e.t.Context(), provider.Cluster{Project: project, Name: "c"})
	if err != nil {
		e.t.Fatal(err)
	}
	out := map[string]string{}
	for _, m := range ms {
		out[m.Name] = m.ID
	}
	return out
}
