package e2e

import (
	"cmp"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"math"
	"net"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	awssdk "github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/autoscaling"
	astypes "github.com/aws/aws-sdk-go-v2/service/autoscaling/types"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
	ec2types "github.com/aws/aws-sdk-go-v2/service/ec2/types"
	elb "github.com/aws/aws-sdk-go-v2/service/elasticloadbalancingv2"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	v1 "kiln.dev/kiln/api/v1"
	"kiln.dev/kiln/internal/cost"
	"kiln.dev/kiln/internal/provider/aws"
	awslocal "kiln.dev/kiln/test/cloud/aws"
	"kiln.dev/kiln/test/waitfor"
)

// The local AWS's keys in these tests: one that may do everything, one
// that may not launch instances.
const (
	awsKey       = "AKIAKILNE2E"
	awsSecret    = "kiln-e2e-secret"
	awsNoRunKey  = "AKIAKILNE2ENORUN"
	awsNoRunPass = "kiln-e2e-norun-secret"
)

// localAWS is bin/kiln-aws-local run for a test, with instances that are
// containers of the node image.
type localAWS struct {
	url   string
	state string
	log   string
}

// sdk is an SDK configuration that reaches the local AWS with the full key.
func (a *localAWS) sdk() awssdk.Config {
	return awssdk.Config{Region: "us-east-1", BaseEndpoint: awssdk.String(a.url),
		Credentials: credentials.NewStaticCredentialsProvider(awsKey, awsSecret, "")}
}

// calls are the AWS calls the local AWS answered since it started, by
// service:Action (its admin API).
func (a *localAWS) calls(t testing.TB) map[string]int {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, a.url+"/_local/calls", nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+awsSecret)
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	out := map[string]int{}
	if err := json.NewDecoder(res.Body).Decode(&out); err != nil || res.StatusCode != http.StatusOK {
		t.Fatalf("the local AWS's calls: %s, %v", res.Status, err)
	}
	return out
}

// account is a cloud account of provider aws reaching the local AWS with key.
func (a *localAWS) account(name, key, secret string) *v1.CloudAccount {
	return &v1.CloudAccount{Name: name, Provider: aws.Name, Credentials: map[string]string{
		aws.CredentialKeyID: key, aws.CredentialSecret: secret, aws.CredentialRegion: "us-east-1", aws.CredentialEndpoint: a.url}}
}

func startLocalAWS(t testing.TB, flags ...string) *localAWS {
	t.Helper()
	dir := t.TempDir()
	a := &localAWS{state: filepath.Join(dir, "aws.json"), log: filepath.Join(dir, "aws.log")}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	a.url = "http://" + addr
	logf, err := os.Create(a.log)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(filepath.Join(binDir, "kiln-aws-local"), "--listen", addr, "--state", a.state,
		"--account", awsKey+":"+awsSecret, "--account", awsNoRunKey+":"+awsNoRunPass, "--deny", awsNoRunKey+":ec2:RunInstances")
	cmd.Args = append(cmd.Args, flags...)
	cmd.Stdout, cmd.Stderr = logf, logf
	identity := "label=" + awslocal.LabelIdentity + "=" + awslocal.StateIdentity(a.state)
	own(identity)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		logf.Close()
		if t.Failed() {
			b, _ := os.ReadFile(a.log)
			t.Logf("kiln-aws-local log:\n%s", tail(string(b), 60))
		}
		// Instances outlive the local AWS as machines outlive kilnd; a
		// test's must not outlive the test.
		removeSelected(identity)
		awslocal.RemoveRouteChains(t.Context(), awslocal.StateIdentity(a.state))
	})
	waitfor.Cond(t, "kiln-aws-local to listen on "+addr, 30*time.Second, func() (bool, error) {
		c, err := net.DialTimeout("tcp", addr, time.Second)
		if err == nil {
			c.Close()
		}
		return err == nil, waitfor.NotYet(err)
	})
	return a
}

// startAWS starts the local AWS and a kilnd with the aws provider whose
// agent gateway listens on the Docker bridge's address, which the
// instances (containers on their VPC's network) reach.
func startAWS(t testing.TB, extra ...string) (*env, *localAWS) {
	t.Helper()
	return startAWSWith(t, nil, extra...)
}

// startAWSWith is startAWS with flags of the local AWS (--route-traffic:
// pod traffic between subnets only as the VPC's routes allow).
func startAWSWith(t testing.TB, awsLocalFlags []string, extra ...string) (*env, *localAWS) {
	t.Helper()
	if _, err := os.Stat(filepath.Join(systemImages, "coredns.tar")); err != nil {
		t.Skipf("no system images in %s (make system-images): aws clusters SKIPPED", systemImages)
	}
	if out, err := exec.Command("docker", "images", "-q", "kiln/node").Output(); err != nil || len(strings.TrimSpace(string(out))) == 0 {
		t.Skipf("no node image on the Docker engine (make node-image): aws clusters SKIPPED (%v)", err)
	}
	host := dockerBridge(t)
	port := strconv.Itoa(freePort(t))
	a := startLocalAWS(t, awsLocalFlags...)
	e := start(t, "kilnd", append(awsFlags(host, port), extra...)...)
	return e, a
}

// awsFlags are kilnd's flags for the aws provider with its agent gateway on
// host:port (the same after a restart, where agents look for it).
func awsFlags(host, port string) []string {
	return []string{"--system-images", systemImages, "--aws",
		"--agent-listen", net.JoinHostPort(host, port), "--agent-advertise", net.JoinHostPort(host, port)}
}

