package aws

import (
	"context"
	"errors"
	"net/netip"
	"regexp"
	"sync"
	"testing"
	"time"

	awssdk "github.com/aws/aws-sdk-go-v2/aws"
	elb "github.com/aws/aws-sdk-go-v2/service/elasticloadbalancingv2"
	"github.com/aws/aws-sdk-go-v2/service/elasticloadbalancingv2/types"

	"kiln.dev/kiln/test/waitfor"
)

// loopbackMachines is a Machines whose every subnet's network is loopback:
// load balancers listen on 127.0.0.1. Its machines are the test's own
// loopback servers: every instance's machine runs, as far as the compute
// loop can tell, and nothing is made or removed.
type loopbackMachines struct{}

func (loopbackMachines) Address(context.Context, *subnet) (netip.Addr, error) {
	return netip.MustParseAddr("127.0.0.1"), nil
}

func (loopbackMachines) Images(context.Context) ([]*image, error)     { return nil, nil }
func (loopbackMachines) Create(context.Context, machineSpec) error    { return nil }
func (loopbackMachines) Start(context.Context, string) error          { return nil }
func (loopbackMachines) Stop(context.Context, string) error           { return nil }
func (loopbackMachines) Remove(context.Context, string) error         { return nil }
func (loopbackMachines) Prune(context.Context, map[string]bool) error { return nil }

// States says the machine of every instance a test added runs: the
// compute loop leaves the test's instances as the test made them.
func (loopbackMachines) States(context.Context) (map[string]machineState, error) {
	loopbackRunning.Lock()
	defer loopbackRunning.Unlock()
	out := map[string]machineState{}
	for id := range loopbackRunning.ids {
		out[id] = machineState{Running: true}
	}
	return out, nil
}

// loopbackRunning are the instances addInstance added, whose machines are
// the test's loopback servers.
var loopbackRunning = struct {
	sync.Mutex
	ids map[string]bool
}{ids: map[string]bool{}}

// addSubnet puts a subnet into the state, as networking would.
func (a *testAWS) addSubnet(id, vpc, zone string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.st.EC2.Net.Subnets[id] = &subnet{ID: id, VPCID: vpc, CIDR: "10.0.0.0/24", Zone: zone, Region: "us-east-1"}
}

// addInstance puts an instance into the state, as compute would.
func (a *testAWS) addInstance(id, vpc, subnetID, ip, state string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.st.EC2.Compute.Instances[id] = &instance{ID: id, State: state, PrivateIP: ip, SubnetID: subnetID, VPCID: vpc, Zone: "us-east-1a", Region: "us-east-1", Made: true}
	loopbackRunning.Lock()
	loopbackRunning.ids[id] = true
	loopbackRunning.Unlock()
}

func (a *testAWS) setInstanceState(id, state string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.st.EC2.Compute.Instances[id].State = state
}

// fastELB makes load balancers active at once and checks health every
// 50ms.
func (a *testAWS) fastELB() {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.elb().rt.interval = 50 * time.Millisecond
	a.elb().rt.provisioning = 0
	a.wakeELB()
}

// eventually waits up to 10 s until check says nothing is wrong.
func eventually(t *testing.T, what string, check func() string) {
	t.Helper()
	waitfor.Cond(t, what, 10*time.Second, func() (bool, error) {
		if msg := check(); msg != "" {
			return false, waitfor.NotYet(errors.New(msg))
		}
		return true, nil
	})
}

// network makes two subnets of vpc-1 in zones a and b and one of vpc-2.
func (a *testAWS) network() {
	a.addSubnet("subnet-a", "vpc-1", "us-east-1a")
	a.addSubnet("subnet-b", "vpc-1", "us-east-1b")
	a.addSubnet("subnet-a2", "vpc-1", "us-east-1a")
	a.addSubnet("subnet-x", "vpc-2", "us-east-1c")
}

