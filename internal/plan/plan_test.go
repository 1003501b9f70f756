package plan

import (
	"testing"

	"github.com/google/go-cmp/cmp"

	v1 "kiln.dev/kiln/api/v1"
)

// TestSteps pins every plan. Changing a list changes what users see in
// operation status and what resumed operations expect: do it on purpose.
func TestSteps(t *testing.T) {
	tests := []struct {
		name string
		kind string
		want []string
	}{
		{name: "create", kind: v1.KindCreate, want: []string{
			"validate-dynamic",
			"ensure-cluster-pki",
			"ensure-network",
			"ensure-load-balancer",
			"ensure-control-plane-machines",
			"wait-nodes-registered",
			"approve-nodes",
			"install-control-plane",
			"ensure-worker-machines",
			"install-workers",
			"wait-nodes-ready",
		}},
		{name: "update", kind: v1.KindUpdate, want: []string{
			"validate-dynamic",
			"ensure-control-plane-machines",
			"ensure-worker-machines",
			"install-workers",
			"remove-surplus-machines",
			"wait-nodes-ready",
		}},
		{name: "delete", kind: v1.KindDelete, want: []string{
			"delete-worker-machines",
			"delete-control-plane-machines",
			"delete-load-balancer",
			"delete-network",
		}},
		{name: "unknown", kind: "reboot", want: nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if diff := cmp.Diff(tt.want, Steps(tt.kind)); diff != "" {
				t.Errorf("Steps(%q) mismatch (-want +got):\n%s", tt.kind, diff)
			}
		})
	}
}

func TestStepsReturnsACopy(t *testing.T) {
	s := Steps(v1.KindCreate)
	s[0] = "changed"
	if got := Steps(v1.KindCreate)[0]; got != StepValidateDynamic {
		t.Fatalf("Steps shares its slice: first step is %q after a caller changed its copy", got)
	}
}

func TestPendingSteps(t *testing.T) {
	got := PendingSteps(v1.KindDelete)
	want := []v1.Step{
		{Name: "delete-worker-machines", State: v1.StepPending},
		{Name: "delete-control-plane-machines", State: v1.StepPending},
		{Name: "delete-load-balancer", State: v1.StepPending},
		{Name: "delete-network", State: v1.StepPending},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("PendingSteps mismatch (-want +got):\n%s", diff)
	}
}
