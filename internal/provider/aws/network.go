package aws

import (
	"context"
	"fmt"
	"net/netip"
	"slices"
	"strings"

	awssdk "github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
	ec2types "github.com/aws/aws-sdk-go-v2/service/ec2/types"

	v1 "kiln.dev/kiln/api/v1"
	"kiln.dev/kiln/internal/failure"
	"kiln.dev/kiln/internal/provider"
)

// DefaultVPCCIDR is the VPC of a cluster whose spec.network.nodeCIDR is
// empty.
var DefaultVPCCIDR = netip.MustParsePrefix("10.0.0.0/16")

// DefaultZones is how many zones a cluster spreads over when its spec names
// none: the region's first ones.
const DefaultZones = 2

// Parts of the network (TagPart values).
const (
	partVPC           = "vpc"
	partPublicSubnet  = "public-subnet"
	partPrivateSubnet = "private-subnet"
	partIGW           = "igw"
	partEIP           = "nat-eip"
	partNAT           = "nat"
	partPublicRoutes  = "public-routes"
	partPrivateRoutes = "private-routes"
	partBastion       = "bastion"
)

// vpcNet is the cluster's network as found or made.
type vpcNet struct {
	vpc     string
	cidr    netip.Prefix
	zones   []string
	public  map[string]string // zone to subnet id
	private map[string]string
	groups  map[string]string // securityGroup role to id
}

func (c *cluster) filter(part string) []ec2types.Filter {
	f := []ec2types.Filter{{Name: awssdk.String("tag:" + TagCluster), Values: []string{c.id}}}
	if part != "" {
		f = append(f, ec2types.Filter{Name: awssdk.String("tag:" + TagPart), Values: []string{part}})
	}
	return f
}

func (c *cluster) tagSpec(kind ec2types.ResourceType, part string, extra ...string) []ec2types.TagSpecification {
	var tags []ec2types.Tag
	for k, v := range c.tags(part, extra...) {
		tags = append(tags, ec2types.Tag{Key: awssdk.String(k), Value: awssdk.String(v)})
	}
	slices.SortFunc(tags, func(a, b ec2types.Tag) int {
		if *a.Key < *b.Key {
			return -1
		}
		return 1
	})
	return []ec2types.TagSpecification{{ResourceType: kind, Tags: tags}}
}

func tagOf(tags []ec2types.Tag, key string) string {
	for _, t := range tags {
		if awssdk.ToString(t.Key) == key {
			return awssdk.ToString(t.Value)
		}
	}
	return ""
}

// EnsureNetwork finds or makes the cluster's VPC with a public and a
// private subnet in each zone, the internet gateway, a NAT gateway per
// zone, the route tables, the security groups, the key pair, the IAM roles
// and instance profiles of its nodes, and the bastion.
func (p *AWS) EnsureNetwork(ctx context.Context, pc provider.Cluster) (provider.Network, error) {
	c, err := p.cluster(pc)
	if err != nil {
		return provider.Network{}, err
	}
	n, err := p.ensureNetwork(ctx, c)
	if err != nil {
		return provider.Network{}, err
	}
	return provider.Network{ID: n.vpc, CIDR: n.cidr.String()}, nil
}

func (p *AWS) ensureNetwork(ctx context.Context, c *cluster) (*vpcNet, error) {
	var n *vpcNet
	var err error
	if c.adopted() {
		n, err = p.existingNetwork(ctx, c)
	} else {
		n, err = p.ensureOwnNetwork(ctx, c)
	}
	if err != nil {
		return nil, err
	}
	if err := p.ensureSecurityGroups(ctx, c, n); err != nil {
		return nil, err
	}
	if err := p.ensureKeyPair(ctx, c); err != nil {
		return nil, err
	}
	if err := p.ensureRoles(ctx, c); err != nil {
		return nil, err
	}
	if err := p.ensureBastion(ctx, c, n); err != nil {
		return nil, err
	}
	return n, nil
}