func createNLB(t *testing.T, c *elb.Client, name string, subnets ...string) types.LoadBalancer {
	t.Helper()
	out, err := c.CreateLoadBalancer(t.Context(), &elb.CreateLoadBalancerInput{Name: &name, Type: types.LoadBalancerTypeEnumNetwork,
		Scheme: types.LoadBalancerSchemeEnumInternal, Subnets: subnets,
		Tags: []types.Tag{{Key: awssdk.String("kiln.dev/cluster"), Value: awssdk.String("c1")}}})
	if err != nil {
		t.Fatalf("CreateLoadBalancer %s: %v", name, err)
	}
	return out.LoadBalancers[0]
}

func createTG(t *testing.T, c *elb.Client, in *elb.CreateTargetGroupInput) types.TargetGroup {
	t.Helper()
	if in.Protocol == "" {
		in.Protocol = types.ProtocolEnumTcp
	}
	if in.VpcId == nil {
		in.VpcId = awssdk.String("vpc-1")
	}
	out, err := c.CreateTargetGroup(t.Context(), in)
	if err != nil {
		t.Fatalf("CreateTargetGroup %s: %v", *in.Name, err)
	}
	return out.TargetGroups[0]
}

func forward(tg string) []types.Action {
	return []types.Action{{Type: types.ActionTypeEnumForward, TargetGroupArn: &tg}}
}