// dockerBridge is the address of the Docker engine's default bridge: a
// host address every container reaches, whatever its network.
func dockerBridge(t testing.TB) string {
	t.Helper()
	ifc, err := net.InterfaceByName("docker0")
	if err != nil {
		t.Skipf("no docker0 interface (%v): aws clusters SKIPPED", err)
	}
	addrs, err := ifc.Addrs()
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range addrs {
		if ip, _, err := net.ParseCIDR(a.String()); err == nil && ip.To4() != nil {
			return ip.String()
		}
	}
	t.Skip("docker0 has no IPv4 address: aws clusters SKIPPED")
	return ""
}

// awsCluster is a 1+2 cluster on the local AWS whose VPC takes a /16 no
// other Docker network on the engine has (vpcRange).
func awsCluster(t testing.TB, name string) *v1.Cluster {
	t.Helper()
	cl := localCluster(name, 1, true, 2)
	cl.Spec.Provider, cl.Spec.CloudAccount, cl.Spec.Region = aws.Name, "acme", "us-east-1"
	cl.Spec.ControlPlane.Zones = []string{"us-east-1a", "us-east-1b"}
	cl.Spec.Network.NodeCIDR = vpcRange(t).String()
	return cl
}

// vpcPool is where the tests' VPC ranges come from, a /16 each.
var vpcPool = netip.MustParsePrefix("10.64.0.0/10")

// vpcRanges are the ranges handed out by this test process.
var vpcRanges struct {
	sync.Mutex
	given []netip.Prefix
}

// vpcRange returns a /16 of vpcPool that neither another test of this
// process nor a Docker network on the engine has. A VPC of the local AWS
// is a Docker network, and Docker refuses overlapping networks: fixed
// ranges failed two tests when another run's networks held them.
func vpcRange(t testing.TB) netip.Prefix {
	t.Helper()
	vpcRanges.Lock()
	defer vpcRanges.Unlock()
	taken := slices.Clone(vpcRanges.given)
	for _, s := range strings.Fields(dockerSubnets(t)) {
		if p, err := netip.ParsePrefix(s); err == nil && p.Addr().Is4() {
			taken = append(taken, p.Masked())
		}
	}
	for p := netip.PrefixFrom(vpcPool.Addr(), 16); vpcPool.Contains(p.Addr()); p = netip.PrefixFrom(nextPrefix(p), 16) {
		if !slices.ContainsFunc(taken, p.Overlaps) {
			vpcRanges.given = append(vpcRanges.given, p)
			return p
		}
	}
	t.Fatalf("no /16 of %s is free of Docker networks for a VPC (taken: %v); remove leftover networks (docker network ls)", vpcPool, taken)
	return netip.Prefix{}
}

// dockerSubnets are the subnets of the engine's networks. Tests beside
// this one make and remove networks all the time: a network listed and
// gone before it was inspected makes it ask again (the engine answers "No
// such network" or "network ID not found"; it failed TestAWSCluster in CI).
func dockerSubnets(t testing.TB) string {
	t.Helper()
	var out []byte
	var err error
	for range 5 {
		ids := strings.Fields(docker(t, "network", "ls", "-q"))
		out, err = exec.Command("docker", append([]string{"network", "inspect", "--format", "{{range .IPAM.Config}}{{.Subnet}} {{end}}"}, ids...)...).CombinedOutput()
		if err == nil || !strings.Contains(string(out), "No such network") && !strings.Contains(string(out), "not found") {
			break
		}
	}
	if err != nil {
		t.Fatalf("docker network inspect: %v: %s", err, out)
	}
	return string(out)
}

// nextPrefix is the first address after p.
func nextPrefix(p netip.Prefix) netip.Addr {
	a := p.Addr().As4()
	n := uint32(a[0])<<24 | uint32(a[1])<<16 | uint32(a[2])<<8 | uint32(a[3])
	n += 1 << (32 - p.Bits())
	return netip.AddrFrom4([4]byte{byte(n >> 24), byte(n >> 16), byte(n >> 8), byte(n)})
}

