package aws

import (
	"context"
	"net/netip"
	"slices"

	awssdk "github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
	ec2types "github.com/aws/aws-sdk-go-v2/service/ec2/types"

	"kiln.dev/kiln/internal/provider"
)

// Nodes in different subnets reach each other's pods through the VPC's
// routes, as Kubernetes' route controller makes them with
// cloud-provider-aws: in the route table of each of the cluster's subnets,
// a route per node for its pod range with the node's instance as target,
// and the instance's source/destination check off (it sends and receives
// packets of pod addresses, not its own). Kiln's bridge pod network then
// needs no overlay between zones.

var _ provider.PodRoutes = (*AWS)(nil)

// EnsurePodRoutes makes the route tables of the cluster's subnets route
// each node's pod range to the node's instance (found by its address in
// the VPC), and deletes the routes of ranges inside the cluster's pod
// network that no node has (a node gone). A node whose address is no
// instance of the VPC gets no route.
func (p *AWS) EnsurePodRoutes(ctx context.Context, pc provider.Cluster, routes []provider.PodRoute) error {
	c, err := p.cluster(pc)
	if err != nil {
		return err
	}
	pods, err := netip.ParsePrefix(c.Spec.Network.PodCIDR)
	if err != nil {
		return nil // none: the API defaults it at create
	}
	n, err := p.network(ctx, c)
	if err != nil {
		return err
	}
	var addrs []string
	for _, r := range routes {
		addrs = append(addrs, r.Address)
	}
	byAddr := map[string]ec2types.Instance{}
	if len(addrs) > 0 {
		out, err := c.api.ec2.DescribeInstances(ctx, &ec2.DescribeInstancesInput{Filters: []ec2types.Filter{
			{Name: awssdk.String("vpc-id"), Values: []string{n.vpc}},
			{Name: awssdk.String("private-ip-address"), Values: addrs},
			{Name: awssdk.String("instance-state-name"), Values: []string{"pending", "running", "stopping", "stopped"}}}})
		if err != nil {
			return classify(err, "", "find the instances of cluster %s's nodes", c.Name)
		}
		for _, r := range out.Reservations {
			for _, i := range r.Instances {
				byAddr[awssdk.ToString(i.PrivateIpAddress)] = i
			}
		}
	}
	want := map[string]string{} // pod range to instance id
	for _, r := range routes {
		i, ok := byAddr[r.Address]
		cidr, err := netip.ParsePrefix(r.CIDR)
		if !ok || err != nil || !pods.Overlaps(cidr) {
			continue
		}
		id := awssdk.ToString(i.InstanceId)
		want[cidr.Masked().String()] = id
		if i.SourceDestCheck == nil || *i.SourceDestCheck {
			p.log.Info("turning off the source/destination check", "cluster", c.Project+"/"+c.Name, "node", r.Node, "instance", id)
			if _, err := c.api.ec2.ModifyInstanceAttribute(ctx, &ec2.ModifyInstanceAttributeInput{InstanceId: &id,
				SourceDestCheck: &ec2types.AttributeBooleanValue{Value: awssdk.Bool(false)}}); err != nil {
				return classify(err, "", "turn off the source/destination check of node %s (instance %s)", r.Node, id)
			}
		}
	}
	var subnets []string
	for _, m := range []map[string]string{n.public, n.private} {
		for _, id := range m {
			subnets = append(subnets, id)
		}
	}
	slices.Sort(subnets)
	tables, err := c.api.ec2.DescribeRouteTables(ctx, &ec2.DescribeRouteTablesInput{Filters: []ec2types.Filter{
		{Name: awssdk.String("vpc-id"), Values: []string{n.vpc}},
		{Name: awssdk.String("association.subnet-id"), Values: subnets}}})
	if err != nil {
		return classify(err, "", "find the route tables of cluster %s", c.Name)
	}
	for _, t := range tables.RouteTables {
		have := map[string]string{}
		for _, r := range t.Routes {
			dest, err := netip.ParsePrefix(awssdk.ToString(r.DestinationCidrBlock))
			if err != nil || !pods.Overlaps(dest) || r.GatewayId != nil && *r.GatewayId == "local" {
				continue
			}
			have[dest.String()] = awssdk.ToString(r.InstanceId)
		}
		for dest, target := range have {
			if want[dest] == target {
				continue
			}
			p.log.Info("deleting pod route", "cluster", c.Project+"/"+c.Name, "table", awssdk.ToString(t.RouteTableId), "range", dest, "instance", target)
			if _, err := c.api.ec2.DeleteRoute(ctx, &ec2.DeleteRouteInput{RouteTableId: t.RouteTableId, DestinationCidrBlock: awssdk.String(dest)}); err != nil && APICode(err) != "InvalidRoute.NotFound" {
				return classify(err, "", "delete the route of %s from route table %s", dest, awssdk.ToString(t.RouteTableId))
			}
			delete(have, dest)
		}
		for dest, target := range want {
			if _, ok := have[dest]; ok {
				continue
			}
			p.log.Info("creating pod route", "cluster", c.Project+"/"+c.Name, "table", awssdk.ToString(t.RouteTableId), "range", dest, "instance", target)
			if _, err := c.api.ec2.CreateRoute(ctx, &ec2.CreateRouteInput{RouteTableId: t.RouteTableId, DestinationCidrBlock: awssdk.String(dest),
				InstanceId: awssdk.String(target)}); err != nil && APICode(err) != "RouteAlreadyExists" {
				return classify(err, "", "route %s to instance %s in route table %s", dest, target, awssdk.ToString(t.RouteTableId))
			}
		}
	}
	return nil
}
