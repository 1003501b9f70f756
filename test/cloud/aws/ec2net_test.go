package aws

import (
	"context"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	awssdk "github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
	"github.com/aws/aws-sdk-go-v2/service/ec2/types"
)

// testClock is a clock tests move on (NAT gateways settle, describe
// delays pass) without sleeping.
type testClock struct{ offset atomic.Int64 }

func (c *testClock) now() time.Time          { return time.Now().Add(time.Duration(c.offset.Load())) }
func (c *testClock) advance(d time.Duration) { c.offset.Add(int64(d)) }
func newNetAWS(t *testing.T) (*testAWS, *ec2.Client, *testClock) {
	clock := &testClock{}
	a := newTestAWS(t, Options{Now: clock.now})
	return a, ec2.NewFromConfig(a.config(testKey)), clock
}

func clusterTags(kind types.ResourceType, name string) []types.TagSpecification {
	return []types.TagSpecification{{ResourceType: kind, Tags: []types.Tag{
		{Key: awssdk.String("kiln:cluster"), Value: awssdk.String("c1")}, {Key: awssdk.String("Name"), Value: awssdk.String(name)}}}}
}

func byTag() []types.Filter {
	return []types.Filter{{Name: awssdk.String("tag:kiln:cluster"), Values: []string{"c1"}}}
}

// must fails the test on err, naming what was being done.
func must[T any](t *testing.T, what string) func(T, error) T {
	return func(v T, err error) T {
		t.Helper()
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		return v
	}
}

// wantCode checks that err is the AWS error code.
func wantCode(t *testing.T, what string, err error, code string) {
	t.Helper()
	if apiCode(err) != code {
		t.Errorf("%s: %v; want %s", what, err, code)
	}
}

// layout is what Kiln makes for a cluster's network.
type layout struct {
	vpc, igw, key   string
	public, private []string // subnets by zone
	eips, nats      []string
	publicRT        string
	privateRT       []string
	cp, nodes       string
}

// TestKilnNetworkLayout makes the network Kiln makes for a cluster, finds
// it again by its tags, checks the dependency rules, then deletes it in
// order.
func TestKilnNetworkLayout(t *testing.T) {
	ctx := context.Background()
	_, c, clock := newNetAWS(t)
	l := makeLayout(t, c, clock)
	checkFound(t, c, l)
	checkDependencies(t, c, l)
	teardown(t, c, clock, l)
	_, err := c.DescribeVpcs(ctx, &ec2.DescribeVpcsInput{VpcIds: []string{l.vpc}})
	wantCode(t, "DescribeVpcs of the deleted VPC", err, "InvalidVpcID.NotFound")
}

