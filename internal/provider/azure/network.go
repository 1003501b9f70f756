package azure

import (
	"context"
	"fmt"
	"net/netip"
	"slices"
	"strings"

	"github.com/Azure/azure-sdk-for-go/sdk/resourcemanager/network/armnetwork/v7"
	"github.com/Azure/azure-sdk-for-go/sdk/resourcemanager/resources/armresources"
	"golang.org/x/sync/errgroup"

	v1 "kiln.dev/kiln/api/v1"
	"kiln.dev/kiln/internal/failure"
	"kiln.dev/kiln/internal/provider"
)

// DefaultVNetCIDR is the virtual network of a cluster whose
// spec.network.nodeCIDR is empty.
var DefaultVNetCIDR = netip.MustParsePrefix("10.0.0.0/16")

// Subnets are the virtual network split in subnetSlots: the control
// plane's and one per worker pool.
const subnetSlots = 16

// Names of the resources in a cluster's group (the group is the cluster's
// own, so they need not say which cluster: its tags do).
const (
	vnetName         = "kiln-vnet"
	natName          = "kiln-nat"
	natIPName        = "kiln-nat-ip"
	controlPlaneNSG  = "kiln-control-plane-nsg"
	nodeNSG          = "kiln-node-nsg"
	controlPlaneName = "control-plane" // its subnet
	poolPrefix       = "pool-"         // a pool's subnet: pool-NAME
)

// Parts of the network (TagPart values).
const (
	partGroup           = "group"
	partVNet            = "vnet"
	partNAT             = "nat"
	partNATIP           = "nat-ip"
	partNSGControlPlane = "nsg-control-plane"
	partNSGNode         = "nsg-node"
)

// natIdleMinutes is the NAT gateway's idle timeout (Azure's default).
const natIdleMinutes = 4

// vnet is the cluster's network as found or made: ids of its parts.
type vnet struct {
	id, cidr string
	nat      string
	nsgs     map[string]string // controlPlaneNSG, nodeNSG to id
	subnets  map[string]string // name to id
}

// EnsureNetwork finds or makes the cluster's network, in dependency order:
// its resource group; the network security groups of the control plane
// and of the nodes, and the NAT gateway's Standard static public IP; the
// NAT gateway; the virtual network with a subnet for the control plane and
// one per worker pool, each with its security group and the NAT gateway
// for egress. What exists as it should is left alone (the second call
// makes no write); what differs in what matters is written again.
func (n *Azure) EnsureNetwork(ctx context.Context, pc provider.Cluster) (provider.Network, error) {
	c, err := n.cluster(pc)
	if err != nil {
		return provider.Network{}, err
	}
	cidr, err := nodeCIDR(c.Spec.Network)
	if err != nil {
		return provider.Network{}, err
	}
	if err := n.ensureGroup(ctx, c); err != nil {
		return provider.Network{}, err
	}
	// The security groups, the public IP and the identity depend on
	// nothing but the group: made side by side.
	var cpNSG, nodesNSG, pip string
	g, gctx := errgroup.WithContext(ctx)
	g.Go(func() (err error) { _, err = n.ensureIdentity(gctx, c); return err })
	g.Go(func() (err error) { cpNSG, err = n.ensureNSG(gctx, c, controlPlaneNSG); return err })
	g.Go(func() (err error) { nodesNSG, err = n.ensureNSG(gctx, c, nodeNSG); return err })
	g.Go(func() (err error) { pip, err = n.ensurePublicIP(gctx, c); return err })
	if err := g.Wait(); err != nil {
		return provider.Network{}, err
	}
	v := &vnet{nsgs: map[string]string{controlPlaneNSG: cpNSG, nodeNSG: nodesNSG}, subnets: map[string]string{}}
	if v.nat, err = n.ensureNAT(ctx, c, pip); err != nil {
		return provider.Network{}, err
	}
	if err := n.ensureVNet(ctx, c, cidr, v); err != nil {
		return provider.Network{}, err
	}
	return provider.Network{ID: v.id, CIDR: v.cidr}, nil
}