// TestELBErrors checks the answers a client branches on: the error codes
// of load balancers, target groups, targets and listeners.
func TestELBErrors(t *testing.T) {
	a := newTestAWS(t, Options{})
	a.network()
	a.addInstance("i-0000000000000000a", "vpc-1", "subnet-a", "10.0.0.10", "running")
	a.addInstance("i-000000000000000dd", "vpc-1", "subnet-a", "10.0.0.11", "terminated")
	a.addInstance("i-0000000000000000e", "vpc-2", "subnet-x", "10.0.0.12", "running")
	c := elb.NewFromConfig(a.config(testKey))
	ctx := t.Context()
	nlb := createNLB(t, c, "api", "subnet-a")
	tg := createTG(t, c, &elb.CreateTargetGroupInput{Name: awssdk.String("api"), Port: awssdk.Int32(6443)})
	if _, err := c.CreateListener(ctx, &elb.CreateListenerInput{LoadBalancerArn: nlb.LoadBalancerArn, Protocol: types.ProtocolEnumTcp,
		Port: awssdk.Int32(6443), DefaultActions: forward(*tg.TargetGroupArn)}); err != nil {
		t.Fatal(err)
	}
	other := createTG(t, c, &elb.CreateTargetGroupInput{Name: awssdk.String("other"), Port: awssdk.Int32(22)})
	missingLB := "arn:aws:elasticloadbalancing:us-east-1:123456789012:loadbalancer/net/nope/0123456789abcdef"
	tests := []struct {
		name string
		call func() error
		want string
	}{
		{"application load balancer", func() error {
			_, err := c.CreateLoadBalancer(ctx, &elb.CreateLoadBalancerInput{Name: awssdk.String("alb"), Subnets: []string{"subnet-a"}})
			return err
		}, "InvalidConfigurationRequest"},
		{"unknown subnet", func() error {
			_, err := c.CreateLoadBalancer(ctx, &elb.CreateLoadBalancerInput{Name: awssdk.String("x"), Type: types.LoadBalancerTypeEnumNetwork, Subnets: []string{"subnet-nope"}})
			return err
		}, "SubnetNotFound"},
		{"two subnets in one zone", func() error {
			_, err := c.CreateLoadBalancer(ctx, &elb.CreateLoadBalancerInput{Name: awssdk.String("x"), Type: types.LoadBalancerTypeEnumNetwork, Subnets: []string{"subnet-a", "subnet-a2"}})
			return err
		}, "InvalidConfigurationRequest"},
		{"subnets of two VPCs", func() error {
			_, err := c.CreateLoadBalancer(ctx, &elb.CreateLoadBalancerInput{Name: awssdk.String("x"), Type: types.LoadBalancerTypeEnumNetwork, Subnets: []string{"subnet-a", "subnet-x"}})
			return err
		}, "InvalidConfigurationRequest"},
		{"bad name", func() error {
			_, err := c.CreateLoadBalancer(ctx, &elb.CreateLoadBalancerInput{Name: awssdk.String("-x"), Type: types.LoadBalancerTypeEnumNetwork, Subnets: []string{"subnet-a"}})
			return err
		}, "ValidationError"},
		{"same name, other settings", func() error {
			_, err := c.CreateLoadBalancer(ctx, &elb.CreateLoadBalancerInput{Name: awssdk.String("api"), Type: types.LoadBalancerTypeEnumNetwork, Subnets: []string{"subnet-a", "subnet-b"}})
			return err
		}, "DuplicateLoadBalancerName"},
		{"describe an unknown name", func() error {
			_, err := c.DescribeLoadBalancers(ctx, &elb.DescribeLoadBalancersInput{Names: []string{"nope"}})
			return err
		}, "LoadBalancerNotFound"},
		{"describe an unknown ARN", func() error {
			_, err := c.DescribeLoadBalancers(ctx, &elb.DescribeLoadBalancersInput{LoadBalancerArns: []string{missingLB}})
			return err
		}, "LoadBalancerNotFound"},
		{"target group of the same name, other port", func() error {
			_, err := c.CreateTargetGroup(ctx, &elb.CreateTargetGroupInput{Name: awssdk.String("api"), Protocol: types.ProtocolEnumTcp, Port: awssdk.Int32(443), VpcId: awssdk.String("vpc-1")})
			return err
		}, "DuplicateTargetGroupName"},
		{"target group in an unknown VPC", func() error {
			_, err := c.CreateTargetGroup(ctx, &elb.CreateTargetGroupInput{Name: awssdk.String("y"), Protocol: types.ProtocolEnumTcp, Port: awssdk.Int32(443), VpcId: awssdk.String("vpc-nope")})
			return err
		}, "ValidationError"},
		{"describe an unknown target group", func() error {
			_, err := c.DescribeTargetGroups(ctx, &elb.DescribeTargetGroupsInput{Names: []string{"nope"}})
			return err
		}, "TargetGroupNotFound"},
		{"register an unknown instance", func() error {
			_, err := c.RegisterTargets(ctx, &elb.RegisterTargetsInput{TargetGroupArn: tg.TargetGroupArn, Targets: []types.TargetDescription{{Id: awssdk.String("i-0123456789abcdef0")}}})
			return err
		}, "InvalidTarget"},
		{"register a terminated instance", func() error {
			_, err := c.RegisterTargets(ctx, &elb.RegisterTargetsInput{TargetGroupArn: tg.TargetGroupArn, Targets: []types.TargetDescription{{Id: awssdk.String("i-000000000000000dd")}}})
			return err
		}, "InvalidTarget"},
		{"register an instance of another VPC", func() error {
			_, err := c.RegisterTargets(ctx, &elb.RegisterTargetsInput{TargetGroupArn: tg.TargetGroupArn, Targets: []types.TargetDescription{{Id: awssdk.String("i-0000000000000000e")}}})
			return err
		}, "InvalidTarget"},
		{"deregister a target not registered", func() error {
			_, err := c.DeregisterTargets(ctx, &elb.DeregisterTargetsInput{TargetGroupArn: tg.TargetGroupArn, Targets: []types.TargetDescription{{Id: awssdk.String("i-0000000000000000a")}}})
			return err
		}, "InvalidTarget"},
		{"a second listener on the port", func() error {
			_, err := c.CreateListener(ctx, &elb.CreateListenerInput{LoadBalancerArn: nlb.LoadBalancerArn, Protocol: types.ProtocolEnumTcp, Port: awssdk.Int32(6443), DefaultActions: forward(*other.TargetGroupArn)})
			return err
		}, "DuplicateListener"},
		{"a listener of an unknown load balancer", func() error {
			_, err := c.CreateListener(ctx, &elb.CreateListenerInput{LoadBalancerArn: &missingLB, Protocol: types.ProtocolEnumTcp, Port: awssdk.Int32(1), DefaultActions: forward(*other.TargetGroupArn)})
			return err
		}, "LoadBalancerNotFound"},
		{"delete a target group in use", func() error {
			_, err := c.DeleteTargetGroup(ctx, &elb.DeleteTargetGroupInput{TargetGroupArn: tg.TargetGroupArn})
			return err
		}, "ResourceInUse"},
		{"tag an unknown load balancer", func() error {
			_, err := c.AddTags(ctx, &elb.AddTagsInput{ResourceArns: []string{missingLB}, Tags: []types.Tag{{Key: awssdk.String("k"), Value: awssdk.String("v")}}})
			return err
		}, "LoadBalancerNotFound"},
		{"describe an unknown listener", func() error {
			_, err := c.DescribeListeners(ctx, &elb.DescribeListenersInput{ListenerArns: []string{"arn:aws:elasticloadbalancing:us-east-1:123456789012:listener/net/api/0123456789abcdef/0123456789abcdef"}})
			return err
		}, "ListenerNotFound"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if err := tt.call(); apiCode(err) != tt.want {
				t.Errorf("error = %v; want %s", err, tt.want)
			}
		})
	}
}

