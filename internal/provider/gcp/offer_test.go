package gcp

import (
	"slices"
	"strings"
	"testing"

	v1 "kiln.dev/kiln/api/v1"
	"kiln.dev/kiln/internal/provider"
	gcplocal "kiln.dev/kiln/test/cloud/gcp"
)

func TestDescribe(t *testing.T) {
	e := start(t)
	o, err := e.g.Describe(t.Context(), e.account(owner), "")
	if err != nil {
		t.Fatal(err)
	}
	var types []string
	for _, it := range o.InstanceTypes {
		types = append(types, it.Name)
	}
	if !slices.Equal(o.Regions, []string{"europe-west1", "us-central1"}) || !slices.Equal(o.Zones, []string{"us-central1-a", "us-central1-b", "us-central1-c"}) ||
		!slices.Equal(types, []string{"e2-medium", "e2-standard-2", "e2-standard-4", "n2-standard-2", "n2-standard-4"}) ||
		o.DefaultInstanceType != DefaultMachineType || o.NodeNetwork != DefaultNodeCIDR {
		t.Fatalf("offer: %+v", o)
	}
	it, _ := o.InstanceType("e2-standard-4")
	if it.VCPUs != 4 || it.MemoryMiB != 16384 {
		t.Fatalf("e2-standard-4: %+v", it)
	}
}

func TestDryRun(t *testing.T) {
	e := start(t)
	owned, na := e.account(owner), e.account(netAdmin)
	cluster := func(a *provider.Account, edit func(*v1.ClusterSpec)) provider.Cluster {
		pc := newCluster("dry", a)
		pc.Spec.ControlPlane = v1.ControlPlane{Size: 1, InstanceType: "e2-standard-2"}
		pc.Spec.WorkerPools = []v1.WorkerPool{{Name: "default", Size: 2, InstanceType: "e2-standard-4", Zones: []string{"us-central1-a", "us-central1-b"}}}
		if edit != nil {
			edit(&pc.Spec)
		}
		return pc
	}
	tests := []struct {
		name         string
		pc           provider.Cluster
		code, target string
		words        []string
	}{
		{"all offered, room for it", cluster(owned, nil), "", "", nil},
		{"a network, a security and an instance admin", cluster(e.account(admins), nil), "", "", nil},
		{"a network admin", cluster(na, nil), v1.CodeForbidden, "spec.cloudAccount",
			[]string{netAdmin, `"gcp-netadmin"`, "compute.firewalls.create", "(and 22 more)"}},
		{"a type not offered in a zone", cluster(owned, func(s *v1.ClusterSpec) {
			s.ControlPlane.InstanceType, s.ControlPlane.Zones = "n2-standard-2", []string{"us-central1-c"}
		}), v1.CodeInvalidParameter, "spec.controlPlane.instanceType", []string{"n2-standard-2", "us-central1-c"}},
		{"a type not offered in every zone of the region", cluster(owned, func(s *v1.ClusterSpec) { s.ControlPlane.InstanceType = "n2-standard-4" }),
			v1.CodeInvalidParameter, "spec.controlPlane.instanceType", []string{"n2-standard-4", "us-central1-c"}},
		{"a zone of another region", cluster(owned, func(s *v1.ClusterSpec) { s.WorkerPools[0].Zones = []string{"europe-west1-b"} }),
			v1.CodeInvalidParameter, "spec.workerPools[0].zones", []string{"europe-west1-b", "us-central1-a, us-central1-b, us-central1-c"}},
		{"more vCPUs than the quota", cluster(owned, func(s *v1.ClusterSpec) { s.WorkerPools[0].Size = 6 }),
			v1.CodeQuotaExceeded, "spec.workerPools[0].size", []string{"26 vCPUs", "limit 24", "2 more"}},
		{"a region not offered", cluster(owned, func(s *v1.ClusterSpec) { s.Region = "mars-north1" }), v1.CodeInvalidParameter, "spec.region", []string{`"mars-north1"`}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := e.g.Preflight(t.Context(), tt.pc)
			if err != nil {
				t.Fatal(err)
			}
			if tt.code == "" {
				if len(got) != 0 {
					t.Fatalf("findings: %v", got)
				}
				return
			}
			if len(got) != 1 || got[0].Code != tt.code || got[0].Target != tt.target {
				t.Fatalf("findings %v; want one %s at %s", got, tt.code, tt.target)
			}
			for _, w := range tt.words {
				if !strings.Contains(got[0].Message, w) {
					t.Fatalf("%q does not say %q", got[0].Message, w)
				}
			}
		})
	}
	if got := e.mutations(); len(got) != 0 {
		t.Fatalf("the dry run wrote %v", got)
	}
}

// TestDryRunGroupQuota: a pool is a managed instance group, counted
// against the region's INSTANCE_GROUP_MANAGERS quota before anything is
// made.
func TestDryRunGroupQuota(t *testing.T) {
	e := start(t, func(o *gcplocal.Options) { o.Quotas = map[string]float64{"INSTANCE_GROUP_MANAGERS": 1} })
	pc := newCluster("dry", e.account(owner))
	pc.Spec.ControlPlane = v1.ControlPlane{Size: 1}
	pc.Spec.WorkerPools = []v1.WorkerPool{{Name: "a", Size: 1}}
	if got, err := e.g.Preflight(t.Context(), pc); err != nil || len(got) != 0 {
		t.Fatalf("one pool, room for one group: %v, %v", got, err)
	}
	pc.Spec.WorkerPools = append(pc.Spec.WorkerPools, v1.WorkerPool{Name: "b", Size: 1})
	got, err := e.g.Preflight(t.Context(), pc)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 || got[0].Code != v1.CodeQuotaExceeded || got[0].Target != "spec.workerPools" ||
		!strings.Contains(got[0].Message, "INSTANCE_GROUP_MANAGERS quota there has room for 1") {
		t.Fatalf("two pools, room for one group: %v", got)
	}
}
