package plan_test

import (
	"testing"

	"github.com/google/go-cmp/cmp"

	v1 "kiln.dev/kiln/api/v1"
	"kiln.dev/kiln/internal/plan"
	"kiln.dev/kiln/internal/provider"
)

// A hibernate removes the workers and stops the control plane, keeping
// its machine; the cluster is Hibernated with its pools' sizes as they
// were. A resume starts the same control-plane machine and makes the
// workers again.
func TestHibernateAndResume(t *testing.T) {
	e := newEnv(t)
	sp := spec(2, nil)
	e.begin("c", v1.KindCreate, sp)
	e.runOnce(e.runner())
	before := machineIDs(e)

	op := e.begin("c", v1.KindHibernate, sp)
	e.runOnce(e.runner())
	if got := e.op(op.ID); got.Status != v1.OpSucceeded {
		t.Fatalf("hibernate %s %+v", got.Status, got.Error)
	}
	cl := e.cluster("c")
	if cl.Status.ProvisioningState != v1.StateHibernated || cl.Spec.WorkerPools[0].Size != 2 {
		t.Errorf("after the hibernate: %s, pool size %d; want Hibernated, 2", cl.Status.ProvisioningState, cl.Spec.WorkerPools[0].Size)
	}
	ms, err := e.sim.ListMachines(t.Context(), provider.Cluster{Project: project, Name: "c"})
	if err != nil {
		t.Fatal(err)
	}
	if len(ms) != 1 || ms[0].Name != "c-cp-0" || ms[0].ID != before["c-cp-0"] || ms[0].Ready {
		t.Errorf("machines after the hibernate %+v; want c-cp-0 (%s) alone, stopped", ms, before["c-cp-0"])
	}
	if diff := cmp.Diff(map[string]string{"c-cp-0": "control-plane//READY"}, e.nodes("c")); diff != "" {
		t.Errorf("nodes after the hibernate (-want +got):\n%s", diff)
	}

	op = e.begin("c", v1.KindResume, sp)
	e.runOnce(e.runner())
	got := e.op(op.ID)
	if got.Status != v1.OpSucceeded {
		t.Fatalf("resume %s %+v", got.Status, got.Error)
	}
	if s := stepStates(got)[plan.StepStartControlPlaneMachines]; s != v1.StepSucceeded {
		t.Errorf("%s: %s", plan.StepStartControlPlaneMachines, s)
	}
	after := machineIDs(e)
	if after["c-cp-0"] != before["c-cp-0"] || len(after) != 3 {
		t.Errorf("machines after the resume %v; want the same c-cp-0 (%s) and two workers", after, before["c-cp-0"])
	}
	if cl := e.cluster("c"); cl.Status.ProvisioningState != v1.StateSucceeded {
		t.Errorf("after the resume: %s", cl.Status.ProvisioningState)
	}
	want := map[string]string{"c-cp-0": "control-plane//READY", "c-default-0": "worker/default/READY", "c-default-1": "worker/default/READY"}
	if diff := cmp.Diff(want, e.nodes("c")); diff != "" {
		t.Errorf("nodes after the resume (-want +got):\n%s", diff)
	}
}