// nodeCIDR is the virtual network's range: spec.network.nodeCIDR (a /16
// to a /24 of IPv4, not overlapping the pod or service ranges: the pod
// network is an overlay over it) or DefaultVNetCIDR.
func nodeCIDR(nw v1.Network) (netip.Prefix, error) {
	invalid := func(format string, args ...any) error {
		e := failure.Terminal(v1.CodeInvalidParameter, format, args...)
		e.Target = "spec.network.nodeCIDR"
		return e
	}
	cidr := DefaultVNetCIDR
	if s := nw.NodeCIDR; s != "" {
		p, err := netip.ParsePrefix(s)
		if err != nil || !p.Addr().Is4() || p.Masked() != p || p.Bits() < 16 || p.Bits() > 24 {
			return cidr, invalid("spec.network.nodeCIDR %q must be an IPv4 CIDR from /16 to /24: it is the virtual network, split in %d subnets (the control plane's and one per worker pool)", s, subnetSlots)
		}
		cidr = p
	}
	for _, r := range []struct{ field, s string }{{"spec.network.podCIDR", nw.PodCIDR}, {"spec.network.serviceCIDR", nw.ServiceCIDR}} {
		if p, err := netip.ParsePrefix(r.s); err == nil && p.Overlaps(cidr) {
			what := "spec.network.nodeCIDR " + cidr.String()
			if nw.NodeCIDR == "" {
				what = "the default node network " + cidr.String() + " (spec.network.nodeCIDR is empty)"
			}
			return cidr, invalid("%s overlaps %s %s: the virtual network and the cluster's ranges must not share addresses; choose another spec.network.nodeCIDR", what, r.field, p)
		}
	}
	return cidr, nil
}

// ensureGroup finds or makes the cluster's resource group, tagged with its
// identity. A group of that name that is not the cluster's (another
// cluster's id in its tag, or none) is never taken over.
func (n *Azure) ensureGroup(ctx context.Context, c *cluster) error {
	want := c.tags(partGroup)
	got, err := c.api.groups.Get(ctx, c.group, nil)
	switch {
	case notFound(err):
	case err != nil:
		return classify(err, c.api.account, "find the resource group %s of cluster %s", c.group, c.Name)
	default:
		if err := c.owns(got.ResourceGroup.Tags, "resource group "+c.group); err != nil {
			return err
		}
		state := ""
		if got.Properties != nil {
			state = deref(got.Properties.ProvisioningState)
		}
		if state == "Deleting" {
			return failure.Retryable(v1.CodeProviderError, nil, "the resource group %s of cluster %s is still being deleted; retrying", c.group, c.Name)
		}
		if l := deref(got.Location); !strings.EqualFold(l, c.region) {
			e := failure.Terminal(v1.CodeInvalidParameter, "the resource group %s of cluster %s is in %s, not in region %s: a cluster's region cannot change", c.group, c.Name, l, c.region)
			e.Target = "spec.region"
			return e
		}
		if tagged(got.Tags, want) {
			return nil
		}
		want = mergeTags(got.Tags, want)
	}
	n.log.Info("creating resource group", "cluster", c.Project+"/"+c.Name, "group", c.group, "region", c.region)
	_, err = c.api.groups.CreateOrUpdate(ctx, c.group, armresources.ResourceGroup{Location: to(c.region), Tags: want}, nil)
	return classify(err, c.api.account, "create the resource group %s of cluster %s in %s", c.group, c.Name, c.region)
}

// owns checks that tags are the cluster's.
func (c *cluster) owns(tags map[string]*string, what string) error {
	if id := deref(tags[TagCluster]); id != c.id {
		owner := "no " + TagCluster + " tag"
		if id != "" {
			owner = TagCluster + "=" + id
		}
		return failure.Terminal(v1.CodeConflict, "%s exists and is not cluster %s's (%s, not %s): Kiln does not take it over; delete it, or give the cluster another name", what, c.Name, owner, c.id)
	}
	return nil
}

// settled reports whether a provisioning state is Succeeded: anything else
// (Failed, or Creating/Updating/Deleting left by a worker that died) is
// written again, which ARM answers with the outcome or a new operation.
func settled(s *armnetwork.ProvisioningState) bool {
	return s != nil && *s == armnetwork.ProvisioningStateSucceeded
}

