package azure

import (
	"context"
	"crypto/rand"
	"encoding/hex"
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

// servicesLB is a load balancer as cloud-provider-azure makes one for
// Services: a public frontend per Service (fronts: frontend name to public
// IP id), one pool, and per frontend a probe and a rule from port to
// backend[name] probing backend[name].
func servicesLB(name string, fronts map[string]string, port int32, backend map[string]int32) armnetwork.LoadBalancer {
	id := "/subscriptions/" + DefaultSubscription + "/resourceGroups/" + group + "/providers/Microsoft.Network/loadBalancers/" + name
	lb := armnetwork.LoadBalancer{Location: to.Ptr("eastus"), SKU: &armnetwork.LoadBalancerSKU{Name: to.Ptr(armnetwork.LoadBalancerSKUNameStandard)},
		Properties: &armnetwork.LoadBalancerPropertiesFormat{BackendAddressPools: []*armnetwork.BackendAddressPool{{Name: to.Ptr("pool")}}}}
	p := lb.Properties
	for fe, pip := range fronts {
		p.FrontendIPConfigurations = append(p.FrontendIPConfigurations, &armnetwork.FrontendIPConfiguration{Name: to.Ptr(fe),
			Properties: &armnetwork.FrontendIPConfigurationPropertiesFormat{PublicIPAddress: &armnetwork.PublicIPAddress{ID: to.Ptr(pip)}}})
		p.Probes = append(p.Probes, &armnetwork.Probe{Name: to.Ptr(fe), Properties: &armnetwork.ProbePropertiesFormat{
			Protocol: to.Ptr(armnetwork.ProbeProtocolTCP), Port: to.Ptr(backend[fe]), IntervalInSeconds: to.Ptr[int32](1), NumberOfProbes: to.Ptr[int32](1)}})
		p.LoadBalancingRules = append(p.LoadBalancingRules, &armnetwork.LoadBalancingRule{Name: to.Ptr(fe), Properties: &armnetwork.LoadBalancingRulePropertiesFormat{
			Protocol: to.Ptr(armnetwork.TransportProtocolTCP), FrontendPort: to.Ptr(port), BackendPort: to.Ptr(backend[fe]),
			FrontendIPConfiguration: &armnetwork.SubResource{ID: to.Ptr(id + "/frontendIPConfigurations/" + fe)},
			BackendAddressPool:      &armnetwork.SubResource{ID: to.Ptr(id + "/backendAddressPools/pool")},
			Probe:                   &armnetwork.SubResource{ID: to.Ptr(id + "/probes/" + fe)}}})
	}
	return lb
}

// TestLoadBalancerOfServices: one load balancer with a frontend per
// Service, each on its public IP and the same port, forwarding to its own
// NodePort of the pool's members, once the members' security group lets
// it in from the Internet; a NodePort moved moves the probe too; a public
// IP a frontend has cannot be deleted (and says which frontend has it)
// until the frontend is gone. The forwarding needs root and ip(8).
func TestLoadBalancerOfServices(t *testing.T) {
	t.Parallel()
	forwards := os.Geteuid() == 0
	if _, err := exec.LookPath("ip"); err != nil {
		forwards = false
	}
	opts := Options{InProgressPolls: -1}
	if forwards {
		b := make([]byte, 4)
		_, _ = rand.Read(b)
		opts.HostAddressLabel = "lo:kaz" + hex.EncodeToString(b)
		t.Cleanup(func() { RemoveHostAddresses(context.Background(), opts.HostAddressLabel) })
	} else {
		t.Log("not root or no ip(8): the records are checked, not the forwarding")
	}
	a := newTestAzure(t, opts)
	t.Cleanup(func() { a.Close() })
	c := newClients(t, a, a.credential(t, testClient.Secret))
	ctx := t.Context()
	c.makeGroup(t, group)
	// The nodes' security group lets web's NodePort in from the Internet,
	// not api's yet.
	nsgs := c.net.NewSecurityGroupsClient()
	nsg := done[armnetwork.SecurityGroupsClientCreateOrUpdateResponse](t, "create security group")(
		nsgs.BeginCreateOrUpdate(ctx, group, "nodes-nsg", armnetwork.SecurityGroup{Location: to.Ptr("eastus"), Properties: &armnetwork.SecurityGroupPropertiesFormat{
			SecurityRules: []*armnetwork.SecurityRule{{Name: to.Ptr("web"), Properties: rule(500, "30080")}}}}, nil))
	nodes := subnet("nodes", "127.78.1.0/24")
	nodes.Properties.NetworkSecurityGroup = &armnetwork.SecurityGroup{ID: nsg.ID}
	v := done[armnetwork.VirtualNetworksClientCreateOrUpdateResponse](t, "create network")(
		c.net.NewVirtualNetworksClient().BeginCreateOrUpdate(ctx, group, "c1-vnet", armnetwork.VirtualNetwork{Location: to.Ptr("eastus"),
			Properties: &armnetwork.VirtualNetworkPropertiesFormat{AddressSpace: &armnetwork.AddressSpace{AddressPrefixes: []*string{to.Ptr("127.78.0.0/16")}},
				Subnets: []*armnetwork.Subnet{nodes}}}, nil))
	sn := *v.Properties.Subnets[0].ID
	ips := c.net.NewPublicIPAddressesClient()
	pips := map[string]armnetwork.PublicIPAddress{}
	fronts := map[string]string{}
	for _, svc := range []string{"web", "api"} {
		pips[svc] = done[armnetwork.PublicIPAddressesClientCreateOrUpdateResponse](t, "create public IP")(
			ips.BeginCreateOrUpdate(ctx, group, "kubernetes-"+svc, armnetwork.PublicIPAddress{Location: to.Ptr("eastus"),
				SKU: &armnetwork.PublicIPAddressSKU{Name: to.Ptr(armnetwork.PublicIPAddressSKUNameStandard)}}, nil)).PublicIPAddress
		fronts[svc] = *pips[svc].ID
	}
	lbs := c.net.NewLoadBalancersClient()
	lbd := done[armnetwork.LoadBalancersClientCreateOrUpdateResponse](t, "create load balancer")(lbs.BeginCreateOrUpdate(ctx, group, "kubernetes",
		servicesLB("kubernetes", fronts, 80, map[string]int32{"web": 30080, "api": 30090}), nil))
	pool := *lbd.Properties.BackendAddressPools[0].ID

	got := must[armnetwork.PublicIPAddressesClientGetResponse](t, "get web's IP")(ips.Get(ctx, group, "kubernetes-web", nil))
	if cfg := got.Properties.IPConfiguration; cfg == nil || !strings.HasSuffix(*cfg.ID, "/frontendIPConfigurations/web") {
		t.Errorf("web's public IP's ipConfiguration %v; want the frontend web", cfg)
	}
	wantARMError(t, "deleting a public IP a frontend has", finish(ips.BeginDelete(ctx, group, "kubernetes-web", nil)), http.StatusBadRequest, "PublicIPAddressCannotBeDeleted")

	if forwards {
		nic := c.joinPool(t, "n1", sn, pool)
		ip := *nic.Properties.IPConfigurations[0].Properties.PrivateIPAddress
		serveLine(t, ip+":30080", "web")
		serveLine(t, ip+":30090", "api")
		serveLine(t, ip+":30091", "api moved")
		answers := func(svc, want string) {
			t.Helper()
			waitfor.Cond(t, svc+"'s frontend to answer "+want, 30*time.Second, func() (bool, error) {
				got, err := askLine(net.JoinHostPort(*pips[svc].Properties.IPAddress, "80"))
				if err != nil {
					return false, waitfor.NotYet(err)
				}
				return got == want, nil
			})
		}
		answers("web", "web")
		// The pass that forwards web's forwards api's to no member: its
		// security group keeps api's NodePort shut.
		if got, err := askLine(net.JoinHostPort(*pips["api"].Properties.IPAddress, "80")); err == nil {
			t.Errorf("api's frontend answered %q with its NodePort shut by the security group; want no member", got)
		}
		done[armnetwork.SecurityRulesClientCreateOrUpdateResponse](t, "open api's NodePorts")(
			c.net.NewSecurityRulesClient().BeginCreateOrUpdate(ctx, group, "nodes-nsg", "api", armnetwork.SecurityRule{Properties: rule(501, "30090-30091")}, nil))
		answers("api", "api")
		// api's NodePort moves: its rule and probe follow.
		done[armnetwork.LoadBalancersClientCreateOrUpdateResponse](t, "move api's NodePort")(lbs.BeginCreateOrUpdate(ctx, group, "kubernetes",
			servicesLB("kubernetes", fronts, 80, map[string]int32{"web": 30080, "api": 30091}), nil))
		answers("api", "api moved")
		answers("web", "web")
	}

	// web's frontend goes: its IP can be deleted, api's still not.
	delete(fronts, "web")
	done[armnetwork.LoadBalancersClientCreateOrUpdateResponse](t, "take web's frontend off")(lbs.BeginCreateOrUpdate(ctx, group, "kubernetes",
		servicesLB("kubernetes", fronts, 80, map[string]int32{"api": 30091}), nil))
	if err := finish(ips.BeginDelete(ctx, group, "kubernetes-web", nil)); err != nil {
		t.Errorf("deleting the public IP no frontend has: %v", err)
	}
	wantARMError(t, "deleting api's public IP", finish(ips.BeginDelete(ctx, group, "kubernetes-api", nil)), http.StatusBadRequest, "PublicIPAddressCannotBeDeleted")
}