// A 1+2 cluster on two zones through the local AWS: the resources of the
// architecture exist with the cluster's tags and placement (nodes in the
// private subnets, NAT gateways and the bastion in the public ones),
// kubectl through the load balancer shows 3 Ready nodes, a Deployment
// serves through a Service (its pods reaching each other across the zones'
// subnets through the VPC's routes), a Service of type LoadBalancer gets a
// network load balancer, and the delete leaves nothing.
func TestAWSCluster(t *testing.T) {
	t.Parallel()
	// The VPC carries pod traffic between its subnets only as its routes
	// say: checkHello's pod to pod across the workers of both zones needs
	// the routes Kiln keeps.
	e, a := startAWSWith(t, []string{"--route-traffic"})
	ctx := t.Context()
	// The account stages the join files in S3: the instances fetch them
	// with their role, and their user data holds no secret.
	if _, err := s3.NewFromConfig(a.sdk(), func(o *s3.Options) { o.UsePathStyle = true }).CreateBucket(ctx, &s3.CreateBucketInput{Bucket: awssdk.String("acme-staging")}); err != nil {
		t.Fatal(err)
	}
	acme := a.account("acme", awsKey, awsSecret)
	acme.Credentials[aws.CredentialStagingBucket] = "acme-staging"
	if _, err := e.c.CreateCloudAccount(ctx, "default", acme); err != nil {
		t.Fatal(err)
	}
	archive := helloImage(t)
	e.kiln("image", "push", archive, "hello:1")

	cl := awsCluster(t, "web")
	v, err := e.c.ValidateCluster(ctx, "default", cl)
	if err != nil || !slices.ContainsFunc(v.Checks, func(c string) bool { return strings.Contains(c, "may make what the cluster needs") }) {
		t.Fatalf("dry run: %+v, %v; want the account's permissions checked", v, err)
	}
	// A key that may not launch instances is named by the dry run.
	if _, err := e.c.CreateCloudAccount(ctx, "default", a.account("norun", awsNoRunKey, awsNoRunPass)); err != nil {
		t.Fatal(err)
	}
	denied := awsCluster(t, "denied")
	denied.Spec.CloudAccount = "norun"
	_, err = e.c.ValidateCluster(ctx, "default", denied)
	if !slices.ContainsFunc(apiError(err).Err.Details, func(d v1.Error) bool {
		// The text is the product here: the permission's name is what the user grants.
		return d.Code == v1.CodeForbidden && d.Target == "spec.cloudAccount" && strings.Contains(d.Message, "ec2:RunInstances")
	}) {
		t.Errorf("dry run with a key that may not launch instances: %v; want a Forbidden detail on spec.cloudAccount naming ec2:RunInstances", err)
	}
	_, opID, err := e.c.CreateCluster(ctx, "default", cl)
	if err != nil {
		t.Fatal(err)
	}
	op := e.wait("web", opID)
	t.Logf("cluster web (aws, 1+2 on 2 zones) Succeeded in %s", op.EndTime.Sub(op.StartTime).Round(time.Second))

	got, err := e.c.GetCluster(ctx, "default", "web")
	if err != nil {
		t.Fatal(err)
	}
	// Every node in a private subnet, the nodes over both zones.
	ec := ec2.NewFromConfig(a.sdk())
	mine := []ec2types.Filter{{Name: awssdk.String("tag:kubernetes.io/cluster/web"), Values: []string{"owned"}}}
	subnets, err := ec.DescribeSubnets(ctx, &ec2.DescribeSubnetsInput{Filters: mine})
	if err != nil {
		t.Fatal(err)
	}
	kind := map[string]string{} // subnet -> public-subnet or private-subnet
	zone := map[string]string{}
	for _, s := range subnets.Subnets {
		for _, tg := range s.Tags {
			if *tg.Key == aws.TagPart {
				kind[*s.SubnetId] = *tg.Value
			}
		}
		zone[*s.SubnetId] = *s.AvailabilityZone
	}
	instances, err := ec.DescribeInstances(ctx, &ec2.DescribeInstancesInput{Filters: append(mine,
		ec2types.Filter{Name: awssdk.String("instance-state-name"), Values: []string{"running"}})})
	if err != nil {
		t.Fatal(err)
	}
	nodeZones := map[string]int{}
	var bastion, workerIP string
	for _, r := range instances.Reservations {
		for _, i := range r.Instances {
			part, machine, pool := "", *i.InstanceId, ""
			for _, tg := range i.Tags {
				switch *tg.Key {
				case aws.TagPart:
					part = *tg.Value
				case aws.TagMachine:
					machine = *tg.Value
				case aws.TagPool:
					pool = *tg.Value
				}
			}
			s := *i.SubnetId
			if part == "bastion" {
				bastion = kind[s]
				continue
			}
			if kind[s] != "private-subnet" {
				t.Errorf("machine %s is in subnet %s (%s); want a private subnet", machine, s, kind[s])
			}
			nodeZones[zone[s]]++
			if pool == "default" {
				workerIP = *i.PrivateIpAddress
			}
		}
	}
	if bastion != "public-subnet" || len(nodeZones) != 2 {
		t.Errorf("bastion in a %q, nodes by zone %v; want the bastion public and nodes in 2 zones", bastion, nodeZones)
	}
	// What it costs (status.cost) is what the price table says of what AWS
	// launched: each running instance (the bastion too) at its type's
	// us-east-1 price with a disk, the load balancer and a NAT gateway per
	// zone (docs/cost.md).
	tab := cost.Default().Providers["aws"]
	prices := tab.Regions["us-east-1"]
	var launched float64
	for _, r := range instances.Reservations {
		for _, i := range r.Instances {
			price, ok := cost.Default().OnDemand("aws", "us-east-1", string(i.InstanceType))
			if !ok {
				t.Errorf("instance %s is a %s, which the price table does not price", *i.InstanceId, i.InstanceType)
			}
			launched += price + tab.DiskGB*prices.DiskGBMonth/cost.Default().HoursPerMonth
		}
	}
	launched += prices.Hourly["load balancer"] + float64(len(nodeZones))*prices.Hourly["NAT gateway"]
	if c := got.Status.Cost; c == nil || math.Abs(c.PerHour-launched) > 1e-4 {
		t.Errorf("status.cost: %+v; want %.4f an hour, what the table says of the instances AWS launched", c, launched)
	}
	if !strings.HasSuffix(got.Status.Endpoint, ":6443") {
		t.Errorf("endpoint %q; want the load balancer on 6443", got.Status.Endpoint)
	}

	// The default pool is an Auto Scaling group of 2 launched from its
	// launch template, its nodes named by their instance ids.
	g := awsGroup(t, a, "web", "default")
	if *g.DesiredCapacity != 2 || len(g.Instances) != 2 || g.LaunchTemplate == nil || *g.LaunchTemplate.Version != "1" {
		t.Errorf("the default pool's group: desired %d, %d instances, template %+v; want 2 from version 1 of its launch template",
			*g.DesiredCapacity, len(g.Instances), g.LaunchTemplate)
	}

	for _, r := range instances.Reservations {
		for _, i := range r.Instances {
			attr, err := ec.DescribeInstanceAttribute(ctx, &ec2.DescribeInstanceAttributeInput{InstanceId: i.InstanceId, Attribute: ec2types.InstanceAttributeNameUserData})
			if err != nil {
				t.Fatal(err)
			}
			script, _ := base64.StdEncoding.DecodeString(awssdk.ToString(attr.UserData.Value))
			if len(script) > 0 && (!strings.Contains(string(script), "--join-from s3://acme-staging/kiln/") || strings.Contains(string(script), "base64 -d")) {
				t.Errorf("instance %s's user data:\n%s\nwant the staging object named and no join files", *i.InstanceId, script)
			}
		}
	}

	// Three Ready nodes through the load balancer, and an app that serves.
	workers := e.readyWorkers("web", 3, 2)
	for _, w := range workers {
		if !slices.ContainsFunc(g.Instances, func(i astypes.Instance) bool { return *i.InstanceId == w }) {
			t.Errorf("worker node %s is no instance of the default pool's group", w)
		}
	}
	e.checkHello("web", workers, workerIP)
	// A Service of type LoadBalancer is a network load balancer of its
	// own, reached from this machine (issue 46); hello-kept is left to the
	// cluster's delete.
	e.checkLoadBalancer("default", "web", func() string { return awsServiceLBs(t, a, "web") })
	// Beyond the region's quota of network load balancers (the API's and
	// hello-kept's fill a quota of 2): the Service's event and the
	// cluster's condition name the quota; deleting the Service clears it.
	a.setFaults(t, awslocal.Faults{LoadBalancerQuota: 2})
	e.mustKubectl("web", "expose", "deployment", "hello", "--name", "hello-over", "--type", "LoadBalancer", "--port", "80", "--target-port", "8080")
	waitfor.Cond(t, "an event on hello-over naming the quota", time.Minute, func() (bool, error) {
		evs, err := e.kubectl("web", "get", "events", "--field-selector", "involvedObject.name=hello-over", "-o", "jsonpath={.items[*].message}")
		return err == nil && strings.Contains(evs, aws.QuotaLoadBalancers), waitfor.NotYet(fmt.Errorf("%v: %s", err, evs))
	})
	quota := func(status string) {
		t.Helper()
		waitfor.Cond(t, "ServiceLoadBalancerQuotaExceeded "+status, time.Minute, func() (bool, error) {
			for _, c := range e.cluster("web").Status.Conditions {
				if c.Type == v1.ConditionServiceLoadBalancerQuotaExceeded {
					return c.Status == status && (status == "False" || strings.Contains(c.Message, "default/hello-over") && strings.Contains(c.Message, aws.QuotaLoadBalancers)),
						waitfor.NotYet(fmt.Errorf("%s: %s", c.Status, c.Message))
				}
			}
			return false, waitfor.NotYet(fmt.Errorf("no condition"))
		})
	}
	quota("True")
	e.mustKubectl("web", "delete", "service", "hello-over", "--wait=true", "--timeout=60s")
	quota("False")
	a.setFaults(t, awslocal.Faults{})

	// Day 2: a worker more; a pool in a third zone; the control plane
	// grown to 3 over the zones, each behind the load balancer.
	e.kiln("cluster", "scale", "web", "--size", "3", "--wait")
	e.kiln("pool", "add", "web", "edge", "--size", "1", "--zone", "us-east-1c", "--spot", "50", "--wait")
	e.kiln("cluster", "scale", "web", "--control-plane", "3", "--wait")
	inv := awsInventory(t, a, "web")
	if inv["machine"] != 7 || inv["vpc"] != 1 || inv["load balancer"] != 1 {
		t.Errorf("after scaling: %v; want 7 machines (3 control planes, 3+1 workers) in 1 VPC behind 1 load balancer", inv)
	}
	zonesOf := awsMachineZones(t, a, "web")
	edge := awsInstances(t, a, "web", "edge")
	if z := zonesOf[*edge[0].InstanceId]; z != "us-east-1c" || edge[0].InstanceLifecycle != ec2types.InstanceLifecycleTypeSpot {
		t.Errorf("the edge pool's machine is in %q, lifecycle %q; want a spot instance in us-east-1c", z, edge[0].InstanceLifecycle)
	}
	if g := awsGroup(t, a, "web", "edge"); g.MixedInstancesPolicy == nil || *g.MixedInstancesPolicy.InstancesDistribution.SpotMaxPrice != "0.0480" {
		t.Errorf("the edge pool's group: %+v; want spot at most 50%% of m5.large's on-demand price (0.0480)", g.MixedInstancesPolicy)
	}
	if cps := []string{zonesOf["web-cp-0"], zonesOf["web-cp-1"], zonesOf["web-cp-2"]}; len(slices.Compact(slices.Sorted(slices.Values(cps)))) != 2 {
		t.Errorf("control planes in zones %v; want them over both control-plane zones", cps)
	}
	if n := len(e.kubeNodes("web")); n != 7 {
		t.Errorf("%d Kubernetes nodes after scaling; want 7", n)
	}
	e.kiln("cluster", "scale", "web", "--size", "1", "--wait")
	if n := awsInventory(t, a, "web")["machine"]; n != 5 {
		t.Errorf("%d machines after scaling the default pool to 1; want 5", n)
	}
	if g := awsGroup(t, a, "web", "default"); *g.DesiredCapacity != 1 {
		t.Errorf("the default pool's group wants %d after scaling it to 1; want 1", *g.DesiredCapacity)
	}
	// Another instance type: the pool's machine is replaced by one of the
	// new type, one more at most while it is (maxSurge 1, maxUnavailable 0).
	stop := e.sampleWorkers("web", "default")
	_, opID, err = e.c.PatchCluster(ctx, "default", "web", map[string]any{"spec": map[string]any{
		"workerPools": []any{map[string]any{"name": "default", "size": 1, "instanceType": "t3.large"}, map[string]any{"name": "edge", "size": 1, "zones": []any{"us-east-1c"}, "spot": map[string]any{"maxPricePercent": 50}}}}})
	if err != nil {
		t.Fatal(err)
	}
	e.wait("web", opID)
	ws := stop()
	if ws.samples == 0 || ws.maxWorkers > 2 || ws.minReady < 1 {
		t.Errorf("kubectl (%d samples) saw up to %d default workers and down to %d Ready; maxSurge 1 and maxUnavailable 0 allow 2 and 1", ws.samples, ws.maxWorkers, ws.minReady)
	}
	// A new version of the pool's launch template, whose instance replaced
	// the old one.
	if is := awsInstances(t, a, "web", "default"); len(is) != 1 || is[0].InstanceType != "t3.large" {
		t.Errorf("the default pool's instances after the rollout: %+v; want one t3.large", is)
	}
	if g := awsGroup(t, a, "web", "default"); g.LaunchTemplate == nil || *g.LaunchTemplate.Version != "2" || *g.DesiredCapacity != 1 {
		t.Errorf("the default pool's group after the rollout launches %+v, wants %d; want version 2 of its template, 1", g.LaunchTemplate, *g.DesiredCapacity)
	}

	// Delete: nothing tagged with the cluster remains.
	delID, err := e.c.DeleteCluster(ctx, "default", "web")
	if err != nil {
		t.Fatal(err)
	}
	e.wait("web", delID)
	left := awsLeftovers(t, a, "web")
	if len(left) > 0 {
		t.Errorf("after the delete, AWS still has %v", left)
	}
}