func makeLayout(t *testing.T, c *ec2.Client, clock *testClock) layout {
	ctx := context.Background()
	var l layout
	vpc := must[*ec2.CreateVpcOutput](t, "CreateVpc")(c.CreateVpc(ctx, &ec2.CreateVpcInput{CidrBlock: awssdk.String("10.0.0.0/16"), TagSpecifications: clusterTags(types.ResourceTypeVpc, "c1")}))
	l.vpc = *vpc.Vpc.VpcId
	if !strings.HasPrefix(l.vpc, "vpc-") || len(l.vpc) != 21 || *vpc.Vpc.CidrBlock != "10.0.0.0/16" {
		t.Fatalf("CreateVpc = %s %s", l.vpc, *vpc.Vpc.CidrBlock)
	}
	must[*ec2.ModifyVpcAttributeOutput](t, "ModifyVpcAttribute")(c.ModifyVpcAttribute(ctx, &ec2.ModifyVpcAttributeInput{VpcId: &l.vpc, EnableDnsHostnames: &types.AttributeBooleanValue{Value: awssdk.Bool(true)}}))
	attr := must[*ec2.DescribeVpcAttributeOutput](t, "DescribeVpcAttribute")(c.DescribeVpcAttribute(ctx, &ec2.DescribeVpcAttributeInput{VpcId: &l.vpc, Attribute: types.VpcAttributeNameEnableDnsHostnames}))
	if attr.EnableDnsHostnames == nil || !*attr.EnableDnsHostnames.Value {
		t.Errorf("DescribeVpcAttribute enableDnsHostnames = %+v; want true", attr.EnableDnsHostnames)
	}
	azs := must[*ec2.DescribeAvailabilityZonesOutput](t, "DescribeAvailabilityZones")(c.DescribeAvailabilityZones(ctx, &ec2.DescribeAvailabilityZonesInput{}))
	igw := must[*ec2.CreateInternetGatewayOutput](t, "CreateInternetGateway")(c.CreateInternetGateway(ctx, &ec2.CreateInternetGatewayInput{TagSpecifications: clusterTags(types.ResourceTypeInternetGateway, "c1")}))
	l.igw = *igw.InternetGateway.InternetGatewayId
	must[*ec2.AttachInternetGatewayOutput](t, "AttachInternetGateway")(c.AttachInternetGateway(ctx, &ec2.AttachInternetGatewayInput{InternetGatewayId: &l.igw, VpcId: &l.vpc}))
	pub := must[*ec2.CreateRouteTableOutput](t, "CreateRouteTable")(c.CreateRouteTable(ctx, &ec2.CreateRouteTableInput{VpcId: &l.vpc, TagSpecifications: clusterTags(types.ResourceTypeRouteTable, "public")}))
	l.publicRT = *pub.RouteTable.RouteTableId
	must[*ec2.CreateRouteOutput](t, "CreateRoute to the IGW")(c.CreateRoute(ctx, &ec2.CreateRouteInput{RouteTableId: &l.publicRT, DestinationCidrBlock: awssdk.String("0.0.0.0/0"), GatewayId: &l.igw}))
	_, err := c.CreateRoute(ctx, &ec2.CreateRouteInput{RouteTableId: &l.publicRT, DestinationCidrBlock: awssdk.String("0.0.0.0/0"), GatewayId: &l.igw})
	wantCode(t, "CreateRoute again", err, "RouteAlreadyExists")
	for i, az := range azs.AvailabilityZones[:2] {
		zone := *az.ZoneName
		ps := must[*ec2.CreateSubnetOutput](t, "CreateSubnet public")(c.CreateSubnet(ctx, &ec2.CreateSubnetInput{VpcId: &l.vpc, AvailabilityZone: &zone,
			CidrBlock: awssdk.String(fmt.Sprintf("10.0.%d.0/24", i)), TagSpecifications: clusterTags(types.ResourceTypeSubnet, "public-"+zone)}))
		if *ps.Subnet.AvailableIpAddressCount != 251 || *ps.Subnet.AvailabilityZone != zone {
			t.Errorf("CreateSubnet = %d addresses in %s; want 251 in %s", *ps.Subnet.AvailableIpAddressCount, *ps.Subnet.AvailabilityZone, zone)
		}
		l.public = append(l.public, *ps.Subnet.SubnetId)
		must[*ec2.ModifySubnetAttributeOutput](t, "ModifySubnetAttribute")(c.ModifySubnetAttribute(ctx, &ec2.ModifySubnetAttributeInput{SubnetId: ps.Subnet.SubnetId, MapPublicIpOnLaunch: &types.AttributeBooleanValue{Value: awssdk.Bool(true)}}))
		pr := must[*ec2.CreateSubnetOutput](t, "CreateSubnet private")(c.CreateSubnet(ctx, &ec2.CreateSubnetInput{VpcId: &l.vpc, AvailabilityZone: &zone,
			CidrBlock: awssdk.String(fmt.Sprintf("10.0.%d.0/20", 16*(i+1))), TagSpecifications: clusterTags(types.ResourceTypeSubnet, "private-"+zone)}))
		l.private = append(l.private, *pr.Subnet.SubnetId)
		must[*ec2.AssociateRouteTableOutput](t, "AssociateRouteTable public")(c.AssociateRouteTable(ctx, &ec2.AssociateRouteTableInput{RouteTableId: &l.publicRT, SubnetId: ps.Subnet.SubnetId}))

		eip := must[*ec2.AllocateAddressOutput](t, "AllocateAddress")(c.AllocateAddress(ctx, &ec2.AllocateAddressInput{Domain: types.DomainTypeVpc, TagSpecifications: clusterTags(types.ResourceTypeElasticIp, zone)}))
		l.eips = append(l.eips, *eip.AllocationId)
		in := &ec2.CreateNatGatewayInput{SubnetId: ps.Subnet.SubnetId, AllocationId: eip.AllocationId, ClientToken: awssdk.String("nat-" + zone),
			TagSpecifications: clusterTags(types.ResourceTypeNatgateway, zone)}
		nat := must[*ec2.CreateNatGatewayOutput](t, "CreateNatGateway")(c.CreateNatGateway(ctx, in))
		again := must[*ec2.CreateNatGatewayOutput](t, "CreateNatGateway again")(c.CreateNatGateway(ctx, in))
		if nat.NatGateway.State != types.NatGatewayStatePending || *again.NatGateway.NatGatewayId != *nat.NatGateway.NatGatewayId {
			t.Errorf("CreateNatGateway = %s %s, again %s; want pending, the same gateway", *nat.NatGateway.NatGatewayId, nat.NatGateway.State, *again.NatGateway.NatGatewayId)
		}
		l.nats = append(l.nats, *nat.NatGateway.NatGatewayId)
		rt := must[*ec2.CreateRouteTableOutput](t, "CreateRouteTable private")(c.CreateRouteTable(ctx, &ec2.CreateRouteTableInput{VpcId: &l.vpc, TagSpecifications: clusterTags(types.ResourceTypeRouteTable, "private-"+zone)}))
		l.privateRT = append(l.privateRT, *rt.RouteTable.RouteTableId)
		must[*ec2.CreateRouteOutput](t, "CreateRoute to the NAT")(c.CreateRoute(ctx, &ec2.CreateRouteInput{RouteTableId: rt.RouteTable.RouteTableId, DestinationCidrBlock: awssdk.String("0.0.0.0/0"), NatGatewayId: nat.NatGateway.NatGatewayId}))
		must[*ec2.AssociateRouteTableOutput](t, "AssociateRouteTable private")(c.AssociateRouteTable(ctx, &ec2.AssociateRouteTableInput{RouteTableId: rt.RouteTable.RouteTableId, SubnetId: pr.Subnet.SubnetId}))
	}
	_, err = c.AssociateRouteTable(ctx, &ec2.AssociateRouteTableInput{RouteTableId: &l.publicRT, SubnetId: &l.private[0]})
	wantCode(t, "AssociateRouteTable of an associated subnet", err, "Resource.AlreadyAssociated")
	clock.advance(3 * time.Second)
	l.cp, l.nodes = makeGroups(t, c, l.vpc)
	key := must[*ec2.CreateKeyPairOutput](t, "CreateKeyPair")(c.CreateKeyPair(ctx, &ec2.CreateKeyPairInput{KeyName: awssdk.String("c1"), KeyType: types.KeyTypeEd25519, TagSpecifications: clusterTags(types.ResourceTypeKeyPair, "c1")}))
	if !strings.HasPrefix(*key.KeyMaterial, "-----BEGIN OPENSSH PRIVATE KEY-----") || !strings.HasPrefix(*key.KeyPairId, "key-") {
		t.Errorf("CreateKeyPair ed25519 = %s %.40q", *key.KeyPairId, *key.KeyMaterial)
	}
	l.key = *key.KeyPairId
	return l
}

