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
)

// A cluster placed in an existing VPC (spec.network.vpcID and subnetIDs)
// gets no VPC, subnets, internet gateway, NAT gateways or route tables of
// its own: its private subnets are those of SubnetIDs whose route table
// sends 0.0.0.0/0 elsewhere than to an internet gateway, its public ones
// the others, the first of each kind per zone. The subnets it uses are
// tagged kubernetes.io/cluster/NAME=shared, as AWS's load balancer
// controllers expect, and the tag is taken off again by the delete; what
// the cluster makes in the VPC (security groups, instances, the load
// balancer) is tagged as everywhere and deleted with it.

// adopted reports whether the cluster is placed in an existing VPC.
func (c *cluster) adopted() bool { return c.Spec.Network.VPCID != "" }

func badSpec(target, format string, args ...any) error {
	e := failure.Terminal(v1.CodeInvalidParameter, format, args...)
	e.Target = target
	return e
}

// existingNetwork describes the VPC and subnets the spec names, and tags
// the subnets the cluster uses as shared with it.
func (p *AWS) existingNetwork(ctx context.Context, c *cluster) (*vpcNet, error) {
	n, err := p.describeExisting(ctx, c)
	if err != nil {
		return nil, err
	}
	return n, p.shareSubnets(ctx, c, n)
}

// describeExisting describes the VPC and subnets the spec names: an
// error names the field at fault.
func (p *AWS) describeExisting(ctx context.Context, c *cluster) (*vpcNet, error) {
	id, ids := c.Spec.Network.VPCID, c.Spec.Network.SubnetIDs
	vpcs, err := c.api.ec2.DescribeVpcs(ctx, &ec2.DescribeVpcsInput{VpcIds: []string{id}})
	if notFound(err) || (err == nil && len(vpcs.Vpcs) == 0) {
		return nil, badSpec("spec.network.vpcID", "VPC %s is not in region %s for cloud account %q; name a VPC the account has there", id, c.api.region, c.Account.Name)
	}
	if err != nil {
		return nil, classify(err, "", "find VPC %s", id)
	}
	cidr, err := netip.ParsePrefix(awssdk.ToString(vpcs.Vpcs[0].CidrBlock))
	if err != nil {
		return nil, fmt.Errorf("VPC %s has CIDR %q: %w", id, awssdk.ToString(vpcs.Vpcs[0].CidrBlock), err)
	}
	subs, err := c.api.ec2.DescribeSubnets(ctx, &ec2.DescribeSubnetsInput{SubnetIds: ids})
	if notFound(err) {
		return nil, badSpec("spec.network.subnetIDs", "%s; name subnets of VPC %s", APIMessage(err), id)
	}
	if err != nil {
		return nil, classify(err, "", "find the subnets %s", joinIDs(ids))
	}
	tables, err := c.api.ec2.DescribeRouteTables(ctx, &ec2.DescribeRouteTablesInput{Filters: []ec2types.Filter{{Name: awssdk.String("vpc-id"), Values: []string{id}}}})
	if err != nil {
		return nil, classify(err, "", "read the route tables of VPC %s", id)
	}
	n := &vpcNet{vpc: id, cidr: cidr, public: map[string]string{}, private: map[string]string{}, groups: map[string]string{}}
	var privateZones []string
	for i, sid := range ids {
		j := slices.IndexFunc(subs.Subnets, func(s ec2types.Subnet) bool { return awssdk.ToString(s.SubnetId) == sid })
		if j < 0 {
			return nil, badSpec(fmt.Sprintf("spec.network.subnetIDs[%d]", i), "subnet %s is not in region %s; name subnets of VPC %s", sid, c.api.region, id)
		}
		s := subs.Subnets[j]
		if awssdk.ToString(s.VpcId) != id {
			return nil, badSpec(fmt.Sprintf("spec.network.subnetIDs[%d]", i), "subnet %s is in VPC %s, not in %s", sid, awssdk.ToString(s.VpcId), id)
		}
		zone := awssdk.ToString(s.AvailabilityZone)
		kind := n.private
		if routesToInternet(tables.RouteTables, sid) {
			kind = n.public
		}
		if kind[zone] == "" {
			kind[zone] = sid
			if !routesToInternet(tables.RouteTables, sid) {
				privateZones = append(privateZones, zone)
			}
		}
	}
	if n.zones, err = p.clusterZones(ctx, c); err != nil {
		return nil, err
	}
	if !c.namesZones() {
		n.zones = privateZones
	}
	for _, z := range n.zones {
		if n.private[z] == "" {
			return nil, badSpec("spec.network.subnetIDs", "no private subnet of spec.network.subnetIDs is in zone %s, where the cluster has machines; add one (a subnet whose route table sends 0.0.0.0/0 to a NAT gateway)", z)
		}
	}
	if len(n.zones) == 0 {
		return nil, badSpec("spec.network.subnetIDs", "spec.network.subnetIDs has no private subnet for the nodes (one whose route table does not send 0.0.0.0/0 to an internet gateway)")
	}
	if len(n.public) == 0 {
		return nil, badSpec("spec.network.subnetIDs", "spec.network.subnetIDs has no public subnet (one routed to an internet gateway) for the load balancer and the bastion")
	}
	return n, nil
}

