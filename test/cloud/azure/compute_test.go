package azure

import (
	"encoding/base64"
	"net/http"
	"testing"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore/to"
	"github.com/Azure/azure-sdk-for-go/sdk/resourcemanager/compute/armcompute/v7"
	"github.com/Azure/azure-sdk-for-go/sdk/resourcemanager/network/armnetwork/v7"
)

const testImage = "v1.36.3"

func (c clients) compute(t *testing.T, a *testAzure) *armcompute.VirtualMachinesClient {
	t.Helper()
	vms, err := armcompute.NewVirtualMachinesClient(DefaultSubscription, a.credential(t, testClient.Secret), a.arm())
	if err != nil {
		t.Fatal(err)
	}
	return vms
}

// makeNIC makes an interface in subnet (an id) with a dynamic address;
// deleteWithVM marks it to go with the virtual machine.
func (c clients) makeNIC(t *testing.T, name, subnet string) armnetwork.Interface {
	t.Helper()
	return done[armnetwork.InterfacesClientCreateOrUpdateResponse](t, "create interface "+name)(
		c.net.NewInterfacesClient().BeginCreateOrUpdate(t.Context(), group, name, nicOf(subnet), nil)).Interface
}

func nicOf(subnet string) armnetwork.Interface {
	return armnetwork.Interface{Location: to.Ptr("eastus"), Properties: &armnetwork.InterfacePropertiesFormat{
		IPConfigurations: []*armnetwork.InterfaceIPConfiguration{{Name: to.Ptr("ipconfig1"), Properties: &armnetwork.InterfaceIPConfigurationPropertiesFormat{
			Subnet: &armnetwork.Subnet{ID: to.Ptr(subnet)}, PrivateIPAllocationMethod: to.Ptr(armnetwork.IPAllocationMethodDynamic)}}}}}
}

// vmOf is a virtual machine of the node image on nic, in zone 1, running
// script at its first boot.
func vmOf(nic, image, size, script string, deleteNIC bool) armcompute.VirtualMachine {
	ref := &armcompute.NetworkInterfaceReference{ID: to.Ptr(nic), Properties: &armcompute.NetworkInterfaceReferenceProperties{Primary: to.Ptr(true)}}
	if deleteNIC {
		ref.Properties.DeleteOption = to.Ptr(armcompute.DeleteOptionsDelete)
	}
	return armcompute.VirtualMachine{Location: to.Ptr("eastus"), Zones: []*string{to.Ptr("1")},
		Properties: &armcompute.VirtualMachineProperties{
			HardwareProfile: &armcompute.HardwareProfile{VMSize: to.Ptr(armcompute.VirtualMachineSizeTypes(size))},
			StorageProfile: &armcompute.StorageProfile{ImageReference: &armcompute.ImageReference{
				Publisher: to.Ptr(ImagePublisher), Offer: to.Ptr(ImageOffer), SKU: to.Ptr(image), Version: to.Ptr("latest")}},
			OSProfile: &armcompute.OSProfile{ComputerName: to.Ptr("node-1"), AdminUsername: to.Ptr("kiln"),
				CustomData: to.Ptr(base64.StdEncoding.EncodeToString([]byte(script)))},
			NetworkProfile: &armcompute.NetworkProfile{NetworkInterfaces: []*armcompute.NetworkInterfaceReference{ref}},
		}}
}

func powerState(t *testing.T, vms *armcompute.VirtualMachinesClient, name string) string {
	t.Helper()
	v := must[armcompute.VirtualMachinesClientInstanceViewResponse](t, "instance view of "+name)(vms.InstanceView(t.Context(), group, name, nil))
	for _, st := range v.Statuses {
		if st.Code != nil && len(*st.Code) > 11 && (*st.Code)[:11] == "PowerState/" {
			return (*st.Code)[11:]
		}
	}
	return ""
}

