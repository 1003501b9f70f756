package aws_test

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"maps"
	"net/http/httptest"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	awssdk "github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/autoscaling"
	astypes "github.com/aws/aws-sdk-go-v2/service/autoscaling/types"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
	ec2types "github.com/aws/aws-sdk-go-v2/service/ec2/types"
	elb "github.com/aws/aws-sdk-go-v2/service/elasticloadbalancingv2"
	"github.com/aws/aws-sdk-go-v2/service/iam"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	v1 "kiln.dev/kiln/api/v1"
	"kiln.dev/kiln/internal/failure"
	"kiln.dev/kiln/internal/provider"
	"kiln.dev/kiln/internal/provider/aws"
	"kiln.dev/kiln/internal/provider/providertest"
	awslocal "kiln.dev/kiln/test/cloud/aws"
	"kiln.dev/kiln/test/waitfor"
)

const (
	keyID   = "AKIAKILNPROVIDER"
	secret  = "kiln-provider-secret"
	limited = "AKIAKILNNORUN"
	version = "v1.36.3"
)

// local is a local AWS whose instances are records only (no container
// runs), and an account of provider aws that reaches it.
type local struct {
	*awslocal.Server
	account *provider.Account
	cfg     awssdk.Config
}

func newLocal(t *testing.T) *local {
	t.Helper()
	s, err := awslocal.New(awslocal.Options{
		Credentials: []awslocal.Credential{{AccessKeyID: keyID, SecretAccessKey: secret},
			{AccessKeyID: limited, SecretAccessKey: secret, User: "no-run", Deny: []string{"ec2:RunInstances", "ec2:CreateNatGateway"}}},
		StatePath: filepath.Join(t.TempDir(), "aws.json"),
	})
	if err != nil {
		t.Fatal(err)
	}
	s.AddImage("kiln-node-"+version, "kiln/node:"+version)
	hs := httptest.NewServer(s)
	t.Cleanup(func() {
		hs.Close()
		s.Close()
	})
	return &local{
		Server: s,
		account: &provider.Account{Name: "acme", Credentials: map[string]string{
			aws.CredentialKeyID: keyID, aws.CredentialSecret: secret, aws.CredentialEndpoint: hs.URL, aws.CredentialRegion: "us-east-1"}},
		cfg: awssdk.Config{Region: "us-east-1", BaseEndpoint: awssdk.String(hs.URL),
			Credentials: credentials.NewStaticCredentialsProvider(keyID, secret, "")},
	}
}

