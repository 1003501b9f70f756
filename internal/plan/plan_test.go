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
			"install-access",
			"install-network-policy",
			"apply-profile",
		}},
		{name: "update", kind: v1.KindUpdate, want: []string{
			"validate-dynamic",
			"ensure-control-plane-machines",
			"install-control-plane",
			"shrink-control-plane",
			"upgrade-control-plane",
			"ensure-worker-machines",
			"install-workers",
			"roll-out-workers",
			"remove-surplus-machines",
			"wait-nodes-ready",
			"install-access",
			"install-network-policy",
			"apply-profile",
		}},
		{name: "repair", kind: v1.KindRepair, want: []string{
			"restart-stopped-control-plane",
			"replace-unhealthy-nodes",
			"ensure-worker-machines",
			"install-workers",
			"wait-nodes-ready",
		}},
		{name: "autoscale", kind: v1.KindAutoscale, want: []string{
			"ensure-worker-machines",
			"install-workers",
			"remove-surplus-machines",
			"wait-nodes-ready",
		}},
		{name: "hibernate", kind: v1.KindHibernate, want: []string{
			"remove-workers",
			"stop-control-plane-machines",
		}},
		{name: "resume", kind: v1.KindResume, want: []string{
			"start-control-plane-machines",
			"ensure-worker-machines",
			"install-workers",
			"wait-nodes-ready",
		}},
		{name: "delete", kind: v1.KindDelete, want: []string{
			"delete-worker-machines",
			"delete-control-plane-machines",
			"delete-load-balancer",
			"delete-network",
		}},
		{name: "reconcile", kind: v1.KindReconcile, want: []string{"install-access", "apply-profile"}},
		{name: "rotate-certificates", kind: v1.KindRotateCertificates, want: []string{"renew-certificates"}},
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

// TestStepsForHosts pins the plans of clusters made of hosts users bring.
func TestStepsForHosts(t *testing.T) {
	tests := []struct {
		kind string
		want []string
	}{
		{v1.KindCreate, []string{"validate-dynamic", "ensure-cluster-pki"}},
		{v1.KindUpdate, []string{"validate-dynamic"}},
		{v1.KindProvision, []string{"validate-dynamic", "check-node-configuration", "refresh-join-material", "install-control-plane", "install-workers", "wait-nodes-ready", "install-access", "install-network-policy", "install-service-load-balancers", "apply-profile"}},
		{v1.KindReset, []string{"reset-nodes", "remove-nodes"}},
		{v1.KindRemoveNode, []string{"drain-nodes", "reset-nodes", "remove-nodes"}},
		{v1.KindDelete, []string{"reset-nodes", "remove-nodes"}},
		{v1.KindReconcile, []string{"install-access", "apply-profile"}},
		{v1.KindRotateCertificates, []string{"renew-certificates"}},
		{"reboot", nil},
	}
	for _, tt := range tests {
		if diff := cmp.Diff(tt.want, StepsFor(tt.kind, true)); diff != "" {
			t.Errorf("StepsFor(%q, true) (-want +got):\n%s", tt.kind, diff)
		}
	}
	if diff := cmp.Diff(Steps(v1.KindCreate), StepsFor(v1.KindCreate, false)); diff != "" {
		t.Errorf("StepsFor(create, false) differs from Steps(create):\n%s", diff)
	}
	if got := StepsFor(v1.KindProvision, false); got != nil {
		t.Errorf("machine clusters have a provision plan: %v", got)
	}
	if got := StepsFor(v1.KindRemoveNode, false); got != nil {
		t.Errorf("machine clusters have a remove-node plan: %v", got)
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

// An attached cluster's plans connect, bind people's roles and apply its
// profile, forget it on delete, and have nothing that makes, stops or
// installs machines.
func TestAttachedSteps(t *testing.T) {
	for kind, want := range map[string][]string{
		v1.KindCreate:             {"validate-dynamic", "connect-cluster", "install-access", "apply-profile"},
		v1.KindUpdate:             {"validate-dynamic", "connect-cluster", "install-access", "apply-profile"},
		v1.KindDelete:             {"detach-cluster"},
		v1.KindReconcile:          {"install-access", "apply-profile"},
		v1.KindRotateCertificates: nil,
		v1.KindHibernate:          nil,
		v1.KindRepair:             nil,
		v1.KindProvision:          nil,
	} {
		if diff := cmp.Diff(want, AttachedSteps(kind)); diff != "" {
			t.Errorf("AttachedSteps(%q) (-want +got):\n%s", kind, diff)
		}
	}
}