// awsLeftovers lists the EC2 and Elastic Load Balancing resources still
// tagged with the cluster that are not gone (terminated instances and deleted NAT gateways are described
// for a while, as on AWS).
func awsLeftovers(t testing.TB, a *localAWS, cluster string) []string {
	t.Helper()
	ec := ec2.NewFromConfig(a.sdk())
	tags, err := ec.DescribeTags(t.Context(), &ec2.DescribeTagsInput{Filters: []ec2types.Filter{
		{Name: awssdk.String("key"), Values: []string{"kubernetes.io/cluster/" + cluster}}}})
	if err != nil {
		t.Fatal(err)
	}
	var left []string
	for _, tg := range tags.Tags {
		id := *tg.ResourceId
		switch tg.ResourceType {
		case ec2types.ResourceTypeInstance:
			out, err := ec.DescribeInstances(t.Context(), &ec2.DescribeInstancesInput{InstanceIds: []string{id}})
			if err == nil && len(out.Reservations) > 0 && out.Reservations[0].Instances[0].State.Name == ec2types.InstanceStateNameTerminated {
				continue
			}
		case ec2types.ResourceTypeNatgateway:
			out, err := ec.DescribeNatGateways(t.Context(), &ec2.DescribeNatGatewaysInput{NatGatewayIds: []string{id}})
			if err == nil && len(out.NatGateways) > 0 && out.NatGateways[0].State == ec2types.NatGatewayStateDeleted {
				continue
			}
		}
		left = append(left, fmt.Sprintf("%s %s", tg.ResourceType, id))
	}
	// Elastic Load Balancing's: the API's and the Services' load
	// balancers and target groups.
	for arn := range awsELBTagged(t, a, cluster) {
		left = append(left, arn)
	}
	slices.Sort(left)
	return left
}