var (
	lbARN       = regexp.MustCompile(`^arn:aws:elasticloadbalancing:us-east-1:123456789012:loadbalancer/net/api/[0-9a-f]{16}$`)
	tgARN       = regexp.MustCompile(`^arn:aws:elasticloadbalancing:us-east-1:123456789012:targetgroup/api/[0-9a-f]{16}$`)
	listenerARN = regexp.MustCompile(`^arn:aws:elasticloadbalancing:us-east-1:123456789012:listener/net/api/[0-9a-f]{16}/[0-9a-f]{16}$`)
)

// TestNLBLifecycle follows a load balancer from creation to deletion as a
// provider drives it, with no Machines (records only).
func TestNLBLifecycle(t *testing.T) {
	a := newTestAWS(t, Options{})
	a.network()
	a.addInstance("i-0000000000000000a", "vpc-1", "subnet-a", "127.0.0.10", "running") // refuses connections
	a.addInstance("i-0000000000000000c", "vpc-1", "subnet-a", "10.0.0.12", "running")
	a.fastELB()
	c := elb.NewFromConfig(a.config(testKey))
	ctx := t.Context()

	nlb := createNLB(t, c, "api", "subnet-a", "subnet-b")
	if !lbARN.MatchString(*nlb.LoadBalancerArn) || nlb.State.Code != types.LoadBalancerStateEnumProvisioning ||
		*nlb.DNSName != "127.0.0.1" || *nlb.VpcId != "vpc-1" || len(nlb.AvailabilityZones) != 2 {
		t.Fatalf("created %s, state %s, DNS name %s, VPC %s, zones %v", *nlb.LoadBalancerArn, nlb.State.Code, *nlb.DNSName, *nlb.VpcId, nlb.AvailabilityZones)
	}
	if again := createNLB(t, c, "api", "subnet-a", "subnet-b"); *again.LoadBalancerArn != *nlb.LoadBalancerArn {
		t.Errorf("creating it again made %s; CreateLoadBalancer is idempotent", *again.LoadBalancerArn)
	}
	waiter := elb.NewLoadBalancerAvailableWaiter(c)
	if err := waiter.Wait(ctx, &elb.DescribeLoadBalancersInput{Names: []string{"api"}}, 10*time.Second, func(o *elb.LoadBalancerAvailableWaiterOptions) {
		o.MinDelay, o.MaxDelay = 50*time.Millisecond, 100*time.Millisecond
	}); err != nil {
		t.Fatalf("waiting for the load balancer to be active: %v", err)
	}

	tg := createTG(t, c, &elb.CreateTargetGroupInput{Name: awssdk.String("api"), Port: awssdk.Int32(6443), TargetType: types.TargetTypeEnumInstance,
		HealthCheckProtocol: types.ProtocolEnumTcp, HealthCheckPort: awssdk.String("traffic-port"), HealthCheckIntervalSeconds: awssdk.Int32(10),
		HealthyThresholdCount: awssdk.Int32(3), UnhealthyThresholdCount: awssdk.Int32(3)})
	if !tgARN.MatchString(*tg.TargetGroupArn) || *tg.HealthCheckIntervalSeconds != 10 || *tg.HealthyThresholdCount != 3 || *tg.Port != 6443 {
		t.Fatalf("target group %s, interval %d, healthy threshold %d", *tg.TargetGroupArn, *tg.HealthCheckIntervalSeconds, *tg.HealthyThresholdCount)
	}
	if _, err := c.RegisterTargets(ctx, &elb.RegisterTargetsInput{TargetGroupArn: tg.TargetGroupArn, Targets: []types.TargetDescription{{Id: awssdk.String("i-0000000000000000a")}}}); err != nil {
		t.Fatal(err)
	}
	health := func(ids ...string) []types.TargetHealthDescription {
		t.Helper()
		in := &elb.DescribeTargetHealthInput{TargetGroupArn: tg.TargetGroupArn}
		for _, id := range ids {
			in.Targets = append(in.Targets, types.TargetDescription{Id: awssdk.String(id)})
		}
		out, err := c.DescribeTargetHealth(ctx, in)
		if err != nil {
			t.Fatal(err)
		}
		return out.TargetHealthDescriptions
	}
	if h := health(); len(h) != 1 || h[0].TargetHealth.State != types.TargetHealthStateEnumUnused || h[0].TargetHealth.Reason != types.TargetHealthReasonEnumNotInUse {
		t.Errorf("a target of a group no listener uses: %+v; want unused, Target.NotInUse", h)
	}
	ln, err := c.CreateListener(ctx, &elb.CreateListenerInput{LoadBalancerArn: nlb.LoadBalancerArn, Protocol: types.ProtocolEnumTcp,
		Port: awssdk.Int32(6443), DefaultActions: forward(*tg.TargetGroupArn)})
	if err != nil {
		t.Fatal(err)
	}
	if arn := *ln.Listeners[0].ListenerArn; !listenerARN.MatchString(arn) {
		t.Errorf("listener ARN %s", arn)
	}
	// 127.0.0.10 refuses: after 3 failed checks the target is unhealthy.
	eventually(t, "the target's health", func() string {
		h := health()[0].TargetHealth
		if h.State == types.TargetHealthStateEnumUnhealthy && h.Reason == types.TargetHealthReasonEnumFailedHealthChecks {
			return ""
		}
		return string(h.State) + " " + string(h.Reason)
	})
	a.setInstanceState("i-0000000000000000a", "stopped")
	if h := health()[0].TargetHealth; h.State != types.TargetHealthStateEnumUnused || h.Reason != types.TargetHealthReasonEnumInvalidState {
		t.Errorf("the target of a stopped instance: %s %s; want unused, Target.InvalidState", h.State, h.Reason)
	}
	if h := health("i-0000000000000000c"); len(h) != 1 || h[0].TargetHealth.State != types.TargetHealthStateEnumUnused || h[0].TargetHealth.Reason != types.TargetHealthReasonEnumNotRegistered {
		t.Errorf("an instance not registered: %+v; want unused, Target.NotRegistered", h)
	}

	groups, err := c.DescribeTargetGroups(ctx, &elb.DescribeTargetGroupsInput{LoadBalancerArn: nlb.LoadBalancerArn})
	if err != nil || len(groups.TargetGroups) != 1 || len(groups.TargetGroups[0].LoadBalancerArns) != 1 || groups.TargetGroups[0].LoadBalancerArns[0] != *nlb.LoadBalancerArn {
		t.Errorf("the load balancer's target groups: %+v, %v", groups, err)
	}
	listeners, err := c.DescribeListeners(ctx, &elb.DescribeListenersInput{LoadBalancerArn: nlb.LoadBalancerArn})
	if err != nil || len(listeners.Listeners) != 1 || *listeners.Listeners[0].DefaultActions[0].TargetGroupArn != *tg.TargetGroupArn {
		t.Errorf("the load balancer's listeners: %+v, %v", listeners, err)
	}

	// Tags: the ones given at creation, added and removed.
	if _, err := c.AddTags(ctx, &elb.AddTagsInput{ResourceArns: []string{*nlb.LoadBalancerArn, *tg.TargetGroupArn},
		Tags: []types.Tag{{Key: awssdk.String("role"), Value: awssdk.String("api")}}}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.RemoveTags(ctx, &elb.RemoveTagsInput{ResourceArns: []string{*nlb.LoadBalancerArn}, TagKeys: []string{"kiln.dev/cluster"}}); err != nil {
		t.Fatal(err)
	}
	tags, err := c.DescribeTags(ctx, &elb.DescribeTagsInput{ResourceArns: []string{*nlb.LoadBalancerArn, *tg.TargetGroupArn}})
	if err != nil || len(tags.TagDescriptions) != 2 || len(tags.TagDescriptions[0].Tags) != 1 || *tags.TagDescriptions[0].Tags[0].Key != "role" ||
		len(tags.TagDescriptions[1].Tags) != 1 {
		t.Errorf("tags: %+v, %v", tags, err)
	}

	// The state survives a restart.
	b := newTestAWS(t, Options{StatePath: a.State})
	if out, err := elb.NewFromConfig(b.config(testKey)).DescribeLoadBalancers(ctx, &elb.DescribeLoadBalancersInput{Names: []string{"api"}}); err != nil ||
		*out.LoadBalancers[0].LoadBalancerArn != *nlb.LoadBalancerArn {
		t.Errorf("after a restart: %+v, %v", out, err)
	}

	// Deletion protection, then deletion (twice: it is idempotent).
	protect := func(on string) {
		t.Helper()
		if _, err := c.ModifyLoadBalancerAttributes(ctx, &elb.ModifyLoadBalancerAttributesInput{LoadBalancerArn: nlb.LoadBalancerArn,
			Attributes: []types.LoadBalancerAttribute{{Key: awssdk.String("deletion_protection.enabled"), Value: &on}}}); err != nil {
			t.Fatal(err)
		}
	}
	protect("true")
	attrs, err := c.DescribeLoadBalancerAttributes(ctx, &elb.DescribeLoadBalancerAttributesInput{LoadBalancerArn: nlb.LoadBalancerArn})
	if err != nil || !hasAttribute(attrs.Attributes, "deletion_protection.enabled", "true") || !hasAttribute(attrs.Attributes, "load_balancing.cross_zone.enabled", "false") {
		t.Errorf("attributes: %+v, %v", attrs, err)
	}
	if _, err := c.DeleteLoadBalancer(ctx, &elb.DeleteLoadBalancerInput{LoadBalancerArn: nlb.LoadBalancerArn}); apiCode(err) != "OperationNotPermitted" {
		t.Errorf("deleting a protected load balancer: %v; want OperationNotPermitted", err)
	}
	protect("false")
	for range 2 {
		if _, err := c.DeleteLoadBalancer(ctx, &elb.DeleteLoadBalancerInput{LoadBalancerArn: nlb.LoadBalancerArn}); err != nil {
			t.Errorf("DeleteLoadBalancer: %v", err)
		}
	}
	if _, err := c.DescribeListeners(ctx, &elb.DescribeListenersInput{ListenerArns: []string{*ln.Listeners[0].ListenerArn}}); apiCode(err) != "ListenerNotFound" {
		t.Errorf("the deleted load balancer's listener: %v; want ListenerNotFound", err)
	}
	if _, err := c.DeleteTargetGroup(ctx, &elb.DeleteTargetGroupInput{TargetGroupArn: tg.TargetGroupArn}); err != nil {
		t.Errorf("deleting the target group no listener uses: %v", err)
	}
}

func hasAttribute(attrs []types.LoadBalancerAttribute, k, v string) bool {
	for _, a := range attrs {
		if *a.Key == k && *a.Value == v {
			return true
		}
	}
	return false
}
