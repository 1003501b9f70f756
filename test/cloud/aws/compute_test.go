package aws

import (
	"encoding/base64"
	"errors"
	"strings"
	"testing"
	"time"

	awssdk "github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
	"github.com/aws/aws-sdk-go-v2/service/ec2/types"
	"github.com/aws/smithy-go"

	"kiln.dev/kiln/test/waitfor"
)

// addSubnet puts a subnet into the state directly (the networking API is
// another file's), returning its id.
func addSubnet(t testing.TB, a *testAWS, id, vpc, cidr, zone string) string {
	t.Helper()
	a.mu.Lock()
	defer a.mu.Unlock()
	a.st.EC2.Net.Subnets[id] = &subnet{ID: id, VPCID: vpc, CIDR: cidr, Zone: zone, Region: "us-east-1"}
	return id
}

// waitFor waits until cond holds, state saying what it is meanwhile.
func waitFor(t testing.TB, d time.Duration, what string, cond func() (bool, string)) {
	t.Helper()
	waitfor.Cond(t, what, d, func() (bool, error) {
		ok, state := cond()
		if ok {
			return true, nil
		}
		return false, waitfor.NotYet(errors.New(state))
	})
}

// describe returns one instance as DescribeInstances says it.
func describe(t testing.TB, c *ec2.Client, id string) types.Instance {
	t.Helper()
	out, err := c.DescribeInstances(t.Context(), &ec2.DescribeInstancesInput{InstanceIds: []string{id}})
	if err != nil {
		t.Fatalf("DescribeInstances %s: %v", id, err)
	}
	if len(out.Reservations) != 1 || len(out.Reservations[0].Instances) != 1 {
		t.Fatalf("DescribeInstances %s: %d reservations", id, len(out.Reservations))
	}
	return out.Reservations[0].Instances[0]
}

func waitState(t testing.TB, c *ec2.Client, id string, want types.InstanceStateName) types.Instance {
	t.Helper()
	var i types.Instance
	waitFor(t, 20*time.Second, "instance "+id+" "+string(want), func() (bool, string) {
		i = describe(t, c, id)
		return i.State.Name == want, string(i.State.Name)
	})
	return i
}

func runOne(t testing.TB, c *ec2.Client, in *ec2.RunInstancesInput) types.Instance {
	t.Helper()
	if in.MinCount == nil {
		in.MinCount, in.MaxCount = awssdk.Int32(1), awssdk.Int32(1)
	}
	out, err := c.RunInstances(t.Context(), in)
	if err != nil {
		t.Fatalf("RunInstances: %v", err)
	}
	return out.Instances[0]
}

