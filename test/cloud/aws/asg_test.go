package aws

import (
	"strings"
	"testing"
	"time"

	awssdk "github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/autoscaling"
	astypes "github.com/aws/aws-sdk-go-v2/service/autoscaling/types"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
	"github.com/aws/aws-sdk-go-v2/service/ec2/types"
)

// asgFixture is a local AWS with two subnets in two zones and a launch
// template "nodes".
func asgFixture(t *testing.T) (*testAWS, *ec2.Client, *autoscaling.Client) {
	t.Helper()
	a := newTestAWS(t, Options{})
	addSubnet(t, a, "subnet-0000000000000000a", "vpc-0000000000000000a", "10.0.1.0/24", "us-east-1a")
	addSubnet(t, a, "subnet-0000000000000000b", "vpc-0000000000000000a", "10.0.2.0/24", "us-east-1b")
	ami := a.AddImage("kiln-node-v1", "kiln/node:v1")
	c := ec2.NewFromConfig(a.config(testKey))
	if _, err := c.CreateLaunchTemplate(t.Context(), &ec2.CreateLaunchTemplateInput{LaunchTemplateName: awssdk.String("nodes"),
		LaunchTemplateData: &types.RequestLaunchTemplateData{ImageId: &ami, InstanceType: "t3.small"}}); err != nil {
		t.Fatal(err)
	}
	return a, c, autoscaling.NewFromConfig(a.config(testKey))
}

func group(t *testing.T, as *autoscaling.Client, name string) astypes.AutoScalingGroup {
	t.Helper()
	out, err := as.DescribeAutoScalingGroups(t.Context(), &autoscaling.DescribeAutoScalingGroupsInput{AutoScalingGroupNames: []string{name}})
	if err != nil {
		t.Fatal(err)
	}
	if len(out.AutoScalingGroups) != 1 {
		t.Fatalf("group %s: %d groups described", name, len(out.AutoScalingGroups))
	}
	return out.AutoScalingGroups[0]
}

// waitInService waits until the group has n instances, all in service.
func waitInService(t *testing.T, as *autoscaling.Client, name string, n int) astypes.AutoScalingGroup {
	t.Helper()
	var g astypes.AutoScalingGroup
	waitFor(t, 20*time.Second, "group "+name+" in service", func() (bool, string) {
		g = group(t, as, name)
		in := 0
		var states []string
		for _, i := range g.Instances {
			states = append(states, *i.InstanceId+" "+string(i.LifecycleState))
			if string(i.LifecycleState) == "InService" {
				in++
			}
		}
		return in == n && len(g.Instances) == n, strings.Join(states, ", ")
	})
	return g
}

