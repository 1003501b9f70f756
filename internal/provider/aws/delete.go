package aws

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	awssdk "github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
	ec2types "github.com/aws/aws-sdk-go-v2/service/ec2/types"
	elb "github.com/aws/aws-sdk-go-v2/service/elasticloadbalancingv2"
	"github.com/aws/aws-sdk-go-v2/service/iam"
	iamtypes "github.com/aws/aws-sdk-go-v2/service/iam/types"

	v1 "kiln.dev/kiln/api/v1"
	"kiln.dev/kiln/internal/failure"
	"kiln.dev/kiln/internal/provider"
)

// How long a delete waits, within one attempt of its step, for AWS to
// finish taking something away (instances, NAT gateways).
const (
	goneTimeout = 3 * time.Minute
	goneEvery   = 2 * time.Second
)

// poll calls check every goneEvery until it says done, for at most
// goneTimeout; then the step is retried, the error naming what it waited
// for.
func poll(ctx context.Context, what string, check func() (bool, error)) error {
	deadline := time.Now().Add(goneTimeout)
	for {
		done, err := check()
		if err != nil || done {
			return err
		}
		if time.Now().After(deadline) {
			return failure.Retryable(v1.CodeTimeout, nil, "waited %s for %s", goneTimeout, what)
		}
		if err := wait(ctx, goneEvery); err != nil {
			return err
		}
	}
}

// DeleteNetwork deletes everything the cluster has in AWS, in the order
// AWS's dependencies want: the pools' Auto Scaling groups (which would
// replace their instances) and launch templates, instances (the bastion too) and the load
// balancer, NAT gateways, their Elastic IPs, the internet gateway, subnets,
// route tables, security groups, the VPC, the key pair, the instance
// profiles and roles. Then it looks for anything still tagged with the
// cluster and fails, naming it, if there is: nothing is left behind
// silently.
func (p *AWS) DeleteNetwork(ctx context.Context, pc provider.Cluster) error {
	c, err := p.cluster(pc)
	if err != nil {
		return err
	}
	steps := []func(context.Context, *cluster) error{
		p.deleteGroups, p.deleteInstances, p.deleteAllServiceLBs, func(ctx context.Context, c *cluster) error { return p.DeleteLoadBalancer(ctx, c.Cluster) },
		p.deleteNATGateways, p.releaseAddresses, p.deleteInternetGateways, p.deleteSubnets, p.deleteRouteTables,
		p.deleteSecurityGroups, p.deleteVPC, p.deleteKeyPair, p.deleteRoles, p.unstage, p.unshareSubnets,
	}
	for _, step := range steps {
		if err := step(ctx, c); err != nil {
			return err
		}
	}
	left, err := p.leftovers(ctx, c)
	if err != nil {
		return err
	}
	if len(left) > 0 {
		return failure.Retryable(v1.CodeProviderError, nil, "resources tagged with cluster %s remain in AWS after the delete: %s", c.Name, joinIDs(left))
	}
	return nil
}

// deleteGroups deletes every pool's group and launch template and waits
// until the groups are gone (their instances terminated).
func (p *AWS) deleteGroups(ctx context.Context, c *cluster) error {
	if err := p.deletePools(ctx, c, true); err != nil {
		return err
	}
	return poll(ctx, "the Auto Scaling groups of cluster "+c.Name+" to be deleted", func() (bool, error) {
		gs, err := p.groups(ctx, c)
		return len(gs) == 0, err
	})
}

func (p *AWS) deleteInstances(ctx context.Context, c *cluster) error {
	states := append(slices.Clone(live), "shutting-down")
	list := func() ([]string, []string, error) {
		f := append(c.filter(""), ec2types.Filter{Name: awssdk.String("instance-state-name"), Values: states})
		out, err := c.api.ec2.DescribeInstances(ctx, &ec2.DescribeInstancesInput{Filters: f})
		if err != nil {
			return nil, nil, classify(err, "", "list the instances of cluster %s", c.Name)
		}
		var running, ending []string
		for _, r := range out.Reservations {
			for _, i := range r.Instances {
				if i.State != nil && i.State.Name == ec2types.InstanceStateNameShuttingDown {
					ending = append(ending, awssdk.ToString(i.InstanceId))
				} else {
					running = append(running, awssdk.ToString(i.InstanceId))
				}
			}
		}
		return running, ending, nil
	}
	running, _, err := list()
	if err != nil {
		return err
	}
	if len(running) > 0 {
		p.log.Info("terminating instances", "cluster", c.Project+"/"+c.Name, "instances", running)
		if _, err := c.api.ec2.TerminateInstances(ctx, &ec2.TerminateInstancesInput{InstanceIds: running}); err != nil {
			return classify(err, "", "terminate the instances of cluster %s (%s)", c.Name, joinIDs(running))
		}
	}
	return poll(ctx, "the instances of cluster "+c.Name+" to terminate", func() (bool, error) {
		running, ending, err := list()
		return len(running)+len(ending) == 0, err
	})
}

