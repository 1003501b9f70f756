package azure

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore/to"
	"github.com/Azure/azure-sdk-for-go/sdk/resourcemanager/network/armnetwork/v7"

	"kiln.dev/kiln/test/waitfor"
)

// lbOf is a Standard load balancer: a frontend (fe: a public IP's or a
// subnet's), a pool, a TCP probe on probePort and a rule from port to
// backendPort.
func lbOf(group, name string, fe *armnetwork.FrontendIPConfigurationPropertiesFormat, port, backendPort, probePort int32) armnetwork.LoadBalancer {
	id := "/subscriptions/" + DefaultSubscription + "/resourceGroups/" + group + "/providers/Microsoft.Network/loadBalancers/" + name
	return armnetwork.LoadBalancer{Location: to.Ptr("eastus"), SKU: &armnetwork.LoadBalancerSKU{Name: to.Ptr(armnetwork.LoadBalancerSKUNameStandard)},
		Properties: &armnetwork.LoadBalancerPropertiesFormat{
			FrontendIPConfigurations: []*armnetwork.FrontendIPConfiguration{{Name: to.Ptr("fe"), Properties: fe}},
			BackendAddressPools:      []*armnetwork.BackendAddressPool{{Name: to.Ptr("pool")}},
			Probes: []*armnetwork.Probe{{Name: to.Ptr("probe"), Properties: &armnetwork.ProbePropertiesFormat{
				Protocol: to.Ptr(armnetwork.ProbeProtocolTCP), Port: to.Ptr(probePort), IntervalInSeconds: to.Ptr[int32](1), NumberOfProbes: to.Ptr[int32](1)}}},
			LoadBalancingRules: []*armnetwork.LoadBalancingRule{{Name: to.Ptr("rule"), Properties: &armnetwork.LoadBalancingRulePropertiesFormat{
				Protocol: to.Ptr(armnetwork.TransportProtocolTCP), FrontendPort: to.Ptr(port), BackendPort: to.Ptr(backendPort),
				FrontendIPConfiguration: &armnetwork.SubResource{ID: to.Ptr(id + "/frontendIPConfigurations/fe")},
				BackendAddressPool:      &armnetwork.SubResource{ID: to.Ptr(id + "/backendAddressPools/pool")},
				Probe:                   &armnetwork.SubResource{ID: to.Ptr(id + "/probes/probe")}}}},
		}}
}

// joinPool makes interface name in subnet, in the load balancer's pool.
func (c clients) joinPool(t *testing.T, name, subnet, pool string) armnetwork.Interface {
	t.Helper()
	nic := nicOf(subnet)
	nic.Properties.IPConfigurations[0].Properties.LoadBalancerBackendAddressPools = []*armnetwork.BackendAddressPool{{ID: to.Ptr(pool)}}
	return done[armnetwork.InterfacesClientCreateOrUpdateResponse](t, "create interface "+name)(
		c.net.NewInterfacesClient().BeginCreateOrUpdate(t.Context(), group, name, nic, nil)).Interface
}

