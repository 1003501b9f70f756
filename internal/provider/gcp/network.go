package gcp

import (
	"context"
	"net/netip"
	"slices"
	"strings"

	"cloud.google.com/go/compute/apiv1/computepb"
	"google.golang.org/protobuf/proto"

	v1 "kiln.dev/kiln/api/v1"
	"kiln.dev/kiln/internal/failure"
	"kiln.dev/kiln/internal/provider"
)

// DefaultNodeCIDR is the subnetwork's primary range (the machines'
// addresses) of a cluster whose spec.network.nodeCIDR is empty.
var DefaultNodeCIDR = netip.MustParsePrefix("10.0.0.0/20")

// Secondary ranges of the cluster's subnetwork (alias IP ranges, as GKE
// and Cluster API's GCP provider name them): the pods' and the services'.
const (
	PodsRange     = "pods"
	ServicesRange = "services"
)

// HealthCheckRanges are where Google's load balancers' health checks come
// from.
var HealthCheckRanges = []string{"35.191.0.0/16", "130.211.0.0/22"}

// Names of the cluster's parts, after its Prefix.
const (
	suffixSubnet   = "-nodes"
	suffixAPI      = "-api"      // firewall: the API server from the allowed ranges
	suffixInternal = "-internal" // firewall: node to node, pods
	suffixHealth   = "-health"   // firewall: Google's health checks to the API server
	suffixRouter   = "-router"
	suffixNAT      = "-nat"
)

// EnsureNetwork finds or makes the cluster's network, in dependency order:
// the custom-mode VPC network; its subnetwork in the cluster's region
// (the node range, with secondary ranges for pods and services); the
// firewall rules (the API server's port from Options.APISourceRanges and
// from Google's health checks to the control plane's tag, everything
// between the cluster's nodes and from its pods); and a Cloud Router with
// Cloud NAT for the subnetwork's egress. What exists as it should is left
// alone (a second call writes nothing); a rule or a NAT that differs is
// patched back.
func (g *GCP) EnsureNetwork(ctx context.Context, pc provider.Cluster) (provider.Network, error) {
	c, err := g.cluster(ctx, pc)
	if err != nil {
		return provider.Network{}, err
	}
	defer c.api.Close()
	nodes, err := nodeCIDR(c.Spec.Network)
	if err != nil {
		return provider.Network{}, err
	}
	if err := g.checkRegion(ctx, c); err != nil {
		return provider.Network{}, err
	}
	network, err := g.ensureVPC(ctx, c)
	if err != nil {
		return provider.Network{}, err
	}
	subnet, err := g.ensureSubnet(ctx, c, network, nodes)
	if err != nil {
		return provider.Network{}, err
	}
	for _, fw := range c.firewalls(network, g.opts.APISourceRanges) {
		if err := g.ensureFirewall(ctx, c, fw); err != nil {
			return provider.Network{}, err
		}
	}
	if err := g.ensureRouter(ctx, c, network, subnet); err != nil {
		return provider.Network{}, err
	}
	return provider.Network{ID: network, CIDR: nodes.String()}, nil
}

// nodeCIDR is the subnetwork's primary range: spec.network.nodeCIDR (an
// IPv4 CIDR from /8 to /29, not overlapping the pod or service ranges,
// which are its secondary ranges) or DefaultNodeCIDR.
func nodeCIDR(nw v1.Network) (netip.Prefix, error) {
	invalid := func(format string, args ...any) error {
		e := failure.Terminal(v1.CodeInvalidParameter, format, args...)
		e.Target = "spec.network.nodeCIDR"
		return e
	}
	cidr := DefaultNodeCIDR
	if s := nw.NodeCIDR; s != "" {
		p, err := netip.ParsePrefix(s)
		if err != nil || !p.Addr().Is4() || p.Masked() != p || p.Bits() < 8 || p.Bits() > 29 {
			return cidr, invalid("spec.network.nodeCIDR %q must be an IPv4 CIDR from /8 to /29 with no host bits: it is the subnetwork's primary range", s)
		}
		cidr = p
	}
	for _, r := range []struct{ field, s string }{{"spec.network.podCIDR", nw.PodCIDR}, {"spec.network.serviceCIDR", nw.ServiceCIDR}} {
		if p, err := netip.ParsePrefix(r.s); err == nil && p.Overlaps(cidr) {
			what := "spec.network.nodeCIDR " + cidr.String()
			if nw.NodeCIDR == "" {
				what = "the default node range " + cidr.String() + " (spec.network.nodeCIDR is empty)"
			}
			return cidr, invalid("%s overlaps %s %s: the subnetwork's ranges must not share addresses; choose another spec.network.nodeCIDR", what, r.field, p)
		}
	}
	return cidr, nil
}

// checkRegion refuses a region the project is not offered, before
// anything is made.
func (g *GCP) checkRegion(ctx context.Context, c *cluster) error {
	_, err := c.api.regions.Get(ctx, &computepb.GetRegionRequest{Project: c.api.project, Region: c.region})
	if isNotFound(err) {
		e := failure.Terminal(v1.CodeInvalidParameter, "region %q is not offered to project %s (cloud account %q); choose another spec.region", c.region, c.api.project, c.api.account)
		e.Target, e.Err = "spec.region", err
		return e
	}
	return classify(err, c.api.account, "read region %s of project %s", c.region, c.api.project)
}