func (p *AWS) deleteNATGateways(ctx context.Context, c *cluster) error {
	list := func() ([]ec2types.NatGateway, error) {
		out, err := c.api.ec2.DescribeNatGateways(ctx, &ec2.DescribeNatGatewaysInput{Filter: c.filter(partNAT)})
		if err != nil {
			return nil, classify(err, "", "find the NAT gateways of cluster %s", c.Name)
		}
		var left []ec2types.NatGateway
		for _, g := range out.NatGateways {
			if g.State != ec2types.NatGatewayStateDeleted && g.State != ec2types.NatGatewayStateFailed {
				left = append(left, g)
			}
		}
		return left, nil
	}
	gws, err := list()
	if err != nil {
		return err
	}
	for _, g := range gws {
		if g.State == ec2types.NatGatewayStateDeleting {
			continue
		}
		p.log.Info("deleting NAT gateway", "cluster", c.Project+"/"+c.Name, "id", awssdk.ToString(g.NatGatewayId))
		if _, err := c.api.ec2.DeleteNatGateway(ctx, &ec2.DeleteNatGatewayInput{NatGatewayId: g.NatGatewayId}); err != nil && APICode(err) != "NatGatewayNotFound" {
			return classify(err, "", "delete NAT gateway %s", awssdk.ToString(g.NatGatewayId))
		}
	}
	return poll(ctx, "the NAT gateways of cluster "+c.Name+" to be deleted", func() (bool, error) {
		gws, err := list()
		return len(gws) == 0, err
	})
}

func (p *AWS) releaseAddresses(ctx context.Context, c *cluster) error {
	out, err := c.api.ec2.DescribeAddresses(ctx, &ec2.DescribeAddressesInput{Filters: c.filter(partEIP)})
	if err != nil {
		return classify(err, "", "find the Elastic IPs of cluster %s", c.Name)
	}
	for _, a := range out.Addresses {
		if _, err := c.api.ec2.ReleaseAddress(ctx, &ec2.ReleaseAddressInput{AllocationId: a.AllocationId}); err != nil && APICode(err) != "InvalidAllocationID.NotFound" {
			return classify(err, "", "release Elastic IP %s", awssdk.ToString(a.AllocationId))
		}
	}
	return nil
}

func (p *AWS) deleteInternetGateways(ctx context.Context, c *cluster) error {
	out, err := c.api.ec2.DescribeInternetGateways(ctx, &ec2.DescribeInternetGatewaysInput{Filters: c.filter(partIGW)})
	if err != nil {
		return classify(err, "", "find the internet gateway of cluster %s", c.Name)
	}
	for _, g := range out.InternetGateways {
		for _, a := range g.Attachments {
			if _, err := c.api.ec2.DetachInternetGateway(ctx, &ec2.DetachInternetGatewayInput{InternetGatewayId: g.InternetGatewayId, VpcId: a.VpcId}); err != nil && APICode(err) != "Gateway.NotAttached" {
				return classify(err, "", "detach internet gateway %s", awssdk.ToString(g.InternetGatewayId))
			}
		}
		if _, err := c.api.ec2.DeleteInternetGateway(ctx, &ec2.DeleteInternetGatewayInput{InternetGatewayId: g.InternetGatewayId}); err != nil && !notFound(err) {
			return classify(err, "", "delete internet gateway %s", awssdk.ToString(g.InternetGatewayId))
		}
	}
	return nil
}

func notFound(err error) bool {
	code := APICode(err)
	return len(code) > 9 && code[len(code)-9:] == ".NotFound"
}

func (p *AWS) deleteSubnets(ctx context.Context, c *cluster) error {
	out, err := c.api.ec2.DescribeSubnets(ctx, &ec2.DescribeSubnetsInput{Filters: c.filter("")})
	if err != nil {
		return classify(err, "", "find the subnets of cluster %s", c.Name)
	}
	for _, s := range out.Subnets {
		if _, err := c.api.ec2.DeleteSubnet(ctx, &ec2.DeleteSubnetInput{SubnetId: s.SubnetId}); err != nil && !notFound(err) {
			return classify(err, "", "delete subnet %s", awssdk.ToString(s.SubnetId))
		}
	}
	return nil
}