func newProvider(t *testing.T) *aws.AWS {
	t.Helper()
	p, err := aws.New(aws.Options{
		// The real user data for a machine with bootstrap data; a script
		// that joins nothing for the others.
		UserData: func(ctx context.Context, m aws.Machine) (string, error) {
			if m.Bootstrap != nil {
				return aws.AgentUserData(ctx, m)
			}
			return "#!/bin/sh\necho join " + m.Name + "\n", nil
		},
		Versions: []string{version},
	})
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func TestContract(t *testing.T) {
	l := newLocal(t)
	ec := ec2.NewFromConfig(l.cfg)
	admin := s3.NewFromConfig(l.cfg, func(o *s3.Options) { o.UsePathStyle = true })
	if _, err := admin.CreateBucket(t.Context(), &s3.CreateBucketInput{Bucket: awssdk.String("kiln-contract")}); err != nil {
		t.Fatal(err)
	}
	account := *l.account
	account.Credentials = maps.Clone(account.Credentials)
	account.Credentials[aws.CredentialStagingBucket] = "kiln-contract"
	userData := func(ctx context.Context, m provider.Machine) (string, error) {
		attr, err := ec.DescribeInstanceAttribute(ctx, &ec2.DescribeInstanceAttributeInput{InstanceId: &m.ID, Attribute: ec2types.InstanceAttributeNameUserData})
		if err != nil {
			return "", err
		}
		script, err := base64.StdEncoding.DecodeString(awssdk.ToString(attr.UserData.Value))
		return string(script), err
	}
	providertest.Run(t, newProvider(t), providertest.WithAccount(&account), providertest.WithBootstrap(providertest.Bootstrap{
		// The staged object the user data names.
		Read: func(ctx context.Context, _ provider.Cluster, m provider.Machine) (*provider.Bootstrap, error) {
			script, err := userData(ctx, m)
			if err != nil {
				return nil, err
			}
			_, after, ok := strings.Cut(script, "--join-from s3://kiln-contract/")
			if !ok {
				return nil, fmt.Errorf("the user data names no staging object: %q", script)
			}
			key := strings.Fields(after)[0]
			obj, err := admin.GetObject(ctx, &s3.GetObjectInput{Bucket: awssdk.String("kiln-contract"), Key: &key})
			if err != nil {
				return nil, err
			}
			defer obj.Body.Close()
			var b v1.JoinBundle
			if err := json.NewDecoder(obj.Body).Decode(&b); err != nil {
				return nil, err
			}
			return (*provider.Bootstrap)(&b), nil
		},
		// The instance's user data and tags (ec2:DescribeInstanceAttribute,
		// ec2:DescribeInstances).
		Viewable: func(ctx context.Context, _ provider.Cluster, m provider.Machine) ([]string, error) {
			script, err := userData(ctx, m)
			if err != nil {
				return nil, err
			}
			out, err := ec.DescribeInstances(ctx, &ec2.DescribeInstancesInput{InstanceIds: []string{m.ID}})
			if err != nil {
				return nil, err
			}
			seen := []string{script}
			for _, r := range out.Reservations {
				for _, i := range r.Instances {
					for _, tag := range i.Tags {
						seen = append(seen, awssdk.ToString(tag.Key)+"="+awssdk.ToString(tag.Value))
					}
				}
			}
			return seen, nil
		},
	}))
}

func cluster(l *local, name string) provider.Cluster {
	return provider.Cluster{Project: "p", Name: name, UID: "uid-" + name, Account: l.account, Spec: v1.ClusterSpec{
		Provider: aws.Name, KubernetesVersion: version,
		ControlPlane: v1.ControlPlane{Size: 1, Zones: []string{"us-east-1a", "us-east-1b"}},
		WorkerPools:  []v1.WorkerPool{{Name: "default", Size: 2}}}}
}

// The architecture: per zone a public and a private subnet, a NAT gateway
// in each public one with routes from its zone's private one, the bastion
// in a public subnet, every node in a private one spread over the zones,
// control planes behind the load balancer's listener on 6443; everything
// tagged with the cluster; delete leaves nothing.
func TestLayout(t *testing.T) {
	l := newLocal(t)
	p := newProvider(t)
	ctx := t.Context()
	c := cluster(l, "c1")
	nw, err := p.EnsureNetwork(ctx, c)
	if err != nil {
		t.Fatal(err)
	}
	if nw.CIDR != "10.0.0.0/16" {
		t.Errorf("network %+v; want the default 10.0.0.0/16", nw)
	}
	lb, err := p.EnsureLoadBalancer(ctx, c)
	if err != nil {
		t.Fatal(err)
	}
	cp, err := p.EnsureMachine(ctx, c, provider.MachineSpec{Name: "c1-cp-0", Role: v1.RoleControlPlane})
	if err != nil {
		t.Fatal(err)
	}
	// The workers are the pool's Auto Scaling group's, named by their ids.
	workers, err := p.GrowPool(ctx, c, provider.MachineSpec{Name: "c1-default-0", Role: v1.RoleWorker, Pool: "default", Revision: "r1"}, nil, 2)
	if err != nil {
		t.Fatal(err)
	}
	if len(workers) != 2 || !strings.HasPrefix(workers[0].Name, "i-") || workers[0].Name != workers[0].ID || workers[0].Revision != "r1" {
		t.Fatalf("GrowPool(default, 2) = %+v; want two machines named by their instance ids, of revision r1", workers)
	}
	machines := append([]provider.Machine{cp}, workers...)
	groups, err := autoscaling.NewFromConfig(l.cfg).DescribeAutoScalingGroups(ctx, &autoscaling.DescribeAutoScalingGroupsInput{})
	if err != nil || len(groups.AutoScalingGroups) != 1 {
		t.Fatalf("Auto Scaling groups %+v, %v; want the pool's", groups, err)
	}
	g := groups.AutoScalingGroups[0]
	if *g.DesiredCapacity != 2 || len(strings.Split(*g.VPCZoneIdentifier, ",")) != 2 || g.LaunchTemplate == nil || *g.LaunchTemplate.Version != "1" {
		t.Errorf("the pool's group: desired %d, subnets %s, template %+v; want 2 in both zones' private subnets from version 1", *g.DesiredCapacity, *g.VPCZoneIdentifier, g.LaunchTemplate)
	}
	e := ec2.NewFromConfig(l.cfg)
	subnets, err := e.DescribeSubnets(ctx, &ec2.DescribeSubnetsInput{Filters: []ec2types.Filter{{Name: awssdk.String("vpc-id"), Values: []string{nw.ID}}}})
	if err != nil {
		t.Fatal(err)
	}
	public, private := map[string]string{}, map[string]string{} // subnet id -> zone
	for _, s := range subnets.Subnets {
		switch tag(s.Tags, aws.TagPart) {
		case "public-subnet":
			public[*s.SubnetId] = *s.AvailabilityZone
		case "private-subnet":
			private[*s.SubnetId] = *s.AvailabilityZone
		}
		if tag(s.Tags, "kubernetes.io/cluster/c1") != "owned" || tag(s.Tags, aws.TagCluster) != "uid-c1" {
			t.Errorf("subnet %s tags %v", *s.SubnetId, s.Tags)
		}
	}
	if len(public) != 2 || len(private) != 2 {
		t.Fatalf("public subnets %v, private %v; want one of each per zone", public, private)
	}
	nats, err := e.DescribeNatGateways(ctx, &ec2.DescribeNatGatewaysInput{Filter: []ec2types.Filter{{Name: awssdk.String("vpc-id"), Values: []string{nw.ID}}}})
	if err != nil || len(nats.NatGateways) != 2 {
		t.Fatalf("NAT gateways %v, %v; want 2", nats, err)
	}
	for _, g := range nats.NatGateways {
		if _, ok := public[*g.SubnetId]; !ok {
			t.Errorf("NAT gateway %s in subnet %s, not a public one", *g.NatGatewayId, *g.SubnetId)
		}
	}
	tables, err := e.DescribeRouteTables(ctx, &ec2.DescribeRouteTablesInput{Filters: []ec2types.Filter{{Name: awssdk.String("vpc-id"), Values: []string{nw.ID}}}})
	if err != nil {
		t.Fatal(err)
	}
	for _, rt := range tables.RouteTables {
		var def ec2types.Route
		for _, r := range rt.Routes {
			if awssdk.ToString(r.DestinationCidrBlock) == "0.0.0.0/0" {
				def = r
			}
		}
		for _, a := range rt.Associations {
			s := awssdk.ToString(a.SubnetId)
			if _, ok := public[s]; ok && !strings.HasPrefix(awssdk.ToString(def.GatewayId), "igw-") {
				t.Errorf("public subnet %s routes 0.0.0.0/0 to %+v; want the internet gateway", s, def)
			}
			if _, ok := private[s]; ok && !strings.HasPrefix(awssdk.ToString(def.NatGatewayId), "nat-") {
				t.Errorf("private subnet %s routes 0.0.0.0/0 to %+v; want its zone's NAT gateway", s, def)
			}
		}
	}
	instances, err := e.DescribeInstances(ctx, &ec2.DescribeInstancesInput{Filters: []ec2types.Filter{{Name: awssdk.String("tag:" + aws.TagCluster), Values: []string{"uid-c1"}}}})
	if err != nil {
		t.Fatal(err)
	}
	zones := map[string]int{}
	bastions := 0
	for _, r := range instances.Reservations {
		for _, i := range r.Instances {
			s := awssdk.ToString(i.SubnetId)
			if tag(i.Tags, aws.TagPart) == "bastion" {
				bastions++
				if _, ok := public[s]; !ok {
					t.Errorf("the bastion is in subnet %s, not a public one", s)
				}
				continue
			}
			if _, ok := private[s]; !ok {
				t.Errorf("node %s is in subnet %s, not a private one", tag(i.Tags, aws.TagMachine), s)
			}
			zones[private[s]]++
		}
	}
	if bastions != 1 || len(zones) != 2 {
		t.Errorf("bastions %d, nodes by zone %v; want one bastion and nodes in both zones", bastions, zones)
	}
	// The control plane behind the listener on 6443.
	lbs := elb.NewFromConfig(l.cfg)
	if !strings.HasSuffix(lb.Address, ":6443") {
		t.Errorf("load balancer address %q; want port 6443", lb.Address)
	}
	tgs, err := lbs.DescribeTargetGroups(ctx, &elb.DescribeTargetGroupsInput{LoadBalancerArn: awssdk.String(lb.ID)})
	if err != nil || len(tgs.TargetGroups) != 1 {
		t.Fatalf("target groups %v, %v", tgs, err)
	}
	health, err := lbs.DescribeTargetHealth(ctx, &elb.DescribeTargetHealthInput{TargetGroupArn: tgs.TargetGroups[0].TargetGroupArn})
	if err != nil || len(health.TargetHealthDescriptions) != 1 || *health.TargetHealthDescriptions[0].Target.Id != machines[0].ID {
		t.Errorf("targets %+v, %v; want the control plane %s", health, err, machines[0].ID)
	}
	// Run again: nothing new.
	before := l.Calls()["ec2:RunInstances"]
	if _, err := p.EnsureNetwork(ctx, c); err != nil {
		t.Fatal(err)
	}
	if _, err := p.EnsureMachine(ctx, c, provider.MachineSpec{Name: "c1-cp-0", Role: v1.RoleControlPlane}); err != nil {
		t.Fatal(err)
	}
	if n := l.Calls()["ec2:RunInstances"] - before; n != 0 || l.Calls()["ec2:CreateVpc"] != 1 {
		t.Errorf("a second ensure made %d instances, %d VPCs in all; want none new", n, l.Calls()["ec2:CreateVpc"])
	}

	// Delete: nothing tagged remains.
	deleteCluster(t, p, c, machines...)
	tags, err := e.DescribeTags(ctx, &ec2.DescribeTagsInput{Filters: []ec2types.Filter{{Name: awssdk.String("key"), Values: []string{aws.TagCluster}}}})
	if err != nil {
		t.Fatal(err)
	}
	for _, tg := range tags.Tags {
		// Terminated instances and deleted NAT gateways are described
		// for a while, as on AWS: their states are checked below.
		if tg.ResourceType != ec2types.ResourceTypeInstance && tg.ResourceType != ec2types.ResourceTypeNatgateway {
			t.Errorf("after delete, %s %s is still tagged with the cluster", tg.ResourceType, *tg.ResourceId)
		}
	}
	if nats, err = e.DescribeNatGateways(ctx, &ec2.DescribeNatGatewaysInput{}); err != nil {
		t.Fatal(err)
	}
	for _, g := range nats.NatGateways {
		if g.State != ec2types.NatGatewayStateDeleted {
			t.Errorf("after delete, NAT gateway %s is %s", *g.NatGatewayId, g.State)
		}
	}
	if instances, err = e.DescribeInstances(ctx, &ec2.DescribeInstancesInput{}); err != nil {
		t.Fatal(err)
	}
	for _, r := range instances.Reservations {
		for _, i := range r.Instances {
			if i.State.Name != ec2types.InstanceStateNameTerminated {
				t.Errorf("after delete, instance %s is %s", *i.InstanceId, i.State.Name)
			}
		}
	}
	roles, err := iam.NewFromConfig(l.cfg).ListRoles(ctx, &iam.ListRolesInput{})
	if err != nil || len(roles.Roles) != 0 {
		t.Errorf("after delete, IAM roles %v, %v", roles, err)
	}
}

// deleteCluster deletes what the plan's delete would: the machines, the
// load balancer, the network.
func deleteCluster(t *testing.T, p *aws.AWS, c provider.Cluster, machines ...provider.Machine) {
	t.Helper()
	for _, m := range machines {
		if err := p.DeleteMachine(t.Context(), c, m.Name); err != nil {
			t.Fatal(err)
		}
	}
	if err := p.DeleteLoadBalancer(t.Context(), c); err != nil {
		t.Fatal(err)
	}
	if err := p.DeleteNetwork(t.Context(), c); err != nil {
		t.Fatal(err)
	}
}

// group is the Auto Scaling group of cluster name's pool (one pool).
func group(t *testing.T, l *local, name string) astypes.AutoScalingGroup {
	t.Helper()
	out, err := autoscaling.NewFromConfig(l.cfg).DescribeAutoScalingGroups(t.Context(), &autoscaling.DescribeAutoScalingGroupsInput{
		Filters: []astypes.Filter{{Name: awssdk.String("tag:" + aws.TagCluster), Values: []string{"uid-" + name}}}})
	if err != nil || len(out.AutoScalingGroups) != 1 {
		t.Fatalf("the groups of cluster %s: %+v, %v; want one", name, out, err)
	}
	return out.AutoScalingGroups[0]
}

func names(ms []provider.Machine) []string {
	var out []string
	for _, m := range ms {
		out = append(out, m.Name)
	}
	return out
}

func tag(tags []ec2types.Tag, key string) string {
	for _, t := range tags {
		if *t.Key == key {
			return *t.Value
		}
	}
	return ""
}

// Throttling and eventual consistency are absorbed: the SDK retries the
// throttled calls and the provider waits for what it made to be described
// (a retried step would otherwise make a second VPC).
func TestThrottlingAndEventualConsistency(t *testing.T) {
	l := newLocal(t)
	p := newProvider(t)
	l.SetFaults(awslocal.Faults{ThrottleEvery: 4, DescribeDelay: awslocal.Duration(700 * time.Millisecond)})
	c := cluster(l, "slow")
	attempts := 0
	ctx, retried := provider.WithCallRetries(t.Context())
	for {
		attempts++
		_, err := p.EnsureNetwork(ctx, c)
		if err == nil {
			break
		}
		if fe := failure.From(err); !fe.Retryable || attempts > 8 {
			t.Fatalf("attempt %d: %v", attempts, err)
		}
		t.Logf("attempt %d: %v", attempts, err)
	}
	l.SetFaults(awslocal.Faults{})
	// The SDK retried the throttled calls, and said so to the step.
	if retried.Count() == 0 {
		t.Errorf("no retried call counted, with every 4th call throttled")
	}
	e := ec2.NewFromConfig(l.cfg)
	f := []ec2types.Filter{{Name: awssdk.String("tag:" + aws.TagCluster), Values: []string{"uid-slow"}}}
	vpcs, err := e.DescribeVpcs(t.Context(), &ec2.DescribeVpcsInput{Filters: f})
	if err != nil || len(vpcs.Vpcs) != 1 {
		t.Errorf("VPCs of the cluster: %v, %v; want one", vpcs, err)
	}
	subnets, err := e.DescribeSubnets(t.Context(), &ec2.DescribeSubnetsInput{Filters: f})
	if err != nil || len(subnets.Subnets) != 4 {
		t.Errorf("subnets of the cluster: %d, %v; want 4", len(subnets.Subnets), err)
	}
	groups, err := e.DescribeSecurityGroups(t.Context(), &ec2.DescribeSecurityGroupsInput{Filters: f})
	if err != nil || len(groups.SecurityGroups) != 4 {
		t.Errorf("security groups of the cluster: %d, %v; want 4", len(groups.SecurityGroups), err)
	}
	t.Logf("network made in %d attempts with every 4th call throttled (%d retried by the SDK) and describes 700ms late; calls %v", attempts, retried.Count(), l.Calls())
}

// A credential that may not launch instances is named by the dry run.
func TestPreflightNamesMissingPermissions(t *testing.T) {
	l := newLocal(t)
	p := newProvider(t)
	c := cluster(l, "denied")
	findings, err := p.Preflight(t.Context(), c)
	if err != nil || len(findings) != 0 {
		t.Fatalf("Preflight with a full key = %v, %v; want nothing", findings, err)
	}
	c.Account = &provider.Account{Name: "no-run", Credentials: map[string]string{aws.CredentialKeyID: limited, aws.CredentialSecret: secret,
		aws.CredentialEndpoint: l.account.Credentials[aws.CredentialEndpoint]}}
	findings, err = p.Preflight(t.Context(), c)
	if err != nil {
		t.Fatal(err)
	}
	var named []string
	for _, f := range findings {
		if f.Code != v1.CodeForbidden || f.Target != "spec.cloudAccount" {
			t.Errorf("finding %+v", f)
		}
		named = append(named, f.Message)
	}
	if len(findings) != 2 || !strings.Contains(named[0]+named[1], "ec2:RunInstances") || !strings.Contains(named[0]+named[1], "ec2:CreateNatGateway") {
		t.Errorf("findings %q; want ec2:RunInstances and ec2:CreateNatGateway named", named)
	}
	if l.Calls()["ec2:RunInstances"] != 2 || slices.Contains(named, "") {
		t.Errorf("RunInstances called %d times; want the two dry runs only", l.Calls()["ec2:RunInstances"])
	}
}

// A zone without capacity for the type: a machine goes to the next zone it
// is allowed, saying so; one allowed that zone only fails naming the field
// to change.
func TestCapacityRoutedToAnotherZone(t *testing.T) {
	l := newLocal(t)
	p := newProvider(t)
	c := cluster(l, "cap")
	c.Spec.ControlPlane.Zones = nil // the region's first two: us-east-1a, us-east-1b
	if _, err := p.EnsureNetwork(t.Context(), c); err != nil {
		t.Fatal(err)
	}
	l.SetFaults(awslocal.Faults{NoCapacity: []string{aws.DefaultInstanceType + "/us-east-1a"}})
	// A pool's group launches where there is capacity.
	ms, err := p.GrowPool(t.Context(), c, provider.MachineSpec{Name: "cap-default-0", Role: v1.RoleWorker, Pool: "default"}, nil, 2)
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range ms {
		if m.Zone != "us-east-1b" {
			t.Errorf("pool machine %s in %s; want us-east-1b, the zone with capacity", m.Name, m.Zone)
		}
	}
	// With none in any of its zones, the pool fails at once naming the
	// field, and its group is set back.
	l.SetFaults(awslocal.Faults{NoCapacity: []string{aws.DefaultInstanceType + "/us-east-1a", aws.DefaultInstanceType + "/us-east-1b"}})
	_, err = p.GrowPool(t.Context(), c, provider.MachineSpec{Name: "cap-default-2", Role: v1.RoleWorker, Pool: "default"}, names(ms), 1)
	if fe := failure.From(err); err == nil || fe.Retryable || fe.Code != v1.CodeQuotaExceeded || fe.Target != "spec.workerPools[0].instanceType" || !strings.Contains(fe.Message, "InsufficientInstanceCapacity") {
		t.Errorf("a pool without capacity in its zones: %+v; want a terminal QuotaExceeded on spec.workerPools[0].instanceType", fe)
	}
	if g := group(t, l, "cap"); *g.DesiredCapacity != 2 {
		t.Errorf("the pool's group wants %d after the failed launch; want 2, as before", *g.DesiredCapacity)
	}
	l.SetFaults(awslocal.Faults{NoCapacity: []string{aws.DefaultInstanceType + "/us-east-1a"}})
	// A zone from the spec's list: the list's other zone is allowed.
	c.Spec.ControlPlane.Zones = []string{"us-east-1a", "us-east-1b"}
	cp, err := p.EnsureMachine(t.Context(), c, provider.MachineSpec{Name: "cap-cp-0", Role: v1.RoleControlPlane, Zone: "us-east-1a"})
	if err != nil || cp.Zone != "us-east-1b" || cp.Note == "" {
		t.Errorf("a control plane given us-east-1a of [us-east-1a us-east-1b]: %+v, %v; want us-east-1b with a note", cp, err)
	}
	// One zone allowed: it fails there.
	c.Spec.ControlPlane.Zones = []string{"us-east-1a"}
	_, err = p.EnsureMachine(t.Context(), c, provider.MachineSpec{Name: "cap-cp-1", Role: v1.RoleControlPlane, Zone: "us-east-1a"})
	fe := failure.From(err)
	if err == nil || fe.Retryable || fe.Code != v1.CodeQuotaExceeded || fe.Target != "spec.controlPlane.instanceType" || !strings.Contains(fe.Message, "InsufficientInstanceCapacity") {
		t.Errorf("a control plane pinned to a zone without capacity: %+v; want a terminal QuotaExceeded on spec.controlPlane.instanceType", fe)
	}
}

// The dry run names a pool whose instance type AWS does not offer in one of
// its zones (the local AWS offers c5.xlarge in no zone c), and a launch
// beyond the account's vCPU quota fails naming the field.
func TestZoneOfferingsAndVCPUQuota(t *testing.T) {
	l := newLocal(t)
	p := newProvider(t)
	c := cluster(l, "types")
	c.Spec.WorkerPools = []v1.WorkerPool{{Name: "big", Size: 1, InstanceType: "c5.xlarge", Zones: []string{"us-east-1b", "us-east-1c"}}}
	findings, err := p.Preflight(t.Context(), c)
	if err != nil {
		t.Fatal(err)
	}
	if len(findings) != 1 || findings[0].Target != "spec.workerPools[0].instanceType" || !strings.Contains(findings[0].Message, "c5.xlarge in us-east-1c") {
		t.Errorf("findings %+v; want c5.xlarge in us-east-1c named on spec.workerPools[0].instanceType", findings)
	}
	o, err := p.Describe(t.Context(), l.account, "us-east-1")
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := o.InstanceType("c5.xlarge"); !ok {
		t.Errorf("the offer has no c5.xlarge (offered in zones a and b): %+v", o.InstanceTypes)
	}

	c = cluster(l, "quota")
	// The dry run: 1 + 2 m5.large and the bastion need 8 vCPUs; the
	// largest part, the pool, is named.
	l.SetFaults(awslocal.Faults{VCPUQuota: 6})
	findings, err = p.Preflight(t.Context(), c)
	if err != nil {
		t.Fatal(err)
	}
	if len(findings) != 1 || findings[0].Code != v1.CodeQuotaExceeded || findings[0].Target != "spec.workerPools[0].size" ||
		!strings.Contains(findings[0].Message, "8 vCPUs more") || !strings.Contains(findings[0].Message, "room for 6") {
		t.Errorf("dry run beyond the vCPU quota: %+v; want QuotaExceeded on spec.workerPools[0].size saying 8 needed, room for 6", findings)
	}
	l.SetFaults(awslocal.Faults{VCPUQuota: 8})
	if findings, err = p.Preflight(t.Context(), c); err != nil || len(findings) != 0 {
		t.Errorf("dry run within the vCPU quota: %+v, %v; want no finding", findings, err)
	}
	if _, err := p.EnsureNetwork(t.Context(), c); err != nil {
		t.Fatal(err)
	}
	l.SetFaults(awslocal.Faults{VCPUQuota: 4}) // the bastion (2) and one m5.large (2)
	if _, err := p.EnsureMachine(t.Context(), c, provider.MachineSpec{Name: "quota-cp-0", Role: v1.RoleControlPlane}); err != nil {
		t.Fatal(err)
	}
	_, err = p.GrowPool(t.Context(), c, provider.MachineSpec{Name: "quota-default-0", Role: v1.RoleWorker, Pool: "default"}, nil, 1)
	fe := failure.From(err)
	if err == nil || fe.Retryable || fe.Code != v1.CodeQuotaExceeded || fe.Target != "spec.workerPools[0].instanceType" || !strings.Contains(fe.Message, "VcpuLimitExceeded") {
		t.Errorf("a launch beyond the vCPU quota: %+v; want a terminal QuotaExceeded naming VcpuLimitExceeded on spec.workerPools[0].instanceType", fe)
	}
}

// A spot pool AWS has no spot capacity for fails naming the way out; with
// spot.fallbackOnDemand its group launches on-demand instead, said in the
// machine's note, and its next growth tries spot first again.
func TestSpotFallbackOnDemand(t *testing.T) {
	l := newLocal(t)
	p := newProvider(t)
	ctx := t.Context()
	c := cluster(l, "spot")
	c.Spec.WorkerPools[0].Spot = &v1.Spot{MaxPricePercent: 50}
	if _, err := p.EnsureNetwork(ctx, c); err != nil {
		t.Fatal(err)
	}
	l.SetFaults(awslocal.Faults{NoSpotCapacity: []string{aws.DefaultInstanceType + "/*"}})
	spec := provider.MachineSpec{Name: "spot-default-0", Role: v1.RoleWorker, Pool: "default"}
	_, err := p.GrowPool(ctx, c, spec, nil, 1)
	if fe := failure.From(err); err == nil || fe.Retryable || fe.Code != v1.CodeQuotaExceeded || fe.Target != "spec.workerPools[0].instanceType" || !strings.Contains(fe.Message, "spot.fallbackOnDemand") {
		t.Fatalf("a spot pool without spot capacity: %+v; want a terminal QuotaExceeded naming spot.fallbackOnDemand", fe)
	}
	c.Spec.WorkerPools[0].Spot.FallbackOnDemand = true
	ms, err := p.GrowPool(ctx, c, spec, nil, 1)
	if err != nil {
		t.Fatal(err)
	}
	e := ec2.NewFromConfig(l.cfg)
	if len(ms) != 1 || !strings.Contains(ms[0].Note, "launched on-demand") || describeOne(t, e, ms[0].ID).InstanceLifecycle == ec2types.InstanceLifecycleTypeSpot {
		t.Fatalf("with fallbackOnDemand: %+v; want an on-demand instance and a note saying why", ms)
	}
	l.SetFaults(awslocal.Faults{})
	more, err := p.GrowPool(ctx, c, spec, []string{ms[0].Name}, 1)
	if err != nil {
		t.Fatal(err)
	}
	if len(more) != 1 || more[0].Note != "" || describeOne(t, e, more[0].ID).InstanceLifecycle != ec2types.InstanceLifecycleTypeSpot {
		t.Errorf("the next growth with spot capacity back: %+v; want a spot instance", more)
	}
}

func describeOne(t *testing.T, e *ec2.Client, id string) ec2types.Instance {
	t.Helper()
	out, err := e.DescribeInstances(t.Context(), &ec2.DescribeInstancesInput{InstanceIds: []string{id}})
	if err != nil || len(out.Reservations) != 1 {
		t.Fatalf("DescribeInstances %s: %+v, %v", id, out, err)
	}
	return out.Reservations[0].Instances[0]
}

// A pool the spec no longer has loses its group and launch template with
// its last machine; a pool the spec keeps keeps its group at size 0.
func TestRemovedPoolGroupGoes(t *testing.T) {
	l := newLocal(t)
	p := newProvider(t)
	ctx := t.Context()
	c := cluster(l, "gone")
	c.Spec.WorkerPools = []v1.WorkerPool{{Name: "default", Size: 1}, {Name: "batch", Size: 1}}
	var ms []provider.Machine
	for _, pool := range []string{"default", "batch"} {
		got, err := p.GrowPool(ctx, c, provider.MachineSpec{Name: "gone-" + pool + "-0", Role: v1.RoleWorker, Pool: pool}, nil, 1)
		if err != nil {
			t.Fatal(err)
		}
		ms = append(ms, got...)
	}
	c.Spec.WorkerPools = c.Spec.WorkerPools[:1] // batch removed
	for _, m := range ms {
		if err := p.DeleteMachine(ctx, c, m.Name); err != nil {
			t.Fatal(err)
		}
	}
	out, err := autoscaling.NewFromConfig(l.cfg).DescribeAutoScalingGroups(ctx, &autoscaling.DescribeAutoScalingGroupsInput{})
	if err != nil {
		t.Fatal(err)
	}
	var live []string
	for _, g := range out.AutoScalingGroups {
		if awssdk.ToString(g.Status) == "" {
			live = append(live, tagOfGroup(g, aws.TagPool))
		}
	}
	if !slices.Equal(live, []string{"default"}) {
		t.Errorf("groups after removing pool batch and every machine: %v; want default's only", live)
	}
}

func tagOfGroup(g astypes.AutoScalingGroup, key string) string {
	for _, tg := range g.Tags {
		if awssdk.ToString(tg.Key) == key {
			return awssdk.ToString(tg.Value)
		}
	}
	return ""
}

// A control-plane machine stops with its volumes kept (hibernation) and
// EnsureMachine starts the same instance again; a pool's instance cannot
// be stopped.
func TestStopAndStartMachine(t *testing.T) {
	l := newLocal(t)
	p := newProvider(t)
	c := cluster(l, "nap")
	if _, err := p.EnsureNetwork(t.Context(), c); err != nil {
		t.Fatal(err)
	}
	cp, err := p.EnsureMachine(t.Context(), c, provider.MachineSpec{Name: "nap-cp-0", Role: v1.RoleControlPlane})
	if err != nil {
		t.Fatal(err)
	}
	state := func(id string) ec2types.InstanceStateName {
		t.Helper()
		out, err := ec2.NewFromConfig(l.cfg).DescribeInstances(t.Context(), &ec2.DescribeInstancesInput{InstanceIds: []string{id}})
		if err != nil {
			t.Fatal(err)
		}
		return out.Reservations[0].Instances[0].State.Name
	}
	waitfor.Cond(t, "the instance running", time.Minute, func() (bool, error) { return state(cp.ID) == ec2types.InstanceStateNameRunning, nil })
	if err := p.StopMachine(t.Context(), c, "nap-cp-0"); err != nil {
		t.Fatal(err)
	}
	if s := state(cp.ID); s != ec2types.InstanceStateNameStopped {
		t.Fatalf("after StopMachine: %s, want stopped", s)
	}
	if err := p.StopMachine(t.Context(), c, "nap-cp-0"); err != nil {
		t.Errorf("StopMachine of a stopped machine: %v", err)
	}
	again, err := p.EnsureMachine(t.Context(), c, provider.MachineSpec{Name: "nap-cp-0", Role: v1.RoleControlPlane})
	if err != nil || again.ID != cp.ID || again.Address != cp.Address {
		t.Fatalf("EnsureMachine of the stopped machine: %+v, %v; want %s at %s again", again, err, cp.ID, cp.Address)
	}
	if s := state(cp.ID); s != ec2types.InstanceStateNamePending && s != ec2types.InstanceStateNameRunning {
		t.Errorf("after EnsureMachine: %s, want started", s)
	}
	ms, err := p.GrowPool(t.Context(), c, provider.MachineSpec{Name: "nap-default-0", Role: v1.RoleWorker, Pool: "default"}, nil, 1)
	if err != nil {
		t.Fatal(err)
	}
	if err := p.StopMachine(t.Context(), c, ms[0].Name); err == nil || failure.From(err).Retryable {
		t.Errorf("StopMachine of a pool's instance: %v; want a terminal error", err)
	}
}
