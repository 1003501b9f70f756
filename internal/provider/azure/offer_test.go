package azure_test

import (
	"slices"
	"testing"

	v1 "kiln.dev/kiln/api/v1"
	"kiln.dev/kiln/internal/provider"
	azurelocal "kiln.dev/kiln/test/cloud/azure"
)

// TestDryRun: Describe says what the subscription is offered (restricted
// sizes left out); Preflight names a size not offered in a zone the pool
// uses and the quota the cluster would exceed, each on its spec field,
// and counts the cluster's own machines as had.
func TestDryRun(t *testing.T) {
	t.Parallel()
	l := newLocal(t, azurelocal.Options{Images: []string{version}})
	l.SetFaults(azurelocal.Faults{SKURestrictions: []string{"Standard_D8s_v5/eastus/2", "Standard_E4s_v5/eastus"},
		FamilyCoresQuota: map[string]int{"standardDSv5Family": 8}})
	p := newNetwork()
	ctx := t.Context()
	o, err := p.Describe(ctx, l.account, "eastus")
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(o.Regions, []string{"eastus", "westeurope", "westus2"}) || !slices.Equal(o.Zones, []string{"1", "2", "3"}) || o.DefaultInstanceType != "Standard_D2s_v5" {
		t.Errorf("offer: regions %v, zones %v, default %s", o.Regions, o.Zones, o.DefaultInstanceType)
	}
	if it, ok := o.InstanceType("Standard_D4s_v5"); !ok || it.VCPUs != 4 || it.MemoryMiB != 16384 {
		t.Errorf("Standard_D4s_v5 in the offer: %+v, %v; want 4 vCPUs, 16384 MiB", it, ok)
	}
	if _, ok := o.InstanceType("Standard_E4s_v5"); ok {
		t.Errorf("the offer holds Standard_E4s_v5, which the region restricts")
	}

	c := cluster(l, "dry")
	c.Spec.ControlPlane.Size = 3 // 3 x 2 vCPUs of standardDSv5Family
	c.Spec.WorkerPools = []v1.WorkerPool{{Name: "big", Size: 1, InstanceType: "Standard_D8s_v5", Zones: []string{"1", "2"}}}
	findings, err := p.Preflight(ctx, c)
	if err != nil {
		t.Fatal(err)
	}
	want := []struct{ code, target string }{
		{v1.CodeInvalidParameter, "spec.workerPools[0].instanceType"}, // D8s_v5 not in zone 2
		{v1.CodeQuotaExceeded, "spec.workerPools[0].size"},            // 6 + 8 DSv5 vCPUs against 8
	}
	if len(findings) != len(want) {
		t.Fatalf("findings %+v; want %v", findings, want)
	}
	for i, w := range want {
		if findings[i].Code != w.code || findings[i].Target != w.target {
			t.Errorf("finding %d: %+v; want %s on %s", i, findings[i], w.code, w.target)
		}
	}

	// Within the quota once the pool is smaller and in zone 1, and a machine
	// the cluster already has counts as had.
	c.Spec.WorkerPools[0] = v1.WorkerPool{Name: "big", Size: 1, InstanceType: "Standard_D2s_v5", Zones: []string{"1"}}
	if _, err := p.EnsureMachine(ctx, c, provider.MachineSpec{Name: "dry-cp-0", Role: v1.RoleControlPlane}); err != nil {
		t.Fatal(err)
	}
	if findings, err := p.Preflight(ctx, c); err != nil || len(findings) != 0 {
		t.Errorf("Preflight of a cluster within its offer and quota: %+v, %v; want nothing", findings, err)
	}
}