func TestAutoScalingGroup(t *testing.T) {
	a, c, as := asgFixture(t)
	ctx := t.Context()
	_, err := as.CreateAutoScalingGroup(ctx, &autoscaling.CreateAutoScalingGroupInput{AutoScalingGroupName: awssdk.String("workers"),
		LaunchTemplate: &astypes.LaunchTemplateSpecification{LaunchTemplateName: awssdk.String("nodes"), Version: awssdk.String("$Latest")},
		MinSize:        awssdk.Int32(1), MaxSize: awssdk.Int32(4), DesiredCapacity: awssdk.Int32(2),
		VPCZoneIdentifier: awssdk.String("subnet-0000000000000000a,subnet-0000000000000000b"),
		Tags:              []astypes.Tag{{Key: awssdk.String("cluster"), Value: awssdk.String("c1"), PropagateAtLaunch: awssdk.Bool(true)}}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := as.CreateAutoScalingGroup(ctx, &autoscaling.CreateAutoScalingGroupInput{AutoScalingGroupName: awssdk.String("workers"),
		LaunchTemplate: &astypes.LaunchTemplateSpecification{LaunchTemplateName: awssdk.String("nodes")},
		MinSize:        awssdk.Int32(0), MaxSize: awssdk.Int32(1), VPCZoneIdentifier: awssdk.String("subnet-0000000000000000a")}); apiCode(err) != "AlreadyExists" {
		t.Errorf("a second group named workers: %v", err)
	}
	g := waitInService(t, as, "workers", 2)
	zones := map[string]bool{}
	for _, i := range g.Instances {
		zones[*i.AvailabilityZone] = true
		if *i.LaunchTemplate.LaunchTemplateName != "nodes" || *i.LaunchTemplate.Version != "1" || *i.InstanceType != "t3.small" {
			t.Errorf("instance %s: template %v type %s", *i.InstanceId, i.LaunchTemplate, *i.InstanceType)
		}
	}
	if len(zones) != 2 {
		t.Errorf("two instances over two zones went to %v", zones)
	}
	first := *g.Instances[0].InstanceId
	if tags := describe(t, c, first).Tags; !hasTag(tags, "cluster", "c1") || !hasTag(tags, "aws:autoscaling:groupName", "workers") {
		t.Errorf("the instance's tags: %v", tags)
	}

	// Terminated behind the group's back: replaced.
	if _, err := c.TerminateInstances(ctx, &ec2.TerminateInstancesInput{InstanceIds: []string{first}}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 20*time.Second, "a replacement", func() (bool, string) {
		g = group(t, as, "workers")
		in := 0
		for _, i := range g.Instances {
			if *i.InstanceId == first {
				return false, "the terminated instance is still a member"
			}
			if string(i.LifecycleState) == "InService" {
				in++
			}
		}
		return in == 2, ""
	})
	acts, err := as.DescribeScalingActivities(ctx, &autoscaling.DescribeScalingActivitiesInput{AutoScalingGroupName: awssdk.String("workers")})
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, act := range acts.Activities {
		found = found || strings.Contains(*act.Description, first) && strings.Contains(*act.Cause, "terminated or stopped")
	}
	if !found || len(acts.Activities) < 4 {
		t.Errorf("the activities do not say the instance was replaced: %d activities", len(acts.Activities))
	}

	if _, err := as.SetDesiredCapacity(ctx, &autoscaling.SetDesiredCapacityInput{AutoScalingGroupName: awssdk.String("workers"), DesiredCapacity: awssdk.Int32(5)}); apiCode(err) != "ValidationError" {
		t.Errorf("desired 5 above max 4: %v", err)
	}
	if _, err := as.SetDesiredCapacity(ctx, &autoscaling.SetDesiredCapacityInput{AutoScalingGroupName: awssdk.String("workers"), DesiredCapacity: awssdk.Int32(1)}); err != nil {
		t.Fatal(err)
	}
	g = waitInService(t, as, "workers", 1)
	kept := *g.Instances[0].InstanceId

	if _, err := as.DeleteAutoScalingGroup(ctx, &autoscaling.DeleteAutoScalingGroupInput{AutoScalingGroupName: awssdk.String("workers")}); apiCode(err) != "ResourceInUse" {
		t.Errorf("deleting a group with instances: %v; want ResourceInUse", err)
	}

	// A new server on the same state keeps the group at its capacity.
	a.Close()
	b := newTestAWS(t, Options{StatePath: a.State})
	bs := autoscaling.NewFromConfig(b.config(testKey))
	if g := waitInService(t, bs, "workers", 1); *g.Instances[0].InstanceId != kept {
		t.Errorf("after a restart the group's instance is %s, want %s", *g.Instances[0].InstanceId, kept)
	}
	if _, err := bs.DeleteAutoScalingGroup(ctx, &autoscaling.DeleteAutoScalingGroupInput{AutoScalingGroupName: awssdk.String("workers"), ForceDelete: awssdk.Bool(true)}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 20*time.Second, "the group deleted", func() (bool, string) {
		out, err := bs.DescribeAutoScalingGroups(ctx, &autoscaling.DescribeAutoScalingGroupsInput{AutoScalingGroupNames: []string{"workers"}})
		return err == nil && len(out.AutoScalingGroups) == 0, "still described"
	})
	if i := describe(t, ec2.NewFromConfig(b.config(testKey)), kept); i.State.Name != types.InstanceStateNameTerminated {
		t.Errorf("ForceDelete left instance %s %s", kept, i.State.Name)
	}
}

func hasTag(tags []types.Tag, k, v string) bool {
	for _, t := range tags {
		if *t.Key == k && *t.Value == v {
			return true
		}
	}
	return false
}

func TestAutoScalingCapacityAndScaleIn(t *testing.T) {
	a, c, as := asgFixture(t)
	ctx := t.Context()
	a.SetFaults(Faults{NoCapacity: []string{"t3.small/us-east-1a"}})
	_, err := as.CreateAutoScalingGroup(ctx, &autoscaling.CreateAutoScalingGroupInput{AutoScalingGroupName: awssdk.String("workers"),
		LaunchTemplate: &astypes.LaunchTemplateSpecification{LaunchTemplateName: awssdk.String("nodes")},
		MinSize:        awssdk.Int32(0), MaxSize: awssdk.Int32(4), DesiredCapacity: awssdk.Int32(2),
		VPCZoneIdentifier: awssdk.String("subnet-0000000000000000a,subnet-0000000000000000b")})
	if err != nil {
		t.Fatal(err)
	}
	g := waitInService(t, as, "workers", 2)
	for _, i := range g.Instances {
		if *i.AvailabilityZone != "us-east-1b" {
			t.Errorf("instance %s launched in %s, which has no capacity", *i.InstanceId, *i.AvailabilityZone)
		}
	}
	acts, err := as.DescribeScalingActivities(ctx, &autoscaling.DescribeScalingActivitiesInput{AutoScalingGroupName: awssdk.String("workers")})
	if err != nil || len(acts.Activities) == 0 || !strings.Contains(*acts.Activities[0].Cause, "No capacity for t3.small in us-east-1a") {
		t.Errorf("the launch activity does not say zone a was skipped: %v", acts.Activities)
	}
	a.SetFaults(Faults{})

	// A new template version; scale-in takes the older version first.
	if _, err := c.CreateLaunchTemplateVersion(ctx, &ec2.CreateLaunchTemplateVersionInput{LaunchTemplateName: awssdk.String("nodes"),
		SourceVersion: awssdk.String("1"), LaunchTemplateData: &types.RequestLaunchTemplateData{InstanceType: "t3.medium"}}); err != nil {
		t.Fatal(err)
	}
	if _, err := as.UpdateAutoScalingGroup(ctx, &autoscaling.UpdateAutoScalingGroupInput{AutoScalingGroupName: awssdk.String("workers"),
		LaunchTemplate:  &astypes.LaunchTemplateSpecification{LaunchTemplateName: awssdk.String("nodes"), Version: awssdk.String("$Latest")},
		DesiredCapacity: awssdk.Int32(3)}); err != nil {
		t.Fatal(err)
	}
	g = waitInService(t, as, "workers", 3)
	var newest string
	for _, i := range g.Instances {
		if *i.LaunchTemplate.Version == "2" {
			newest = *i.InstanceId
			if *i.AvailabilityZone != "us-east-1a" || *i.InstanceType != "t3.medium" {
				t.Errorf("the third instance: %s %s; want the emptier zone us-east-1a and t3.medium", *i.AvailabilityZone, *i.InstanceType)
			}
		}
	}
	if _, err := as.SetDesiredCapacity(ctx, &autoscaling.SetDesiredCapacityInput{AutoScalingGroupName: awssdk.String("workers"), DesiredCapacity: awssdk.Int32(2)}); err != nil {
		t.Fatal(err)
	}
	g = waitInService(t, as, "workers", 2)
	ids := map[string]bool{}
	for _, i := range g.Instances {
		ids[*i.InstanceId] = true
	}
	if !ids[newest] {
		t.Errorf("scale-in terminated the newest version's instance %s", newest)
	}

	// Terminating one and decrementing: no replacement.
	for id := range ids {
		if id == newest {
			continue
		}
		out, err := as.TerminateInstanceInAutoScalingGroup(ctx, &autoscaling.TerminateInstanceInAutoScalingGroupInput{InstanceId: &id, ShouldDecrementDesiredCapacity: awssdk.Bool(true)})
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(*out.Activity.Description, id) {
			t.Errorf("the activity: %s", *out.Activity.Description)
		}
		break
	}
	g = waitInService(t, as, "workers", 1)
	if *g.DesiredCapacity != 1 {
		t.Errorf("desired after a decrementing terminate: %d", *g.DesiredCapacity)
	}
	if _, err := as.TerminateInstanceInAutoScalingGroup(ctx, &autoscaling.TerminateInstanceInAutoScalingGroupInput{InstanceId: awssdk.String("i-0000000000000000f"), ShouldDecrementDesiredCapacity: awssdk.Bool(false)}); apiCode(err) != "ValidationError" {
		t.Errorf("an instance of no group: %v", err)
	}
}

func TestAutoScalingMixedSpot(t *testing.T) {
	a, c, as := asgFixture(t)
	ctx := t.Context()
	_, err := as.CreateAutoScalingGroup(ctx, &autoscaling.CreateAutoScalingGroupInput{AutoScalingGroupName: awssdk.String("spot"),
		MixedInstancesPolicy: &astypes.MixedInstancesPolicy{
			LaunchTemplate: &astypes.LaunchTemplate{LaunchTemplateSpecification: &astypes.LaunchTemplateSpecification{LaunchTemplateName: awssdk.String("nodes")},
				Overrides: []astypes.LaunchTemplateOverrides{{InstanceType: awssdk.String("m5.large")}, {InstanceType: awssdk.String("t3.medium")}}},
			InstancesDistribution: &astypes.InstancesDistribution{OnDemandBaseCapacity: awssdk.Int32(1), OnDemandPercentageAboveBaseCapacity: awssdk.Int32(0)}},
		MinSize: awssdk.Int32(0), MaxSize: awssdk.Int32(4), DesiredCapacity: awssdk.Int32(2),
		VPCZoneIdentifier: awssdk.String("subnet-0000000000000000a")})
	if err != nil {
		t.Fatal(err)
	}
	g := waitInService(t, as, "spot", 2)
	var spot string
	for _, i := range g.Instances {
		got := describe(t, c, *i.InstanceId)
		if got.InstanceType != "m5.large" {
			t.Errorf("instance type %s; want the first override", got.InstanceType)
		}
		if got.InstanceLifecycle == types.InstanceLifecycleTypeSpot {
			spot = *i.InstanceId
		}
	}
	if spot == "" {
		t.Fatal("a base of one on-demand and 0% above launched no spot instance")
	}
	a.SetFaults(Faults{SpotNotice: Duration(100 * time.Millisecond)})
	if err := a.Interrupt(spot); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 20*time.Second, "the interrupted instance replaced", func() (bool, string) {
		g := group(t, as, "spot")
		for _, i := range g.Instances {
			if *i.InstanceId == spot {
				return false, "still a member"
			}
		}
		return len(g.Instances) == 2, "members"
	})
	acts, err := as.DescribeScalingActivities(ctx, &autoscaling.DescribeScalingActivitiesInput{AutoScalingGroupName: awssdk.String("spot")})
	found := false
	for _, act := range acts.Activities {
		found = found || strings.Contains(*act.Cause, "spot instance interruption")
	}
	if err != nil || !found {
		t.Errorf("no activity says the spot interruption: %v", err)
	}
}