// ensureVPC finds or makes the custom-mode network, and returns its URL.
func (g *GCP) ensureVPC(ctx context.Context, c *cluster) (string, error) {
	name := c.prefix
	key := "networks/" + name
	what := "make the network " + name
	if err := g.resume(ctx, c, key); err != nil {
		return "", classify(err, c.api.account, "%s", what)
	}
	for {
		got, err := c.api.networks.Get(ctx, &computepb.GetNetworkRequest{Project: c.api.project, Network: name})
		if err == nil {
			if err := c.owns(got.GetDescription(), "network "+name); err != nil {
				return "", err
			}
			return got.GetSelfLink(), nil
		}
		if !isNotFound(err) {
			return "", classify(err, c.api.account, "find the network %s", name)
		}
		g.log.Info("creating network", "cluster", c.Project+"/"+c.Name, "network", name)
		op, err := c.api.networks.Insert(ctx, &computepb.InsertNetworkRequest{Project: c.api.project, NetworkResource: &computepb.Network{
			Name: proto.String(name), Description: proto.String(c.owner("network")), AutoCreateSubnetworks: proto.Bool(false),
			RoutingConfig: &computepb.NetworkRoutingConfig{RoutingMode: proto.String("REGIONAL")},
		}})
		if err := g.await(ctx, c, key, "global", op, err); err != nil && !isAlreadyExists(err) {
			return "", classify(err, c.api.account, "%s", what)
		}
	}
}

// ensureSubnet finds or makes the cluster's subnetwork, and returns its
// URL. One whose ranges differ is refused: Compute changes no range but
// by expanding the primary one.
func (g *GCP) ensureSubnet(ctx context.Context, c *cluster, network string, nodes netip.Prefix) (string, error) {
	name := c.prefix + suffixSubnet
	key := "subnetworks/" + c.region + "/" + name
	what := "make the subnetwork " + name + " in " + c.region
	if err := g.resume(ctx, c, key); err != nil {
		return "", classify(err, c.api.account, "%s", what)
	}
	var secondary []*computepb.SubnetworkSecondaryRange
	for _, r := range []struct{ name, cidr string }{{PodsRange, c.Spec.Network.PodCIDR}, {ServicesRange, c.Spec.Network.ServiceCIDR}} {
		if r.cidr != "" {
			secondary = append(secondary, &computepb.SubnetworkSecondaryRange{RangeName: proto.String(r.name), IpCidrRange: proto.String(r.cidr)})
		}
	}
	for {
		got, err := c.api.subnets.Get(ctx, &computepb.GetSubnetworkRequest{Project: c.api.project, Region: c.region, Subnetwork: name})
		if err == nil {
			if err := c.owns(got.GetDescription(), "subnetwork "+name); err != nil {
				return "", err
			}
			if got.GetIpCidrRange() != nodes.String() || !sameRanges(got.GetSecondaryIpRanges(), secondary) {
				e := failure.Terminal(v1.CodeInvalidParameter, "subnetwork %s has the range %s and secondary ranges %s; the cluster wants %s and %s, and Compute cannot change them",
					name, got.GetIpCidrRange(), rangesString(got.GetSecondaryIpRanges()), nodes, rangesString(secondary))
				e.Target = "spec.network"
				return "", e
			}
			return got.GetSelfLink(), nil
		}
		if !isNotFound(err) {
			return "", classify(err, c.api.account, "find the subnetwork %s", name)
		}
		g.log.Info("creating subnetwork", "cluster", c.Project+"/"+c.Name, "subnetwork", name, "region", c.region)
		op, err := c.api.subnets.Insert(ctx, &computepb.InsertSubnetworkRequest{Project: c.api.project, Region: c.region, SubnetworkResource: &computepb.Subnetwork{
			Name: proto.String(name), Description: proto.String(c.owner("subnetwork")), Network: proto.String(network),
			IpCidrRange: proto.String(nodes.String()), SecondaryIpRanges: secondary, PrivateIpGoogleAccess: proto.Bool(true),
		}})
		if err := g.await(ctx, c, key, "regions/"+c.region, op, err); err != nil && !isAlreadyExists(err) {
			return "", invalidRanges(classify(err, c.api.account, "%s", what))
		}
	}
}

// invalidRanges says a subnetwork Compute refused (ranges overlapping
// another subnetwork of the network) is about spec.network.
func invalidRanges(err error) error {
	if fe, ok := err.(*failure.Error); ok && fe.Code == v1.CodeInvalidParameter && fe.Target == "" {
		fe.Target = "spec.network"
	}
	return err
}

func sameRanges(a, b []*computepb.SubnetworkSecondaryRange) bool {
	return rangesString(a) == rangesString(b)
}

func rangesString(rs []*computepb.SubnetworkSecondaryRange) string {
	out := make([]string, 0, len(rs))
	for _, r := range rs {
		out = append(out, r.GetRangeName()+"="+r.GetIpCidrRange())
	}
	slices.Sort(out)
	return "[" + strings.Join(out, ", ") + "]"
}