// ensureOwnNetwork finds or makes the cluster's own VPC, subnets,
// internet gateway, NAT gateways and routes.
func (p *AWS) ensureOwnNetwork(ctx context.Context, c *cluster) (*vpcNet, error) {
	n, err := p.ensureVPC(ctx, c)
	if err != nil {
		return nil, err
	}
	if err := p.ensureSubnets(ctx, c, n); err != nil {
		return nil, err
	}
	igw, err := p.ensureInternetGateway(ctx, c, n)
	if err != nil {
		return nil, err
	}
	return n, p.ensureRoutes(ctx, c, n, igw)
}

// network is the cluster's network with its security groups: found, or
// made when its VPC is not there (a machine or load balancer asked for
// before ensure-network ran).
func (p *AWS) network(ctx context.Context, c *cluster) (*vpcNet, error) {
	var n *vpcNet
	var err error
	if c.adopted() {
		// ensure-network tagged the subnets; here they are only described.
		if n, err = p.describeExisting(ctx, c); err != nil {
			return nil, err
		}
	} else {
		var ok bool
		n, ok, err = p.findNetwork(ctx, c)
		switch {
		case err != nil:
			return nil, err
		case !ok:
			return p.ensureNetwork(ctx, c)
		}
		if n.zones, err = p.clusterZones(ctx, c); err != nil {
			return nil, err
		}
		for _, z := range n.zones {
			if n.public[z] == "" || n.private[z] == "" {
				// A zone the spec came to name (a pool added there): its
				// subnets, NAT gateway and routes are made first.
				return p.ensureNetwork(ctx, c)
			}
		}
	}
	groups, err := c.api.ec2.DescribeSecurityGroups(ctx, &ec2.DescribeSecurityGroupsInput{Filters: c.filter("")})
	if err != nil {
		return nil, classify(err, "", "find the security groups of cluster %s", c.Name)
	}
	for _, g := range groups.SecurityGroups {
		if role, ok := strings.CutPrefix(tagOf(g.Tags, TagPart), "sg-"); ok {
			n.groups[role] = awssdk.ToString(g.GroupId)
		}
	}
	return n, nil
}

// findNetwork finds the cluster's VPC and subnets without making anything;
// ok is false when there is no VPC.
func (p *AWS) findNetwork(ctx context.Context, c *cluster) (*vpcNet, bool, error) {
	out, err := c.api.ec2.DescribeVpcs(ctx, &ec2.DescribeVpcsInput{Filters: c.filter(partVPC)})
	if err != nil {
		return nil, false, classify(err, "", "find the VPC of cluster %s", c.Name)
	}
	if len(out.Vpcs) == 0 {
		return nil, false, nil
	}
	v := out.Vpcs[0]
	cidr, err := netip.ParsePrefix(awssdk.ToString(v.CidrBlock))
	if err != nil {
		return nil, false, fmt.Errorf("VPC %s has CIDR %q: %w", awssdk.ToString(v.VpcId), awssdk.ToString(v.CidrBlock), err)
	}
	n := &vpcNet{vpc: awssdk.ToString(v.VpcId), cidr: cidr, public: map[string]string{}, private: map[string]string{}, groups: map[string]string{}}
	subs, err := c.api.ec2.DescribeSubnets(ctx, &ec2.DescribeSubnetsInput{Filters: c.filter("")})
	if err != nil {
		return nil, false, classify(err, "", "find the subnets of cluster %s", c.Name)
	}
	for _, s := range subs.Subnets {
		zone := awssdk.ToString(s.AvailabilityZone)
		switch tagOf(s.Tags, TagPart) {
		case partPublicSubnet:
			n.public[zone] = awssdk.ToString(s.SubnetId)
		case partPrivateSubnet:
			n.private[zone] = awssdk.ToString(s.SubnetId)
		}
	}
	return n, true, nil
}