// kilnd killed with SIGKILL right after the worker pool's group launched
// its instance (before kilnd recorded anything of it) and again in the middle of the delete: the
// create ends with one VPC, one load balancer and one instance per machine,
// and the delete leaves nothing tagged with the cluster.
func TestAWSSurvivesKill(t *testing.T) {
	t.Parallel()
	e, a := startAWS(t, "--fault", "provider.GrowPool.after:1")
	ctx := t.Context()
	if _, err := e.c.CreateCloudAccount(ctx, "default", a.account("acme", awsKey, awsSecret)); err != nil {
		t.Fatal(err)
	}
	cl := awsCluster(t, "crash")
	cl.Spec.WorkerPools[0].Size = 1
	_, opID, err := e.c.CreateCluster(ctx, "default", cl)
	if err != nil {
		t.Fatal(err)
	}
	select {
	case <-e.k.Done():
	case <-time.After(5 * time.Minute):
		t.Fatal("kilnd did not reach its fault point provider.GrowPool.after:1 within 5 minutes")
	}
	host, port, _ := net.SplitHostPort(agentAddr(t, e.k.LogText()))
	t.Logf("kilnd killed after launching the worker; AWS has %v", awsInventory(t, a, "crash"))
	e.startKilnd("kilnd-again", awsFlags(host, port)...)
	e.wait("crash", opID)
	inv := awsInventory(t, a, "crash")
	if inv["vpc"] != 1 || inv["load balancer"] != 1 || inv["machine"] != 2 || inv["bastion"] != 1 {
		t.Errorf("after the create: %v; want 1 VPC, 1 load balancer, 2 machines, 1 bastion", inv)
	}
	if n := len(e.kubeNodes("crash")); n != 2 {
		t.Errorf("%d Kubernetes nodes, want 2", n)
	}

	e.k.Kill(syscall.SIGKILL)
	<-e.k.Done()
	e.startKilnd("kilnd-deleting", append(awsFlags(host, port), "--fault", "provider.DeleteMachine.after:1")...)
	delID, err := e.c.DeleteCluster(ctx, "default", "crash")
	if err != nil {
		t.Fatal(err)
	}
	select {
	case <-e.k.Done():
	case <-time.After(5 * time.Minute):
		t.Fatal("kilnd did not reach its fault point provider.DeleteMachine.after:1 within 5 minutes")
	}
	t.Logf("kilnd killed in the delete; AWS has %v", awsInventory(t, a, "crash"))
	e.startKilnd("kilnd-after", awsFlags(host, port)...)
	e.wait("crash", delID)
	if left := awsLeftovers(t, a, "crash"); len(left) > 0 {
		t.Errorf("after the delete, AWS still has %v", left)
	}
}

