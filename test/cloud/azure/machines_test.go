package azure

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"net/netip"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore/to"
	"github.com/Azure/azure-sdk-for-go/sdk/resourcemanager/compute/armcompute/v7"
	"github.com/Azure/azure-sdk-for-go/sdk/resourcemanager/network/armnetwork/v7"
	"github.com/Azure/azure-sdk-for-go/sdk/resourcemanager/resources/armresources"

	"kiln.dev/kiln/test/cloud/machines"
	"kiln.dev/kiln/test/waitfor"
)

func docker(args ...string) (string, error) {
	out, err := exec.Command("docker", args...).CombinedOutput()
	return strings.TrimSpace(string(out)), err
}

// TestVirtualMachineMachines makes a virtual machine with the SDK on a
// local Azure whose machines are containers of the node image: its create
// ends once its container runs at its interface's address with its
// computer name and has run its custom data; power off and start stop and
// start the container (the custom data is not run again); its delete ends
// once the container is gone, and the network's Docker network goes with
// the group. Skipped without Docker or a node image.
// dockerAzure is a local Azure whose machines are containers of the node
// image, everything it makes on Docker removed at the test's end, its
// test's range free; the test is skipped without Docker or a node image.
func dockerAzure(t *testing.T, space netip.Prefix) (*testAzure, *machines.Docker, string, string) {
	t.Helper()
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	// KILN_AZURE_TEST_NODE_REPOSITORY runs the test with other images than
	// kiln/node (any image with /bin/sh, sleep and tee will do).
	identity := "test" + hex.EncodeToString(b)
	m, err := NewDockerMachines(t.Context(), identity, os.Getenv("KILN_AZURE_TEST_NODE_REPOSITORY"), nil)
	if err != nil {
		t.Skipf("no Docker engine: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if err := m.RemoveAll(ctx, nil); err != nil {
			t.Errorf("cleaning up the test's Docker objects: %v", err)
		}
		m.Close()
	})
	ims, err := m.Images(t.Context())
	if err != nil || len(ims) == 0 {
		t.Skipf("no node image kiln/node on the Docker engine (make node-image builds it): %v", err)
	}
	if other := m.Overlapping(t.Context(), space); other != "" {
		t.Skipf("the test's range %s overlaps the Docker network %s", space, other)
	}
	a := newTestAzure(t, Options{Machines: m, InProgressPolls: -1})
	t.Cleanup(func() { a.Close() })
	waitfor.Cond(t, "the local Azure to list the node images", 30*time.Second, func() (bool, error) {
		a.mu.Lock()
		defer a.mu.Unlock()
		return len(a.images) > 0, nil
	})
	return a, m, identity, ims[0].Version
}

func TestVirtualMachineMachines(t *testing.T) {
	space := netip.MustParsePrefix("10.218.0.0/16")
	a, m, identity, version := dockerAzure(t, space)
	c := newClients(t, a, a.credential(t, testClient.Secret))
	ctx := t.Context()
	c.makeGroup(t, group)
	v := done[armnetwork.VirtualNetworksClientCreateOrUpdateResponse](t, "create network")(
		c.net.NewVirtualNetworksClient().BeginCreateOrUpdate(ctx, group, "c1-vnet", armnetwork.VirtualNetwork{Location: to.Ptr("eastus"),
			Properties: &armnetwork.VirtualNetworkPropertiesFormat{AddressSpace: &armnetwork.AddressSpace{AddressPrefixes: []*string{to.Ptr(space.String())}},
				Subnets: []*armnetwork.Subnet{subnet("nodes", "10.218.1.0/24")}}}, nil))
	nic := c.makeNIC(t, "n1", *v.Properties.Subnets[0].ID)

	vms := c.compute(t, a)
	script := "#!/bin/sh\necho \"booted $(hostname)\" >> /var/lib/kiln-test\n"
	vm := done[armcompute.VirtualMachinesClientCreateOrUpdateResponse](t, "create vm1")(
		vms.BeginCreateOrUpdate(ctx, group, "vm1", vmOf(*nic.ID, version, "Standard_D2s_v5", script, true), nil))
	name := m.Name(*vm.Properties.VMID)
	if got, err := docker("inspect", "-f", "{{.State.Running}} {{.Config.Hostname}} {{range .NetworkSettings.Networks}}{{.IPAddress}}{{end}}", name); err != nil || got != "true node-1 10.218.1.4" {
		t.Fatalf("vm1's container when its create ended: %q (%v); want running, node-1, at 10.218.1.4", got, err)
	}
	booted := func(want int) {
		t.Helper()
		waitfor.Cond(t, "vm1's custom data to have run", 30*time.Second, func() (bool, error) {
			out, err := docker("exec", name, "cat", "/var/lib/kiln-test")
			if err != nil {
				return false, waitfor.NotYet(errors.New(out))
			}
			if n := strings.Count(out, "booted node-1"); n != want {
				return false, waitfor.NotYet(errors.New(out))
			}
			return true, nil
		})
	}
	booted(1)

	done[armcompute.VirtualMachinesClientPowerOffResponse](t, "power off")(vms.BeginPowerOff(ctx, group, "vm1", nil))
	if got, _ := docker("inspect", "-f", "{{.State.Running}}", name); got != "false" || powerState(t, vms, "vm1") != "stopped" {
		t.Errorf("after power off: running %s, power state %s; want the container stopped", got, powerState(t, vms, "vm1"))
	}
	done[armcompute.VirtualMachinesClientStartResponse](t, "start")(vms.BeginStart(ctx, group, "vm1", nil))
	if got, _ := docker("inspect", "-f", "{{.State.Running}}", name); got != "true" || powerState(t, vms, "vm1") != "running" {
		t.Errorf("after start: running %s, power state %s; want the container running", got, powerState(t, vms, "vm1"))
	}
	time.Sleep(2 * time.Second) // a second boot would have written its line
	booted(1)

	done[armcompute.VirtualMachinesClientDeleteResponse](t, "delete vm1")(vms.BeginDelete(ctx, group, "vm1", nil))
	if _, err := docker("inspect", name); err == nil {
		t.Errorf("vm1's container is still there after its delete ended")
	}
	done[armresources.ResourceGroupsClientDeleteResponse](t, "delete group")(c.groups.BeginDelete(ctx, group, nil))
	waitfor.Cond(t, "the network's Docker network to go", 30*time.Second, func() (bool, error) {
		out, err := docker("network", "ls", "-q", "--filter", "label="+LabelIdentity+"="+identity)
		return err == nil && out == "", waitfor.NotYet(errors.New(out))
	})
}