func (p *AWS) deleteRouteTables(ctx context.Context, c *cluster) error {
	out, err := c.api.ec2.DescribeRouteTables(ctx, &ec2.DescribeRouteTablesInput{Filters: c.filter("")})
	if err != nil {
		return classify(err, "", "find the route tables of cluster %s", c.Name)
	}
	for _, t := range out.RouteTables {
		for _, a := range t.Associations {
			if awssdk.ToBool(a.Main) {
				continue
			}
			if _, err := c.api.ec2.DisassociateRouteTable(ctx, &ec2.DisassociateRouteTableInput{AssociationId: a.RouteTableAssociationId}); err != nil && !notFound(err) {
				return classify(err, "", "disassociate route table %s", awssdk.ToString(t.RouteTableId))
			}
		}
		if _, err := c.api.ec2.DeleteRouteTable(ctx, &ec2.DeleteRouteTableInput{RouteTableId: t.RouteTableId}); err != nil && !notFound(err) {
			return classify(err, "", "delete route table %s", awssdk.ToString(t.RouteTableId))
		}
	}
	return nil
}

// deleteSecurityGroups takes the rules out of the cluster's groups first:
// groups that refer to each other cannot be deleted otherwise.
func (p *AWS) deleteSecurityGroups(ctx context.Context, c *cluster) error {
	out, err := c.api.ec2.DescribeSecurityGroups(ctx, &ec2.DescribeSecurityGroupsInput{Filters: c.filter("")})
	if err != nil {
		return classify(err, "", "find the security groups of cluster %s", c.Name)
	}
	for _, g := range out.SecurityGroups {
		if len(g.IpPermissions) == 0 {
			continue
		}
		if _, err := c.api.ec2.RevokeSecurityGroupIngress(ctx, &ec2.RevokeSecurityGroupIngressInput{GroupId: g.GroupId, IpPermissions: g.IpPermissions}); err != nil && !notFound(err) && APICode(err) != "InvalidPermission.NotFound" {
			return classify(err, "", "take the rules out of security group %s", awssdk.ToString(g.GroupId))
		}
	}
	for _, g := range out.SecurityGroups {
		if _, err := c.api.ec2.DeleteSecurityGroup(ctx, &ec2.DeleteSecurityGroupInput{GroupId: g.GroupId}); err != nil && !notFound(err) {
			return classify(err, "", "delete security group %s", awssdk.ToString(g.GroupId))
		}
	}
	return nil
}

func (p *AWS) deleteVPC(ctx context.Context, c *cluster) error {
	out, err := c.api.ec2.DescribeVpcs(ctx, &ec2.DescribeVpcsInput{Filters: c.filter(partVPC)})
	if err != nil {
		return classify(err, "", "find the VPC of cluster %s", c.Name)
	}
	for _, v := range out.Vpcs {
		p.log.Info("deleting VPC", "cluster", c.Project+"/"+c.Name, "vpc", awssdk.ToString(v.VpcId))
		if _, err := c.api.ec2.DeleteVpc(ctx, &ec2.DeleteVpcInput{VpcId: v.VpcId}); err != nil && !notFound(err) {
			return classify(err, "", "delete VPC %s", awssdk.ToString(v.VpcId))
		}
	}
	return nil
}

func (p *AWS) deleteKeyPair(ctx context.Context, c *cluster) error {
	if _, err := c.api.ec2.DeleteKeyPair(ctx, &ec2.DeleteKeyPairInput{KeyName: awssdk.String(c.short("key"))}); err != nil && !notFound(err) {
		return classify(err, "", "delete the key pair of cluster %s", c.Name)
	}
	return nil
}

func (p *AWS) deleteRoles(ctx context.Context, c *cluster) error {
	var missing *iamtypes.NoSuchEntityException
	gone := func(err error) bool { return errors.As(err, &missing) }
	for _, role := range []string{sgControlPlane, sgWorker} {
		name := c.roleName(role)
		if _, err := c.api.iam.RemoveRoleFromInstanceProfile(ctx, &iam.RemoveRoleFromInstanceProfileInput{InstanceProfileName: &name, RoleName: &name}); err != nil && !gone(err) {
			return classify(err, "", "take IAM role %s out of its instance profile", name)
		}
		if _, err := c.api.iam.DeleteInstanceProfile(ctx, &iam.DeleteInstanceProfileInput{InstanceProfileName: &name}); err != nil && !gone(err) {
			return classify(err, "", "delete instance profile %s", name)
		}
		if _, err := c.api.iam.DeleteRolePolicy(ctx, &iam.DeleteRolePolicyInput{RoleName: &name, PolicyName: awssdk.String("kiln-node")}); err != nil && !gone(err) {
			return classify(err, "", "delete the policy of IAM role %s", name)
		}
		if _, err := c.api.iam.DeleteRole(ctx, &iam.DeleteRoleInput{RoleName: &name}); err != nil && !gone(err) {
			return classify(err, "", "delete IAM role %s", name)
		}
	}
	return nil
}

