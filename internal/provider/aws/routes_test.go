package aws_test

import (
	"testing"

	awssdk "github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
	ec2types "github.com/aws/aws-sdk-go-v2/service/ec2/types"

	v1 "kiln.dev/kiln/api/v1"
	"kiln.dev/kiln/internal/provider"
)

// Each node's pod range is routed to its instance in the route table of
// every subnet of the cluster, with the instance's source/destination
// check off; a node gone loses its routes, a range moved is routed anew;
// a node that is no instance gets none; the same call again changes
// nothing.
func TestPodRoutes(t *testing.T) {
	l := newLocal(t)
	p := newProvider(t)
	ctx := t.Context()
	c := cluster(l, "routes")
	c.Spec.Network.PodCIDR = "10.244.0.0/16"
	if _, err := p.EnsureNetwork(ctx, c); err != nil {
		t.Fatal(err)
	}
	a, err := p.EnsureMachine(ctx, c, provider.MachineSpec{Name: "routes-cp-0", Role: v1.RoleControlPlane})
	if err != nil {
		t.Fatal(err)
	}
	b, err := p.EnsureMachine(ctx, c, provider.MachineSpec{Name: "routes-cp-1", Role: v1.RoleControlPlane})
	if err != nil {
		t.Fatal(err)
	}
	routes := []provider.PodRoute{{Node: "routes-cp-0", Address: a.Address, CIDR: "10.244.0.0/24"},
		{Node: "routes-cp-1", Address: b.Address, CIDR: "10.244.1.0/24"},
		{Node: "elsewhere", Address: "10.99.0.1", CIDR: "10.244.2.0/24"}}
	ec := ec2.NewFromConfig(l.cfg)
	tables := func() map[string]map[string]string { // table -> range -> instance
		t.Helper()
		out, err := ec.DescribeRouteTables(ctx, &ec2.DescribeRouteTablesInput{Filters: []ec2types.Filter{
			{Name: awssdk.String("tag:kubernetes.io/cluster/routes"), Values: []string{"owned"}}}})
		if err != nil {
			t.Fatal(err)
		}
		got := map[string]map[string]string{}
		for _, rt := range out.RouteTables {
			m := map[string]string{}
			for _, r := range rt.Routes {
				if r.InstanceId != nil {
					m[*r.DestinationCidrBlock] = *r.InstanceId + "/" + string(r.State)
				}
			}
			got[*rt.RouteTableId] = m
		}
		return got
	}
	check := func(want map[string]string) {
		t.Helper()
		got := tables()
		if len(got) < 2 {
			t.Fatalf("%d route tables of the cluster; want its public and private ones", len(got))
		}
		for id, m := range got {
			if len(m) != len(want) {
				t.Errorf("route table %s routes %v; want %v", id, m, want)
				continue
			}
			for k, v := range want {
				if m[k] != v+"/active" {
					t.Errorf("route table %s routes %s to %q; want %s, active", id, k, m[k], v)
				}
			}
		}
	}
	for range 2 {
		if err := p.EnsurePodRoutes(ctx, c, routes); err != nil {
			t.Fatal(err)
		}
		check(map[string]string{"10.244.0.0/24": a.ID, "10.244.1.0/24": b.ID})
	}
	for _, m := range []provider.Machine{a, b} {
		attr, err := ec.DescribeInstanceAttribute(ctx, &ec2.DescribeInstanceAttributeInput{InstanceId: &m.ID, Attribute: ec2types.InstanceAttributeNameSourceDestCheck})
		if err != nil || attr.SourceDestCheck == nil || awssdk.ToBool(attr.SourceDestCheck.Value) {
			t.Errorf("instance %s's source/destination check: %+v, %v; want off", m.ID, attr, err)
		}
	}
	// routes-cp-1 is gone; routes-cp-0's range moved.
	if err := p.EnsurePodRoutes(ctx, c, []provider.PodRoute{{Node: "routes-cp-0", Address: a.Address, CIDR: "10.244.5.0/24"}}); err != nil {
		t.Fatal(err)
	}
	check(map[string]string{"10.244.5.0/24": a.ID})
	if err := p.DeleteNetwork(ctx, c); err != nil {
		t.Fatalf("DeleteNetwork with pod routes: %v", err)
	}
}
