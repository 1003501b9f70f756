package azure

import (
	"context"
	"fmt"
	"net/http"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/runtime"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/to"
	"github.com/Azure/azure-sdk-for-go/sdk/resourcemanager/network/armnetwork/v7"
	"github.com/Azure/azure-sdk-for-go/sdk/resourcemanager/resources/armresources"
)

// clients are the SDK's ARM clients of a test, all through one credential.
type clients struct {
	groups *armresources.ResourceGroupsClient
	net    *armnetwork.ClientFactory
}

func newClients(t *testing.T, a *testAzure, cred azcore.TokenCredential) clients {
	t.Helper()
	groups, err := armresources.NewResourceGroupsClient(DefaultSubscription, cred, a.arm())
	if err != nil {
		t.Fatal(err)
	}
	f, err := armnetwork.NewClientFactory(DefaultSubscription, cred, a.arm())
	if err != nil {
		t.Fatal(err)
	}
	return clients{groups: groups, net: f}
}

// done polls a long-running operation the SDK began until it ends.
func done[T any](t *testing.T, what string) func(*runtime.Poller[T], error) T {
	return func(p *runtime.Poller[T], err error) T {
		t.Helper()
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		v, err := p.PollUntilDone(t.Context(), &runtime.PollUntilDoneOptions{Frequency: time.Second})
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		return v
	}
}

// finish is done for a test that wants the error.
func finish[T any](p *runtime.Poller[T], err error) error {
	if err != nil {
		return err
	}
	_, err = p.PollUntilDone(context.Background(), &runtime.PollUntilDoneOptions{Frequency: time.Second})
	return err
}

const group = "kiln-c1"

func (c clients) makeGroup(t *testing.T, name string) armresources.ResourceGroup {
	t.Helper()
	return must[armresources.ResourceGroupsClientCreateOrUpdateResponse](t, "create group "+name)(
		c.groups.CreateOrUpdate(t.Context(), name, armresources.ResourceGroup{Location: to.Ptr("eastus"), Tags: map[string]*string{"kiln:cluster": to.Ptr("c1")}}, nil)).ResourceGroup
}

func subnet(name, prefix string) *armnetwork.Subnet {
	return &armnetwork.Subnet{Name: to.Ptr(name), Properties: &armnetwork.SubnetPropertiesFormat{AddressPrefix: to.Ptr(prefix)}}
}

func vnet(subnets ...*armnetwork.Subnet) armnetwork.VirtualNetwork {
	return armnetwork.VirtualNetwork{Location: to.Ptr("eastus"), Properties: &armnetwork.VirtualNetworkPropertiesFormat{
		AddressSpace: &armnetwork.AddressSpace{AddressPrefixes: []*string{to.Ptr("10.0.0.0/16")}}, Subnets: subnets}}
}

func rule(priority int32, port string) *armnetwork.SecurityRulePropertiesFormat {
	return &armnetwork.SecurityRulePropertiesFormat{Protocol: to.Ptr(armnetwork.SecurityRuleProtocolTCP),
		SourcePortRange: to.Ptr("*"), DestinationPortRange: to.Ptr(port), SourceAddressPrefix: to.Ptr("*"), DestinationAddressPrefix: to.Ptr("*"),
		Access: to.Ptr(armnetwork.SecurityRuleAccessAllow), Priority: to.Ptr(priority), Direction: to.Ptr(armnetwork.SecurityRuleDirectionInbound)}
}

// layout is what a cluster's network is made of.
type layout struct {
	group                   armresources.ResourceGroup
	vnet, nsg, pip, nat     string // ids
	workers                 armnetwork.Subnet
	controlPlane, nodesName string
}

// TestNetworkLayout makes a cluster's network with the SDK: a group, a
// network with two subnets inline, a security group with rules, a NAT
// gateway with a public IP, and a subnet of its own using both; then
// checks what ARM computes and refuses, lists with paging, and deletes the
// group with everything in it.
func TestNetworkLayout(t *testing.T) {
	t.Parallel()
	a := newTestAzure(t, Options{InProgressPolls: -1, PageSize: 2})
	c := newClients(t, a, a.credential(t, testClient.Secret))
	l := makeLayout(t, c)
	checkComputed(t, c, l)
	checkPaging(t, c)
	t.Run("refusals", func(t *testing.T) { checkRefusals(t, a, c, l) })
	t.Run("inline and nested subnets agree", func(t *testing.T) { checkInline(t, c) })

	done[armresources.ResourceGroupsClientDeleteResponse](t, "delete group")(c.groups.BeginDelete(t.Context(), group, nil))
	_, err := c.net.NewVirtualNetworksClient().Get(t.Context(), group, "c1-vnet", nil)
	wantARMError(t, "get the network of a deleted group", err, http.StatusNotFound, "ResourceGroupNotFound")
	_, err = c.groups.Get(t.Context(), group, nil)
	wantARMError(t, "get the deleted group", err, http.StatusNotFound, "ResourceGroupNotFound")
	a.mu.Lock()
	defer a.mu.Unlock()
	for k := range a.st.Resources {
		if strings.HasPrefix(k, key(*l.group.ID)) {
			t.Errorf("after the group's deletion, %s is left", k)
		}
	}
}