func TestInstanceLifecycle(t *testing.T) {
	a := newTestAWS(t, Options{})
	sn := addSubnet(t, a, "subnet-0000000000000000a", "vpc-0000000000000000a", "10.0.1.0/24", "us-east-1a")
	ami := a.AddImage("kiln-node-v1.33.1", "kiln/node:v1.33.1")
	c := ec2.NewFromConfig(a.config(testKey))
	ctx := t.Context()

	out, err := c.RunInstances(ctx, &ec2.RunInstancesInput{ImageId: &ami, InstanceType: types.InstanceTypeT3Small,
		SubnetId: &sn, MinCount: awssdk.Int32(2), MaxCount: awssdk.Int32(2),
		UserData: awssdk.String(base64.StdEncoding.EncodeToString([]byte("#!/bin/sh\necho hi\n"))),
		TagSpecifications: []types.TagSpecification{{ResourceType: types.ResourceTypeInstance,
			Tags: []types.Tag{{Key: awssdk.String("Name"), Value: awssdk.String("node")}}}}})
	if err != nil {
		t.Fatal(err)
	}
	if len(out.Instances) != 2 || *out.ReservationId == "" {
		t.Fatalf("RunInstances made %d instances", len(out.Instances))
	}
	for n, want := range []string{"10.0.1.4", "10.0.1.5"} {
		i := out.Instances[n]
		if *i.PrivateIpAddress != want || *i.PrivateDnsName != "ip-10-0-1-"+want[len("10.0.1."):]+".ec2.internal" {
			t.Errorf("instance %d: address %s, name %s; want %s", n, *i.PrivateIpAddress, *i.PrivateDnsName, want)
		}
		if i.State.Name != types.InstanceStateNamePending || *i.Placement.AvailabilityZone != "us-east-1a" || *i.VpcId != "vpc-0000000000000000a" {
			t.Errorf("instance %d: %s in %s of %s", n, i.State.Name, *i.Placement.AvailabilityZone, *i.VpcId)
		}
	}
	id := *out.Instances[0].InstanceId
	waitState(t, c, id, types.InstanceStateNameRunning)

	filtered, err := c.DescribeInstances(ctx, &ec2.DescribeInstancesInput{Filters: []types.Filter{
		{Name: awssdk.String("tag:Name"), Values: []string{"node"}},
		{Name: awssdk.String("private-ip-address"), Values: []string{"10.0.1.4"}},
	}})
	if err != nil {
		t.Fatal(err)
	}
	if len(filtered.Reservations) != 1 || len(filtered.Reservations[0].Instances) != 1 || *filtered.Reservations[0].Instances[0].InstanceId != id {
		t.Errorf("filters tag:Name and private-ip-address: %+v", filtered.Reservations)
	}
	if _, err := c.DescribeInstances(ctx, &ec2.DescribeInstancesInput{Filters: []types.Filter{{Name: awssdk.String("no-such"), Values: []string{"x"}}}}); apiCode(err) != "InvalidParameterValue" {
		t.Errorf("an unknown filter: %v; want InvalidParameterValue", err)
	}

	if _, err := c.StopInstances(ctx, &ec2.StopInstancesInput{InstanceIds: []string{id}}); err != nil {
		t.Fatal(err)
	}
	stopped := waitState(t, c, id, types.InstanceStateNameStopped)
	if *stopped.PrivateIpAddress != "10.0.1.4" || *stopped.StateReason.Code != "Client.UserInitiatedShutdown" {
		t.Errorf("stopped: address %s, reason %v", *stopped.PrivateIpAddress, stopped.StateReason)
	}
	if _, err := c.StartInstances(ctx, &ec2.StartInstancesInput{InstanceIds: []string{id}}); err != nil {
		t.Fatal(err)
	}
	waitState(t, c, id, types.InstanceStateNameRunning)

	term, err := c.TerminateInstances(ctx, &ec2.TerminateInstancesInput{InstanceIds: []string{id}})
	if err != nil {
		t.Fatal(err)
	}
	if ch := term.TerminatingInstances[0]; ch.PreviousState.Name != types.InstanceStateNameRunning || ch.CurrentState.Name != types.InstanceStateNameShuttingDown {
		t.Errorf("TerminateInstances: %s -> %s", ch.PreviousState.Name, ch.CurrentState.Name)
	}
	gone := waitState(t, c, id, types.InstanceStateNameTerminated)
	if gone.StateReason == nil || *gone.StateReason.Code != "Client.UserInitiatedShutdown" {
		t.Errorf("terminated: reason %v", gone.StateReason)
	}
	if _, err := c.StartInstances(ctx, &ec2.StartInstancesInput{InstanceIds: []string{id}}); apiCode(err) != "IncorrectInstanceState" {
		t.Errorf("starting a terminated instance: %v; want IncorrectInstanceState", err)
	}
	// The terminated instance's address is free again: the lowest one.
	again := runOne(t, c, &ec2.RunInstancesInput{ImageId: &ami, InstanceType: types.InstanceTypeT3Small, SubnetId: &sn})
	if *again.PrivateIpAddress != "10.0.1.4" {
		t.Errorf("a new instance after a terminate: %s, want 10.0.1.4", *again.PrivateIpAddress)
	}

	// A new server on the same state file has the instances.
	b := newTestAWS(t, Options{StatePath: a.State})
	cb := ec2.NewFromConfig(b.config(testKey))
	if i := describe(t, cb, *out.Instances[1].InstanceId); i.State.Name != types.InstanceStateNameRunning || *i.PrivateIpAddress != "10.0.1.5" {
		t.Errorf("after a restart: %s %s", i.State.Name, *i.PrivateIpAddress)
	}
	if i := describe(t, cb, id); i.State.Name != types.InstanceStateNameTerminated {
		t.Errorf("after a restart, the terminated instance is %s", i.State.Name)
	}
}

