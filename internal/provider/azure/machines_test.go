package azure_test

import (
	"net/netip"
	"strings"
	"testing"

	v1 "kiln.dev/kiln/api/v1"
	"kiln.dev/kiln/internal/provider"
	"kiln.dev/kiln/internal/provider/azure"
	azurelocal "kiln.dev/kiln/test/cloud/azure"
)

// TestMachines: machines in their role's subnet and zone, sizes and image
// as the spec says, a stopped machine started again by its ensure, and
// what Azure refuses said as the spec's field.
func TestMachines(t *testing.T) {
	t.Parallel()
	l := newLocal(t, azurelocal.Options{Images: []string{version}})
	p := newNetwork()
	ctx := t.Context()
	c := cluster(l, "m1")
	c.Spec.ControlPlane.Zones = []string{"1", "2", "3"}
	c.Spec.WorkerPools[0].InstanceType = "Standard_D4s_v5"
	c.Spec.WorkerPools[0].Zones = []string{"2"}
	nw, err := p.EnsureNetwork(ctx, c)
	if err != nil {
		t.Fatal(err)
	}
	ms := map[string]provider.Machine{}
	for _, s := range []provider.MachineSpec{{Name: "m1-cp-0", Role: v1.RoleControlPlane}, {Name: "m1-cp-1", Role: v1.RoleControlPlane}} {
		m, err := p.EnsureMachine(ctx, c, s)
		if err != nil {
			t.Fatalf("EnsureMachine(%s): %v", s.Name, err)
		}
		ms[s.Name] = m
	}
	pool := provider.MachineSpec{Role: v1.RoleWorker, Pool: "default", InstanceType: "Standard_D4s_v5", Revision: "r1"}
	grown, err := p.GrowPool(ctx, c, pool, nil, 2)
	if err != nil || len(grown) != 2 {
		t.Fatalf("GrowPool(default, 2) = %+v, %v", grown, err)
	}
	for _, m := range grown {
		if !strings.HasPrefix(m.Name, "default-") || len(m.Name) != len("default-")+6 || m.Revision != "r1" || m.Pool != "default" {
			t.Errorf("pool machine %+v: want a name default-XXXXXX (its computer name), pool default, revision r1", m)
		}
	}
	ms["m1-default-0"] = grown[0]
	space := netip.MustParsePrefix(nw.CIDR)
	for name, want := range map[string]struct{ zone, size string }{
		"m1-cp-0": {"1", azure.DefaultVMSize}, "m1-cp-1": {"2", azure.DefaultVMSize}, "m1-default-0": {"2", "Standard_D4s_v5"},
	} {
		m := ms[name]
		a, err := netip.ParseAddr(m.Address)
		if err != nil || !space.Contains(a) || m.Zone != want.zone || m.InstanceType != want.size {
			t.Errorf("%s: address %q, zone %q, size %q; want an address in %s, zone %s, %s", name, m.Address, m.Zone, m.InstanceType, space, want.zone, want.size)
		}
	}
	cp, _ := netip.ParseAddr(ms["m1-cp-0"].Address)
	w, _ := netip.ParseAddr(ms["m1-default-0"].Address)
	if netip.PrefixFrom(cp, 20).Masked() == netip.PrefixFrom(w, 20).Masked() {
		t.Errorf("the control plane (%s) and the pool's machine (%s) share a subnet; each role has its own", cp, w)
	}

	vms := l.clients(t).compute.NewVirtualMachinesClient()
	group := azure.GroupName("p", "m1")
	poller, err := vms.BeginPowerOff(ctx, group, "m1-cp-0", nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := poller.PollUntilDone(ctx, nil); err != nil {
		t.Fatal(err)
	}
	again, err := p.EnsureMachine(ctx, c, provider.MachineSpec{Name: "m1-cp-0", Role: v1.RoleControlPlane})
	if err != nil || again.ID != ms["m1-cp-0"].ID {
		t.Fatalf("EnsureMachine of a stopped machine = %+v, %v; want the same machine", again, err)
	}
	iv, err := vms.InstanceView(ctx, group, "m1-cp-0", nil)
	if err != nil || len(iv.Statuses) < 2 || *iv.Statuses[1].Code != "PowerState/running" {
		t.Errorf("after its ensure, m1-cp-0's statuses are %v (%v); want it running again", iv.Statuses, err)
	}

	big := pool
	big.InstanceType = "Standard_Z1"
	_, err = p.GrowPool(ctx, c, big, []string{grown[0].Name, grown[1].Name}, 1)
	wantFailure(t, err, v1.CodeInvalidParameter, "spec.workerPools[0].instanceType", false, "Standard_Z1")
	old := c
	old.Spec.KubernetesVersion = "v1.30.0"
	_, err = p.EnsureMachine(ctx, old, provider.MachineSpec{Name: "m1-cp-2", Role: v1.RoleControlPlane})
	wantFailure(t, err, v1.CodeUnsupportedVersion, "spec.kubernetesVersion", false, "kiln:kiln-node:v1.30.0", "eastus")
	_, err = p.GrowPool(ctx, c, provider.MachineSpec{Role: v1.RoleWorker, Pool: "x"}, nil, 1)
	wantFailure(t, err, v1.CodeInvalidParameter, "spec.workerPools", false, `pool "x"`)
	if got, err := vms.Get(ctx, group, "m1-cp-2", nil); err == nil {
		t.Errorf("a refused machine was kept: %v", got.ID)
	}
	for _, nic := range []string{"m1-cp-2-nic"} {
		if _, err := l.clients(t).net.NewInterfacesClient().Get(ctx, group, nic, nil); err == nil {
			t.Errorf("the interface %s of a refused machine was kept", nic)
		}
	}

	for _, name := range []string{"m1-cp-1", grown[1].Name} {
		if err := p.DeleteMachine(ctx, c, name); err != nil {
			t.Fatal(err)
		}
		if err := p.DeleteMachine(ctx, c, name); err != nil {
			t.Errorf("DeleteMachine of a machine gone: %v", err)
		}
	}
	list, err := p.ListMachines(ctx, c)
	if err != nil || len(list) != 2 || list[0].Name != grown[0].Name || list[1].Name != "m1-cp-0" {
		t.Errorf("ListMachines = %+v, %v; want %s and m1-cp-0", list, err, grown[0].Name)
	}
	sets := l.clients(t).compute.NewVirtualMachineScaleSetsClient()
	if set, err := sets.Get(ctx, group, "kiln-pool-default", nil); err != nil || *set.SKU.Capacity != 1 || *set.SKU.Name != "Standard_D4s_v5" {
		t.Errorf("the pool's scale set after one machine's delete and a refused size: %v, %v; want capacity 1, Standard_D4s_v5", set.SKU, err)
	}
	if err := p.DeleteNetwork(ctx, c); err != nil {
		t.Fatal(err)
	}
	if list, err := p.ListMachines(ctx, c); err != nil || len(list) != 0 {
		t.Errorf("ListMachines after DeleteNetwork = %v, %v; want none", list, err)
	}
}