// TestScaleSetMachines: a flexible scale set's virtual machines run as
// containers named by their computer names, each having run the custom
// data; a capacity of 0 removes them. Skipped without Docker or a node
// image.
func TestScaleSetMachines(t *testing.T) {
	space := netip.MustParsePrefix("10.219.0.0/16")
	a, m, _, version := dockerAzure(t, space)
	c := newClients(t, a, a.credential(t, testClient.Secret))
	ctx := t.Context()
	c.makeGroup(t, group)
	v := done[armnetwork.VirtualNetworksClientCreateOrUpdateResponse](t, "create network")(
		c.net.NewVirtualNetworksClient().BeginCreateOrUpdate(ctx, group, "c1-vnet", armnetwork.VirtualNetwork{Location: to.Ptr("eastus"),
			Properties: &armnetwork.VirtualNetworkPropertiesFormat{AddressSpace: &armnetwork.AddressSpace{AddressPrefixes: []*string{to.Ptr(space.String())}},
				Subnets: []*armnetwork.Subnet{subnet("pool", "10.219.1.0/24")}}}, nil))
	sets, err := armcompute.NewVirtualMachineScaleSetsClient(DefaultSubscription, a.credential(t, testClient.Secret), a.arm())
	if err != nil {
		t.Fatal(err)
	}
	set := done[armcompute.VirtualMachineScaleSetsClientCreateOrUpdateResponse](t, "create the scale set")(
		sets.BeginCreateOrUpdate(ctx, group, "pool", scaleSetOf(*v.Properties.Subnets[0].ID, version, 2), nil))
	vms := c.compute(t, a)
	members := scaleSetVMs(t, vms, *set.ID)
	if len(members) != 2 {
		t.Fatalf("members = %v, want 2", members)
	}
	var names []string
	for name, computer := range members {
		vm := must[armcompute.VirtualMachinesClientGetResponse](t, "get "+name)(vms.Get(ctx, group, name, nil))
		container := m.Name(*vm.Properties.VMID)
		names = append(names, container)
		if got, err := docker("inspect", "-f", "{{.State.Running}} {{.Config.Hostname}}", container); err != nil || got != "true "+computer {
			t.Errorf("member %s's container: %q (%v); want running as %s", name, got, err, computer)
		}
		waitfor.Cond(t, name+"'s custom data to have run", 30*time.Second, func() (bool, error) {
			out, err := docker("exec", container, "cat", "/var/lib/kiln-test")
			return err == nil && out == "booted "+computer, waitfor.NotYet(errors.New(out))
		})
	}
	set.SKU.Capacity = to.Ptr[int64](0)
	done[armcompute.VirtualMachineScaleSetsClientCreateOrUpdateResponse](t, "scale to 0")(sets.BeginCreateOrUpdate(ctx, group, "pool", set.VirtualMachineScaleSet, nil))
	for _, container := range names {
		if _, err := docker("inspect", container); err == nil {
			t.Errorf("container %s is still there after the scale set's capacity went to 0", container)
		}
	}
}