func TestRunInstancesErrors(t *testing.T) {
	a := newTestAWS(t, Options{})
	sn := addSubnet(t, a, "subnet-0000000000000000a", "vpc-0000000000000000a", "10.0.1.0/24", "us-east-1a")
	small := addSubnet(t, a, "subnet-0000000000000000b", "vpc-0000000000000000a", "10.0.2.0/28", "us-east-1b")
	ami := a.AddImage("kiln-node-v1", "kiln/node:v1")
	c := ec2.NewFromConfig(a.config(testKey))
	// A type and zone the catalog does not pair.
	var unofferedType, unofferedZone string
	for _, typ := range []string{"t3.micro", "t3.small", "m5.large", "m5.xlarge", "c5.large", "c5.xlarge", "p4d.24xlarge", "m7i.large"} {
		for _, z := range a.zones("us-east-1") {
			if _, _, ok := instanceTypeOf(typ); ok && !offered(typ, z) && unofferedType == "" {
				unofferedType, unofferedZone = typ, z
			}
		}
	}
	unofferedSubnet := addSubnet(t, a, "subnet-0000000000000000c", "vpc-0000000000000000a", "10.0.3.0/24", unofferedZone)

	tests := []struct {
		name   string
		faults Faults
		key    Credential
		in     ec2.RunInstancesInput
		want   string
	}{
		{name: "unknown image", in: ec2.RunInstancesInput{ImageId: awssdk.String("ami-0000000000000000f"), SubnetId: &sn, InstanceType: "t3.small"}, want: "InvalidAMIID.NotFound"},
		{name: "unknown subnet", in: ec2.RunInstancesInput{ImageId: &ami, SubnetId: awssdk.String("subnet-0000000000000000f"), InstanceType: "t3.small"}, want: "InvalidSubnetID.NotFound"},
		{name: "unknown type", in: ec2.RunInstancesInput{ImageId: &ami, SubnetId: &sn, InstanceType: "t9.huge"}, want: "InvalidParameterValue"},
		{name: "type not offered in the zone", in: ec2.RunInstancesInput{ImageId: &ami, SubnetId: &unofferedSubnet, InstanceType: types.InstanceType(unofferedType)}, want: "Unsupported"},
		{name: "no capacity", faults: Faults{NoCapacity: []string{"t3.small/us-east-1a"}}, in: ec2.RunInstancesInput{ImageId: &ami, SubnetId: &sn, InstanceType: "t3.small"}, want: "InsufficientInstanceCapacity"},
		{name: "vcpu quota", faults: Faults{VCPUQuota: 3}, in: ec2.RunInstancesInput{ImageId: &ami, SubnetId: &sn, InstanceType: "t3.small", MinCount: awssdk.Int32(2), MaxCount: awssdk.Int32(2)}, want: "VcpuLimitExceeded"},
		{name: "subnet full", in: ec2.RunInstancesInput{ImageId: &ami, SubnetId: &small, InstanceType: "t3.small", MinCount: awssdk.Int32(12), MaxCount: awssdk.Int32(12)}, want: "InsufficientFreeAddressesInSubnet"},
		{name: "address in use", in: ec2.RunInstancesInput{ImageId: &ami, SubnetId: &sn, InstanceType: "t3.small", PrivateIpAddress: awssdk.String("10.0.1.4")}, want: "InvalidIPAddress.InUse"},
		{name: "restricted key", key: restrictedKey, in: ec2.RunInstancesInput{ImageId: &ami, SubnetId: &sn, InstanceType: "t3.small"}, want: "UnauthorizedOperation"},
	}
	// One instance at 10.0.1.4, with 2 vCPUs against the quotas.
	runOne(t, c, &ec2.RunInstancesInput{ImageId: &ami, SubnetId: &sn, InstanceType: "t3.small"})
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if tt.want == "Unsupported" && unofferedType == "" {
				t.Skip("the catalog offers every type in every zone")
			}
			a.SetFaults(tt.faults)
			defer a.SetFaults(Faults{})
			key := testKey
			if tt.key.AccessKeyID != "" {
				key = tt.key
			}
			in := tt.in
			if in.MinCount == nil {
				in.MinCount, in.MaxCount = awssdk.Int32(1), awssdk.Int32(1)
			}
			_, err := ec2.NewFromConfig(a.config(key)).RunInstances(t.Context(), &in)
			if apiCode(err) != tt.want {
				t.Errorf("RunInstances: %v; want %s", err, tt.want)
			}
		})
	}
	t.Run("quota leaves room for fewer", func(t *testing.T) {
		a.SetFaults(Faults{VCPUQuota: 6})
		defer a.SetFaults(Faults{})
		out, err := c.RunInstances(t.Context(), &ec2.RunInstancesInput{ImageId: &ami, SubnetId: &sn, InstanceType: "t3.small", MinCount: awssdk.Int32(1), MaxCount: awssdk.Int32(5)})
		if err != nil || len(out.Instances) != 2 {
			t.Fatalf("RunInstances 1..5 under a quota of 6 vCPUs with 2 used: %v, want 2 instances", err)
		}
	})
	t.Run("describe an unknown and a late instance", func(t *testing.T) {
		if _, err := c.DescribeInstances(t.Context(), &ec2.DescribeInstancesInput{InstanceIds: []string{"i-0000000000000000f"}}); apiCode(err) != "InvalidInstanceID.NotFound" {
			t.Errorf("unknown: %v", err)
		}
		a.SetFaults(Faults{DescribeDelay: Duration(time.Hour)})
		defer a.SetFaults(Faults{})
		i := runOne(t, c, &ec2.RunInstancesInput{ImageId: &ami, SubnetId: &sn, InstanceType: "t3.small"})
		if _, err := c.DescribeInstances(t.Context(), &ec2.DescribeInstancesInput{InstanceIds: []string{*i.InstanceId}}); apiCode(err) != "InvalidInstanceID.NotFound" {
			t.Errorf("just launched with a describe delay: %v; want InvalidInstanceID.NotFound", err)
		}
	})
}