func makeLayout(t *testing.T, c clients) layout {
	ctx := t.Context()
	var l layout
	l.group = c.makeGroup(t, group)
	if *l.group.ID != "/subscriptions/"+DefaultSubscription+"/resourceGroups/"+group || *l.group.Properties.ProvisioningState != "Succeeded" {
		t.Errorf("group = %s %s", *l.group.ID, *l.group.Properties.ProvisioningState)
	}

	nsg := done[armnetwork.SecurityGroupsClientCreateOrUpdateResponse](t, "create security group")(
		c.net.NewSecurityGroupsClient().BeginCreateOrUpdate(ctx, group, "c1-nodes", armnetwork.SecurityGroup{Location: to.Ptr("eastus"),
			Properties: &armnetwork.SecurityGroupPropertiesFormat{SecurityRules: []*armnetwork.SecurityRule{{Name: to.Ptr("api"), Properties: rule(100, "6443")}}}}, nil))
	l.nsg = *nsg.ID
	done[armnetwork.SecurityRulesClientCreateOrUpdateResponse](t, "create security rule")(
		c.net.NewSecurityRulesClient().BeginCreateOrUpdate(ctx, group, "c1-nodes", "ssh", armnetwork.SecurityRule{Properties: rule(110, "22")}, nil))

	pip := done[armnetwork.PublicIPAddressesClientCreateOrUpdateResponse](t, "create public IP")(
		c.net.NewPublicIPAddressesClient().BeginCreateOrUpdate(ctx, group, "c1-nat-ip", armnetwork.PublicIPAddress{Location: to.Ptr("eastus"),
			SKU: &armnetwork.PublicIPAddressSKU{Name: to.Ptr(armnetwork.PublicIPAddressSKUNameStandard)}}, nil))
	l.pip = *pip.ID
	if addr, err := netip.ParseAddr(*pip.Properties.IPAddress); err != nil || !publicRanges[0].Contains(addr) ||
		*pip.Properties.PublicIPAllocationMethod != armnetwork.IPAllocationMethodStatic {
		t.Errorf("public IP = %s %s; want a static address of %s", *pip.Properties.IPAddress, *pip.Properties.PublicIPAllocationMethod, publicRanges[0])
	}
	nat := done[armnetwork.NatGatewaysClientCreateOrUpdateResponse](t, "create NAT gateway")(
		c.net.NewNatGatewaysClient().BeginCreateOrUpdate(ctx, group, "c1-nat", armnetwork.NatGateway{Location: to.Ptr("eastus"),
			SKU:        &armnetwork.NatGatewaySKU{Name: to.Ptr(armnetwork.NatGatewaySKUNameStandard)},
			Properties: &armnetwork.NatGatewayPropertiesFormat{PublicIPAddresses: []*armnetwork.SubResource{{ID: pip.ID}}}}, nil))
	l.nat = *nat.ID

	v := done[armnetwork.VirtualNetworksClientCreateOrUpdateResponse](t, "create network")(
		c.net.NewVirtualNetworksClient().BeginCreateOrUpdate(ctx, group, "c1-vnet", vnet(subnet("control-plane", "10.0.0.0/24"), subnet("nodes", "10.0.1.0/24")), nil))
	l.vnet = *v.ID
	if len(v.Properties.Subnets) != 2 || *v.Properties.ProvisioningState != armnetwork.ProvisioningStateSucceeded {
		t.Errorf("network = %d subnets, %s; want 2, Succeeded", len(v.Properties.Subnets), *v.Properties.ProvisioningState)
	}
	workers := subnet("workers", "10.0.16.0/20")
	workers.Properties.NetworkSecurityGroup = &armnetwork.SecurityGroup{ID: nsg.ID}
	workers.Properties.NatGateway = &armnetwork.SubResource{ID: nat.ID}
	l.workers = done[armnetwork.SubnetsClientCreateOrUpdateResponse](t, "create subnet")(
		c.net.NewSubnetsClient().BeginCreateOrUpdate(ctx, group, "c1-vnet", "workers", *workers, nil)).Subnet
	if *l.workers.ID != l.vnet+"/subnets/workers" || *l.workers.Properties.ProvisioningState != armnetwork.ProvisioningStateSucceeded {
		t.Errorf("subnet = %s %s", *l.workers.ID, *l.workers.Properties.ProvisioningState)
	}
	return l
}