// makeGroups makes a control plane's and nodes' security groups whose
// rules name each other.
func makeGroups(t *testing.T, c *ec2.Client, vpc string) (cp, nodes string) {
	ctx := context.Background()
	mk := func(name string) string {
		out := must[*ec2.CreateSecurityGroupOutput](t, "CreateSecurityGroup")(c.CreateSecurityGroup(ctx, &ec2.CreateSecurityGroupInput{
			GroupName: awssdk.String(name), Description: awssdk.String("Kiln " + name), VpcId: &vpc, TagSpecifications: clusterTags(types.ResourceTypeSecurityGroup, name)}))
		return *out.GroupId
	}
	cp, nodes = mk("c1-control-plane"), mk("c1-nodes")
	_, err := c.CreateSecurityGroup(ctx, &ec2.CreateSecurityGroupInput{GroupName: awssdk.String("c1-nodes"), Description: awssdk.String("again"), VpcId: &vpc})
	wantCode(t, "CreateSecurityGroup with a taken name", err, "InvalidGroup.Duplicate")
	api := types.IpPermission{IpProtocol: awssdk.String("tcp"), FromPort: awssdk.Int32(6443), ToPort: awssdk.Int32(6443),
		IpRanges: []types.IpRange{{CidrIp: awssdk.String("0.0.0.0/0")}}, UserIdGroupPairs: []types.UserIdGroupPair{{GroupId: &nodes}}}
	must[*ec2.AuthorizeSecurityGroupIngressOutput](t, "Authorize control plane")(c.AuthorizeSecurityGroupIngress(ctx, &ec2.AuthorizeSecurityGroupIngressInput{GroupId: &cp, IpPermissions: []types.IpPermission{api}}))
	_, err = c.AuthorizeSecurityGroupIngress(ctx, &ec2.AuthorizeSecurityGroupIngressInput{GroupId: &cp, IpPermissions: []types.IpPermission{api}})
	wantCode(t, "Authorize the same rule", err, "InvalidPermission.Duplicate")
	all := types.IpPermission{IpProtocol: awssdk.String("-1"), UserIdGroupPairs: []types.UserIdGroupPair{{GroupId: &cp}, {GroupId: &nodes}}}
	must[*ec2.AuthorizeSecurityGroupIngressOutput](t, "Authorize nodes")(c.AuthorizeSecurityGroupIngress(ctx, &ec2.AuthorizeSecurityGroupIngressInput{GroupId: &nodes, IpPermissions: []types.IpPermission{all}}))
	return cp, nodes
}