// agentAddr is the agent gateway's address from kilnd's log.
func agentAddr(t testing.TB, log string) string {
	t.Helper()
	_, after, ok := strings.Cut(log, `msg="agent gateway listening" addr=`)
	if !ok {
		t.Fatal("kilnd's log does not say where the agent gateway listens")
	}
	return strings.Fields(after)[0]
}

// awsInventory counts what AWS holds of a cluster and is not gone: "vpc",
// "load balancer", "machine" (instances of its machines), "bastion".
func awsInventory(t testing.TB, a *localAWS, cluster string) map[string]int {
	t.Helper()
	ec := ec2.NewFromConfig(a.sdk())
	owned := []ec2types.Filter{{Name: awssdk.String("tag:kubernetes.io/cluster/" + cluster), Values: []string{"owned"}}}
	out := map[string]int{}
	vpcs, err := ec.DescribeVpcs(t.Context(), &ec2.DescribeVpcsInput{Filters: owned})
	if err != nil {
		t.Fatal(err)
	}
	out["vpc"] = len(vpcs.Vpcs)
	is, err := ec.DescribeInstances(t.Context(), &ec2.DescribeInstancesInput{Filters: append(owned,
		ec2types.Filter{Name: awssdk.String("instance-state-name"), Values: []string{"pending", "running", "stopping", "stopped"}})})
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range is.Reservations {
		for _, i := range r.Instances {
			kind := "machine"
			for _, tg := range i.Tags {
				if *tg.Key == aws.TagPart && *tg.Value == "bastion" {
					kind = "bastion"
				}
			}
			out[kind]++
		}
	}
	lbs, err := elb.NewFromConfig(a.sdk()).DescribeLoadBalancers(t.Context(), &elb.DescribeLoadBalancersInput{})
	if err != nil {
		t.Fatal(err)
	}
	arns := []string{}
	for _, lb := range lbs.LoadBalancers {
		arns = append(arns, *lb.LoadBalancerArn)
	}
	if len(arns) > 0 {
		tags, err := elb.NewFromConfig(a.sdk()).DescribeTags(t.Context(), &elb.DescribeTagsInput{ResourceArns: arns})
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range tags.TagDescriptions {
			kind := "load balancer"
			for _, tg := range d.Tags {
				if *tg.Key == aws.TagPart && *tg.Value == "service-load-balancer" {
					kind = "service load balancer"
				}
			}
			for _, tg := range d.Tags {
				if *tg.Key == "kubernetes.io/cluster/"+cluster {
					out[kind]++
				}
			}
		}
	}
	return out
}

// awsELBTagged are the load balancers and target groups tagged with the
// cluster, by ARN, with their tags.
func awsELBTagged(t testing.TB, a *localAWS, cluster string) map[string]map[string]string {
	t.Helper()
	api := elb.NewFromConfig(a.sdk())
	var arns []string
	lbs, err := api.DescribeLoadBalancers(t.Context(), &elb.DescribeLoadBalancersInput{})
	if err != nil {
		t.Fatal(err)
	}
	for _, lb := range lbs.LoadBalancers {
		arns = append(arns, *lb.LoadBalancerArn)
	}
	tgs, err := api.DescribeTargetGroups(t.Context(), &elb.DescribeTargetGroupsInput{})
	if err != nil {
		t.Fatal(err)
	}
	for _, tg := range tgs.TargetGroups {
		arns = append(arns, *tg.TargetGroupArn)
	}
	out := map[string]map[string]string{}
	for chunk := range slices.Chunk(arns, 20) {
		tags, err := api.DescribeTags(t.Context(), &elb.DescribeTagsInput{ResourceArns: chunk})
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range tags.TagDescriptions {
			m := map[string]string{}
			for _, tg := range d.Tags {
				m[*tg.Key] = *tg.Value
			}
			if _, ok := m["kubernetes.io/cluster/"+cluster]; ok {
				out[*d.ResourceArn] = m
			}
		}
	}
	return out
}

