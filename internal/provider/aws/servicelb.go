package aws

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"slices"
	"strings"

	awssdk "github.com/aws/aws-sdk-go-v2/aws"
	elb "github.com/aws/aws-sdk-go-v2/service/elasticloadbalancingv2"
	elbtypes "github.com/aws/aws-sdk-go-v2/service/elasticloadbalancingv2/types"

	v1 "kiln.dev/kiln/api/v1"
	"kiln.dev/kiln/internal/failure"
	"kiln.dev/kiln/internal/provider"
)

// A Service's load balancer on aws is a network load balancer of its own,
// as cloud-provider-aws makes one for a Service of type LoadBalancer with
// the annotation aws-load-balancer-type "nlb": internet-facing, in the
// cluster's public subnets (those of its API load balancer), named as
// Kubernetes names it (cloudprovider.DefaultLoadBalancerName: "a" and the
// Service's UID, 32 characters); per port of the Service a target group
// of the nodes' addresses on the port's NodePort (ip targets: the service
// controller gives nodes by address) with TCP health checks, and a TCP
// listener forwarding to it. Each carries the cluster's tags, part
// service-load-balancer or service-targets, kubernetes.io/service-name
// (NAMESPACE/NAME, as cloud-provider-aws tags) and TagServiceLB (the load
// balancer's name), so that the cluster's delete finds and deletes every
// one, even a target group left by a call that failed half way.

// Tags and parts of Service load balancers.
const (
	// TagServiceName is the Service (NAMESPACE/NAME), as cloud-provider-aws
	// tags its load balancers.
	TagServiceName = "kubernetes.io/service-name"
	// TagServiceLB is the Service load balancer's name on its target
	// groups (and on itself).
	TagServiceLB = "kiln.dev/service-load-balancer"

	partServiceLB      = "service-load-balancer"
	partServiceTargets = "service-targets"
)

// QuotaLoadBalancers is Service Quotas' code of Elastic Load Balancing's
// "Network Load Balancers per Region" (AWS's default: 50): more is
// TooManyLoadBalancers.
const QuotaLoadBalancers = "L-69A177A2"

var _ provider.ServiceLoadBalancers = (*AWS)(nil)