func TestClientToken(t *testing.T) {
	a := newTestAWS(t, Options{})
	sn := addSubnet(t, a, "subnet-0000000000000000a", "vpc-0000000000000000a", "10.0.1.0/24", "us-east-1a")
	ami := a.AddImage("kiln-node-v1", "kiln/node:v1")
	c := ec2.NewFromConfig(a.config(testKey))
	in := func(typ types.InstanceType) *ec2.RunInstancesInput {
		return &ec2.RunInstancesInput{ImageId: &ami, SubnetId: &sn, InstanceType: typ, ClientToken: awssdk.String("token-1"),
			MinCount: awssdk.Int32(1), MaxCount: awssdk.Int32(1)}
	}
	first, err := c.RunInstances(t.Context(), in("t3.small"))
	if err != nil {
		t.Fatal(err)
	}
	second, err := c.RunInstances(t.Context(), in("t3.small"))
	if err != nil {
		t.Fatal(err)
	}
	if *first.Instances[0].InstanceId != *second.Instances[0].InstanceId || *first.ReservationId != *second.ReservationId {
		t.Errorf("a retried RunInstances launched again: %s then %s", *first.Instances[0].InstanceId, *second.Instances[0].InstanceId)
	}
	all, err := c.DescribeInstances(t.Context(), &ec2.DescribeInstancesInput{})
	if err != nil || len(all.Reservations) != 1 {
		t.Errorf("after a retried RunInstances: %v, %d reservations; want 1", err, len(all.Reservations))
	}
	if _, err := c.RunInstances(t.Context(), in("t3.medium")); apiCode(err) != "IdempotentParameterMismatch" {
		t.Errorf("the token with other parameters: %v; want IdempotentParameterMismatch", err)
	}
}

