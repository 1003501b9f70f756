package aws_test

import (
	"slices"
	"strconv"
	"strings"
	"testing"

	awssdk "github.com/aws/aws-sdk-go-v2/aws"
	elb "github.com/aws/aws-sdk-go-v2/service/elasticloadbalancingv2"
	elbtypes "github.com/aws/aws-sdk-go-v2/service/elasticloadbalancingv2/types"

	v1 "kiln.dev/kiln/api/v1"
	"kiln.dev/kiln/internal/failure"
	"kiln.dev/kiln/internal/provider"
	"kiln.dev/kiln/internal/provider/aws"
	awslocal "kiln.dev/kiln/test/cloud/aws"
)

// A Service's load balancer is a network load balancer of its own in the
// public subnets, tagged with the cluster and the Service; a target group
// (ip targets: the nodes on the NodePort) and a TCP listener per port. A
// port added gets its listener and group, one removed or moved to another
// NodePort loses them; a node gone is deregistered. Deleting it leaves
// none of its groups; deleting the cluster deletes every one; beyond the
// region's quota the error is QuotaExceeded naming it.
func TestServiceLoadBalancers(t *testing.T) {
	l := newLocal(t)
	p := newProvider(t)
	ctx := t.Context()
	c := cluster(l, "svc")
	if _, err := p.EnsureNetwork(ctx, c); err != nil {
		t.Fatal(err)
	}
	api := elb.NewFromConfig(l.cfg)
	s := provider.ServiceLoadBalancer{Name: "a3f9e0c1d2b34c5d6e7f8091a2b3c4d5", Service: "shop/web", Nodes: []string{"10.0.16.10", "10.0.48.10"},
		Ports: []provider.ServicePort{{Name: "http", Protocol: "TCP", Port: 80, NodePort: 30080}}}
	addrs, err := p.EnsureServiceLoadBalancer(ctx, c, s)
	if err != nil || len(addrs) != 1 {
		t.Fatalf("EnsureServiceLoadBalancer = %v, %v", addrs, err)
	}
	lbs, err := api.DescribeLoadBalancers(ctx, &elb.DescribeLoadBalancersInput{Names: []string{s.Name}})
	if err != nil {
		t.Fatal(err)
	}
	lb := lbs.LoadBalancers[0]
	if lb.Type != elbtypes.LoadBalancerTypeEnumNetwork || lb.Scheme != elbtypes.LoadBalancerSchemeEnumInternetFacing || len(lb.AvailabilityZones) != 2 ||
		awssdk.ToString(lb.DNSName) != addrs[0] {
		t.Errorf("load balancer %+v; want an internet-facing NLB in both zones answering on %s", lb, addrs[0])
	}
	tags := tagsOf(t, api, awssdk.ToString(lb.LoadBalancerArn))
	if tags["kubernetes.io/service-name"] != "shop/web" || tags["kubernetes.io/cluster/svc"] != "owned" || tags[aws.TagCluster] != "uid-svc" {
		t.Errorf("load balancer tags %v; want the Service and the cluster", tags)
	}
	listeners := func() map[int32]elbtypes.TargetGroup {
		t.Helper()
		ls, err := api.DescribeListeners(ctx, &elb.DescribeListenersInput{LoadBalancerArn: lb.LoadBalancerArn})
		if err != nil {
			t.Fatal(err)
		}
		out := map[int32]elbtypes.TargetGroup{}
		for _, li := range ls.Listeners {
			tg, err := api.DescribeTargetGroups(ctx, &elb.DescribeTargetGroupsInput{TargetGroupArns: []string{awssdk.ToString(li.DefaultActions[0].TargetGroupArn)}})
			if err != nil {
				t.Fatal(err)
			}
			out[awssdk.ToInt32(li.Port)] = tg.TargetGroups[0]
		}
		return out
	}
	targets := func(tg elbtypes.TargetGroup) []string {
		t.Helper()
		h, err := api.DescribeTargetHealth(ctx, &elb.DescribeTargetHealthInput{TargetGroupArn: tg.TargetGroupArn})
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, d := range h.TargetHealthDescriptions {
			if d.TargetHealth.State != elbtypes.TargetHealthStateEnumDraining {
				out = append(out, awssdk.ToString(d.Target.Id)+":"+strconv.Itoa(int(awssdk.ToInt32(d.Target.Port))))
			}
		}
		slices.Sort(out)
		return out
	}
	ls := listeners()
	if tg, ok := ls[80]; !ok || len(ls) != 1 || tg.TargetType != elbtypes.TargetTypeEnumIp || awssdk.ToInt32(tg.Port) != 30080 ||
		!slices.Equal(targets(tg), []string{"10.0.16.10:30080", "10.0.48.10:30080"}) {
		t.Fatalf("listeners %v; want port 80 to an ip target group of both nodes on 30080", ls)
	}
	first := ls[80]

	// Ports change: 80 moves to NodePort 30081, 443 is added; one node goes.
	s.Ports = []provider.ServicePort{{Name: "http", Port: 80, NodePort: 30081}, {Name: "https", Protocol: "TCP", Port: 443, NodePort: 30443}}
	s.Nodes = []string{"10.0.48.10"}
	again, err := p.EnsureServiceLoadBalancer(ctx, c, s)
	if err != nil || !slices.Equal(again, addrs) {
		t.Fatalf("EnsureServiceLoadBalancer with other ports = %v, %v; want the same address %v", again, err, addrs)
	}
	ls = listeners()
	if len(ls) != 2 || awssdk.ToInt32(ls[80].Port) != 30081 || awssdk.ToInt32(ls[443].Port) != 30443 ||
		!slices.Equal(targets(ls[443]), []string{"10.0.48.10:30443"}) {
		t.Errorf("listeners after the change %v; want 80 to 30081 and 443 to 30443, one node", ls)
	}
	if _, err := api.DescribeTargetGroups(ctx, &elb.DescribeTargetGroupsInput{TargetGroupArns: []string{awssdk.ToString(first.TargetGroupArn)}}); aws.APICode(err) != "TargetGroupNotFound" {
		t.Errorf("the target group of the old NodePort: %v; want it deleted", err)
	}
	// Idempotent: the same again changes nothing.
	before := listeners()
	if _, err := p.EnsureServiceLoadBalancer(ctx, c, s); err != nil {
		t.Fatal(err)
	}
	if after := listeners(); len(after) != 2 || awssdk.ToString(after[443].TargetGroupArn) != awssdk.ToString(before[443].TargetGroupArn) {
		t.Errorf("EnsureServiceLoadBalancer again changed the listeners: %v, then %v", before, after)
	}

	// Delete: the load balancer and its groups go.
	if err := p.DeleteServiceLoadBalancer(ctx, c, s.Name); err != nil {
		t.Fatal(err)
	}
	if _, ok, err := p.ServiceLoadBalancer(ctx, c, s.Name); ok || err != nil {
		t.Errorf("ServiceLoadBalancer after its delete = %v, %v", ok, err)
	}
	if tgs, _ := api.DescribeTargetGroups(ctx, &elb.DescribeTargetGroupsInput{}); len(tgs.TargetGroups) != 0 {
		t.Errorf("target groups left after the Service's delete: %d", len(tgs.TargetGroups))
	}

	// The quota: with room for one more load balancer, the second Service
	// is refused naming it.
	if _, err := p.EnsureServiceLoadBalancer(ctx, c, s); err != nil {
		t.Fatal(err)
	}
	l.SetFaults(awslocal.Faults{LoadBalancerQuota: 1})
	other := provider.ServiceLoadBalancer{Name: "a0000000000000000000000000000002", Service: "shop/api", Nodes: s.Nodes, Ports: s.Ports}
	_, err = p.EnsureServiceLoadBalancer(ctx, c, other)
	fe := failure.From(err)
	if err == nil || fe.Retryable || fe.Code != v1.CodeQuotaExceeded || !strings.Contains(fe.Message, aws.QuotaLoadBalancers) || !strings.Contains(fe.Message, "shop/api") {
		t.Errorf("a load balancer beyond the quota: %v; want a terminal QuotaExceeded naming the Service and quota %s", err, aws.QuotaLoadBalancers)
	}
	l.SetFaults(awslocal.Faults{})

	// The cluster's delete deletes its Service load balancers and groups.
	if err := p.DeleteNetwork(ctx, c); err != nil {
		t.Fatalf("DeleteNetwork: %v", err)
	}
	all, err := api.DescribeLoadBalancers(ctx, &elb.DescribeLoadBalancersInput{})
	if err != nil {
		t.Fatal(err)
	}
	tgs, err := api.DescribeTargetGroups(ctx, &elb.DescribeTargetGroupsInput{})
	if err != nil {
		t.Fatal(err)
	}
	if len(all.LoadBalancers) != 0 || len(tgs.TargetGroups) != 0 {
		t.Errorf("after the cluster's delete: %d load balancers, %d target groups; want none", len(all.LoadBalancers), len(tgs.TargetGroups))
	}
}

func tagsOf(t *testing.T, api *elb.Client, arn string) map[string]string {
	t.Helper()
	out, err := api.DescribeTags(t.Context(), &elb.DescribeTagsInput{ResourceArns: []string{arn}})
	if err != nil {
		t.Fatal(err)
	}
	tags := map[string]string{}
	for _, d := range out.TagDescriptions {
		for _, tag := range d.Tags {
			tags[awssdk.ToString(tag.Key)] = awssdk.ToString(tag.Value)
		}
	}
	return tags
}