// TestLoadBalancerRecords: a public and an internal load balancer, what ARM
// computes (a frontend's address, a pool's members) and refuses.
func TestLoadBalancerRecords(t *testing.T) {
	t.Parallel()
	a := newTestAzure(t, Options{InProgressPolls: -1})
	c := newClients(t, a, a.credential(t, testClient.Secret))
	ctx := t.Context()
	c.makeGroup(t, group)
	v := done[armnetwork.VirtualNetworksClientCreateOrUpdateResponse](t, "create network")(
		c.net.NewVirtualNetworksClient().BeginCreateOrUpdate(ctx, group, "c1-vnet", vnet(subnet("nodes", "10.0.1.0/24")), nil))
	sn := *v.Properties.Subnets[0].ID
	lbs := c.net.NewLoadBalancersClient()

	internal := done[armnetwork.LoadBalancersClientCreateOrUpdateResponse](t, "create internal load balancer")(lbs.BeginCreateOrUpdate(ctx, group, "api",
		lbOf(group, "api", &armnetwork.FrontendIPConfigurationPropertiesFormat{Subnet: &armnetwork.Subnet{ID: to.Ptr(sn)}}, 6443, 6443, 6443), nil))
	fe := internal.Properties.FrontendIPConfigurations[0]
	if *fe.Properties.PrivateIPAddress != "10.0.1.4" || *fe.Properties.PrivateIPAllocationMethod != armnetwork.IPAllocationMethodDynamic {
		t.Errorf("internal frontend: %s %s; want the subnet's first free address, dynamic", *fe.Properties.PrivateIPAddress, *fe.Properties.PrivateIPAllocationMethod)
	}
	pool := *internal.Properties.BackendAddressPools[0].ID
	nic := c.joinPool(t, "n1", sn, pool)
	if ip := *nic.Properties.IPConfigurations[0].Properties.PrivateIPAddress; ip != "10.0.1.5" {
		t.Errorf("the interface's address %s; want 10.0.1.5 (10.0.1.4 is the frontend's)", ip)
	}
	got := must[armnetwork.LoadBalancersClientGetResponse](t, "get api")(lbs.Get(ctx, group, "api", nil))
	if m := got.Properties.BackendAddressPools[0].Properties.BackendIPConfigurations; len(m) != 1 || !strings.EqualFold(*m[0].ID, *nic.Properties.IPConfigurations[0].ID) {
		t.Errorf("the pool's members: %v; want n1's IP configuration", m)
	}
	wantARMError(t, "delete a load balancer whose pool has members", finish(lbs.BeginDelete(ctx, group, "api", nil)), http.StatusBadRequest, "LoadBalancerInUseByVirtualMachineScaleSet")

	basic := done[armnetwork.PublicIPAddressesClientCreateOrUpdateResponse](t, "create basic public IP")(
		c.net.NewPublicIPAddressesClient().BeginCreateOrUpdate(ctx, group, "basic", armnetwork.PublicIPAddress{Location: to.Ptr("eastus"),
			SKU: &armnetwork.PublicIPAddressSKU{Name: to.Ptr(armnetwork.PublicIPAddressSKUNameBasic)}}, nil))
	wantARMError(t, "a Basic public IP", finish(lbs.BeginCreateOrUpdate(ctx, group, "pub",
		lbOf(group, "pub", &armnetwork.FrontendIPConfigurationPropertiesFormat{PublicIPAddress: &armnetwork.PublicIPAddress{ID: basic.ID}}, 443, 6443, 6443), nil)),
		http.StatusBadRequest, "StandardSkuLoadBalancerCannotReferenceBasicSkuPublicIPAddress")
	foreign := lbOf(group, "pub", &armnetwork.FrontendIPConfigurationPropertiesFormat{Subnet: &armnetwork.Subnet{ID: to.Ptr(sn)}}, 443, 6443, 6443)
	foreign.Properties.LoadBalancingRules[0].Properties.BackendAddressPool.ID = to.Ptr(pool) // api's
	wantARMError(t, "a rule naming another load balancer's pool", finish(lbs.BeginCreateOrUpdate(ctx, group, "pub", foreign, nil)), http.StatusBadRequest, "InvalidResourceReference")
	twice := lbOf(group, "pub", &armnetwork.FrontendIPConfigurationPropertiesFormat{Subnet: &armnetwork.Subnet{ID: to.Ptr(sn)}}, 443, 6443, 6443)
	r2 := *twice.Properties.LoadBalancingRules[0]
	r2.Name = to.Ptr("rule2")
	twice.Properties.LoadBalancingRules = append(twice.Properties.LoadBalancingRules, &r2)
	wantARMError(t, "a frontend port twice", finish(lbs.BeginCreateOrUpdate(ctx, group, "pub", twice, nil)), http.StatusBadRequest, "LoadBalancingRuleFrontendPortConflict")
	bad := nicOf(sn)
	bad.Properties.IPConfigurations[0].Properties.LoadBalancerBackendAddressPools = []*armnetwork.BackendAddressPool{{ID: to.Ptr(pool + "x")}}
	wantARMError(t, "an interface joining a pool not there", finish(c.net.NewInterfacesClient().BeginCreateOrUpdate(ctx, group, "n2", bad, nil)), http.StatusBadRequest, "InvalidResourceReference")
}