// EnsureServiceLoadBalancer makes the network load balancer of Service
// s.Service, or gives the one of its name s's ports and nodes: a listener
// and target group per port; a port gone loses its listener and group, a
// NodePort changed gets a new group. It returns the load balancer's DNS
// name.
func (p *AWS) EnsureServiceLoadBalancer(ctx context.Context, pc provider.Cluster, s provider.ServiceLoadBalancer) ([]string, error) {
	c, err := p.cluster(pc)
	if err != nil {
		return nil, err
	}
	if err := s.CheckTCP("the aws provider's network load balancers"); err != nil {
		return nil, err
	}
	lb, err := p.findServiceLB(ctx, c, s.Name)
	if err != nil {
		return nil, err
	}
	n, err := p.network(ctx, c)
	if err != nil {
		return nil, err
	}
	if lb == nil {
		subnets := n.publicSubnets()
		p.log.Info("creating Service load balancer", "cluster", c.Project+"/"+c.Name, "service", s.Service, "name", s.Name, "subnets", subnets)
		made, err := c.api.elb.CreateLoadBalancer(ctx, &elb.CreateLoadBalancerInput{Name: awssdk.String(s.Name),
			Type: elbtypes.LoadBalancerTypeEnumNetwork, Scheme: elbtypes.LoadBalancerSchemeEnumInternetFacing,
			Subnets: subnets, Tags: c.serviceTags(partServiceLB, s)})
		if err != nil {
			return nil, classify(err, "", "create the load balancer of Service %s", s.Service)
		}
		lb = &made.LoadBalancers[0]
	}
	// The target group of each port, made when missing, with the nodes
	// registered on the port's NodePort.
	want := map[int32]string{} // listener port to target group ARN
	for _, port := range s.Ports {
		arn, err := p.ensureServiceTargets(ctx, c, n, s, port)
		if err != nil {
			return nil, err
		}
		want[int32(port.Port)] = arn
	}
	ls, err := c.api.elb.DescribeListeners(ctx, &elb.DescribeListenersInput{LoadBalancerArn: lb.LoadBalancerArn})
	if err != nil {
		return nil, classify(err, "", "list the listeners of the load balancer of Service %s", s.Service)
	}
	have := map[int32]bool{}
	for _, l := range ls.Listeners {
		port := awssdk.ToInt32(l.Port)
		if arn, ok := want[port]; ok && forwardsTo(l) == arn {
			have[port] = true
			continue
		}
		p.log.Info("deleting Service load balancer listener", "cluster", c.Project+"/"+c.Name, "service", s.Service, "port", port)
		if _, err := c.api.elb.DeleteListener(ctx, &elb.DeleteListenerInput{ListenerArn: l.ListenerArn}); err != nil && APICode(err) != "ListenerNotFound" {
			return nil, classify(err, "", "delete the listener on port %d of the load balancer of Service %s", port, s.Service)
		}
	}
	for _, port := range s.Ports {
		lp := int32(port.Port)
		if have[lp] {
			continue
		}
		p.log.Info("creating Service load balancer listener", "cluster", c.Project+"/"+c.Name, "service", s.Service, "port", lp, "nodePort", port.NodePort)
		_, err := c.api.elb.CreateListener(ctx, &elb.CreateListenerInput{LoadBalancerArn: lb.LoadBalancerArn, Protocol: elbtypes.ProtocolEnumTcp,
			Port: awssdk.Int32(lp), DefaultActions: []elbtypes.Action{{Type: elbtypes.ActionTypeEnumForward, TargetGroupArn: awssdk.String(want[lp])}},
			Tags: c.serviceTags(partServiceLB, s)})
		if err != nil && APICode(err) != "DuplicateListener" {
			return nil, classify(err, "", "create the listener on port %d of the load balancer of Service %s", lp, s.Service)
		}
		have[lp] = true
	}
	// Target groups of the Service that no listener uses any more (a port
	// gone, a NodePort changed).
	keep := map[string]bool{}
	for _, arn := range want {
		keep[arn] = true
	}
	if err := p.deleteServiceTargets(ctx, c, s.Name, keep); err != nil {
		return nil, err
	}
	return []string{awssdk.ToString(lb.DNSName)}, nil
}

// forwardsTo is the target group a listener forwards to.
func forwardsTo(l elbtypes.Listener) string {
	for _, a := range l.DefaultActions {
		if a.TargetGroupArn != nil {
			return *a.TargetGroupArn
		}
		if a.ForwardConfig != nil && len(a.ForwardConfig.TargetGroups) == 1 {
			return awssdk.ToString(a.ForwardConfig.TargetGroups[0].TargetGroupArn)
		}
	}
	return ""
}

// serviceTargetsName is the name of the target group of a port of Service
// load balancer lb: "k8s-" and 20 hex digits of a hash of the load
// balancer's name, the port and its NodePort (a target group forwards to
// one port: a NodePort changed is another group). Target group names are
// unique in a region and 32 characters at most.
func serviceTargetsName(lb string, port provider.ServicePort) string {
	sum := sha256.Sum256([]byte(fmt.Sprintf("%s/%d/%d", lb, port.Port, port.NodePort)))
	return "k8s-" + hex.EncodeToString(sum[:10])
}