// existingFindings are the dry run's findings on an existing VPC: what
// describeExisting refuses, and pod or service ranges inside the VPC's.
func (p *AWS) existingFindings(ctx context.Context, c *cluster) ([]v1.Error, error) {
	n, err := p.describeExisting(ctx, c)
	if fe := failure.From(err); err != nil && !fe.Retryable && fe.Target != "" {
		return []v1.Error{{Code: fe.Code, Target: fe.Target, Message: fe.Message}}, nil
	}
	if err != nil {
		return nil, err
	}
	var out []v1.Error
	for _, r := range []struct{ target, cidr string }{{"spec.network.podCIDR", c.Spec.Network.PodCIDR}, {"spec.network.serviceCIDR", c.Spec.Network.ServiceCIDR}} {
		if pr, err := netip.ParsePrefix(r.cidr); err == nil && pr.Overlaps(n.cidr) {
			out = append(out, v1.Error{Code: v1.CodeInvalidParameter, Target: r.target, Message: fmt.Sprintf("%s overlaps %s, the range of VPC %s; pick a range that does not", pr, n.cidr, n.vpc)})
		}
	}
	return out, nil
}

// namesZones reports whether the spec names the zones of any machines.
func (c *cluster) namesZones() bool {
	if len(c.Spec.ControlPlane.Zones) > 0 {
		return true
	}
	return slices.ContainsFunc(c.Spec.WorkerPools, func(wp v1.WorkerPool) bool { return len(wp.Zones) > 0 })
}

// routesToInternet reports whether a subnet's route table (its own, else
// the VPC's main one) sends 0.0.0.0/0 to an internet gateway.
func routesToInternet(tables []ec2types.RouteTable, subnet string) bool {
	var main, own *ec2types.RouteTable
	for i := range tables {
		for _, a := range tables[i].Associations {
			switch {
			case awssdk.ToString(a.SubnetId) == subnet:
				own = &tables[i]
			case awssdk.ToBool(a.Main):
				main = &tables[i]
			}
		}
	}
	t := own
	if t == nil {
		t = main
	}
	if t == nil {
		return false
	}
	for _, r := range t.Routes {
		if awssdk.ToString(r.DestinationCidrBlock) == "0.0.0.0/0" && strings.HasPrefix(awssdk.ToString(r.GatewayId), "igw-") {
			return true
		}
	}
	return false
}

// sharedTag is the tag of an existing subnet the cluster uses.
func (c *cluster) sharedTag() string { return "kubernetes.io/cluster/" + c.Name }

// shareSubnets tags the subnets the cluster uses as shared with it.
func (p *AWS) shareSubnets(ctx context.Context, c *cluster, n *vpcNet) error {
	var ids []string
	for _, m := range []map[string]string{n.public, n.private} {
		for _, id := range m {
			ids = append(ids, id)
		}
	}
	slices.Sort(ids)
	_, err := c.api.ec2.CreateTags(ctx, &ec2.CreateTagsInput{Resources: ids, Tags: []ec2types.Tag{{Key: awssdk.String(c.sharedTag()), Value: awssdk.String("shared")}}})
	return classify(err, "", "tag the subnets %s as shared with cluster %s", joinIDs(ids), c.Name)
}

// unshareSubnets takes the cluster's shared tag off the existing subnets.
func (p *AWS) unshareSubnets(ctx context.Context, c *cluster) error {
	if !c.adopted() {
		return nil
	}
	out, err := c.api.ec2.DescribeSubnets(ctx, &ec2.DescribeSubnetsInput{Filters: []ec2types.Filter{{Name: awssdk.String("tag:" + c.sharedTag()), Values: []string{"shared"}}}})
	if err != nil || len(out.Subnets) == 0 {
		return classify(err, "", "find the subnets shared with cluster %s", c.Name)
	}
	var ids []string
	for _, s := range out.Subnets {
		ids = append(ids, awssdk.ToString(s.SubnetId))
	}
	_, err = c.api.ec2.DeleteTags(ctx, &ec2.DeleteTagsInput{Resources: ids, Tags: []ec2types.Tag{{Key: awssdk.String(c.sharedTag())}}})
	return classify(err, "", "take the tag of cluster %s off the subnets %s", c.Name, joinIDs(ids))
}

// firstPublic is the public subnet of the first zone that has one, and
// its zone: where the bastion goes.
func (n *vpcNet) firstPublic() (subnet, zone string) {
	for _, z := range n.zones {
		if n.public[z] != "" {
			return n.public[z], z
		}
	}
	zones := make([]string, 0, len(n.public))
	for z := range n.public {
		zones = append(zones, z)
	}
	slices.Sort(zones)
	if len(zones) == 0 {
		return "", ""
	}
	return n.public[zones[0]], zones[0]
}