// TestLoadBalancerForwards: with a host interface, a public load
// balancer's frontend answers on this host (an address of lo) and forwards to its pool's
// members whose probe answers; a member that stops answering its probe is
// left out. Needs root and ip(8).
func TestLoadBalancerForwards(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root: the frontends' addresses go on lo")
	}
	if _, err := exec.LookPath("ip"); err != nil {
		t.Skip("no ip(8)")
	}
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	label := "lo:kaz" + hex.EncodeToString(b)
	t.Cleanup(func() { RemoveHostAddresses(context.Background(), label) })
	a := newTestAzure(t, Options{InProgressPolls: -1, HostAddressLabel: label})
	t.Cleanup(func() { a.Close() })
	c := newClients(t, a, a.credential(t, testClient.Secret))
	ctx := t.Context()
	c.makeGroup(t, group)
	// Members on loopback addresses: the network's range is 127.77.0.0/16.
	v := done[armnetwork.VirtualNetworksClientCreateOrUpdateResponse](t, "create network")(
		c.net.NewVirtualNetworksClient().BeginCreateOrUpdate(ctx, group, "c1-vnet", armnetwork.VirtualNetwork{Location: to.Ptr("eastus"),
			Properties: &armnetwork.VirtualNetworkPropertiesFormat{AddressSpace: &armnetwork.AddressSpace{AddressPrefixes: []*string{to.Ptr("127.77.0.0/16")}},
				Subnets: []*armnetwork.Subnet{subnet("nodes", "127.77.1.0/24")}}}, nil))
	sn := *v.Properties.Subnets[0].ID
	pip := done[armnetwork.PublicIPAddressesClientCreateOrUpdateResponse](t, "create public IP")(
		c.net.NewPublicIPAddressesClient().BeginCreateOrUpdate(ctx, group, "api-ip", armnetwork.PublicIPAddress{Location: to.Ptr("eastus"),
			SKU: &armnetwork.PublicIPAddressSKU{Name: to.Ptr(armnetwork.PublicIPAddressSKUNameStandard)}}, nil))
	lbd := done[armnetwork.LoadBalancersClientCreateOrUpdateResponse](t, "create load balancer")(c.net.NewLoadBalancersClient().BeginCreateOrUpdate(ctx, group, "api",
		lbOf(group, "api", &armnetwork.FrontendIPConfigurationPropertiesFormat{PublicIPAddress: &armnetwork.PublicIPAddress{ID: pip.ID}}, 443, 8080, 8081), nil))
	pool := *lbd.Properties.BackendAddressPools[0].ID
	var probes []net.Listener
	for _, n := range []string{"n1", "n2"} {
		nic := c.joinPool(t, n, sn, pool)
		ip := *nic.Properties.IPConfigurations[0].Properties.PrivateIPAddress
		serveLine(t, ip+":8080", n)
		probes = append(probes, serveLine(t, ip+":8081", "ok"))
	}
	front := net.JoinHostPort(*pip.Properties.IPAddress, "443")
	ask := func() (string, error) { return askLine(front) }
	seen := map[string]bool{}
	waitfor.Cond(t, "the frontend "+front+" to answer from both members", 30*time.Second, func() (bool, error) {
		got, err := ask()
		if err != nil {
			return false, waitfor.NotYet(err)
		}
		seen[got] = true
		return seen["n1"] && seen["n2"], nil
	})
	probes[0].Close() // n1's probe stops answering
	// Round robin answers from each in turn until the probe's verdict is
	// in: then from n2 alone, four times running.
	waitfor.Cond(t, "the frontend to answer from n2 alone once n1's probe fails", 15*time.Second, func() (bool, error) {
		for range 4 {
			if got, err := ask(); err != nil || got != "n2" {
				return false, waitfor.NotYet(fmt.Errorf("answered %q, %v", got, err))
			}
		}
		return true, nil
	})
	for range 6 {
		if got, err := ask(); err != nil || got != "n2" {
			t.Errorf("with n1's probe down: %q, %v; want n2 alone", got, err)
		}
	}
}

// serveLine answers every connection to addr with a line, answer, until
// the test ends or the listener it returns is closed.
func serveLine(t *testing.T, addr, answer string) net.Listener {
	t.Helper()
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			_, _ = conn.Write([]byte(answer + "\n"))
			conn.Close()
		}
	}()
	return ln
}

// askLine is the line addr answers with.
func askLine(addr string) (string, error) {
	conn, err := net.DialTimeout("tcp", addr, 2*time.Second)
	if err != nil {
		return "", err
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(2 * time.Second))
	line, err := bufio.NewReader(conn).ReadString('\n')
	return strings.TrimSpace(line), err
}