func (n *Azure) ensurePublicIP(ctx context.Context, c *cluster) (string, error) {
	want := armnetwork.PublicIPAddress{Location: to(c.region), Tags: c.tags(partNATIP),
		SKU: &armnetwork.PublicIPAddressSKU{Name: to(armnetwork.PublicIPAddressSKUNameStandard), Tier: to(armnetwork.PublicIPAddressSKUTierRegional)},
		Properties: &armnetwork.PublicIPAddressPropertiesFormat{
			PublicIPAllocationMethod: to(armnetwork.IPAllocationMethodStatic),
			PublicIPAddressVersion:   to(armnetwork.IPVersionIPv4),
		}}
	key := "publicIPAddresses/" + natIPName
	if err := resume[armnetwork.PublicIPAddressesClientCreateOrUpdateResponse](ctx, n, c, key,
		fmt.Sprintf("create the NAT gateway's public IP %s of cluster %s", natIPName, c.Name)); err != nil {
		return "", err
	}
	api := c.api.net.NewPublicIPAddressesClient()
	got, err := api.Get(ctx, c.group, natIPName, nil)
	switch {
	case notFound(err):
	case err != nil:
		return "", classify(err, c.api.account, "find the NAT gateway's public IP %s of cluster %s", natIPName, c.Name)
	default:
		p := got.PublicIPAddress
		if p.Properties != nil && settled(p.Properties.ProvisioningState) && tagged(p.Tags, want.Tags) &&
			p.SKU != nil && deref(p.SKU.Name) == armnetwork.PublicIPAddressSKUNameStandard &&
			deref(p.Properties.PublicIPAllocationMethod) == armnetwork.IPAllocationMethodStatic {
			return deref(p.ID), nil
		}
		want.Tags = mergeTags(p.Tags, want.Tags)
	}
	n.log.Info("creating public IP", "cluster", c.Project+"/"+c.Name, "group", c.group, "name", natIPName)
	made, err := await[armnetwork.PublicIPAddressesClientCreateOrUpdateResponse](ctx, n, c, key,
		fmt.Sprintf("create the NAT gateway's public IP %s of cluster %s", natIPName, c.Name))(
		api.BeginCreateOrUpdate(ctx, c.group, natIPName, want, nil))
	return deref(made.ID), err
}

func (n *Azure) ensureNAT(ctx context.Context, c *cluster, pip string) (string, error) {
	want := armnetwork.NatGateway{Location: to(c.region), Tags: c.tags(partNAT),
		SKU: &armnetwork.NatGatewaySKU{Name: to(armnetwork.NatGatewaySKUNameStandard)},
		Properties: &armnetwork.NatGatewayPropertiesFormat{
			IdleTimeoutInMinutes: to(int32(natIdleMinutes)),
			PublicIPAddresses:    []*armnetwork.SubResource{{ID: to(pip)}},
		}}
	key := "natGateways/" + natName
	if err := resume[armnetwork.NatGatewaysClientCreateOrUpdateResponse](ctx, n, c, key,
		fmt.Sprintf("create the NAT gateway %s of cluster %s", natName, c.Name)); err != nil {
		return "", err
	}
	api := c.api.net.NewNatGatewaysClient()
	got, err := api.Get(ctx, c.group, natName, nil)
	switch {
	case notFound(err):
	case err != nil:
		return "", classify(err, c.api.account, "find the NAT gateway %s of cluster %s", natName, c.Name)
	default:
		g := got.NatGateway
		if g.Properties != nil && settled(g.Properties.ProvisioningState) && tagged(g.Tags, want.Tags) &&
			g.SKU != nil && deref(g.SKU.Name) == armnetwork.NatGatewaySKUNameStandard &&
			slices.ContainsFunc(g.Properties.PublicIPAddresses, func(r *armnetwork.SubResource) bool { return r != nil && sameID(deref(r.ID), pip) }) {
			return deref(g.ID), nil
		}
		want.Tags = mergeTags(g.Tags, want.Tags)
	}
	n.log.Info("creating NAT gateway", "cluster", c.Project+"/"+c.Name, "group", c.group, "name", natName)
	made, err := await[armnetwork.NatGatewaysClientCreateOrUpdateResponse](ctx, n, c, key,
		fmt.Sprintf("create the NAT gateway %s of cluster %s", natName, c.Name))(
		api.BeginCreateOrUpdate(ctx, c.group, natName, want, nil))
	return deref(made.ID), err
}

// subnetSpec is a subnet the cluster wants: its name and security group.
type subnetSpec struct{ name, nsg string }