func (p *AWS) ensureVPC(ctx context.Context, c *cluster) (*vpcNet, error) {
	zones, err := p.clusterZones(ctx, c)
	if err != nil {
		return nil, err
	}
	n, ok, err := p.findNetwork(ctx, c)
	if err != nil {
		return nil, err
	}
	if ok {
		n.zones = zones
		return n, nil
	}
	cidr := DefaultVPCCIDR
	if s := c.Spec.Network.NodeCIDR; s != "" {
		if cidr, err = netip.ParsePrefix(s); err != nil || cidr.Bits() < 16 || cidr.Bits() > 24 {
			e := failure.Terminal(v1.CodeInvalidParameter, "spec.network.nodeCIDR %q must be a CIDR from /16 to /24: it is the VPC, split into a public and a private subnet per zone", s)
			e.Target = "spec.network.nodeCIDR"
			return nil, e
		}
	}
	p.log.Info("creating VPC", "cluster", c.Project+"/"+c.Name, "cidr", cidr)
	out, err := c.api.ec2.CreateVpc(ctx, &ec2.CreateVpcInput{CidrBlock: awssdk.String(cidr.String()),
		TagSpecifications: c.tagSpec(ec2types.ResourceTypeVpc, partVPC)})
	if err != nil {
		return nil, classify(err, "spec.network.nodeCIDR", "create the VPC of cluster %s", c.Name)
	}
	vpc := awssdk.ToString(out.Vpc.VpcId)
	if err := visible(ctx, "VPC "+vpc, func() (bool, error) {
		out, err := c.api.ec2.DescribeVpcs(ctx, &ec2.DescribeVpcsInput{Filters: c.filter(partVPC)})
		return err == nil && len(out.Vpcs) > 0, err
	}); err != nil {
		return nil, err
	}
	if _, err := c.api.ec2.ModifyVpcAttribute(ctx, &ec2.ModifyVpcAttributeInput{VpcId: &vpc,
		EnableDnsHostnames: &ec2types.AttributeBooleanValue{Value: awssdk.Bool(true)}}); err != nil {
		return nil, classify(err, "", "turn on DNS host names in VPC %s", vpc)
	}
	return &vpcNet{vpc: vpc, cidr: cidr, zones: zones, public: map[string]string{}, private: map[string]string{}, groups: map[string]string{}}, nil
}

// clusterZones are the zones the cluster spreads over: those its spec
// names, in order, or the region's first DefaultZones.
func (p *AWS) clusterZones(ctx context.Context, c *cluster) ([]string, error) {
	var zones []string
	add := func(zs []string) {
		for _, z := range zs {
			if !slices.Contains(zones, z) {
				zones = append(zones, z)
			}
		}
	}
	add(c.Spec.ControlPlane.Zones)
	for _, wp := range c.Spec.WorkerPools {
		add(wp.Zones)
	}
	if len(zones) > 0 {
		return zones, nil
	}
	all, err := p.regionZones(ctx, c.api)
	if err != nil {
		return nil, err
	}
	return all[:min(DefaultZones, len(all))], nil
}

func (p *AWS) regionZones(ctx context.Context, api *clients) ([]string, error) {
	out, err := api.ec2.DescribeAvailabilityZones(ctx, &ec2.DescribeAvailabilityZonesInput{})
	if err != nil {
		return nil, classify(err, "spec.region", "list the zones of region %s", api.region)
	}
	var zones []string
	for _, z := range out.AvailabilityZones {
		if z.State == ec2types.AvailabilityZoneStateAvailable {
			zones = append(zones, awssdk.ToString(z.ZoneName))
		}
	}
	slices.Sort(zones)
	if len(zones) == 0 {
		return nil, failure.Terminal(v1.CodeInvalidParameter, "region %s has no available zone", api.region)
	}
	return zones, nil
}