// leftovers names what still carries the cluster's tag (or name) after a
// delete: EC2 resources (terminated instances aside), the load balancer and
// target group, the IAM roles and instance profiles.
func (p *AWS) leftovers(ctx context.Context, c *cluster) ([]string, error) {
	var left []string
	out, err := c.api.ec2.DescribeTags(ctx, &ec2.DescribeTagsInput{Filters: []ec2types.Filter{
		{Name: awssdk.String("key"), Values: []string{TagCluster}}, {Name: awssdk.String("value"), Values: []string{c.id}}}})
	if err != nil {
		return nil, classify(err, "", "look for what remains of cluster %s", c.Name)
	}
	var instances []string
	for _, t := range out.Tags {
		id := awssdk.ToString(t.ResourceId)
		switch t.ResourceType {
		case ec2types.ResourceTypeInstance:
			instances = append(instances, id)
			continue
		case ec2types.ResourceTypeNatgateway:
			continue // deleted ones are described for a while: asked below
		}
		left = append(left, fmt.Sprintf("%s %s", t.ResourceType, id))
	}
	if len(instances) > 0 {
		is, err := c.api.ec2.DescribeInstances(ctx, &ec2.DescribeInstancesInput{InstanceIds: instances})
		if err != nil && !notFound(err) {
			return nil, classify(err, "", "look for the instances that remain of cluster %s", c.Name)
		}
		if err == nil {
			for _, r := range is.Reservations {
				for _, i := range r.Instances {
					if i.State != nil && i.State.Name != ec2types.InstanceStateNameTerminated {
						left = append(left, "instance "+awssdk.ToString(i.InstanceId))
					}
				}
			}
		}
	}
	gs, err := p.groups(ctx, c)
	if err != nil {
		return nil, err
	}
	staged, err := p.stagedLeft(ctx, c)
	if err != nil {
		return nil, err
	}
	left = append(left, staged...)
	for _, g := range gs {
		left = append(left, "Auto Scaling group "+awssdk.ToString(g.AutoScalingGroupName))
	}
	nats, err := c.api.ec2.DescribeNatGateways(ctx, &ec2.DescribeNatGatewaysInput{Filter: c.filter(partNAT)})
	if err != nil {
		return nil, classify(err, "", "look for the NAT gateways that remain of cluster %s", c.Name)
	}
	for _, g := range nats.NatGateways {
		if g.State != ec2types.NatGatewayStateDeleted && g.State != ec2types.NatGatewayStateFailed {
			left = append(left, "NAT gateway "+awssdk.ToString(g.NatGatewayId))
		}
	}
	if lbs, err := c.api.elb.DescribeLoadBalancers(ctx, &elb.DescribeLoadBalancersInput{Names: []string{c.short("")}}); err == nil {
		for _, lb := range lbs.LoadBalancers {
			left = append(left, "load balancer "+awssdk.ToString(lb.LoadBalancerArn))
		}
	} else if APICode(err) != "LoadBalancerNotFound" {
		return nil, classify(err, "", "look for the load balancer of cluster %s", c.Name)
	}
	if tg, err := p.targetGroup(ctx, c); err != nil {
		return nil, err
	} else if tg != "" {
		left = append(left, "target group "+tg)
	}
	slbs, err := p.serviceLBs(ctx, c)
	if err != nil {
		return nil, err
	}
	for _, lb := range slbs {
		left = append(left, "Service load balancer "+awssdk.ToString(lb.LoadBalancerArn))
	}
	stgs, err := p.serviceTargets(ctx, c, "")
	if err != nil {
		return nil, err
	}
	for _, arn := range stgs {
		left = append(left, "Service target group "+arn)
	}
	for _, role := range []string{sgControlPlane, sgWorker} {
		name := c.roleName(role)
		if _, err := c.api.iam.GetRole(ctx, &iam.GetRoleInput{RoleName: &name}); err == nil {
			left = append(left, "IAM role "+name)
		}
		if _, err := c.api.iam.GetInstanceProfile(ctx, &iam.GetInstanceProfileInput{InstanceProfileName: &name}); err == nil {
			left = append(left, "instance profile "+name)
		}
	}
	slices.Sort(left)
	return left, nil
}
