package aws

import (
	"context"
	"net"
	"strconv"

	awssdk "github.com/aws/aws-sdk-go-v2/aws"
	elb "github.com/aws/aws-sdk-go-v2/service/elasticloadbalancingv2"
	elbtypes "github.com/aws/aws-sdk-go-v2/service/elasticloadbalancingv2/types"

	v1 "kiln.dev/kiln/api/v1"
	"kiln.dev/kiln/internal/provider"
)

// Health checks of the API servers behind the load balancer.
const (
	healthInterval  = 10
	healthThreshold = 2
)

// targetGroup is the ARN of the cluster's target group, "" when there is
// none.
func (p *AWS) targetGroup(ctx context.Context, c *cluster) (string, error) {
	out, err := c.api.elb.DescribeTargetGroups(ctx, &elb.DescribeTargetGroupsInput{Names: []string{c.short("api")}})
	switch {
	case APICode(err) == "TargetGroupNotFound":
		return "", nil
	case err != nil:
		return "", classify(err, "", "find the target group of cluster %s", c.Name)
	case len(out.TargetGroups) == 0:
		return "", nil
	}
	return awssdk.ToString(out.TargetGroups[0].TargetGroupArn), nil
}

func (c *cluster) elbTags(part string) []elbtypes.Tag {
	var tags []elbtypes.Tag
	for k, v := range c.tags(part) {
		tags = append(tags, elbtypes.Tag{Key: awssdk.String(k), Value: awssdk.String(v)})
	}
	return tags
}