// checkFound finds the layout again by its tags, as Kiln does after a
// restart.
func checkFound(t *testing.T, c *ec2.Client, l layout) {
	ctx := context.Background()
	vpcs := must[*ec2.DescribeVpcsOutput](t, "DescribeVpcs")(c.DescribeVpcs(ctx, &ec2.DescribeVpcsInput{Filters: byTag()}))
	if len(vpcs.Vpcs) != 1 || *vpcs.Vpcs[0].VpcId != l.vpc || vpcs.Vpcs[0].State != types.VpcStateAvailable {
		t.Errorf("DescribeVpcs by tag = %+v; want %s available", vpcs.Vpcs, l.vpc)
	}
	subnets := must[*ec2.DescribeSubnetsOutput](t, "DescribeSubnets")(c.DescribeSubnets(ctx, &ec2.DescribeSubnetsInput{Filters: append(byTag(),
		types.Filter{Name: awssdk.String("vpc-id"), Values: []string{l.vpc}})}))
	if len(subnets.Subnets) != 4 {
		t.Errorf("DescribeSubnets by tag = %d subnets; want 4", len(subnets.Subnets))
	}
	igws := must[*ec2.DescribeInternetGatewaysOutput](t, "DescribeInternetGateways")(c.DescribeInternetGateways(ctx, &ec2.DescribeInternetGatewaysInput{
		Filters: []types.Filter{{Name: awssdk.String("attachment.vpc-id"), Values: []string{l.vpc}}}}))
	if len(igws.InternetGateways) != 1 || *igws.InternetGateways[0].InternetGatewayId != l.igw {
		t.Errorf("DescribeInternetGateways by attachment = %+v; want %s", igws.InternetGateways, l.igw)
	}
	nats := must[*ec2.DescribeNatGatewaysOutput](t, "DescribeNatGateways")(c.DescribeNatGateways(ctx, &ec2.DescribeNatGatewaysInput{
		Filter: []types.Filter{{Name: awssdk.String("vpc-id"), Values: []string{l.vpc}}, {Name: awssdk.String("state"), Values: []string{"available"}}}}))
	if len(nats.NatGateways) != 2 || !strings.HasPrefix(*nats.NatGateways[0].NatGatewayAddresses[0].PublicIp, "198.51.100.") {
		t.Errorf("DescribeNatGateways available = %d; want 2 with public IPs", len(nats.NatGateways))
	}
	rts := must[*ec2.DescribeRouteTablesOutput](t, "DescribeRouteTables")(c.DescribeRouteTables(ctx, &ec2.DescribeRouteTablesInput{
		Filters: []types.Filter{{Name: awssdk.String("association.subnet-id"), Values: []string{l.private[1]}}}}))
	if len(rts.RouteTables) != 1 || *rts.RouteTables[0].RouteTableId != l.privateRT[1] {
		t.Fatalf("DescribeRouteTables of %s = %+v; want %s", l.private[1], rts.RouteTables, l.privateRT[1])
	}
	routes := map[string]string{}
	for _, r := range rts.RouteTables[0].Routes {
		routes[*r.DestinationCidrBlock] = awssdk.ToString(r.GatewayId) + awssdk.ToString(r.NatGatewayId) + "/" + string(r.State)
	}
	if routes["10.0.0.0/16"] != "local/active" || routes["0.0.0.0/0"] != l.nats[1]+"/active" {
		t.Errorf("routes of the private table = %v; want local and 0.0.0.0/0 to %s", routes, l.nats[1])
	}
	main := must[*ec2.DescribeRouteTablesOutput](t, "DescribeRouteTables main")(c.DescribeRouteTables(ctx, &ec2.DescribeRouteTablesInput{
		Filters: []types.Filter{{Name: awssdk.String("vpc-id"), Values: []string{l.vpc}}, {Name: awssdk.String("association.main"), Values: []string{"true"}}}}))
	if len(main.RouteTables) != 1 || !*main.RouteTables[0].Associations[0].Main {
		t.Errorf("the VPC's main route table = %+v; want one", main.RouteTables)
	}
	sgs := must[*ec2.DescribeSecurityGroupsOutput](t, "DescribeSecurityGroups")(c.DescribeSecurityGroups(ctx, &ec2.DescribeSecurityGroupsInput{GroupIds: []string{l.cp}}))
	g := sgs.SecurityGroups[0]
	if len(g.IpPermissions) != 1 || *g.IpPermissions[0].FromPort != 6443 || *g.IpPermissions[0].IpRanges[0].CidrIp != "0.0.0.0/0" ||
		*g.IpPermissions[0].UserIdGroupPairs[0].GroupId != l.nodes || *g.IpPermissionsEgress[0].IpProtocol != "-1" {
		t.Errorf("the control plane's group = %+v %+v", g.IpPermissions, g.IpPermissionsEgress)
	}
	byName := must[*ec2.DescribeSecurityGroupsOutput](t, "DescribeSecurityGroups by name")(c.DescribeSecurityGroups(ctx, &ec2.DescribeSecurityGroupsInput{
		Filters: []types.Filter{{Name: awssdk.String("vpc-id"), Values: []string{l.vpc}}, {Name: awssdk.String("group-name"), Values: []string{"default", "c1-*"}}}}))
	if len(byName.SecurityGroups) != 3 {
		t.Errorf("DescribeSecurityGroups default and c1-* = %d groups; want 3", len(byName.SecurityGroups))
	}
	keys := must[*ec2.DescribeKeyPairsOutput](t, "DescribeKeyPairs")(c.DescribeKeyPairs(ctx, &ec2.DescribeKeyPairsInput{Filters: byTag(), IncludePublicKey: awssdk.Bool(true)}))
	if len(keys.KeyPairs) != 1 || !strings.HasPrefix(*keys.KeyPairs[0].PublicKey, "ssh-ed25519 ") || keys.KeyPairs[0].KeyType != types.KeyTypeEd25519 {
		t.Errorf("DescribeKeyPairs by tag = %+v", keys.KeyPairs)
	}
}

