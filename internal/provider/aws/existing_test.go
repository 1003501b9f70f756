package aws_test

import (
	"strings"
	"testing"

	awssdk "github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
	ec2types "github.com/aws/aws-sdk-go-v2/service/ec2/types"

	v1 "kiln.dev/kiln/api/v1"
	"kiln.dev/kiln/internal/provider"
	"kiln.dev/kiln/internal/provider/aws"
)

// A cluster placed in a VPC the account has: its nodes in the private
// subnets named, its load balancer and bastion in the public one, nothing
// of the network made; the dry run names what does not fit; the delete
// leaves the VPC and its subnets as they were.
func TestExistingVPC(t *testing.T) {
	l := newLocal(t)
	p := newProvider(t)
	ctx := t.Context()
	e := ec2.NewFromConfig(l.cfg)
	vpc, err := e.CreateVpc(ctx, &ec2.CreateVpcInput{CidrBlock: awssdk.String("10.50.0.0/16")})
	if err != nil {
		t.Fatal(err)
	}
	vpcID := *vpc.Vpc.VpcId
	subnet := func(cidr, zone string) string {
		out, err := e.CreateSubnet(ctx, &ec2.CreateSubnetInput{VpcId: &vpcID, CidrBlock: awssdk.String(cidr), AvailabilityZone: awssdk.String(zone)})
		if err != nil {
			t.Fatal(err)
		}
		return *out.Subnet.SubnetId
	}
	publicA, privateA, privateB := subnet("10.50.0.0/24", "us-east-1a"), subnet("10.50.1.0/24", "us-east-1a"), subnet("10.50.2.0/24", "us-east-1b")
	igw, err := e.CreateInternetGateway(ctx, &ec2.CreateInternetGatewayInput{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.AttachInternetGateway(ctx, &ec2.AttachInternetGatewayInput{InternetGatewayId: igw.InternetGateway.InternetGatewayId, VpcId: &vpcID}); err != nil {
		t.Fatal(err)
	}
	rt, err := e.CreateRouteTable(ctx, &ec2.CreateRouteTableInput{VpcId: &vpcID})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.CreateRoute(ctx, &ec2.CreateRouteInput{RouteTableId: rt.RouteTable.RouteTableId, DestinationCidrBlock: awssdk.String("0.0.0.0/0"), GatewayId: igw.InternetGateway.InternetGatewayId}); err != nil {
		t.Fatal(err)
	}
	if _, err := e.AssociateRouteTable(ctx, &ec2.AssociateRouteTableInput{RouteTableId: rt.RouteTable.RouteTableId, SubnetId: &publicA}); err != nil {
		t.Fatal(err)
	}

	c := cluster(l, "shared")
	c.Spec.ControlPlane.Zones = nil
	c.Spec.Network = v1.Network{PodCIDR: "10.244.0.0/16", ServiceCIDR: "10.96.0.0/12", VPCID: vpcID, SubnetIDs: []string{publicA, privateA, privateB}}
	findings, err := p.Preflight(ctx, c)
	if err != nil || len(findings) != 0 {
		t.Fatalf("dry run in the VPC: %+v, %v; want no finding", findings, err)
	}
	for _, tc := range []struct {
		name   string
		change func(*v1.Network)
		target string
	}{
		{"no such subnet", func(n *v1.Network) { n.SubnetIDs = []string{publicA, "subnet-0000000000000000f"} }, "spec.network.subnetIDs"},
		{"no public subnet", func(n *v1.Network) { n.SubnetIDs = []string{privateA, privateB} }, "spec.network.subnetIDs"},
		{"no such VPC", func(n *v1.Network) { n.VPCID = "vpc-0000000000000000f" }, "spec.network.vpcID"},
		{"pods in the VPC's range", func(n *v1.Network) { n.PodCIDR = "10.50.128.0/17" }, "spec.network.podCIDR"},
	} {
		bad := c
		bad.Spec.Network.SubnetIDs = append([]string(nil), c.Spec.Network.SubnetIDs...)
		tc.change(&bad.Spec.Network)
		f, err := p.Preflight(ctx, bad)
		if err != nil || len(f) != 1 || f[0].Target != tc.target {
			t.Errorf("dry run, %s: %+v, %v; want one finding on %s", tc.name, f, err, tc.target)
		}
	}

	before := l.Calls() // the dry runs' DryRun calls
	nw, err := p.EnsureNetwork(ctx, c)
	if err != nil {
		t.Fatal(err)
	}
	if nw.ID != vpcID || nw.CIDR != "10.50.0.0/16" {
		t.Errorf("network %+v; want VPC %s", nw, vpcID)
	}
	if _, err := p.EnsureLoadBalancer(ctx, c); err != nil {
		t.Fatal(err)
	}
	cp, err := p.EnsureMachine(ctx, c, provider.MachineSpec{Name: "shared-cp-0", Role: v1.RoleControlPlane})
	if err != nil {
		t.Fatal(err)
	}
	workers, err := p.GrowPool(ctx, c, provider.MachineSpec{Name: "shared-default-0", Role: v1.RoleWorker, Pool: "default"}, nil, 2)
	if err != nil {
		t.Fatal(err)
	}
	calls := l.Calls()
	for _, made := range []string{"ec2:CreateVpc", "ec2:CreateSubnet", "ec2:CreateNatGateway", "ec2:CreateInternetGateway", "ec2:AllocateAddress"} {
		if n := calls[made] - before[made]; n != 0 {
			t.Errorf("%s called %d times; the cluster makes no network of its own", made, n)
		}
	}
	out, err := e.DescribeInstances(ctx, &ec2.DescribeInstancesInput{Filters: []ec2types.Filter{{Name: awssdk.String("tag:" + aws.TagCluster), Values: []string{"uid-shared"}}}})
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range out.Reservations {
		for _, i := range r.Instances {
			want := []string{privateA, privateB}
			if tag(i.Tags, aws.TagPart) == "bastion" {
				want = []string{publicA}
			}
			if !strings.Contains(strings.Join(want, " "), *i.SubnetId) {
				t.Errorf("instance %s (%s) in subnet %s; want one of %v", *i.InstanceId, tag(i.Tags, aws.TagPart), *i.SubnetId, want)
			}
		}
	}
	subs, err := e.DescribeSubnets(ctx, &ec2.DescribeSubnetsInput{SubnetIds: []string{publicA, privateA, privateB}})
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range subs.Subnets {
		if tag(s.Tags, "kubernetes.io/cluster/shared") != "shared" {
			t.Errorf("subnet %s tags %v; want it shared with the cluster", *s.SubnetId, s.Tags)
		}
	}

	deleteCluster(t, p, c, append([]provider.Machine{cp}, workers...)...)
	if subs, err = e.DescribeSubnets(ctx, &ec2.DescribeSubnetsInput{SubnetIds: []string{publicA, privateA, privateB}}); err != nil || len(subs.Subnets) != 3 {
		t.Fatalf("the VPC's subnets after the delete: %+v, %v; want all three", subs, err)
	}
	for _, s := range subs.Subnets {
		if tag(s.Tags, "kubernetes.io/cluster/shared") != "" {
			t.Errorf("subnet %s still tagged with the cluster after the delete: %v", *s.SubnetId, s.Tags)
		}
	}
	if vpcs, err := e.DescribeVpcs(ctx, &ec2.DescribeVpcsInput{VpcIds: []string{vpcID}}); err != nil || len(vpcs.Vpcs) != 1 {
		t.Errorf("the VPC after the delete: %+v, %v; want it kept", vpcs, err)
	}
}
