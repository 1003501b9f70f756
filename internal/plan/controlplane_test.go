package plan_test

import (
	"testing"

	"github.com/google/go-cmp/cmp"

	v1 "kiln.dev/kiln/api/v1"
	"kiln.dev/kiln/internal/plan"
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