// ensureServiceTargets finds or makes the target group of a port of
// Service load balancer s and registers s's nodes on its NodePort (and
// deregisters the nodes gone).
func (p *AWS) ensureServiceTargets(ctx context.Context, c *cluster, n *vpcNet, s provider.ServiceLoadBalancer, port provider.ServicePort) (string, error) {
	name := serviceTargetsName(s.Name, port)
	var arn string
	out, err := c.api.elb.DescribeTargetGroups(ctx, &elb.DescribeTargetGroupsInput{Names: []string{name}})
	switch {
	case err != nil && APICode(err) != "TargetGroupNotFound":
		return "", classify(err, "", "find the target group of port %d of Service %s", port.Port, s.Service)
	case err == nil && len(out.TargetGroups) > 0:
		arn = awssdk.ToString(out.TargetGroups[0].TargetGroupArn)
	default:
		p.log.Info("creating Service target group", "cluster", c.Project+"/"+c.Name, "service", s.Service, "port", port.Port, "nodePort", port.NodePort)
		tg, err := c.api.elb.CreateTargetGroup(ctx, &elb.CreateTargetGroupInput{Name: awssdk.String(name),
			Protocol: elbtypes.ProtocolEnumTcp, Port: awssdk.Int32(int32(port.NodePort)), VpcId: &n.vpc, TargetType: elbtypes.TargetTypeEnumIp,
			HealthCheckProtocol: elbtypes.ProtocolEnumTcp, HealthCheckIntervalSeconds: awssdk.Int32(healthInterval),
			HealthyThresholdCount: awssdk.Int32(healthThreshold), UnhealthyThresholdCount: awssdk.Int32(healthThreshold),
			Tags: c.serviceTags(partServiceTargets, s)})
		if err != nil {
			return "", classify(err, "", "create the target group of port %d of Service %s", port.Port, s.Service)
		}
		arn = awssdk.ToString(tg.TargetGroups[0].TargetGroupArn)
	}
	health, err := c.api.elb.DescribeTargetHealth(ctx, &elb.DescribeTargetHealthInput{TargetGroupArn: &arn})
	if err != nil {
		return "", classify(err, "", "list the targets of port %d of Service %s", port.Port, s.Service)
	}
	registered := map[string]bool{}
	var gone []elbtypes.TargetDescription
	for _, h := range health.TargetHealthDescriptions {
		if h.Target == nil || h.TargetHealth != nil && h.TargetHealth.State == elbtypes.TargetHealthStateEnumDraining {
			continue
		}
		id := awssdk.ToString(h.Target.Id)
		registered[id] = true
		if !slices.Contains(s.Nodes, id) {
			gone = append(gone, *h.Target)
		}
	}
	var add []elbtypes.TargetDescription
	for _, node := range s.Nodes {
		if !registered[node] {
			add = append(add, elbtypes.TargetDescription{Id: awssdk.String(node), Port: awssdk.Int32(int32(port.NodePort))})
		}
	}
	if len(add) > 0 {
		if _, err := c.api.elb.RegisterTargets(ctx, &elb.RegisterTargetsInput{TargetGroupArn: &arn, Targets: add}); err != nil {
			return "", classify(err, "", "register the nodes for port %d of Service %s", port.Port, s.Service)
		}
	}
	if len(gone) > 0 {
		if _, err := c.api.elb.DeregisterTargets(ctx, &elb.DeregisterTargetsInput{TargetGroupArn: &arn, Targets: gone}); err != nil && APICode(err) != "InvalidTarget" {
			return "", classify(err, "", "deregister nodes gone for port %d of Service %s", port.Port, s.Service)
		}
	}
	return arn, nil
}

// ServiceLoadBalancer returns the DNS name of the Service load balancer
// named name.
func (p *AWS) ServiceLoadBalancer(ctx context.Context, pc provider.Cluster, name string) ([]string, bool, error) {
	c, err := p.cluster(pc)
	if err != nil {
		return nil, false, err
	}
	lb, err := p.findServiceLB(ctx, c, name)
	if err != nil || lb == nil {
		return nil, false, err
	}
	return []string{awssdk.ToString(lb.DNSName)}, true, nil
}

// DeleteServiceLoadBalancer deletes the Service load balancer named name
// (its listeners with it) and then its target groups.
func (p *AWS) DeleteServiceLoadBalancer(ctx context.Context, pc provider.Cluster, name string) error {
	c, err := p.cluster(pc)
	if err != nil {
		return err
	}
	lb, err := p.findServiceLB(ctx, c, name)
	if err != nil {
		return err
	}
	if lb != nil {
		if err := p.deleteServiceLB(ctx, c, *lb); err != nil {
			return err
		}
	}
	return p.deleteServiceTargets(ctx, c, name, nil)
}