// awsServiceLBs lists the cluster's Service load balancers, a line each
// ("" for none): the Service, the load balancer's ARN.
func awsServiceLBs(t testing.TB, a *localAWS, cluster string) string {
	t.Helper()
	var lines []string
	for arn, tags := range awsELBTagged(t, a, cluster) {
		if strings.Contains(arn, ":loadbalancer/") && tags["kubernetes.io/service-name"] != "" {
			lines = append(lines, tags["kubernetes.io/service-name"]+" "+arn)
		}
	}
	slices.Sort(lines)
	return strings.Join(lines, "\n")
}

// awsMachineZones is the zone of each live machine of a cluster, by name.
func awsMachineZones(t testing.TB, a *localAWS, cluster string) map[string]string {
	t.Helper()
	is, err := ec2.NewFromConfig(a.sdk()).DescribeInstances(t.Context(), &ec2.DescribeInstancesInput{Filters: []ec2types.Filter{
		{Name: awssdk.String("tag:kubernetes.io/cluster/" + cluster), Values: []string{"owned"}},
		{Name: awssdk.String("instance-state-name"), Values: []string{"pending", "running"}}}})
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for _, r := range is.Reservations {
		for _, i := range r.Instances {
			name := ""
			for _, tg := range i.Tags {
				switch *tg.Key {
				case aws.TagMachine:
					name = *tg.Value
				case aws.TagPool:
					name = cmp.Or(name, *i.InstanceId) // a pool's machine is named by its id
				}
			}
			if name != "" {
				out[name] = *i.Placement.AvailabilityZone
			}
		}
	}
	return out
}

// awsInstances are the live instances of a cluster's pool.
func awsInstances(t testing.TB, a *localAWS, cluster, pool string) []ec2types.Instance {
	t.Helper()
	out, err := ec2.NewFromConfig(a.sdk()).DescribeInstances(t.Context(), &ec2.DescribeInstancesInput{Filters: []ec2types.Filter{
		{Name: awssdk.String("tag:kubernetes.io/cluster/" + cluster), Values: []string{"owned"}},
		{Name: awssdk.String("tag:" + aws.TagPool), Values: []string{pool}},
		{Name: awssdk.String("instance-state-name"), Values: []string{"pending", "running"}}}})
	if err != nil {
		t.Fatal(err)
	}
	var is []ec2types.Instance
	for _, r := range out.Reservations {
		is = append(is, r.Instances...)
	}
	return is
}

// awsGroup is the Auto Scaling group of a cluster's pool.
func awsGroup(t testing.TB, a *localAWS, cluster, pool string) astypes.AutoScalingGroup {
	t.Helper()
	out, err := autoscaling.NewFromConfig(a.sdk()).DescribeAutoScalingGroups(t.Context(), &autoscaling.DescribeAutoScalingGroupsInput{
		Filters: []astypes.Filter{{Name: awssdk.String("tag:kubernetes.io/cluster/" + cluster), Values: []string{"owned"}},
			{Name: awssdk.String("tag:" + aws.TagPool), Values: []string{pool}}}})
	if err != nil || len(out.AutoScalingGroups) != 1 {
		t.Fatalf("the Auto Scaling group of pool %s of cluster %s: %+v, %v; want one", pool, cluster, out, err)
	}
	return out.AutoScalingGroups[0]
}

// setFaults sets the local AWS's faults (its admin API).
func (a *localAWS) setFaults(t testing.TB, f awslocal.Faults) {
	t.Helper()
	body, _ := json.Marshal(f)
	a.admin(t, http.MethodPut, "/_local/faults", string(body))
}

func (a *localAWS) admin(t testing.TB, method, path, body string) {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), method, a.url+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+awsSecret)
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode >= 300 {
		t.Fatalf("the local AWS's admin API: %s %s: %s", method, path, res.Status)
	}
}

