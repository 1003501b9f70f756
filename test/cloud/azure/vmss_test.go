package azure

import (
	"encoding/base64"
	"net/http"
	"slices"
	"strings"
	"testing"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore/to"
	"github.com/Azure/azure-sdk-for-go/sdk/resourcemanager/compute/armcompute/v7"
	"github.com/Azure/azure-sdk-for-go/sdk/resourcemanager/network/armnetwork/v7"
)

func scaleSetOf(subnet, image string, capacity int64, zones ...string) armcompute.VirtualMachineScaleSet {
	var zs []*string
	for _, z := range zones {
		zs = append(zs, to.Ptr(z))
	}
	return armcompute.VirtualMachineScaleSet{Location: to.Ptr("eastus"), Zones: zs,
		SKU:  &armcompute.SKU{Name: to.Ptr("Standard_D2s_v5"), Capacity: to.Ptr(capacity)},
		Tags: map[string]*string{"pool": to.Ptr("default")},
		Properties: &armcompute.VirtualMachineScaleSetProperties{
			OrchestrationMode: to.Ptr(armcompute.OrchestrationModeFlexible), PlatformFaultDomainCount: to.Ptr[int32](1),
			VirtualMachineProfile: &armcompute.VirtualMachineScaleSetVMProfile{
				StorageProfile: &armcompute.VirtualMachineScaleSetStorageProfile{ImageReference: &armcompute.ImageReference{
					Publisher: to.Ptr(ImagePublisher), Offer: to.Ptr(ImageOffer), SKU: to.Ptr(image), Version: to.Ptr("latest")}},
				OSProfile: &armcompute.VirtualMachineScaleSetOSProfile{ComputerNamePrefix: to.Ptr("pool"), AdminUsername: to.Ptr("kiln"),
					CustomData: to.Ptr(base64.StdEncoding.EncodeToString([]byte("#!/bin/sh\necho \"booted $(hostname)\" >> /var/lib/kiln-test\n")))},
				NetworkProfile: &armcompute.VirtualMachineScaleSetNetworkProfile{
					NetworkAPIVersion: to.Ptr(armcompute.NetworkAPIVersionTwoThousandTwenty1101),
					NetworkInterfaceConfigurations: []*armcompute.VirtualMachineScaleSetNetworkConfiguration{{Name: to.Ptr("nic"),
						Properties: &armcompute.VirtualMachineScaleSetNetworkConfigurationProperties{Primary: to.Ptr(true),
							IPConfigurations: []*armcompute.VirtualMachineScaleSetIPConfiguration{{Name: to.Ptr("ip"),
								Properties: &armcompute.VirtualMachineScaleSetIPConfigurationProperties{Subnet: &armcompute.APIEntityReference{ID: to.Ptr(subnet)}}}}}}},
				},
			}}}
}

// scaleSetVMs lists the virtual machines of the group in the scale set,
// as name -> computer name.
func scaleSetVMs(t *testing.T, vms *armcompute.VirtualMachinesClient, vmss string) map[string]string {
	t.Helper()
	out := map[string]string{}
	pages := vms.NewListPager(group, nil)
	for pages.More() {
		page := must[armcompute.VirtualMachinesClientListResponse](t, "list virtual machines")(pages.NextPage(t.Context()))
		for _, vm := range page.Value {
			if p := vm.Properties; p != nil && p.VirtualMachineScaleSet != nil && strings.EqualFold(*p.VirtualMachineScaleSet.ID, vmss) {
				out[*vm.Name] = *p.OSProfile.ComputerName
			}
		}
	}
	return out
}