// DeleteServiceLoadBalancers deletes every Service load balancer of the
// cluster and every target group of theirs, found by the cluster's tag.
func (p *AWS) DeleteServiceLoadBalancers(ctx context.Context, pc provider.Cluster) error {
	c, err := p.cluster(pc)
	if err != nil {
		return err
	}
	return p.deleteAllServiceLBs(ctx, c)
}

func (p *AWS) deleteAllServiceLBs(ctx context.Context, c *cluster) error {
	lbs, err := p.serviceLBs(ctx, c)
	if err != nil {
		return err
	}
	for _, lb := range lbs {
		if err := p.deleteServiceLB(ctx, c, lb); err != nil {
			return err
		}
	}
	return p.deleteServiceTargets(ctx, c, "", nil)
}

func (p *AWS) deleteServiceLB(ctx context.Context, c *cluster, lb elbtypes.LoadBalancer) error {
	p.log.Info("deleting Service load balancer", "cluster", c.Project+"/"+c.Name, "name", awssdk.ToString(lb.LoadBalancerName))
	if _, err := c.api.elb.DeleteLoadBalancer(ctx, &elb.DeleteLoadBalancerInput{LoadBalancerArn: lb.LoadBalancerArn}); err != nil {
		return classify(err, "", "delete the Service load balancer %s of cluster %s", awssdk.ToString(lb.LoadBalancerName), c.Name)
	}
	return nil
}

// findServiceLB is the Service load balancer named name of the cluster;
// nil when there is none. A load balancer of that name that is not the
// cluster's (its tag says another) is not it.
func (p *AWS) findServiceLB(ctx context.Context, c *cluster, name string) (*elbtypes.LoadBalancer, error) {
	out, err := c.api.elb.DescribeLoadBalancers(ctx, &elb.DescribeLoadBalancersInput{Names: []string{name}})
	switch {
	case APICode(err) == "LoadBalancerNotFound":
		return nil, nil
	case err != nil:
		return nil, classify(err, "", "find the Service load balancer %s of cluster %s", name, c.Name)
	case len(out.LoadBalancers) == 0:
		return nil, nil
	}
	lb := out.LoadBalancers[0]
	tags, err := p.elbTagsOf(ctx, c, []string{awssdk.ToString(lb.LoadBalancerArn)})
	if err != nil {
		return nil, err
	}
	t := tags[awssdk.ToString(lb.LoadBalancerArn)]
	if t[TagCluster] != c.id || t[TagPart] != partServiceLB {
		return nil, failure.Terminal(v1.CodeConflict, "a load balancer named %s is there that is not a Service load balancer of cluster %s", name, c.Name)
	}
	return &lb, nil
}

// serviceLBs are the cluster's Service load balancers, by their tags.
func (p *AWS) serviceLBs(ctx context.Context, c *cluster) ([]elbtypes.LoadBalancer, error) {
	out, err := c.api.elb.DescribeLoadBalancers(ctx, &elb.DescribeLoadBalancersInput{})
	if err != nil {
		return nil, classify(err, "", "list the load balancers of cluster %s", c.Name)
	}
	var arns []string
	for _, lb := range out.LoadBalancers {
		arns = append(arns, awssdk.ToString(lb.LoadBalancerArn))
	}
	tags, err := p.elbTagsOf(ctx, c, arns)
	if err != nil {
		return nil, err
	}
	var mine []elbtypes.LoadBalancer
	for _, lb := range out.LoadBalancers {
		if t := tags[awssdk.ToString(lb.LoadBalancerArn)]; t[TagCluster] == c.id && t[TagPart] == partServiceLB {
			mine = append(mine, lb)
		}
	}
	return mine, nil
}

