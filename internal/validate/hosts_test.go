package validate_test

import (
	"strings"
	"testing"

	v1 "kiln.dev/kiln/api/v1"
	"kiln.dev/kiln/internal/validate"
)

func TestHostCounts(t *testing.T) {
	spec := func(size int, dedicated bool) *v1.ClusterSpec {
		return &v1.ClusterSpec{ControlPlane: v1.ControlPlane{Size: size, Dedicated: dedicated}}
	}
	tests := []struct {
		name  string
		spec  *v1.ClusterSpec
		hosts validate.Hosts
		want  string // "" when the hosts match
	}{
		{"converged single", spec(1, false), validate.Hosts{ControlPlanes: 1}, ""},
		{"dedicated single", spec(1, true), validate.Hosts{ControlPlanes: 1, Workers: 2}, ""},
		{"converged multi", spec(3, false), validate.Hosts{ControlPlanes: 3}, ""},
		{"dedicated multi", spec(3, true), validate.Hosts{ControlPlanes: 3, Workers: 1}, ""},
		{"nothing configured", spec(1, false), validate.Hosts{Unconfigured: []string{"host-a"}},
			"a converged single control plane needs 1 control-plane host and no workers; configured: 0 control plane, 0 workers; configure 1 host more as control plane (joined without a role: host-a; kiln node configure CLUSTER NODE --role ...)"},
		{"dedicated single without a worker", spec(1, true), validate.Hosts{ControlPlanes: 1},
			"a dedicated single control plane needs 1 control-plane host and at least 1 worker; configured: 1 control plane, 0 workers; configure at least 1 host as worker"},
		{"converged multi short of two", spec(3, false), validate.Hosts{ControlPlanes: 1},
			"a converged multi control plane needs 3 control-plane hosts and no workers; configured: 1 control plane, 0 workers; configure 2 hosts more as control plane"},
		{"converged with a worker", spec(1, false), validate.Hosts{ControlPlanes: 1, Workers: 1},
			"a converged single control plane needs 1 control-plane host and no workers; configured: 1 control plane, 1 worker; a converged cluster has no workers: set spec.controlPlane.dedicated for 1 host, or remove it"},
		{"too many control planes", spec(1, true), validate.Hosts{ControlPlanes: 3, Workers: 1},
			"a dedicated single control plane needs 1 control-plane host and at least 1 worker; configured: 3 control plane, 1 worker; 2 hosts too many have the control-plane role: remove the extra, or give them the worker role"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := validate.HostCounts(tt.spec, tt.hosts)
			switch {
			case tt.want == "" && got != nil:
				t.Errorf("HostCounts() = %+v, want a match", got)
			case tt.want != "" && got == nil:
				t.Errorf("HostCounts() matched, want %q", tt.want)
			case got != nil && (got.Code != v1.CodeNodeCountMismatch || got.Target != "nodes" || got.Message != tt.want):
				t.Errorf("HostCounts() = %s %s %q\nwant NodeCountMismatch nodes %q", got.Code, got.Target, got.Message, tt.want)
			}
		})
	}
}

func TestHostsOf(t *testing.T) {
	got := validate.HostsOf([]v1.Node{
		{Name: "a", State: v1.NodeConfigured, Role: v1.RoleControlPlane},
		{Name: "b", State: v1.NodeReady, Role: v1.RoleWorker},
		{Name: "c", State: v1.NodeFailed, Role: v1.RoleWorker},
		{Name: "d", State: v1.NodeDiscovered},
		{Name: "e", State: v1.NodeApproved},
		{Name: "f", State: v1.NodePrecheckFailed},
		{Name: "g", State: v1.NodeDeleting, Role: v1.RoleWorker},
	})
	if got.ControlPlanes != 1 || got.Workers != 2 || strings.Join(got.Unconfigured, ",") != "d,e" {
		t.Errorf("HostsOf() = %+v, want 1 control plane, 2 workers, d and e without a role", got)
	}
}