// TestVirtualMachineRecords makes interfaces and a virtual machine with
// the SDK on a local Azure without machines: addresses given in order,
// what ARM refuses (a size, an image, an address outside the subnet, an
// interface in use, a subnet in use), power actions and the instance
// view, and a delete that takes the interface marked to go with it.
func TestVirtualMachineRecords(t *testing.T) {
	t.Parallel()
	a := newTestAzure(t, Options{InProgressPolls: -1, Images: []string{testImage}})
	c := newClients(t, a, a.credential(t, testClient.Secret))
	ctx := t.Context()
	c.makeGroup(t, group)
	v := done[armnetwork.VirtualNetworksClientCreateOrUpdateResponse](t, "create network")(
		c.net.NewVirtualNetworksClient().BeginCreateOrUpdate(ctx, group, "c1-vnet", vnet(subnet("nodes", "10.0.1.0/24")), nil))
	sn := *v.Properties.Subnets[0].ID

	nic1, nic2 := c.makeNIC(t, "n1", sn), c.makeNIC(t, "n2", sn)
	for _, tc := range []struct {
		nic  armnetwork.Interface
		want string
	}{{nic1, "10.0.1.4"}, {nic2, "10.0.1.5"}} {
		if got := *tc.nic.Properties.IPConfigurations[0].Properties.PrivateIPAddress; got != tc.want {
			t.Errorf("%s's address is %s, want %s (Azure keeps a subnet's first four)", *tc.nic.Name, got, tc.want)
		}
	}
	static := nicOf(sn)
	static.Properties.IPConfigurations[0].Properties.PrivateIPAllocationMethod = to.Ptr(armnetwork.IPAllocationMethodStatic)
	static.Properties.IPConfigurations[0].Properties.PrivateIPAddress = to.Ptr("10.0.2.9")
	wantARMError(t, "an address outside the subnet", finish(c.net.NewInterfacesClient().BeginCreateOrUpdate(ctx, group, "n3", static, nil)),
		http.StatusBadRequest, "PrivateIPAddressNotInSubnet")
	static.Properties.IPConfigurations[0].Properties.PrivateIPAddress = to.Ptr("10.0.1.4")
	wantARMError(t, "an address another interface has", finish(c.net.NewInterfacesClient().BeginCreateOrUpdate(ctx, group, "n3", static, nil)),
		http.StatusBadRequest, "PrivateIPAddressInUse")

	vms := c.compute(t, a)
	wantARMError(t, "a size not offered", finish(vms.BeginCreateOrUpdate(ctx, group, "vm1", vmOf(*nic1.ID, testImage, "Standard_X9", "", false), nil)),
		http.StatusBadRequest, "InvalidParameter")
	wantARMError(t, "an image not there", finish(vms.BeginCreateOrUpdate(ctx, group, "vm1", vmOf(*nic1.ID, "v0.0.1", "Standard_D2s_v5", "", false), nil)),
		http.StatusNotFound, "PlatformImageNotFound")
	noAdmin := vmOf(*nic1.ID, testImage, "Standard_D2s_v5", "", false)
	noAdmin.Properties.OSProfile.AdminUsername = nil
	wantARMError(t, "no admin user", finish(vms.BeginCreateOrUpdate(ctx, group, "vm1", noAdmin, nil)), http.StatusBadRequest, "InvalidParameter")
	if _, err := vms.Get(ctx, group, "vm1", nil); err == nil {
		t.Errorf("a refused virtual machine was kept")
	}

	vm := done[armcompute.VirtualMachinesClientCreateOrUpdateResponse](t, "create vm1")(
		vms.BeginCreateOrUpdate(ctx, group, "vm1", vmOf(*nic1.ID, testImage, "Standard_D2s_v5", "#!/bin/sh\necho secret-ish\n", true), nil))
	if *vm.Properties.ProvisioningState != "Succeeded" || vm.Properties.VMID == nil || vm.Properties.OSProfile.CustomData != nil {
		t.Errorf("vm1: %s, vmId %v, custom data %v; want Succeeded, an id, no custom data answered", *vm.Properties.ProvisioningState, vm.Properties.VMID, vm.Properties.OSProfile.CustomData)
	}
	got := must[armnetwork.InterfacesClientGetResponse](t, "get n1")(c.net.NewInterfacesClient().Get(ctx, group, "n1", nil))
	if got.Properties.VirtualMachine == nil || *got.Properties.VirtualMachine.ID != *vm.ID {
		t.Errorf("n1's virtual machine = %v, want %s", got.Properties.VirtualMachine, *vm.ID)
	}
	wantARMError(t, "a second machine on n1", finish(vms.BeginCreateOrUpdate(ctx, group, "vm2", vmOf(*nic1.ID, testImage, "Standard_D2s_v5", "", false), nil)),
		http.StatusBadRequest, "NicInUse")
	wantARMError(t, "delete n1 in use", finish(c.net.NewInterfacesClient().BeginDelete(ctx, group, "n1", nil)), http.StatusBadRequest, "NicInUse")
	wantARMError(t, "delete the subnet in use", finish(c.net.NewSubnetsClient().BeginDelete(ctx, group, "c1-vnet", "nodes", nil)),
		http.StatusBadRequest, "InUseSubnetCannotBeDeleted")

	if p := powerState(t, vms, "vm1"); p != "running" {
		t.Errorf("vm1's power state = %q, want running", p)
	}
	done[armcompute.VirtualMachinesClientPowerOffResponse](t, "power off")(vms.BeginPowerOff(ctx, group, "vm1", nil))
	if p := powerState(t, vms, "vm1"); p != "stopped" {
		t.Errorf("after power off, vm1's power state = %q, want stopped", p)
	}
	done[armcompute.VirtualMachinesClientStartResponse](t, "start")(vms.BeginStart(ctx, group, "vm1", nil))
	expanded := must[armcompute.VirtualMachinesClientGetResponse](t, "get vm1 with its instance view")(
		vms.Get(ctx, group, "vm1", &armcompute.VirtualMachinesClientGetOptions{Expand: to.Ptr(armcompute.InstanceViewTypesInstanceView)}))
	if iv := expanded.Properties.InstanceView; iv == nil || len(iv.Statuses) != 2 || *iv.Statuses[1].Code != "PowerState/running" {
		t.Errorf("vm1's instance view = %+v, want provisioning and PowerState/running", iv)
	}
	_, err := vms.BeginStart(ctx, group, "nope", nil)
	wantARMError(t, "start a machine not there", err, http.StatusNotFound, "ResourceNotFound")

	done[armcompute.VirtualMachinesClientDeleteResponse](t, "delete vm1")(vms.BeginDelete(ctx, group, "vm1", nil))
	_, err = c.net.NewInterfacesClient().Get(ctx, group, "n1", nil)
	wantARMError(t, "n1 after vm1's delete (deleteOption Delete)", err, http.StatusNotFound, "ResourceNotFound")
	if got := must[armnetwork.InterfacesClientGetResponse](t, "get n2")(c.net.NewInterfacesClient().Get(ctx, group, "n2", nil)); got.Properties.VirtualMachine != nil {
		t.Errorf("n2 has a virtual machine: %v", got.Properties.VirtualMachine)
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if len(a.st.Machines) != 0 {
		t.Errorf("machines left after the delete: %v", a.st.Machines)
	}
}
