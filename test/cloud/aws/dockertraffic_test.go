package aws

import (
	"encoding/base64"
	"net/netip"
	"os/exec"
	"strings"
	"testing"
	"time"

	awssdk "github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
	"github.com/aws/aws-sdk-go-v2/service/ec2/types"
)

// With RouteTraffic, a VPC's network carries a packet for a pod range
// between machines of two subnets only while the sender's subnet's route
// table routes the range to an instance and the replying machine's
// source/destination check is off: instance b holds 10.244.1.1 (a "pod"
// answering on 8080), instance a routes 10.244.1.0/24 to b itself (as
// Kiln's agent does); a reaches it only with the route and b's check off,
// and no more once the route is deleted. Needs root (iptables), Docker and
// an image with ip and perl (KILN_AWS_TEST_NODE_REPOSITORY).
func TestDockerRouteTraffic(t *testing.T) {
	if _, err := exec.LookPath("iptables"); err != nil {
		t.Skip("no iptables on this host")
	}
	a, m, im := dockerAWSWith(t, DockerOptions{RouteTraffic: true})
	if other := m.Overlapping(t.Context(), netip.MustParsePrefix("10.214.0.0/16")); other != "" {
		t.Skipf("the test's range 10.214.0.0/16 overlaps the Docker network %s", other)
	}
	c := ec2.NewFromConfig(a.config(testKey))
	ctx := t.Context()
	vpc, err := c.CreateVpc(ctx, &ec2.CreateVpcInput{CidrBlock: awssdk.String("10.214.0.0/16")})
	if err != nil {
		t.Fatal(err)
	}
	subnet := func(cidr, zone string) (string, string) {
		sn, err := c.CreateSubnet(ctx, &ec2.CreateSubnetInput{VpcId: vpc.Vpc.VpcId, CidrBlock: &cidr, AvailabilityZone: &zone})
		if err != nil {
			t.Fatal(err)
		}
		rt, err := c.CreateRouteTable(ctx, &ec2.CreateRouteTableInput{VpcId: vpc.Vpc.VpcId})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := c.AssociateRouteTable(ctx, &ec2.AssociateRouteTableInput{RouteTableId: rt.RouteTable.RouteTableId, SubnetId: sn.Subnet.SubnetId}); err != nil {
			t.Fatal(err)
		}
		return *sn.Subnet.SubnetId, *rt.RouteTable.RouteTableId
	}
	snA, rtA := subnet("10.214.16.0/20", "us-east-1a")
	snB, _ := subnet("10.214.48.0/20", "us-east-1b")
	waitFor(t, 10*time.Second, "the node image as an AMI", func() (bool, string) {
		out, err := c.DescribeImages(ctx, &ec2.DescribeImagesInput{ImageIds: []string{im.ID}})
		return err == nil && len(out.Images) == 1, "not described"
	})
	launch := func(sn, script string) string {
		i := runOne(t, c, &ec2.RunInstancesInput{ImageId: &im.ID, InstanceType: "t3.small", SubnetId: &sn,
			UserData: awssdk.String(base64.StdEncoding.EncodeToString([]byte(script)))})
		waitState(t, c, *i.InstanceId, types.InstanceStateNameRunning)
		return *i.InstanceId
	}
	b := launch(snB, "#!/bin/sh\nip addr add 10.244.1.1/32 dev lo\n"+
		`perl -MIO::Socket::INET -e '$s=IO::Socket::INET->new(LocalAddr=>"10.244.1.1",LocalPort=>8080,Listen=>5,ReuseAddr=>1) or die $!; while($c=$s->accept){print $c "pod\n"; close $c}' &`+"\n")
	a2 := launch(snA, "#!/bin/sh\nip route add 10.244.1.0/24 via 10.214.48.4\n")
	reach := func() bool {
		out, _ := exec.CommandContext(ctx, "docker", "exec", m.name(a2), "perl", "-MIO::Socket::INET", "-e",
			`$c=IO::Socket::INET->new(PeerAddr=>"10.244.1.1",PeerPort=>8080,Timeout=>2) or exit 1; print <$c>`).CombinedOutput()
		return strings.TrimSpace(string(out)) == "pod"
	}
	settle := func(want bool, what string) {
		t.Helper()
		waitFor(t, 30*time.Second, what, func() (bool, string) { return reach() == want, "not yet" })
		// And it stays so (the compute loop rewrites the rules each second).
		time.Sleep(2 * time.Second)
		if reach() != want {
			t.Errorf("%s: changed back", what)
		}
	}
	settle(false, "no route: the pod range unreachable from the other subnet")
	if _, err := c.CreateRoute(ctx, &ec2.CreateRouteInput{RouteTableId: &rtA, DestinationCidrBlock: awssdk.String("10.244.1.0/24"), InstanceId: &b}); err != nil {
		t.Fatal(err)
	}
	settle(false, "a route, b's source/destination check on: its answers from the pod address dropped")
	if _, err := c.ModifyInstanceAttribute(ctx, &ec2.ModifyInstanceAttributeInput{InstanceId: &b,
		SourceDestCheck: &types.AttributeBooleanValue{Value: awssdk.Bool(false)}}); err != nil {
		t.Fatal(err)
	}
	settle(true, "the route and b's check off: the pod answers")
	if _, err := c.DeleteRoute(ctx, &ec2.DeleteRouteInput{RouteTableId: &rtA, DestinationCidrBlock: awssdk.String("10.244.1.0/24")}); err != nil {
		t.Fatal(err)
	}
	settle(false, "the route deleted: unreachable again")
}