// subnetCIDRs are zone i's subnets: the VPC split in 16, public 2i and
// private 2i+1.
func subnetCIDRs(vpc netip.Prefix, i int) (public, private netip.Prefix, err error) {
	if i >= 8 {
		return public, private, failure.Terminal(v1.CodeInvalidParameter, "a cluster spreads over at most 8 zones")
	}
	bits := vpc.Bits() + 4
	size := uint64(1) << (32 - bits)
	base := vpc.Masked().Addr().As4()
	start := uint64(base[0])<<24 | uint64(base[1])<<16 | uint64(base[2])<<8 | uint64(base[3])
	at := func(k uint64) netip.Prefix {
		v := start + k*size
		return netip.PrefixFrom(netip.AddrFrom4([4]byte{byte(v >> 24), byte(v >> 16), byte(v >> 8), byte(v)}), bits)
	}
	return at(uint64(2 * i)), at(uint64(2*i + 1)), nil
}

func (p *AWS) ensureSubnets(ctx context.Context, c *cluster, n *vpcNet) error {
	made := false
	for i, zone := range n.zones {
		public, private, err := subnetCIDRs(n.cidr, i)
		if err != nil {
			return err
		}
		for _, s := range []struct {
			part string
			cidr netip.Prefix
			ids  map[string]string
		}{{partPublicSubnet, public, n.public}, {partPrivateSubnet, private, n.private}} {
			if s.ids[zone] != "" {
				continue
			}
			p.log.Info("creating subnet", "cluster", c.Project+"/"+c.Name, "part", s.part, "zone", zone, "cidr", s.cidr)
			out, err := c.api.ec2.CreateSubnet(ctx, &ec2.CreateSubnetInput{VpcId: &n.vpc, CidrBlock: awssdk.String(s.cidr.String()),
				AvailabilityZone: awssdk.String(zone), TagSpecifications: c.tagSpec(ec2types.ResourceTypeSubnet, s.part, TagZone, zone)})
			if err != nil {
				return classify(err, "", "create the %s of cluster %s in zone %s", s.part, c.Name, zone)
			}
			s.ids[zone] = awssdk.ToString(out.Subnet.SubnetId)
			made = true
		}
	}
	if !made {
		return nil
	}
	return visible(ctx, "the subnets of cluster "+c.Name, func() (bool, error) {
		out, err := c.api.ec2.DescribeSubnets(ctx, &ec2.DescribeSubnetsInput{Filters: c.filter("")})
		return err == nil && len(out.Subnets) >= 2*len(n.zones), err
	})
}

func (p *AWS) ensureInternetGateway(ctx context.Context, c *cluster, n *vpcNet) (string, error) {
	out, err := c.api.ec2.DescribeInternetGateways(ctx, &ec2.DescribeInternetGatewaysInput{Filters: c.filter(partIGW)})
	if err != nil {
		return "", classify(err, "", "find the internet gateway of cluster %s", c.Name)
	}
	var id string
	attached := false
	if len(out.InternetGateways) > 0 {
		g := out.InternetGateways[0]
		id = awssdk.ToString(g.InternetGatewayId)
		for _, a := range g.Attachments {
			attached = attached || awssdk.ToString(a.VpcId) == n.vpc
		}
	} else {
		p.log.Info("creating internet gateway", "cluster", c.Project+"/"+c.Name)
		made, err := c.api.ec2.CreateInternetGateway(ctx, &ec2.CreateInternetGatewayInput{TagSpecifications: c.tagSpec(ec2types.ResourceTypeInternetGateway, partIGW)})
		if err != nil {
			return "", classify(err, "", "create the internet gateway of cluster %s", c.Name)
		}
		id = awssdk.ToString(made.InternetGateway.InternetGatewayId)
		if err := visible(ctx, "internet gateway "+id, func() (bool, error) {
			out, err := c.api.ec2.DescribeInternetGateways(ctx, &ec2.DescribeInternetGatewaysInput{Filters: c.filter(partIGW)})
			return err == nil && len(out.InternetGateways) > 0, err
		}); err != nil {
			return "", err
		}
	}
	if !attached {
		if _, err := c.api.ec2.AttachInternetGateway(ctx, &ec2.AttachInternetGatewayInput{InternetGatewayId: &id, VpcId: &n.vpc}); err != nil {
			return "", classify(err, "", "attach internet gateway %s to VPC %s", id, n.vpc)
		}
	}
	return id, nil
}