// checkDependencies checks that what something depends on is not deleted.
func checkDependencies(t *testing.T, c *ec2.Client, l layout) {
	ctx := context.Background()
	_, err := c.DeleteVpc(ctx, &ec2.DeleteVpcInput{VpcId: &l.vpc})
	wantCode(t, "DeleteVpc", err, "DependencyViolation")
	_, err = c.DeleteSubnet(ctx, &ec2.DeleteSubnetInput{SubnetId: &l.public[0]})
	wantCode(t, "DeleteSubnet with a NAT gateway", err, "DependencyViolation")
	_, err = c.ReleaseAddress(ctx, &ec2.ReleaseAddressInput{AllocationId: &l.eips[0]})
	wantCode(t, "ReleaseAddress held by a NAT gateway", err, "InvalidIPAddress.InUse")
	_, err = c.DeleteInternetGateway(ctx, &ec2.DeleteInternetGatewayInput{InternetGatewayId: &l.igw})
	wantCode(t, "DeleteInternetGateway attached", err, "DependencyViolation")
	_, err = c.DeleteRouteTable(ctx, &ec2.DeleteRouteTableInput{RouteTableId: &l.publicRT})
	wantCode(t, "DeleteRouteTable associated", err, "DependencyViolation")
	_, err = c.DeleteSecurityGroup(ctx, &ec2.DeleteSecurityGroupInput{GroupId: &l.cp})
	wantCode(t, "DeleteSecurityGroup named by another's rule", err, "DependencyViolation")
	sgs := must[*ec2.DescribeSecurityGroupsOutput](t, "DescribeSecurityGroups default")(c.DescribeSecurityGroups(ctx, &ec2.DescribeSecurityGroupsInput{
		Filters: []types.Filter{{Name: awssdk.String("vpc-id"), Values: []string{l.vpc}}, {Name: awssdk.String("group-name"), Values: []string{"default"}}}}))
	_, err = c.DeleteSecurityGroup(ctx, &ec2.DeleteSecurityGroupInput{GroupId: sgs.SecurityGroups[0].GroupId})
	wantCode(t, "DeleteSecurityGroup default", err, "CannotDelete")
}

// teardown deletes the layout in the order a client must.
func teardown(t *testing.T, c *ec2.Client, clock *testClock, l layout) {
	ctx := context.Background()
	for _, id := range l.nats {
		must[*ec2.DeleteNatGatewayOutput](t, "DeleteNatGateway")(c.DeleteNatGateway(ctx, &ec2.DeleteNatGatewayInput{NatGatewayId: &id}))
	}
	nat := must[*ec2.DescribeNatGatewaysOutput](t, "DescribeNatGateways")(c.DescribeNatGateways(ctx, &ec2.DescribeNatGatewaysInput{NatGatewayIds: l.nats[:1]}))
	if nat.NatGateways[0].State != types.NatGatewayStateDeleting {
		t.Errorf("a NAT gateway just deleted is %s; want deleting", nat.NatGateways[0].State)
	}
	clock.advance(3 * time.Second)
	nat = must[*ec2.DescribeNatGatewaysOutput](t, "DescribeNatGateways")(c.DescribeNatGateways(ctx, &ec2.DescribeNatGatewaysInput{NatGatewayIds: l.nats[:1]}))
	if nat.NatGateways[0].State != types.NatGatewayStateDeleted {
		t.Errorf("a NAT gateway deleted a moment ago is %s; want deleted (and still described)", nat.NatGateways[0].State)
	}
	for _, id := range l.eips {
		must[*ec2.ReleaseAddressOutput](t, "ReleaseAddress")(c.ReleaseAddress(ctx, &ec2.ReleaseAddressInput{AllocationId: &id}))
	}
	for _, id := range append(append([]string{}, l.public...), l.private...) {
		must[*ec2.DeleteSubnetOutput](t, "DeleteSubnet")(c.DeleteSubnet(ctx, &ec2.DeleteSubnetInput{SubnetId: &id}))
	}
	for _, id := range append([]string{l.publicRT}, l.privateRT...) {
		must[*ec2.DeleteRouteTableOutput](t, "DeleteRouteTable")(c.DeleteRouteTable(ctx, &ec2.DeleteRouteTableInput{RouteTableId: &id}))
	}
	_, err := c.DeleteVpc(ctx, &ec2.DeleteVpcInput{VpcId: &l.vpc})
	wantCode(t, "DeleteVpc with its internet gateway and groups", err, "DependencyViolation")
	must[*ec2.DetachInternetGatewayOutput](t, "DetachInternetGateway")(c.DetachInternetGateway(ctx, &ec2.DetachInternetGatewayInput{InternetGatewayId: &l.igw, VpcId: &l.vpc}))
	must[*ec2.DeleteInternetGatewayOutput](t, "DeleteInternetGateway")(c.DeleteInternetGateway(ctx, &ec2.DeleteInternetGatewayInput{InternetGatewayId: &l.igw}))
	must[*ec2.RevokeSecurityGroupIngressOutput](t, "RevokeSecurityGroupIngress")(c.RevokeSecurityGroupIngress(ctx, &ec2.RevokeSecurityGroupIngressInput{GroupId: &l.nodes,
		IpPermissions: []types.IpPermission{{IpProtocol: awssdk.String("-1"), UserIdGroupPairs: []types.UserIdGroupPair{{GroupId: &l.cp}}}}}))
	must[*ec2.DeleteSecurityGroupOutput](t, "DeleteSecurityGroup control plane")(c.DeleteSecurityGroup(ctx, &ec2.DeleteSecurityGroupInput{GroupId: &l.cp}))
	must[*ec2.DeleteSecurityGroupOutput](t, "DeleteSecurityGroup nodes")(c.DeleteSecurityGroup(ctx, &ec2.DeleteSecurityGroupInput{GroupId: &l.nodes}))
	for range 2 { // deleting a key pair that is gone is no error
		must[*ec2.DeleteKeyPairOutput](t, "DeleteKeyPair")(c.DeleteKeyPair(ctx, &ec2.DeleteKeyPairInput{KeyName: awssdk.String("c1")}))
	}
	must[*ec2.DeleteVpcOutput](t, "DeleteVpc")(c.DeleteVpc(ctx, &ec2.DeleteVpcInput{VpcId: &l.vpc}))
}