// checkComputed: what ARM computes when answering, from the other side of
// each reference.
func checkComputed(t *testing.T, c clients, l layout) {
	ctx := t.Context()
	v := must[armnetwork.VirtualNetworksClientGetResponse](t, "get network")(c.net.NewVirtualNetworksClient().Get(ctx, group, "c1-vnet", nil))
	var names []string
	for _, s := range v.Properties.Subnets {
		names = append(names, *s.Name)
	}
	if fmt.Sprint(names) != "[control-plane nodes workers]" {
		t.Errorf("the network's subnets = %v; want the two inline and the one made on its own", names)
	}
	nsg := must[armnetwork.SecurityGroupsClientGetResponse](t, "get security group")(c.net.NewSecurityGroupsClient().Get(ctx, group, "c1-nodes", nil))
	if len(nsg.Properties.SecurityRules) != 2 || len(nsg.Properties.Subnets) != 1 || *nsg.Properties.Subnets[0].ID != *l.workers.ID {
		t.Errorf("security group: %d rules, subnets %v; want 2 rules, the workers' subnet", len(nsg.Properties.SecurityRules), nsg.Properties.Subnets)
	}
	nat := must[armnetwork.NatGatewaysClientGetResponse](t, "get NAT gateway")(c.net.NewNatGatewaysClient().Get(ctx, group, "c1-nat", nil))
	if len(nat.Properties.Subnets) != 1 || *nat.Properties.Subnets[0].ID != *l.workers.ID {
		t.Errorf("NAT gateway's subnets = %v; want the workers'", nat.Properties.Subnets)
	}
	pip := must[armnetwork.PublicIPAddressesClientGetResponse](t, "get public IP")(c.net.NewPublicIPAddressesClient().Get(ctx, group, "c1-nat-ip", nil))
	if pip.Properties.NatGateway == nil || *pip.Properties.NatGateway.ID != l.nat {
		t.Errorf("public IP's NAT gateway = %v; want %s", pip.Properties.NatGateway, l.nat)
	}
}

// checkPaging lists with pages of two (Options.PageSize): the SDK's pagers
// follow nextLink.
func checkPaging(t *testing.T, c clients) {
	for _, g := range []string{"kiln-c2", "kiln-c3", "kiln-c4"} {
		c.makeGroup(t, g)
	}
	var groups, pages int
	for p := c.groups.NewListPager(nil); p.More(); pages++ {
		groups += len(must[armresources.ResourceGroupsClientListResponse](t, "list groups")(p.NextPage(t.Context())).Value)
	}
	if groups != 4 || pages != 2 {
		t.Errorf("listed %d groups in %d pages; want 4 in 2", groups, pages)
	}
	var subnets int
	pages = 0
	for p := c.net.NewSubnetsClient().NewListPager(group, "c1-vnet", nil); p.More(); pages++ {
		subnets += len(must[armnetwork.SubnetsClientListResponse](t, "list subnets")(p.NextPage(t.Context())).Value)
	}
	if subnets != 3 || pages != 2 {
		t.Errorf("listed %d subnets in %d pages; want 3 in 2", subnets, pages)
	}
}

// checkInline: a network's PUT replaces its subnets (what it omits goes),
// and a subnet's PUT shows in the network's.
func checkInline(t *testing.T, c clients) {
	ctx := t.Context()
	vnets, subnets := c.net.NewVirtualNetworksClient(), c.net.NewSubnetsClient()
	done[armnetwork.VirtualNetworksClientCreateOrUpdateResponse](t, "create network")(
		vnets.BeginCreateOrUpdate(ctx, group, "inline", vnet(subnet("a", "10.0.0.0/24"), subnet("b", "10.0.1.0/24")), nil))
	done[armnetwork.SubnetsClientCreateOrUpdateResponse](t, "create subnet c")(
		subnets.BeginCreateOrUpdate(ctx, group, "inline", "c", *subnet("c", "10.0.2.0/24"), nil))
	v := must[armnetwork.VirtualNetworksClientGetResponse](t, "get network")(vnets.Get(ctx, group, "inline", nil)).VirtualNetwork
	if len(v.Properties.Subnets) != 3 {
		t.Fatalf("network has %d subnets; want a, b and c", len(v.Properties.Subnets))
	}
	// The read-modify-write every client does: b goes.
	v.Properties.Subnets = []*armnetwork.Subnet{v.Properties.Subnets[0], v.Properties.Subnets[2]}
	v.Tags = map[string]*string{"updated": to.Ptr("yes")}
	done[armnetwork.VirtualNetworksClientCreateOrUpdateResponse](t, "update network")(vnets.BeginCreateOrUpdate(ctx, group, "inline", v, nil))
	_, err := subnets.Get(ctx, group, "inline", "b", nil)
	wantARMError(t, "get the subnet the network's PUT left out", err, http.StatusNotFound, "NotFound")
	sc := must[armnetwork.SubnetsClientGetResponse](t, "get subnet c")(subnets.Get(ctx, group, "inline", "c", nil))
	if *sc.Properties.AddressPrefix != "10.0.2.0/24" {
		t.Errorf("subnet c = %s after the network's PUT; want 10.0.2.0/24", *sc.Properties.AddressPrefix)
	}
	done[armnetwork.VirtualNetworksClientDeleteResponse](t, "delete network")(vnets.BeginDelete(ctx, group, "inline", nil))
	_, err = subnets.Get(ctx, group, "inline", "c", nil)
	wantARMError(t, "get a subnet of the deleted network", err, http.StatusNotFound, "NotFound")
}