// ensureRoutes makes the public route table (to the internet gateway,
// for the public subnets) and, per zone, an Elastic IP, a NAT gateway in the
// public subnet and the private subnet's route table to it.
func (p *AWS) ensureRoutes(ctx context.Context, c *cluster, n *vpcNet, igw string) error {
	tables, err := c.api.ec2.DescribeRouteTables(ctx, &ec2.DescribeRouteTablesInput{Filters: c.filter("")})
	if err != nil {
		return classify(err, "", "find the route tables of cluster %s", c.Name)
	}
	find := func(part, zone string) *ec2types.RouteTable {
		for i, t := range tables.RouteTables {
			if tagOf(t.Tags, TagPart) == part && (zone == "" || tagOf(t.Tags, TagZone) == zone) {
				return &tables.RouteTables[i]
			}
		}
		return nil
	}
	var publicSubnets []string
	for _, z := range n.zones {
		publicSubnets = append(publicSubnets, n.public[z])
	}
	if err := p.ensureRouteTable(ctx, c, n, find(partPublicRoutes, ""), partPublicRoutes, "", publicSubnets,
		&ec2.CreateRouteInput{GatewayId: &igw}); err != nil {
		return err
	}
	nats, err := p.ensureNATGateways(ctx, c, n)
	if err != nil {
		return err
	}
	for _, z := range n.zones {
		nat := nats[z]
		if err := p.ensureRouteTable(ctx, c, n, find(partPrivateRoutes, z), partPrivateRoutes, z, []string{n.private[z]},
			&ec2.CreateRouteInput{NatGatewayId: &nat}); err != nil {
			return err
		}
	}
	return nil
}

// ensureRouteTable makes (or completes) a route table with a default route
// (route's target) associated with subnets.
func (p *AWS) ensureRouteTable(ctx context.Context, c *cluster, n *vpcNet, t *ec2types.RouteTable, part, zone string, subnets []string, route *ec2.CreateRouteInput) error {
	var id string
	hasDefault := false
	associated := map[string]bool{}
	if t != nil {
		id = awssdk.ToString(t.RouteTableId)
		for _, r := range t.Routes {
			hasDefault = hasDefault || awssdk.ToString(r.DestinationCidrBlock) == "0.0.0.0/0"
		}
		for _, a := range t.Associations {
			associated[awssdk.ToString(a.SubnetId)] = true
		}
	} else {
		var extra []string
		if zone != "" {
			extra = []string{TagZone, zone}
		}
		out, err := c.api.ec2.CreateRouteTable(ctx, &ec2.CreateRouteTableInput{VpcId: &n.vpc, TagSpecifications: c.tagSpec(ec2types.ResourceTypeRouteTable, part, extra...)})
		if err != nil {
			return classify(err, "", "create the %s route table of cluster %s", part, c.Name)
		}
		id = awssdk.ToString(out.RouteTable.RouteTableId)
		f := c.filter(part)
		if zone != "" {
			f = append(f, ec2types.Filter{Name: awssdk.String("tag:" + TagZone), Values: []string{zone}})
		}
		if err := visible(ctx, "route table "+id, func() (bool, error) {
			out, err := c.api.ec2.DescribeRouteTables(ctx, &ec2.DescribeRouteTablesInput{Filters: f})
			return err == nil && len(out.RouteTables) > 0, err
		}); err != nil {
			return err
		}
	}
	if !hasDefault {
		route.RouteTableId, route.DestinationCidrBlock = &id, awssdk.String("0.0.0.0/0")
		if _, err := c.api.ec2.CreateRoute(ctx, route); err != nil && APICode(err) != "RouteAlreadyExists" {
			return classify(err, "", "add the default route of route table %s", id)
		}
	}
	for _, s := range subnets {
		if associated[s] {
			continue
		}
		if _, err := c.api.ec2.AssociateRouteTable(ctx, &ec2.AssociateRouteTableInput{RouteTableId: &id, SubnetId: awssdk.String(s)}); err != nil && APICode(err) != "Resource.AlreadyAssociated" {
			return classify(err, "", "associate route table %s with subnet %s", id, s)
		}
	}
	return nil
}

