package aws

import (
	"slices"
	"strings"
	"testing"

	awssdk "github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
	"github.com/aws/aws-sdk-go-v2/service/ec2/types"
)

// A route to an instance: made in a subnet's table (an instance of
// another VPC or a terminated one refused), described with the instance,
// blackhole once it terminates; ModifyInstanceAttribute turns the
// source/destination check off. What the VPC's network lets through
// follows: the sender's subnet's routes, the checked senders.
func TestInstanceRoutesAndTraffic(t *testing.T) {
	a := newTestAWS(t, Options{})
	c := ec2.NewFromConfig(a.config(testKey))
	ctx := t.Context()
	vpc, err := c.CreateVpc(ctx, &ec2.CreateVpcInput{CidrBlock: awssdk.String("10.0.0.0/16")})
	if err != nil {
		t.Fatal(err)
	}
	vpcID := vpc.Vpc.VpcId
	subnet := func(cidr, zone string) (string, string) {
		sn, err := c.CreateSubnet(ctx, &ec2.CreateSubnetInput{VpcId: vpcID, CidrBlock: &cidr, AvailabilityZone: &zone})
		if err != nil {
			t.Fatal(err)
		}
		rt, err := c.CreateRouteTable(ctx, &ec2.CreateRouteTableInput{VpcId: vpcID})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := c.AssociateRouteTable(ctx, &ec2.AssociateRouteTableInput{RouteTableId: rt.RouteTable.RouteTableId, SubnetId: sn.Subnet.SubnetId}); err != nil {
			t.Fatal(err)
		}
		return *sn.Subnet.SubnetId, *rt.RouteTable.RouteTableId
	}
	snA, rtA := subnet("10.0.16.0/20", "us-east-1a")
	snB, rtB := subnet("10.0.48.0/20", "us-east-1b")
	a.addInstance("i-0000000000000000a", *vpcID, snA, "10.0.16.4", "running")
	a.addInstance("i-0000000000000000b", *vpcID, snB, "10.0.48.4", "running")
	a.addInstance("i-0000000000000000c", "vpc-other", snB, "10.9.0.4", "running")

	route := func(table, dest, instance string) error {
		_, err := c.CreateRoute(ctx, &ec2.CreateRouteInput{RouteTableId: &table, DestinationCidrBlock: &dest, InstanceId: &instance})
		return err
	}
	if err := route(rtA, "10.244.1.0/24", "i-0000000000000000c"); apiCode(err) != "InvalidParameterValue" {
		t.Errorf("a route to an instance of another VPC: %v; want InvalidParameterValue", err)
	}
	if err := route(rtA, "10.244.1.0/24", "i-0000000000000000b"); err != nil {
		t.Fatal(err)
	}
	if err := route(rtB, "10.244.0.0/24", "i-0000000000000000a"); err != nil {
		t.Fatal(err)
	}
	out, err := c.DescribeRouteTables(ctx, &ec2.DescribeRouteTablesInput{Filters: []types.Filter{
		{Name: awssdk.String("route.instance-id"), Values: []string{"i-0000000000000000b"}}}})
	if err != nil || len(out.RouteTables) != 1 || *out.RouteTables[0].RouteTableId != rtA {
		t.Fatalf("route tables routing to instance b: %+v, %v; want %s", out, err, rtA)
	}
	var r types.Route
	for _, x := range out.RouteTables[0].Routes {
		if awssdk.ToString(x.InstanceId) != "" {
			r = x
		}
	}
	if r.State != types.RouteStateActive || !strings.HasPrefix(awssdk.ToString(r.NetworkInterfaceId), "eni-") {
		t.Errorf("the route to instance b: %+v; want active, with its network interface", r)
	}
	for _, id := range []string{"i-0000000000000000a", "i-0000000000000000b"} {
		if _, err := c.ModifyInstanceAttribute(ctx, &ec2.ModifyInstanceAttributeInput{InstanceId: awssdk.String(id),
			SourceDestCheck: &types.AttributeBooleanValue{Value: awssdk.Bool(false)}}); err != nil {
			t.Fatal(err)
		}
	}
	if i := describe(t, c, "i-0000000000000000a"); awssdk.ToBool(i.SourceDestCheck) {
		t.Errorf("instance a's source/destination check is on after turning it off")
	}
	a.mu.Lock()
	got := a.traffic()
	a.mu.Unlock()
	var mine *vpcTraffic
	for i := range got {
		if got[i].VPCID == *vpcID {
			mine = &got[i]
		}
	}
	if mine == nil {
		t.Fatalf("no traffic rules for %s: %+v", *vpcID, got)
	}
	want := []allowed{{Instance: "i-0000000000000000a", Dest: "10.244.1.0/24"}, {Instance: "i-0000000000000000b", Dest: "10.244.0.0/24"}}
	if !slices.Equal(mine.Allowed, want) || len(mine.Checked) != 0 {
		t.Errorf("traffic %+v; want allowed %+v and no checked sender", *mine, want)
	}
	rules := trafficRules(*mine, map[string]string{"i-0000000000000000a": "02:00:00:00:00:0a", "i-0000000000000000b": "02:00:00:00:00:0b"})
	wantRules := []string{"-d 10.0.0.0/16 -j RETURN",
		"-m mac --mac-source 02:00:00:00:00:0a -d 10.244.1.0/24 -j RETURN",
		"-m mac --mac-source 02:00:00:00:00:0b -d 10.244.0.0/24 -j RETURN", "-j DROP"}
	if !slices.Equal(rules, wantRules) {
		t.Errorf("rules:\n%s\nwant:\n%s", strings.Join(rules, "\n"), strings.Join(wantRules, "\n"))
	}

	// Instance b terminates: its route is a blackhole and carries nothing.
	a.setInstanceState("i-0000000000000000b", "terminated")
	a.mu.Lock()
	got = a.traffic()
	a.mu.Unlock()
	for _, v := range got {
		if v.VPCID == *vpcID && slices.ContainsFunc(v.Allowed, func(x allowed) bool { return x.Dest == "10.244.1.0/24" }) {
			t.Errorf("a route to a terminated instance still carries traffic: %+v", v)
		}
	}
	if err := route(rtB, "10.244.9.0/24", "i-0000000000000000b"); apiCode(err) != "IncorrectInstanceState" {
		t.Errorf("a route to a terminated instance: %v; want IncorrectInstanceState", err)
	}
}