// TestScaleSetRecords: a flexible scale set's capacity makes and deletes
// its virtual machines (zones in turn, computer names from the prefix,
// interfaces in the subnet), a member deleted on its own lowers the
// capacity, what ARM refuses, and the scale set's delete takes them all.
func TestScaleSetRecords(t *testing.T) {
	t.Parallel()
	a := newTestAzure(t, Options{InProgressPolls: -1, Images: []string{testImage}})
	c := newClients(t, a, a.credential(t, testClient.Secret))
	ctx := t.Context()
	c.makeGroup(t, group)
	v := done[armnetwork.VirtualNetworksClientCreateOrUpdateResponse](t, "create network")(
		c.net.NewVirtualNetworksClient().BeginCreateOrUpdate(ctx, group, "c1-vnet", vnet(subnet("nodes", "10.0.1.0/24")), nil))
	sn := *v.Properties.Subnets[0].ID
	sets, err := armcompute.NewVirtualMachineScaleSetsClient(DefaultSubscription, a.credential(t, testClient.Secret), a.arm())
	if err != nil {
		t.Fatal(err)
	}
	vms := c.compute(t, a)

	uniform := scaleSetOf(sn, testImage, 1)
	uniform.Properties.OrchestrationMode = to.Ptr(armcompute.OrchestrationModeUniform)
	wantARMError(t, "uniform orchestration", finish(sets.BeginCreateOrUpdate(ctx, group, "pool", uniform, nil)), http.StatusBadRequest, "InvalidParameter")
	wantARMError(t, "an image not there", finish(sets.BeginCreateOrUpdate(ctx, group, "pool", scaleSetOf(sn, "v0.0.1", 1), nil)), http.StatusNotFound, "PlatformImageNotFound")

	set := done[armcompute.VirtualMachineScaleSetsClientCreateOrUpdateResponse](t, "create the scale set")(
		sets.BeginCreateOrUpdate(ctx, group, "pool", scaleSetOf(sn, testImage, 3, "1", "2", "3"), nil))
	got := scaleSetVMs(t, vms, *set.ID)
	if len(got) != 3 {
		t.Fatalf("the scale set of capacity 3 has %v", got)
	}
	var zones []string
	for name, computer := range got {
		if !strings.HasPrefix(name, "pool_") || !strings.HasPrefix(computer, "pool") || len(computer) != 10 {
			t.Errorf("member %s (computer %s): want pool_XXXXXX and pool + 6 characters", name, computer)
		}
		vm := must[armcompute.VirtualMachinesClientGetResponse](t, "get "+name)(vms.Get(ctx, group, name, nil))
		zones = append(zones, *vm.Zones[0])
		if *vm.Properties.ProvisioningState != "Succeeded" || *vm.Tags["pool"] != "default" || vm.Properties.OSProfile.CustomData != nil {
			t.Errorf("member %s: %s, tags %v; want Succeeded, the scale set's tags, no custom data answered", name, *vm.Properties.ProvisioningState, vm.Tags)
		}
		nic := must[armnetwork.InterfacesClientGetResponse](t, "get its interface")(c.net.NewInterfacesClient().Get(ctx, group, name+"-nic", nil))
		if ip := *nic.Properties.IPConfigurations[0].Properties.PrivateIPAddress; !strings.HasPrefix(ip, "10.0.1.") {
			t.Errorf("member %s's address %s is not in its subnet", name, ip)
		}
	}
	if slices.Sort(zones); !slices.Equal(zones, []string{"1", "2", "3"}) {
		t.Errorf("members' zones = %v, want one in each", zones)
	}

	set.SKU.Capacity = to.Ptr[int64](1)
	done[armcompute.VirtualMachineScaleSetsClientCreateOrUpdateResponse](t, "scale in")(sets.BeginCreateOrUpdate(ctx, group, "pool", set.VirtualMachineScaleSet, nil))
	left := scaleSetVMs(t, vms, *set.ID)
	if len(left) != 1 {
		t.Fatalf("after scaling in to 1: %v", left)
	}
	for name := range left {
		done[armcompute.VirtualMachinesClientDeleteResponse](t, "delete the last member")(vms.BeginDelete(ctx, group, name, nil))
		if _, err := c.net.NewInterfacesClient().Get(ctx, group, name+"-nic", nil); err == nil {
			t.Errorf("the interface of deleted member %s is left", name)
		}
	}
	now := must[armcompute.VirtualMachineScaleSetsClientGetResponse](t, "get the scale set")(sets.Get(ctx, group, "pool", nil))
	if *now.SKU.Capacity != 0 || now.Properties.VirtualMachineProfile.OSProfile.CustomData != nil {
		t.Errorf("after its last member's delete, capacity %d (custom data %v); want 0 and no custom data answered", *now.SKU.Capacity, now.Properties.VirtualMachineProfile.OSProfile.CustomData)
	}
	now.SKU.Capacity = to.Ptr[int64](2)
	done[armcompute.VirtualMachineScaleSetsClientCreateOrUpdateResponse](t, "scale out")(sets.BeginCreateOrUpdate(ctx, group, "pool", now.VirtualMachineScaleSet, nil))
	done[armcompute.VirtualMachineScaleSetsClientDeleteResponse](t, "delete the scale set")(sets.BeginDelete(ctx, group, "pool", nil))
	if left := scaleSetVMs(t, vms, *set.ID); len(left) != 0 {
		t.Errorf("after the scale set's delete: %v", left)
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if len(a.st.Machines) != 0 || len(a.ofType(typeNIC)) != 0 {
		t.Errorf("left: machines %v, interfaces %d", a.st.Machines, len(a.ofType(typeNIC)))
	}
}