// ensureNATGateways returns each zone's NAT gateway, made (with its
// Elastic IP) where missing. A NAT gateway that is being deleted or failed
// does not count.
func (p *AWS) ensureNATGateways(ctx context.Context, c *cluster, n *vpcNet) (map[string]string, error) {
	out, err := c.api.ec2.DescribeNatGateways(ctx, &ec2.DescribeNatGatewaysInput{Filter: c.filter(partNAT)})
	if err != nil {
		return nil, classify(err, "", "find the NAT gateways of cluster %s", c.Name)
	}
	nats := map[string]string{}
	for _, g := range out.NatGateways {
		if g.State == ec2types.NatGatewayStatePending || g.State == ec2types.NatGatewayStateAvailable {
			nats[tagOf(g.Tags, TagZone)] = awssdk.ToString(g.NatGatewayId)
		}
	}
	addrs, err := c.api.ec2.DescribeAddresses(ctx, &ec2.DescribeAddressesInput{Filters: c.filter(partEIP)})
	if err != nil {
		return nil, classify(err, "", "find the Elastic IPs of cluster %s", c.Name)
	}
	eips := map[string]ec2types.Address{}
	for _, a := range addrs.Addresses {
		eips[tagOf(a.Tags, TagZone)] = a
	}
	for _, z := range n.zones {
		if nats[z] != "" {
			continue
		}
		a, ok := eips[z]
		if !ok {
			p.log.Info("allocating Elastic IP", "cluster", c.Project+"/"+c.Name, "zone", z)
			made, err := c.api.ec2.AllocateAddress(ctx, &ec2.AllocateAddressInput{Domain: ec2types.DomainTypeVpc,
				TagSpecifications: c.tagSpec(ec2types.ResourceTypeElasticIp, partEIP, TagZone, z)})
			if err != nil {
				return nil, classify(err, "", "allocate the Elastic IP of the NAT gateway of cluster %s in zone %s", c.Name, z)
			}
			a = ec2types.Address{AllocationId: made.AllocationId}
			f := append(c.filter(partEIP), ec2types.Filter{Name: awssdk.String("tag:" + TagZone), Values: []string{z}})
			if err := visible(ctx, "Elastic IP "+awssdk.ToString(made.AllocationId), func() (bool, error) {
				out, err := c.api.ec2.DescribeAddresses(ctx, &ec2.DescribeAddressesInput{Filters: f})
				return err == nil && len(out.Addresses) > 0, err
			}); err != nil {
				return nil, err
			}
		}
		p.log.Info("creating NAT gateway", "cluster", c.Project+"/"+c.Name, "zone", z)
		made, err := c.api.ec2.CreateNatGateway(ctx, &ec2.CreateNatGatewayInput{SubnetId: awssdk.String(n.public[z]), AllocationId: a.AllocationId,
			ClientToken:       awssdk.String(c.short("nat-" + z)),
			TagSpecifications: c.tagSpec(ec2types.ResourceTypeNatgateway, partNAT, TagZone, z)})
		if err != nil {
			return nil, classify(err, "", "create the NAT gateway of cluster %s in zone %s", c.Name, z)
		}
		nats[z] = awssdk.ToString(made.NatGateway.NatGatewayId)
	}
	return nats, nil
}