// deleteServiceTargets deletes the cluster's Service target groups (of
// the load balancer named lb when it is not "") but those in keep.
func (p *AWS) deleteServiceTargets(ctx context.Context, c *cluster, lb string, keep map[string]bool) error {
	tgs, err := p.serviceTargets(ctx, c, lb)
	if err != nil {
		return err
	}
	for _, arn := range tgs {
		if keep[arn] {
			continue
		}
		p.log.Info("deleting Service target group", "cluster", c.Project+"/"+c.Name, "arn", arn)
		if _, err := c.api.elb.DeleteTargetGroup(ctx, &elb.DeleteTargetGroupInput{TargetGroupArn: &arn}); err != nil && APICode(err) != "TargetGroupNotFound" {
			return classify(err, "", "delete the Service target group %s of cluster %s", arn, c.Name)
		}
	}
	return nil
}

// serviceTargets are the ARNs of the cluster's Service target groups (of
// the load balancer named lb when it is not ""), by their tags.
func (p *AWS) serviceTargets(ctx context.Context, c *cluster, lb string) ([]string, error) {
	out, err := c.api.elb.DescribeTargetGroups(ctx, &elb.DescribeTargetGroupsInput{})
	if err != nil {
		return nil, classify(err, "", "list the target groups of cluster %s", c.Name)
	}
	var arns []string
	for _, tg := range out.TargetGroups {
		arns = append(arns, awssdk.ToString(tg.TargetGroupArn))
	}
	tags, err := p.elbTagsOf(ctx, c, arns)
	if err != nil {
		return nil, err
	}
	var mine []string
	for _, arn := range arns {
		t := tags[arn]
		if t[TagCluster] == c.id && t[TagPart] == partServiceTargets && (lb == "" || t[TagServiceLB] == lb) {
			mine = append(mine, arn)
		}
	}
	return mine, nil
}

// elbTagsOf are the tags of load balancers or target groups, by ARN
// (DescribeTags takes 20 at a time).
func (p *AWS) elbTagsOf(ctx context.Context, c *cluster, arns []string) (map[string]map[string]string, error) {
	tags := map[string]map[string]string{}
	for chunk := range slices.Chunk(arns, 20) {
		out, err := c.api.elb.DescribeTags(ctx, &elb.DescribeTagsInput{ResourceArns: chunk})
		if err != nil {
			if strings.HasSuffix(APICode(err), "NotFound") {
				continue // one went meanwhile: the next pass sees the rest
			}
			return nil, classify(err, "", "read the tags of the load balancers of cluster %s", c.Name)
		}
		for _, d := range out.TagDescriptions {
			t := map[string]string{}
			for _, tag := range d.Tags {
				t[awssdk.ToString(tag.Key)] = awssdk.ToString(tag.Value)
			}
			tags[awssdk.ToString(d.ResourceArn)] = t
		}
	}
	return tags, nil
}

// serviceTags are the tags of a Service load balancer's part.
func (c *cluster) serviceTags(part string, s provider.ServiceLoadBalancer) []elbtypes.Tag {
	var tags []elbtypes.Tag
	for k, v := range c.tags(part, TagServiceName, s.Service, TagServiceLB, s.Name) {
		tags = append(tags, elbtypes.Tag{Key: awssdk.String(k), Value: awssdk.String(v)})
	}
	slices.SortFunc(tags, func(a, b elbtypes.Tag) int { return strings.Compare(*a.Key, *b.Key) })
	return tags
}

// publicSubnets are the subnets of the cluster's internet-facing load
// balancers: the public subnet of each of its zones.
func (n *vpcNet) publicSubnets() []string {
	var subnets []string
	for _, z := range n.zones {
		if n.public[z] != "" {
			subnets = append(subnets, n.public[z])
		}
	}
	if len(subnets) == 0 { // an existing VPC whose public subnets are in other zones
		s, _ := n.firstPublic()
		subnets = append(subnets, s)
	}
	return subnets
}

// quotaMessage names the quota a TooManyLoadBalancers answer is about.
func quotaMessage(code string) string {
	if code == "TooManyLoadBalancers" {
		return "; the region's quota of network load balancers (Elastic Load Balancing's \"Network Load Balancers per Region\", Service Quotas code " +
			QuotaLoadBalancers + ") is reached: delete a Service of type LoadBalancer or ask AWS for a higher quota"
	}
	return ""
}