func TestSubnetRules(t *testing.T) {
	ctx := context.Background()
	_, c, _ := newNetAWS(t)
	vpc := must[*ec2.CreateVpcOutput](t, "CreateVpc")(c.CreateVpc(ctx, &ec2.CreateVpcInput{CidrBlock: awssdk.String("10.1.0.0/16")}))
	must[*ec2.CreateSubnetOutput](t, "CreateSubnet")(c.CreateSubnet(ctx, &ec2.CreateSubnetInput{VpcId: vpc.Vpc.VpcId, CidrBlock: awssdk.String("10.1.0.0/20")}))
	for _, tc := range []struct{ name, cidr, zone, code string }{
		{"overlapping a sibling", "10.1.8.0/24", "us-east-1a", "InvalidSubnet.Conflict"},
		{"outside the VPC", "10.2.0.0/24", "us-east-1a", "InvalidSubnet.Range"},
		{"too small", "10.1.32.0/29", "us-east-1a", "InvalidSubnet.Range"},
		{"a zone of another region", "10.1.32.0/24", "us-west-2a", "InvalidParameterValue"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := c.CreateSubnet(ctx, &ec2.CreateSubnetInput{VpcId: vpc.Vpc.VpcId, CidrBlock: &tc.cidr, AvailabilityZone: &tc.zone})
			wantCode(t, "CreateSubnet "+tc.cidr, err, tc.code)
		})
	}
	_, err := c.CreateVpc(ctx, &ec2.CreateVpcInput{CidrBlock: awssdk.String("10.0.0.0/8")})
	wantCode(t, "CreateVpc /8", err, "InvalidVpc.Range")
}

func TestAddressLimitAndRegions(t *testing.T) {
	ctx := context.Background()
	a, c, _ := newNetAWS(t)
	for i := range maxAddresses {
		must[*ec2.AllocateAddressOutput](t, fmt.Sprintf("AllocateAddress %d", i))(c.AllocateAddress(ctx, &ec2.AllocateAddressInput{Domain: types.DomainTypeVpc}))
	}
	_, err := c.AllocateAddress(ctx, &ec2.AllocateAddressInput{Domain: types.DomainTypeVpc})
	wantCode(t, "AllocateAddress beyond the quota", err, "AddressLimitExceeded")
	west := a.config(testKey)
	west.Region = "us-west-2"
	cw := ec2.NewFromConfig(west)
	must[*ec2.AllocateAddressOutput](t, "AllocateAddress in another region")(cw.AllocateAddress(ctx, &ec2.AllocateAddressInput{Domain: types.DomainTypeVpc}))
	vpc := must[*ec2.CreateVpcOutput](t, "CreateVpc in us-west-2")(cw.CreateVpc(ctx, &ec2.CreateVpcInput{CidrBlock: awssdk.String("10.0.0.0/16")}))
	_, err = c.DescribeVpcs(ctx, &ec2.DescribeVpcsInput{VpcIds: []string{*vpc.Vpc.VpcId}})
	wantCode(t, "DescribeVpcs in us-east-1 of a us-west-2 VPC", err, "InvalidVpcID.NotFound")
}