func TestSpotInterruption(t *testing.T) {
	a := newTestAWS(t, Options{})
	sn := addSubnet(t, a, "subnet-0000000000000000a", "vpc-0000000000000000a", "10.0.1.0/24", "us-east-1a")
	ami := a.AddImage("kiln-node-v1", "kiln/node:v1")
	c := ec2.NewFromConfig(a.config(testKey))
	i := runOne(t, c, &ec2.RunInstancesInput{ImageId: &ami, SubnetId: &sn, InstanceType: "t3.small",
		InstanceMarketOptions: &types.InstanceMarketOptionsRequest{MarketType: types.MarketTypeSpot,
			SpotOptions: &types.SpotMarketOptions{MaxPrice: awssdk.String("0.05")}}})
	if i.InstanceLifecycle != types.InstanceLifecycleTypeSpot || i.SpotInstanceRequestId == nil {
		t.Fatalf("a spot launch: lifecycle %q", i.InstanceLifecycle)
	}
	if _, err := c.StopInstances(t.Context(), &ec2.StopInstancesInput{InstanceIds: []string{*i.InstanceId}}); apiCode(err) != "UnsupportedOperation" {
		t.Errorf("stopping a one-time spot instance: %v; want UnsupportedOperation", err)
	}
	waitState(t, c, *i.InstanceId, types.InstanceStateNameRunning)
	a.SetFaults(Faults{SpotNotice: Duration(time.Second)})
	if err := a.Interrupt(*i.InstanceId); err != nil {
		t.Fatal(err)
	}
	if got := describe(t, c, *i.InstanceId); got.State.Name != types.InstanceStateNameRunning {
		t.Errorf("during its notice the instance is %s", got.State.Name)
	}
	gone := waitState(t, c, *i.InstanceId, types.InstanceStateNameTerminated)
	if *gone.StateReason.Code != "Server.SpotInstanceTermination" {
		t.Errorf("interrupted: reason %s", *gone.StateReason.Code)
	}
	if err := a.Interrupt("i-0000000000000000f"); err == nil {
		t.Error("interrupting an unknown instance did not fail")
	}
}