// A spot worker that AWS gives its interruption notice (two minutes here
// as on AWS): its agent reads the notice from IMDS, the health check
// drains the node while it still runs (the Deployment's pod leaves it
// gracefully) and replaces the machine with a new spot instance of the
// pool's group before AWS takes the old one; the pool is back to size with
// the pod Running on the new node.
func TestAWSSpotInterruption(t *testing.T) {
	t.Parallel()
	e, a := startAWS(t, "--health-interval", "2s")
	ctx := t.Context()
	if _, err := e.c.CreateCloudAccount(ctx, "default", a.account("acme", awsKey, awsSecret)); err != nil {
		t.Fatal(err)
	}
	cl := awsCluster(t, "spot")
	cl.Spec.WorkerPools[0].Size = 1
	cl.Spec.WorkerPools[0].Spot = &v1.Spot{MaxPricePercent: 100}
	e.wait("spot", e.create(cl).ID)
	is := awsInstances(t, a, "spot", "default")
	if len(is) != 1 || is[0].InstanceLifecycle != ec2types.InstanceLifecycleTypeSpot {
		t.Fatalf("the default pool's instances: %+v; want one spot instance", is)
	}
	before := is[0]
	if g := awsGroup(t, a, "spot", "default"); g.MixedInstancesPolicy == nil || *g.MixedInstancesPolicy.InstancesDistribution.OnDemandPercentageAboveBaseCapacity != 0 ||
		*g.MixedInstancesPolicy.InstancesDistribution.SpotMaxPrice != "0.0960" {
		t.Errorf("the spot pool's group: %+v; want all spot, at most 100%% of m5.large's on-demand price (0.0960)", g.MixedInstancesPolicy)
	}
	e.apply("spot", pauseWeb(1))
	e.mustKubectl("spot", "wait", "--for=jsonpath={.status.availableReplicas}=1", "deployment/web", "--timeout=180s")

	t0 := time.Now()
	a.admin(t, http.MethodPost, "/_local/interrupt?instance="+*before.InstanceId, "")
	var after ec2types.Instance
	waitfor.Cond(t, "the pool's group to replace "+*before.InstanceId+" after its notice", 3*time.Minute, func() (bool, error) {
		is := awsInstances(t, a, "spot", "default")
		if len(is) == 1 && *is[0].InstanceId != *before.InstanceId {
			after = is[0]
			return true, nil
		}
		return false, nil
	})
	if after.InstanceLifecycle != ec2types.InstanceLifecycleTypeSpot {
		t.Errorf("the replacement is %q; want spot", after.InstanceLifecycle)
	}
	e.waitKubeNode("spot", *after.InstanceId, "Ready on the replacement instance", func(n kubeNode) bool { return n.ready() })
	e.mustKubectl("spot", "wait", "--for=jsonpath={.status.availableReplicas}=1", "deployment/web", "--timeout=180s")
	t.Logf("replaced and the pod Running again %s after the notice", time.Since(t0).Round(time.Second))
	if _, ok := e.kubeNodes("spot")[*before.InstanceId]; ok {
		t.Errorf("node %s is still in Kubernetes", *before.InstanceId)
	}
	if n := len(awsInstances(t, a, "spot", "default")); n != 1 {
		t.Errorf("the pool has %d instances; want 1", n)
	}
	// Kiln took the instance away itself, before AWS's deadline.
	old, err := ec2.NewFromConfig(a.sdk()).DescribeInstances(ctx, &ec2.DescribeInstancesInput{InstanceIds: []string{*before.InstanceId}})
	if err != nil || len(old.Reservations) == 0 {
		t.Fatalf("describe the interrupted instance: %v", err)
	}
	if r := old.Reservations[0].Instances[0].StateReason; r != nil && *r.Code == "Server.SpotInstanceTermination" {
		t.Errorf("the interrupted instance was terminated by AWS's interruption, not removed by Kiln first")
	}
	var reasons []string
	for _, ev := range e.events("spot") {
		if ev.Node == *before.InstanceId {
			reasons = append(reasons, ev.Reason)
		}
	}
	for _, want := range []string{"NodeInterruptionNotice", "NodeReplacing", "NodeDraining", "NodeDrained"} {
		if !slices.Contains(reasons, want) {
			t.Errorf("events of node %s: %v; want %s among them", *before.InstanceId, reasons, want)
		}
	}
}

// A create while AWS throttles every 5th call and describes what was made
// a second late: the operation Succeeds with one VPC, one load balancer
// and one instance per machine (the SDK retries the throttled calls with
// backoff; the provider waits for what it made to be described).
func TestAWSThrottlingAndEventualConsistency(t *testing.T) {
	t.Parallel()
	e, a := startAWS(t)
	ctx := t.Context()
	if _, err := e.c.CreateCloudAccount(ctx, "default", a.account("acme", awsKey, awsSecret)); err != nil {
		t.Fatal(err)
	}
	a.setFaults(t, awslocal.Faults{ThrottleEvery: 5, DescribeDelay: awslocal.Duration(time.Second)})
	cl := awsCluster(t, "slow")
	cl.Spec.WorkerPools[0].Size = 1
	op := e.wait("slow", e.create(cl).ID)
	t.Logf("created in %s with every 5th AWS call throttled and describes 1 s late", op.EndTime.Sub(op.StartTime).Round(time.Second))
	retried := 0
	for _, s := range op.Properties.Steps {
		if s.Attempts > 1 {
			t.Logf("step %s took %d attempts", s.Name, s.Attempts)
		}
		if strings.Contains(s.Message, "provider calls retried after throttling") {
			t.Logf("step %s: %s", s.Name, s.Message)
			retried++
		}
	}
	if retried == 0 {
		t.Errorf("no step says how many throttled calls were retried: %+v", op.Properties.Steps)
	}
	if inv := awsInventory(t, a, "slow"); inv["vpc"] != 1 || inv["load balancer"] != 1 || inv["machine"] != 2 || inv["bastion"] != 1 {
		t.Errorf("after the create: %v; want 1 VPC, 1 load balancer, 2 machines, 1 bastion", inv)
	}
	if n := len(e.kubeNodes("slow")); n != 2 {
		t.Errorf("%d Kubernetes nodes, want 2", n)
	}
	e.wait("slow", mustDelete(t, e, "slow"))
	if left := awsLeftovers(t, a, "slow"); len(left) > 0 {
		t.Errorf("after the delete, AWS still has %v", left)
	}
}

func mustDelete(t testing.TB, e *env, cluster string) string {
	t.Helper()
	id, err := e.c.DeleteCluster(t.Context(), "default", cluster)
	if err != nil {
		t.Fatal(err)
	}
	return id
}