func TestKeyPairs(t *testing.T) {
	ctx := context.Background()
	_, c, _ := newNetAWS(t)
	k := must[*ec2.CreateKeyPairOutput](t, "CreateKeyPair rsa")(c.CreateKeyPair(ctx, &ec2.CreateKeyPairInput{KeyName: awssdk.String("rsa")}))
	block, _ := pem.Decode([]byte(*k.KeyMaterial))
	if block == nil {
		t.Fatalf("CreateKeyPair rsa material is no PEM: %.60q", *k.KeyMaterial)
	}
	if _, err := x509.ParsePKCS1PrivateKey(block.Bytes); err != nil {
		t.Errorf("CreateKeyPair rsa material: %v", err)
	}
	_, err := c.CreateKeyPair(ctx, &ec2.CreateKeyPairInput{KeyName: awssdk.String("rsa")})
	wantCode(t, "CreateKeyPair with a taken name", err, "InvalidKeyPair.Duplicate")
	pub := []byte("ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIOMqqnkVzrm0SdG6UOoqKLsabgH5C9okWi0dh2l9GKJl kiln@test")
	imp := must[*ec2.ImportKeyPairOutput](t, "ImportKeyPair")(c.ImportKeyPair(ctx, &ec2.ImportKeyPairInput{KeyName: awssdk.String("imported"), PublicKeyMaterial: pub}))
	if !strings.HasPrefix(*imp.KeyPairId, "key-") || *imp.KeyFingerprint == "" {
		t.Errorf("ImportKeyPair = %s %s", *imp.KeyPairId, *imp.KeyFingerprint)
	}
	_, err = c.ImportKeyPair(ctx, &ec2.ImportKeyPairInput{KeyName: awssdk.String("bad"), PublicKeyMaterial: []byte("not a key")})
	wantCode(t, "ImportKeyPair of no key", err, "InvalidKey.Format")
	_, err = c.DescribeKeyPairs(ctx, &ec2.DescribeKeyPairsInput{KeyNames: []string{"nobody"}})
	wantCode(t, "DescribeKeyPairs of a missing name", err, "InvalidKeyPair.NotFound")
	got := must[*ec2.DescribeKeyPairsOutput](t, "DescribeKeyPairs")(c.DescribeKeyPairs(ctx, &ec2.DescribeKeyPairsInput{KeyPairIds: []string{*imp.KeyPairId}}))
	if len(got.KeyPairs) != 1 || *got.KeyPairs[0].KeyName != "imported" {
		t.Errorf("DescribeKeyPairs by id = %+v", got.KeyPairs)
	}
}

func TestCatalog(t *testing.T) {
	ctx := context.Background()
	_, c, _ := newNetAWS(t)
	azs := must[*ec2.DescribeAvailabilityZonesOutput](t, "DescribeAvailabilityZones")(c.DescribeAvailabilityZones(ctx, &ec2.DescribeAvailabilityZonesInput{
		Filters: []types.Filter{{Name: awssdk.String("zone-name"), Values: []string{"us-east-1a"}}}}))
	if len(azs.AvailabilityZones) != 1 || *azs.AvailabilityZones[0].ZoneId != "use1-az1" || azs.AvailabilityZones[0].State != types.AvailabilityZoneStateAvailable {
		t.Errorf("DescribeAvailabilityZones us-east-1a = %+v", azs.AvailabilityZones)
	}
	regions := must[*ec2.DescribeRegionsOutput](t, "DescribeRegions")(c.DescribeRegions(ctx, &ec2.DescribeRegionsInput{}))
	if len(regions.Regions) != 3 {
		t.Errorf("DescribeRegions = %d; want the 3 of the options", len(regions.Regions))
	}
	types_ := must[*ec2.DescribeInstanceTypesOutput](t, "DescribeInstanceTypes")(c.DescribeInstanceTypes(ctx, &ec2.DescribeInstanceTypesInput{InstanceTypes: []types.InstanceType{"m5.xlarge"}}))
	if it := types_.InstanceTypes[0]; *it.VCpuInfo.DefaultVCpus != 4 || *it.MemoryInfo.SizeInMiB != 16384 {
		t.Errorf("m5.xlarge = %d vCPUs %d MiB; want 4, 16384", *it.VCpuInfo.DefaultVCpus, *it.MemoryInfo.SizeInMiB)
	}
	_, err := c.DescribeInstanceTypes(ctx, &ec2.DescribeInstanceTypesInput{InstanceTypes: []types.InstanceType{"x9.huge"}})
	wantCode(t, "DescribeInstanceTypes of an unknown type", err, "InvalidInstanceType")
	offers := must[*ec2.DescribeInstanceTypeOfferingsOutput](t, "DescribeInstanceTypeOfferings")(c.DescribeInstanceTypeOfferings(ctx, &ec2.DescribeInstanceTypeOfferingsInput{
		LocationType: types.LocationTypeAvailabilityZone, Filters: []types.Filter{{Name: awssdk.String("instance-type"), Values: []string{"c5.xlarge"}}}}))
	var zones []string
	for _, o := range offers.InstanceTypeOfferings {
		zones = append(zones, *o.Location)
	}
	if strings.Join(zones, ",") != "us-east-1a,us-east-1b" {
		t.Errorf("c5.xlarge is offered in %v; want us-east-1a and b", zones)
	}
	attrs := must[*ec2.DescribeAccountAttributesOutput](t, "DescribeAccountAttributes")(c.DescribeAccountAttributes(ctx, &ec2.DescribeAccountAttributesInput{
		AttributeNames: []types.AccountAttributeName{"max-elastic-ips"}}))
	if len(attrs.AccountAttributes) != 1 || *attrs.AccountAttributes[0].AttributeValues[0].AttributeValue != "5" {
		t.Errorf("max-elastic-ips = %+v", attrs.AccountAttributes)
	}
}