// EnsureLoadBalancer finds or makes the cluster's network load balancer
// in its public subnets, a TCP listener on APIServerPort forwarding to the
// target group of the control-plane instances (those that exist are
// registered), and returns its address. Both are found by name, derived
// from the cluster's id (and AWS makes their creates idempotent by name).
func (p *AWS) EnsureLoadBalancer(ctx context.Context, pc provider.Cluster) (provider.LoadBalancer, error) {
	c, err := p.cluster(pc)
	if err != nil {
		return provider.LoadBalancer{}, err
	}
	n, err := p.network(ctx, c)
	if err != nil {
		return provider.LoadBalancer{}, err
	}
	subnets := n.publicSubnets()
	arn, err := p.targetGroup(ctx, c)
	if err != nil {
		return provider.LoadBalancer{}, err
	}
	if arn == "" {
		tg, err := c.api.elb.CreateTargetGroup(ctx, &elb.CreateTargetGroupInput{Name: awssdk.String(c.short("api")),
			Protocol: elbtypes.ProtocolEnumTcp, Port: awssdk.Int32(APIServerPort), VpcId: &n.vpc, TargetType: elbtypes.TargetTypeEnumInstance,
			HealthCheckProtocol: elbtypes.ProtocolEnumTcp, HealthCheckIntervalSeconds: awssdk.Int32(healthInterval),
			HealthyThresholdCount: awssdk.Int32(healthThreshold), UnhealthyThresholdCount: awssdk.Int32(healthThreshold),
			Tags: c.elbTags("api-targets")})
		if err != nil {
			return provider.LoadBalancer{}, classify(err, "", "create the target group of cluster %s", c.Name)
		}
		arn = awssdk.ToString(tg.TargetGroups[0].TargetGroupArn)
	}
	tgARN := &arn
	// Found by name first: one made before a zone was added keeps its
	// subnets (creating it again with more would be refused as a
	// duplicate with other settings).
	lbs, err := c.api.elb.DescribeLoadBalancers(ctx, &elb.DescribeLoadBalancersInput{Names: []string{c.short("")}})
	if err != nil && APICode(err) != "LoadBalancerNotFound" {
		return provider.LoadBalancer{}, classify(err, "", "find the load balancer of cluster %s", c.Name)
	}
	if err != nil || len(lbs.LoadBalancers) == 0 {
		p.log.Info("creating load balancer", "cluster", c.Project+"/"+c.Name, "subnets", subnets)
		made, err := c.api.elb.CreateLoadBalancer(ctx, &elb.CreateLoadBalancerInput{Name: awssdk.String(c.short("")),
			Type: elbtypes.LoadBalancerTypeEnumNetwork, Scheme: elbtypes.LoadBalancerSchemeEnumInternetFacing,
			Subnets: subnets, Tags: c.elbTags("api-load-balancer")})
		if err != nil {
			return provider.LoadBalancer{}, classify(err, "", "create the load balancer of cluster %s", c.Name)
		}
		lbs = &elb.DescribeLoadBalancersOutput{LoadBalancers: made.LoadBalancers}
	}
	lb := lbs.LoadBalancers[0]
	ls, err := c.api.elb.DescribeListeners(ctx, &elb.DescribeListenersInput{LoadBalancerArn: lb.LoadBalancerArn})
	if err != nil {
		return provider.LoadBalancer{}, classify(err, "", "find the listener of the load balancer of cluster %s", c.Name)
	}
	if len(ls.Listeners) == 0 {
		p.log.Info("creating load balancer listener", "cluster", c.Project+"/"+c.Name, "port", APIServerPort)
		_, err := c.api.elb.CreateListener(ctx, &elb.CreateListenerInput{LoadBalancerArn: lb.LoadBalancerArn, Protocol: elbtypes.ProtocolEnumTcp,
			Port: awssdk.Int32(APIServerPort), DefaultActions: []elbtypes.Action{{Type: elbtypes.ActionTypeEnumForward, TargetGroupArn: tgARN}}})
		if err != nil && APICode(err) != "DuplicateListener" {
			return provider.LoadBalancer{}, classify(err, "", "create the listener of the load balancer of cluster %s", c.Name)
		}
	}
	is, err := c.instances(ctx, "")
	if err != nil {
		return provider.LoadBalancer{}, err
	}
	var cps []string
	for _, i := range is {
		if tagOf(i.Tags, TagRole) == v1.RoleControlPlane {
			cps = append(cps, awssdk.ToString(i.InstanceId))
		}
	}
	if err := p.registerTargets(ctx, c, cps); err != nil {
		return provider.LoadBalancer{}, err
	}
	return provider.LoadBalancer{ID: awssdk.ToString(lb.LoadBalancerArn),
		Address: net.JoinHostPort(awssdk.ToString(lb.DNSName), strconv.Itoa(APIServerPort))}, nil
}

// DeleteLoadBalancer deletes the load balancer (its listeners with it) and
// then its target group; nothing there is success.
func (p *AWS) DeleteLoadBalancer(ctx context.Context, pc provider.Cluster) error {
	c, err := p.cluster(pc)
	if err != nil {
		return err
	}
	out, err := c.api.elb.DescribeLoadBalancers(ctx, &elb.DescribeLoadBalancersInput{Names: []string{c.short("")}})
	switch {
	case APICode(err) == "LoadBalancerNotFound":
	case err != nil:
		return classify(err, "", "find the load balancer of cluster %s", c.Name)
	default:
		for _, lb := range out.LoadBalancers {
			p.log.Info("deleting load balancer", "cluster", c.Project+"/"+c.Name, "arn", awssdk.ToString(lb.LoadBalancerArn))
			if _, err := c.api.elb.DeleteLoadBalancer(ctx, &elb.DeleteLoadBalancerInput{LoadBalancerArn: lb.LoadBalancerArn}); err != nil {
				return classify(err, "", "delete the load balancer of cluster %s", c.Name)
			}
		}
	}
	tg, err := p.targetGroup(ctx, c)
	if err != nil || tg == "" {
		return err
	}
	if _, err := c.api.elb.DeleteTargetGroup(ctx, &elb.DeleteTargetGroupInput{TargetGroupArn: &tg}); err != nil {
		return classify(err, "", "delete the target group of cluster %s", c.Name)
	}
	return nil
}