func TestLaunchTemplates(t *testing.T) {
	a := newTestAWS(t, Options{})
	sn := addSubnet(t, a, "subnet-0000000000000000a", "vpc-0000000000000000a", "10.0.1.0/24", "us-east-1a")
	ami := a.AddImage("kiln-node-v1", "kiln/node:v1")
	c := ec2.NewFromConfig(a.config(testKey))
	ctx := t.Context()
	created, err := c.CreateLaunchTemplate(ctx, &ec2.CreateLaunchTemplateInput{LaunchTemplateName: awssdk.String("nodes"),
		LaunchTemplateData: &types.RequestLaunchTemplateData{ImageId: &ami, InstanceType: "t3.small",
			UserData: awssdk.String(base64.StdEncoding.EncodeToString([]byte("#!/bin/sh\n"))),
			TagSpecifications: []types.LaunchTemplateTagSpecificationRequest{{ResourceType: types.ResourceTypeInstance,
				Tags: []types.Tag{{Key: awssdk.String("role"), Value: awssdk.String("worker")}}}}}})
	if err != nil {
		t.Fatal(err)
	}
	lt := created.LaunchTemplate
	if *lt.DefaultVersionNumber != 1 || *lt.LatestVersionNumber != 1 || len(*lt.LaunchTemplateId) != len("lt-0123456789abcdef0") {
		t.Errorf("CreateLaunchTemplate: %s default %d latest %d", *lt.LaunchTemplateId, *lt.DefaultVersionNumber, *lt.LatestVersionNumber)
	}
	if _, err := c.CreateLaunchTemplate(ctx, &ec2.CreateLaunchTemplateInput{LaunchTemplateName: awssdk.String("nodes"),
		LaunchTemplateData: &types.RequestLaunchTemplateData{ImageId: &ami}}); apiCode(err) != "InvalidLaunchTemplateName.AlreadyExistsException" {
		t.Errorf("a second template named nodes: %v", err)
	}
	v2, err := c.CreateLaunchTemplateVersion(ctx, &ec2.CreateLaunchTemplateVersionInput{LaunchTemplateId: lt.LaunchTemplateId,
		SourceVersion: awssdk.String("1"), LaunchTemplateData: &types.RequestLaunchTemplateData{InstanceType: "t3.medium"}})
	if err != nil {
		t.Fatal(err)
	}
	if d := v2.LaunchTemplateVersion.LaunchTemplateData; *v2.LaunchTemplateVersion.VersionNumber != 2 || d.InstanceType != "t3.medium" || *d.ImageId != ami || len(d.TagSpecifications) != 1 {
		t.Errorf("version 2 from version 1: %+v", d)
	}
	versions, err := c.DescribeLaunchTemplateVersions(ctx, &ec2.DescribeLaunchTemplateVersionsInput{LaunchTemplateName: awssdk.String("nodes"), Versions: []string{"$Latest", "$Default"}})
	if err != nil {
		t.Fatal(err)
	}
	if len(versions.LaunchTemplateVersions) != 2 || *versions.LaunchTemplateVersions[0].VersionNumber != 2 || *versions.LaunchTemplateVersions[1].VersionNumber != 1 {
		t.Errorf("$Latest and $Default: %d versions", len(versions.LaunchTemplateVersions))
	}
	if _, err := c.ModifyLaunchTemplate(ctx, &ec2.ModifyLaunchTemplateInput{LaunchTemplateId: lt.LaunchTemplateId, DefaultVersion: awssdk.String("2")}); err != nil {
		t.Fatal(err)
	}
	// Launched from the default (now 2), with the request's type over it.
	i := runOne(t, c, &ec2.RunInstancesInput{SubnetId: &sn, LaunchTemplate: &types.LaunchTemplateSpecification{LaunchTemplateName: awssdk.String("nodes")}})
	if i.InstanceType != "t3.medium" || *i.ImageId != ami || len(i.Tags) != 1 || *i.Tags[0].Value != "worker" {
		t.Errorf("from the template: %s %s %v", i.InstanceType, *i.ImageId, i.Tags)
	}
	i = runOne(t, c, &ec2.RunInstancesInput{SubnetId: &sn, InstanceType: "m5.large",
		LaunchTemplate: &types.LaunchTemplateSpecification{LaunchTemplateId: lt.LaunchTemplateId, Version: awssdk.String("1")}})
	if i.InstanceType != "m5.large" {
		t.Errorf("the request's type over the template's: %s", i.InstanceType)
	}
	if _, err := c.RunInstances(ctx, &ec2.RunInstancesInput{SubnetId: &sn, MinCount: awssdk.Int32(1), MaxCount: awssdk.Int32(1),
		LaunchTemplate: &types.LaunchTemplateSpecification{LaunchTemplateId: lt.LaunchTemplateId, Version: awssdk.String("9")}}); apiCode(err) != "InvalidLaunchTemplateId.VersionNotFound" {
		t.Errorf("version 9: %v", err)
	}
	if _, err := c.DeleteLaunchTemplate(ctx, &ec2.DeleteLaunchTemplateInput{LaunchTemplateName: awssdk.String("nodes")}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.DescribeLaunchTemplates(ctx, &ec2.DescribeLaunchTemplatesInput{LaunchTemplateIds: []string{*lt.LaunchTemplateId}}); apiCode(err) != "InvalidLaunchTemplateId.NotFound" {
		t.Errorf("a deleted template: %v", err)
	}
}

func TestDescribeImages(t *testing.T) {
	a := newTestAWS(t, Options{})
	c := ec2.NewFromConfig(a.config(testKey))
	ami := a.AddImage("kiln-node-v1.33.1", "kiln/node:v1.33.1")
	a.AddImage("kiln-node-v1.32.0", "kiln/node:v1.32.0")
	out, err := c.DescribeImages(t.Context(), &ec2.DescribeImagesInput{Owners: []string{"self"},
		Filters: []types.Filter{{Name: awssdk.String("name"), Values: []string{"kiln-node-v1.33*"}}}})
	if err != nil {
		t.Fatal(err)
	}
	if len(out.Images) != 1 || *out.Images[0].ImageId != ami || out.Images[0].State != types.ImageStateAvailable ||
		out.Images[0].Architecture != types.ArchitectureValuesX8664 || *out.Images[0].OwnerId != DefaultAccountID {
		t.Fatalf("DescribeImages: %+v", out.Images)
	}
	if amazon, err := c.DescribeImages(t.Context(), &ec2.DescribeImagesInput{Owners: []string{"amazon"}}); err != nil || len(amazon.Images) != 0 {
		t.Errorf("amazon's images: %v %d", err, len(amazon.Images))
	}
	if _, err := c.DescribeImages(t.Context(), &ec2.DescribeImagesInput{ImageIds: []string{"ami-0000000000000000f"}}); apiCode(err) != "InvalidAMIID.NotFound" {
		t.Errorf("an unknown image: %v", err)
	}
}

// An instance launched with resource-based naming has its id as its guest
// hostname (what its machine is given); its private DNS name stays the
// address's. A hostname type AWS does not know is refused.
func TestResourceBasedHostname(t *testing.T) {
	a := newTestAWS(t, Options{})
	sn := addSubnet(t, a, "subnet-0000000000000000a", "vpc-0000000000000000a", "10.0.1.0/24", "us-east-1a")
	ami := a.AddImage("kiln-node-v1.33.1", "kiln/node:v1.33.1")
	c := ec2.NewFromConfig(a.config(testKey))
	i := runOne(t, c, &ec2.RunInstancesInput{ImageId: &ami, InstanceType: types.InstanceTypeT3Small, SubnetId: &sn,
		PrivateDnsNameOptions: &types.PrivateDnsNameOptionsRequest{HostnameType: types.HostnameTypeResourceName}})
	a.mu.Lock()
	host := a.st.EC2.Compute.Instances[*i.InstanceId].hostname()
	a.mu.Unlock()
	if host != *i.InstanceId+".ec2.internal" || *i.PrivateDnsName != "ip-"+strings.ReplaceAll(*i.PrivateIpAddress, ".", "-")+".ec2.internal" {
		t.Errorf("hostname %q, private DNS name %q; want %s.ec2.internal and the address's name", host, *i.PrivateDnsName, *i.InstanceId)
	}
	// The launch above with only its hostname type changed: that is what
	// the refusal is of.
	_, err := c.RunInstances(t.Context(), &ec2.RunInstancesInput{ImageId: &ami, InstanceType: types.InstanceTypeT3Small, SubnetId: &sn,
		MinCount: awssdk.Int32(1), MaxCount: awssdk.Int32(1), PrivateDnsNameOptions: &types.PrivateDnsNameOptionsRequest{HostnameType: "host-name"}})
	var ae smithy.APIError
	if !errors.As(err, &ae) || ae.ErrorCode() != "InvalidParameterValue" {
		t.Errorf("RunInstances with hostname type host-name: %v; want InvalidParameterValue", err)
	}
}