// TestNetDryRunDelayRestart checks DryRun as the SDK sees it, that a VPC
// just made is hidden while Faults.DescribeDelay says, and that the
// network survives a restart.
func TestNetDryRunDelayRestart(t *testing.T) {
	ctx := context.Background()
	a, c, clock := newNetAWS(t)
	_, err := c.CreateVpc(ctx, &ec2.CreateVpcInput{CidrBlock: awssdk.String("10.0.0.0/16"), DryRun: awssdk.Bool(true)})
	wantCode(t, "CreateVpc DryRun", err, "DryRunOperation")
	denied := restrictedKey
	denied.Deny = []string{"ec2:CreateVpc"}
	d := newTestAWS(t, Options{Credentials: []Credential{denied}})
	_, err = ec2.NewFromConfig(d.config(denied)).CreateVpc(ctx, &ec2.CreateVpcInput{CidrBlock: awssdk.String("10.0.0.0/16"), DryRun: awssdk.Bool(true)})
	wantCode(t, "CreateVpc DryRun with a key denied it", err, "UnauthorizedOperation")

	a.SetFaults(Faults{DescribeDelay: Duration(time.Minute)})
	vpc := must[*ec2.CreateVpcOutput](t, "CreateVpc")(c.CreateVpc(ctx, &ec2.CreateVpcInput{CidrBlock: awssdk.String("10.0.0.0/16"), TagSpecifications: clusterTags(types.ResourceTypeVpc, "c1")}))
	_, err = c.DescribeVpcs(ctx, &ec2.DescribeVpcsInput{VpcIds: []string{*vpc.Vpc.VpcId}})
	wantCode(t, "DescribeVpcs of a VPC just made", err, "InvalidVpcID.NotFound")
	clock.advance(2 * time.Minute)
	must[*ec2.DescribeVpcsOutput](t, "DescribeVpcs a minute on")(c.DescribeVpcs(ctx, &ec2.DescribeVpcsInput{VpcIds: []string{*vpc.Vpc.VpcId}}))
	a.SetFaults(Faults{})
	sn := must[*ec2.CreateSubnetOutput](t, "CreateSubnet")(c.CreateSubnet(ctx, &ec2.CreateSubnetInput{VpcId: vpc.Vpc.VpcId, CidrBlock: awssdk.String("10.0.1.0/24"), AvailabilityZone: awssdk.String("us-east-1b")}))

	b := newTestAWS(t, Options{StatePath: a.State, Now: clock.now}) // the same clock: what was made is not in its future
	cb := ec2.NewFromConfig(b.config(testKey))
	vpcs := must[*ec2.DescribeVpcsOutput](t, "DescribeVpcs after a restart")(cb.DescribeVpcs(ctx, &ec2.DescribeVpcsInput{Filters: byTag()}))
	if len(vpcs.Vpcs) != 1 || *vpcs.Vpcs[0].VpcId != *vpc.Vpc.VpcId {
		t.Fatalf("after a restart DescribeVpcs by tag = %+v; want %s", vpcs.Vpcs, *vpc.Vpc.VpcId)
	}
	subnets := must[*ec2.DescribeSubnetsOutput](t, "DescribeSubnets after a restart")(cb.DescribeSubnets(ctx, &ec2.DescribeSubnetsInput{SubnetIds: []string{*sn.Subnet.SubnetId}}))
	if *subnets.Subnets[0].AvailabilityZone != "us-east-1b" {
		t.Errorf("after a restart the subnet is in %s", *subnets.Subnets[0].AvailabilityZone)
	}
	_, err = cb.DeleteVpc(ctx, &ec2.DeleteVpcInput{VpcId: vpc.Vpc.VpcId})
	wantCode(t, "DeleteVpc with a subnet after a restart", err, "DependencyViolation")
}