// wantSubnets are the control plane's subnet and a subnet per worker pool.
func wantSubnets(spec v1.ClusterSpec) []subnetSpec {
	out := []subnetSpec{{controlPlaneName, controlPlaneNSG}}
	for _, p := range spec.WorkerPools {
		out = append(out, subnetSpec{poolPrefix + p.Name, nodeNSG})
	}
	return out
}

// ensureVNet finds or makes the virtual network and its subnets. A
// network made here is made with its subnets (one operation); subnets
// missing from a network found (a worker pool added) are made one by one,
// each in the lowest part of the range no subnet uses, so a subnet keeps
// its range for its life whatever pools come and go. Subnets of pools the
// spec no longer has are left (their machines go first: a later part).
func (n *Azure) ensureVNet(ctx context.Context, c *cluster, cidr netip.Prefix, v *vnet) error {
	api := c.api.net.NewVirtualNetworksClient()
	wants := wantSubnets(c.Spec)
	if len(wants) > subnetSlots {
		e := failure.Terminal(v1.CodeInvalidParameter, "the virtual network has room for the control plane's subnet and %d worker pools' subnets; the spec has %d pools", subnetSlots-1, len(wants)-1)
		e.Target = "spec.workerPools"
		return e
	}
	subnet := func(s subnetSpec, prefix string) *armnetwork.Subnet {
		return &armnetwork.Subnet{Name: to(s.name), Properties: &armnetwork.SubnetPropertiesFormat{
			AddressPrefix:        to(prefix),
			NetworkSecurityGroup: &armnetwork.SecurityGroup{ID: to(v.nsgs[s.nsg])},
			NatGateway:           &armnetwork.SubResource{ID: to(v.nat)},
		}}
	}
	// Operations an earlier attempt began on the network or its subnets
	// end first: what they made is read below.
	vnetKey := "virtualNetworks/" + vnetName
	subnetKey := func(s subnetSpec) string { return vnetKey + "/subnets/" + s.name }
	if err := resume[armnetwork.VirtualNetworksClientCreateOrUpdateResponse](ctx, n, c, vnetKey,
		fmt.Sprintf("write the virtual network %s of cluster %s", vnetName, c.Name)); err != nil {
		return err
	}
	for _, s := range wants {
		if err := resume[armnetwork.SubnetsClientCreateOrUpdateResponse](ctx, n, c, subnetKey(s),
			fmt.Sprintf("write the subnet %s of cluster %s", s.name, c.Name)); err != nil {
			return err
		}
	}
	got, err := api.Get(ctx, c.group, vnetName, nil)
	if notFound(err) {
		var subnets []*armnetwork.Subnet
		var used []netip.Prefix
		for _, s := range wants {
			p, err := freeSlot(cidr, used)
			if err != nil {
				return err
			}
			used = append(used, p)
			subnets = append(subnets, subnet(s, p.String()))
		}
		n.log.Info("creating virtual network", "cluster", c.Project+"/"+c.Name, "group", c.group, "cidr", cidr, "subnets", len(subnets))
		made, err := await[armnetwork.VirtualNetworksClientCreateOrUpdateResponse](ctx, n, c, vnetKey,
			fmt.Sprintf("create the virtual network %s (%s) of cluster %s", vnetName, cidr, c.Name))(
			api.BeginCreateOrUpdate(ctx, c.group, vnetName, armnetwork.VirtualNetwork{Location: to(c.region), Tags: c.tags(partVNet),
				Properties: &armnetwork.VirtualNetworkPropertiesFormat{
					AddressSpace: &armnetwork.AddressSpace{AddressPrefixes: []*string{to(cidr.String())}},
					Subnets:      subnets,
				}}, nil))
		if err != nil {
			return err
		}
		v.id, v.cidr = deref(made.ID), cidr.String()
		return nil
	}
	if err != nil {
		return classify(err, c.api.account, "find the virtual network %s of cluster %s", vnetName, c.Name)
	}
	vn := got.VirtualNetwork
	if vn.Properties == nil {
		vn.Properties = &armnetwork.VirtualNetworkPropertiesFormat{}
	}
	var space []string
	if vn.Properties.AddressSpace != nil {
		for _, p := range vn.Properties.AddressSpace.AddressPrefixes {
			space = append(space, deref(p))
		}
	}
	if !settled(vn.Properties.ProvisioningState) || !tagged(vn.Tags, c.tags(partVNet)) || !slices.Contains(space, cidr.String()) {
		// Written back as found, subnets included: a network's PUT
		// deletes the subnets it leaves out.
		vn.Tags = mergeTags(vn.Tags, c.tags(partVNet))
		if !slices.Contains(space, cidr.String()) {
			prefixes := []*string{to(cidr.String())}
			for _, p := range space {
				prefixes = append(prefixes, to(p))
			}
			vn.Properties.AddressSpace = &armnetwork.AddressSpace{AddressPrefixes: prefixes}
		}
		n.log.Info("correcting virtual network", "cluster", c.Project+"/"+c.Name, "group", c.group)
		made, err := await[armnetwork.VirtualNetworksClientCreateOrUpdateResponse](ctx, n, c, vnetKey,
			fmt.Sprintf("correct the virtual network %s of cluster %s", vnetName, c.Name))(
			api.BeginCreateOrUpdate(ctx, c.group, vnetName, vn, nil))
		if err != nil {
			return err
		}
		vn = made.VirtualNetwork
	}
	v.id, v.cidr = deref(vn.ID), cidr.String()
	have := map[string]*armnetwork.Subnet{}
	var used []netip.Prefix
	for _, s := range vn.Properties.Subnets {
		if s == nil || s.Properties == nil {
			continue
		}
		have[strings.ToLower(deref(s.Name))] = s
		for _, raw := range append([]*string{s.Properties.AddressPrefix}, s.Properties.AddressPrefixes...) {
			if p, err := netip.ParsePrefix(deref(raw)); err == nil {
				used = append(used, p)
			}
		}
	}
	subnets := c.api.net.NewSubnetsClient()
	for _, s := range wants {
		prefix := ""
		if h := have[strings.ToLower(s.name)]; h != nil {
			hp := h.Properties
			if settled(hp.ProvisioningState) && hp.NetworkSecurityGroup != nil && sameID(deref(hp.NetworkSecurityGroup.ID), v.nsgs[s.nsg]) &&
				hp.NatGateway != nil && sameID(deref(hp.NatGateway.ID), v.nat) {
				v.subnets[s.name] = deref(h.ID)
				continue
			}
			prefix = deref(hp.AddressPrefix)
		}
		if prefix == "" {
			p, err := freeSlot(cidr, used)
			if err != nil {
				return err
			}
			used = append(used, p)
			prefix = p.String()
		}
		n.log.Info("writing subnet", "cluster", c.Project+"/"+c.Name, "group", c.group, "subnet", s.name, "prefix", prefix)
		made, err := await[armnetwork.SubnetsClientCreateOrUpdateResponse](ctx, n, c, subnetKey(s),
			fmt.Sprintf("create the subnet %s (%s) of cluster %s", s.name, prefix, c.Name))(
			subnets.BeginCreateOrUpdate(ctx, c.group, vnetName, s.name, *subnet(s, prefix), nil))
		if err != nil {
			return err
		}
		v.subnets[s.name] = deref(made.ID)
	}
	return nil
}

// freeSlot is the lowest of the network's subnetSlots parts that no prefix
// of used overlaps.
func freeSlot(cidr netip.Prefix, used []netip.Prefix) (netip.Prefix, error) {
	bits := cidr.Bits() + 4
	size := uint32(1) << (32 - bits)
	base := cidr.Masked().Addr().As4()
	start := uint32(base[0])<<24 | uint32(base[1])<<16 | uint32(base[2])<<8 | uint32(base[3])
	for i := range uint32(subnetSlots) {
		a := start + i*size
		p := netip.PrefixFrom(netip.AddrFrom4([4]byte{byte(a >> 24), byte(a >> 16), byte(a >> 8), byte(a)}), bits)
		if !slices.ContainsFunc(used, p.Overlaps) {
			return p, nil
		}
	}
	e := failure.Terminal(v1.CodeInvalidParameter, "the virtual network %s has no free part for another subnet (its %d parts of /%d are used); choose a larger spec.network.nodeCIDR or fewer worker pools", cidr, subnetSlots, bits)
	e.Target = "spec.network.nodeCIDR"
	return netip.Prefix{}, e
}
