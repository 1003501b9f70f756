package aws

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	awssdk "github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
	ec2types "github.com/aws/aws-sdk-go-v2/service/ec2/types"
	elb "github.com/aws/aws-sdk-go-v2/service/elasticloadbalancingv2"
	elbtypes "github.com/aws/aws-sdk-go-v2/service/elasticloadbalancingv2/types"

	v1 "kiln.dev/kiln/api/v1"
	"kiln.dev/kiln/internal/failure"
	"kiln.dev/kiln/internal/provider"
)

// Instance types when the spec names none.
const (
	DefaultInstanceType = "m5.large"
	BastionInstanceType = "t3.medium"
)

// live are the states of an instance that exists (not terminated, not
// going away).
var live = []string{"pending", "running", "stopping", "stopped"}

// instances lists the cluster's live instances, of one machine when
// machine is not "" (the instance of that id, when a pool's group
// launched it).
func (c *cluster) instances(ctx context.Context, machine string) ([]ec2types.Instance, error) {
	f := append(c.filter(""), ec2types.Filter{Name: awssdk.String("instance-state-name"), Values: live})
	if strings.HasPrefix(machine, "i-") {
		out, err := c.instancesBy(ctx, append(f, ec2types.Filter{Name: awssdk.String("instance-id"), Values: []string{machine}}))
		if err != nil || len(out) > 0 {
			return out, err
		}
	}
	if machine != "" {
		f = append(f, ec2types.Filter{Name: awssdk.String("tag:" + TagMachine), Values: []string{machine}})
	}
	return c.instancesBy(ctx, f)
}

func (c *cluster) instancesBy(ctx context.Context, f []ec2types.Filter) ([]ec2types.Instance, error) {
	var out []ec2types.Instance
	pages := ec2.NewDescribeInstancesPaginator(c.api.ec2, &ec2.DescribeInstancesInput{Filters: f})
	for pages.HasMorePages() {
		page, err := pages.NextPage(ctx)
		if err != nil {
			return nil, classify(err, "", "list the instances of cluster %s", c.Name)
		}
		for _, r := range page.Reservations {
			out = append(out, r.Instances...)
		}
	}
	slices.SortFunc(out, func(a, b ec2types.Instance) int {
		return strings.Compare(machineName(a), machineName(b))
	})
	return out, nil
}

// machineName is the name of the machine an instance is: its machine tag,
// or the id of an instance a pool's group launched; "" for the bastion.
func machineName(i ec2types.Instance) string {
	if name := tagOf(i.Tags, TagMachine); name != "" {
		return name
	}
	if tagOf(i.Tags, TagGroup) != "" && tagOf(i.Tags, TagPool) != "" {
		return awssdk.ToString(i.InstanceId)
	}
	return ""
}

func machineOf(i ec2types.Instance) provider.Machine {
	zone := ""
	if i.Placement != nil {
		zone = awssdk.ToString(i.Placement.AvailabilityZone)
	}
	return provider.Machine{
		MachineSpec: provider.MachineSpec{Name: machineName(i), Role: tagOf(i.Tags, TagRole), Pool: tagOf(i.Tags, TagPool),
			InstanceType: string(i.InstanceType), Zone: zone, Revision: tagOf(i.Tags, TagRevision)},
		ID:      awssdk.ToString(i.InstanceId),
		Address: awssdk.ToString(i.PrivateIpAddress),
	}
}

// EnsureMachine finds the machine's instance or launches it in the private
// subnet of its zone (the spec's, or the cluster's zones in turn by the
// machine's number), from the node image of the cluster's version, with
// user data that starts its agent. A control-plane instance is registered
// with the load balancer's target group.
func (p *AWS) EnsureMachine(ctx context.Context, pc provider.Cluster, m provider.MachineSpec) (provider.Machine, error) {
	c, err := p.cluster(pc)
	if err != nil {
		return provider.Machine{}, err
	}
	found, err := c.instances(ctx, m.Name)
	if err != nil {
		return provider.Machine{}, err
	}
	if len(found) > 0 {
		got := machineOf(found[0])
		if err := p.startStopped(ctx, c, found[0]); err != nil {
			return provider.Machine{}, err
		}
		if m.Role == v1.RoleControlPlane {
			if err := p.registerTargets(ctx, c, []string{got.ID}); err != nil {
				return provider.Machine{}, err
			}
		}
		return got, nil
	}
	if m.Role == v1.RoleWorker && m.Pool != "" {
		// A pool's machines are its group's (GrowPool); one that is gone is
		// the group's to replace.
		return provider.Machine{}, failure.Retryable(v1.CodeProviderError, nil,
			"machine %s of pool %s is no instance of cluster %s any more: the pool's group launches its replacement", m.Name, m.Pool, c.Name)
	}
	n, err := p.network(ctx, c)
	if err != nil {
		return provider.Machine{}, err
	}
	i, note, err := p.launchInZones(ctx, c, n, m)
	if err != nil {
		return provider.Machine{}, err
	}
	got := machineOf(i)
	got.Note = note
	if m.Role == v1.RoleControlPlane {
		if err := p.registerTargets(ctx, c, []string{got.ID}); err != nil {
			return provider.Machine{}, err
		}
	}
	return got, nil
}

// startStopped starts an instance that was stopped (a hibernated
// cluster's control plane); one still stopping is retried.
func (p *AWS) startStopped(ctx context.Context, c *cluster, i ec2types.Instance) error {
	id := awssdk.ToString(i.InstanceId)
	switch i.State.Name {
	case ec2types.InstanceStateNameStopped:
		p.log.Info("starting stopped instance", "cluster", c.Name, "instance", id)
		if _, err := c.api.ec2.StartInstances(ctx, &ec2.StartInstancesInput{InstanceIds: []string{id}}); err != nil {
			return classify(err, "", "start instance %s of cluster %s", id, c.Name)
		}
	case ec2types.InstanceStateNameStopping:
		return failure.Retryable(v1.CodeProviderError, nil, "instance %s of cluster %s is stopping; it is started once it has stopped", id, c.Name)
	}
	return nil
}

// stopWait bounds StopMachine's wait for an instance to have stopped.
const stopWait = 10 * time.Minute

// StopMachine stops the machine's instance, keeping its volumes
// (provider.Stopper), and waits until it has stopped. EnsureMachine starts
// it again. A pool's instances are its group's and cannot be stopped
// (the group would replace them): hibernation removes them instead.
func (p *AWS) StopMachine(ctx context.Context, pc provider.Cluster, name string) error {
	c, err := p.cluster(pc)
	if err != nil {
		return err
	}
	found, err := c.instances(ctx, name)
	if err != nil {
		return err
	}
	var ids []string
	for _, i := range found {
		if tagOf(i.Tags, TagGroup) != "" {
			return &failure.Error{Code: v1.CodeInvalidParameter, Message: fmt.Sprintf("machine %s of cluster %s is an instance of a pool's Auto Scaling group: it cannot be stopped", name, c.Name)}
		}
		id := awssdk.ToString(i.InstanceId)
		ids = append(ids, id)
		if i.State.Name == ec2types.InstanceStateNameRunning || i.State.Name == ec2types.InstanceStateNamePending {
			p.log.Info("stopping instance", "cluster", c.Name, "machine", name, "instance", id)
			if _, err := c.api.ec2.StopInstances(ctx, &ec2.StopInstancesInput{InstanceIds: []string{id}}); err != nil {
				return classify(err, "", "stop instance %s of cluster %s", id, c.Name)
			}
		}
	}
	if len(ids) == 0 {
		return nil
	}
	w := ec2.NewInstanceStoppedWaiter(c.api.ec2, func(o *ec2.InstanceStoppedWaiterOptions) { o.MinDelay, o.MaxDelay = time.Second, 15*time.Second })
	if err := w.Wait(ctx, &ec2.DescribeInstancesInput{InstanceIds: ids}, stopWait); err != nil {
		return failure.Retryable(v1.CodeTimeout, err, "instance %s of machine %s did not stop within %s: %v", strings.Join(ids, ", "), name, stopWait, err)
	}
	return nil
}

// launchInZones launches the machine in its zone: the one the plan gave it
// from the spec's zones, or the cluster's zones in turn by the machine's
// number. When that zone has no capacity for the instance type (or does
// not offer it), the other zones the machine is allowed (its pool's or the
// control plane's, else the cluster's) are tried in order; note says where
// it went and why. A machine allowed one zone only fails there.
func (p *AWS) launchInZones(ctx context.Context, c *cluster, n *vpcNet, m provider.MachineSpec) (ec2types.Instance, string, error) {
	allowed := n.zones
	if m.Role == v1.RoleControlPlane && len(c.Spec.ControlPlane.Zones) > 0 {
		allowed = c.Spec.ControlPlane.Zones
	}
	if i := slices.IndexFunc(c.Spec.WorkerPools, func(wp v1.WorkerPool) bool { return wp.Name == m.Pool }); m.Role != v1.RoleControlPlane && i >= 0 && len(c.Spec.WorkerPools[i].Zones) > 0 {
		allowed = c.Spec.WorkerPools[i].Zones
	}
	first := machineNumber(m.Name) % len(allowed)
	if j := slices.Index(allowed, m.Zone); j >= 0 {
		first = j
	}
	zones := append(slices.Clone(allowed[first:]), allowed[:first]...)
	if m.Zone != "" && !slices.Contains(allowed, m.Zone) {
		zones = []string{m.Zone}
	}
	var refused []string
	for _, zone := range zones {
		subnet := n.private[zone]
		if subnet == "" {
			return ec2types.Instance{}, "", failure.Terminal(v1.CodeInvalidParameter, "cluster %s has no private subnet in zone %s for machine %s", c.Name, zone, m.Name)
		}
		i, err := p.launch(ctx, c, n, m, zone, subnet)
		if code := APICode(err); code == "InsufficientInstanceCapacity" || code == "Unsupported" {
			p.log.Info("no capacity for the machine in its zone; trying the next", "cluster", c.Project+"/"+c.Name, "machine", m.Name, "zone", zone, "code", code)
			refused = append(refused, zone+" ("+code+")")
			if len(refused) < len(zones) {
				continue
			}
		}
		if err != nil {
			return ec2types.Instance{}, "", err
		}
		note := ""
		if len(refused) > 0 {
			note = fmt.Sprintf("launched in %s: AWS had no %s for it in %s", zone, instanceType(m), strings.Join(refused, ", "))
		}
		return i, note, nil
	}
	return ec2types.Instance{}, "", fmt.Errorf("no zone to launch machine %s in", m.Name) // zones is never empty
}

func instanceType(m provider.MachineSpec) string {
	if m.InstanceType == "" {
		return DefaultInstanceType
	}
	return m.InstanceType
}

// machineNumber is the N of a machine named ...-N (0 when none).
func machineNumber(name string) int {
	i := strings.LastIndexByte(name, '-')
	n, _ := strconv.Atoi(name[i+1:])
	return n
}

func (p *AWS) launch(ctx context.Context, c *cluster, n *vpcNet, m provider.MachineSpec, zone, subnet string) (ec2types.Instance, error) {
	version := p.version(c)
	image, err := p.image(ctx, c, version)
	if err != nil {
		return ec2types.Instance{}, err
	}
	um := Machine{Project: c.Project, Cluster: c.Name, Name: m.Name, Role: m.Role, Pool: m.Pool, Version: version, Region: c.api.region, Bootstrap: m.Bootstrap}
	if um.JoinFrom, err = p.stage(ctx, c, um); err != nil {
		return ec2types.Instance{}, err
	}
	script, err := p.opts.UserData(ctx, um)
	if err != nil {
		return ec2types.Instance{}, failure.Retryable(v1.CodeProviderError, err, "cannot prepare the user data of machine %s", m.Name)
	}
	itype := m.InstanceType
	if itype == "" {
		itype = DefaultInstanceType
	}
	target := "spec.workerPools"
	var market *ec2types.InstanceMarketOptionsRequest
	if i := slices.IndexFunc(c.Spec.WorkerPools, func(wp v1.WorkerPool) bool { return wp.Name == m.Pool }); i >= 0 {
		target = fmt.Sprintf("spec.workerPools[%d].instanceType", i)
		if c.Spec.WorkerPools[i].Spot != nil {
			// A one-time spot request capped at AWS's default, the
			// on-demand price: maxPricePercent is not applied yet
			// (docs/provider-aws.md).
			market = &ec2types.InstanceMarketOptionsRequest{MarketType: ec2types.MarketTypeSpot,
				SpotOptions: &ec2types.SpotMarketOptions{SpotInstanceType: ec2types.SpotInstanceTypeOneTime,
					InstanceInterruptionBehavior: ec2types.InstanceInterruptionBehaviorTerminate}}
		}
	}
	group, profile := n.groups[sgWorker], c.roleName(sgWorker)
	if m.Role == v1.RoleControlPlane {
		group, profile, target = n.groups[sgControlPlane], c.roleName(sgControlPlane), "spec.controlPlane.instanceType"
	}
	if group == "" {
		if err := p.ensureSecurityGroups(ctx, c, n); err != nil {
			return ec2types.Instance{}, err
		}
		group = n.groups[sgWorker]
		if m.Role == v1.RoleControlPlane {
			group = n.groups[sgControlPlane]
		}
	}
	extra := []string{TagMachine, m.Name, TagRole, m.Role, TagZone, zone}
	if m.Pool != "" {
		extra = append(extra, TagPool, m.Pool)
	}
	if m.Revision != "" {
		extra = append(extra, TagRevision, m.Revision)
	}
	token, err := p.clientToken(ctx, c, m, zone)
	if err != nil {
		return ec2types.Instance{}, err
	}
	p.log.Info("launching instance", "cluster", c.Project+"/"+c.Name, "machine", m.Name, "type", itype, "zone", zone, "image", image)
	out, err := c.api.ec2.RunInstances(ctx, &ec2.RunInstancesInput{
		ImageId: &image, InstanceType: ec2types.InstanceType(itype), MinCount: awssdk.Int32(1), MaxCount: awssdk.Int32(1),
		SubnetId: &subnet, SecurityGroupIds: []string{group}, KeyName: awssdk.String(c.short("key")),
		IamInstanceProfile:    &ec2types.IamInstanceProfileSpecification{Name: &profile},
		UserData:              awssdk.String(base64.StdEncoding.EncodeToString([]byte(script))),
		ClientToken:           &token,
		InstanceMarketOptions: market,
		TagSpecifications:     c.tagSpec(ec2types.ResourceTypeInstance, "machine", extra...),
	})
	if err != nil {
		return ec2types.Instance{}, classify(err, target, "launch the instance of machine %s (%s in %s)", m.Name, itype, zone)
	}
	if len(out.Instances) == 0 {
		return ec2types.Instance{}, failure.Retryable(v1.CodeProviderError, nil, "AWS launched no instance for machine %s", m.Name)
	}
	return out.Instances[0], nil
}

// clientToken makes RunInstances idempotent for one launch of a machine in
// a zone: a launch retried after kilnd died mid-call gets the instance the
// first made, while a machine made again after its instance was terminated
// (a repair) gets a new one, as the count of its ended instances differs.
func (p *AWS) clientToken(ctx context.Context, c *cluster, m provider.MachineSpec, zone string) (string, error) {
	f := append(c.filter(""), ec2types.Filter{Name: awssdk.String("tag:" + TagMachine), Values: []string{m.Name}},
		ec2types.Filter{Name: awssdk.String("instance-state-name"), Values: []string{"shutting-down", "terminated"}})
	out, err := c.api.ec2.DescribeInstances(ctx, &ec2.DescribeInstancesInput{Filters: f})
	if err != nil {
		return "", classify(err, "", "list the ended instances of machine %s", m.Name)
	}
	ended := 0
	for _, r := range out.Reservations {
		ended += len(r.Instances)
	}
	sum := sha256.Sum256(fmt.Appendf(nil, "%s/%s/%s/%s/%d", c.id, m.Name, m.Revision, zone, ended))
	return hex.EncodeToString(sum[:16]), nil
}

// version is the Kubernetes version the cluster's machines boot: the
// spec's, or the newest there are images of.
func (p *AWS) version(c *cluster) string {
	if v := c.Spec.KubernetesVersion; v != "" || len(p.opts.Versions) == 0 {
		return v
	}
	return p.opts.Versions[len(p.opts.Versions)-1]
}

// image is the node image (AMI) of a Kubernetes version.
func (p *AWS) image(ctx context.Context, c *cluster, version string) (string, error) {
	name := p.opts.ImagePrefix + version
	out, err := c.api.ec2.DescribeImages(ctx, &ec2.DescribeImagesInput{Owners: []string{"self"},
		Filters: []ec2types.Filter{{Name: awssdk.String("name"), Values: []string{name}}}})
	if err != nil {
		return "", classify(err, "", "find the node image %s", name)
	}
	if len(out.Images) == 0 {
		e := failure.Terminal(v1.CodeUnsupportedVersion, "region %s has no node image %s for Kubernetes %s; choose a version it has or make the image there", c.api.region, name, version)
		e.Target = "spec.kubernetesVersion"
		return "", e
	}
	return awssdk.ToString(out.Images[0].ImageId), nil
}

// ListMachines returns the cluster's live instances that are machines (the
// bastion is not).
func (p *AWS) ListMachines(ctx context.Context, pc provider.Cluster) ([]provider.Machine, error) {
	c, err := p.cluster(pc)
	if err != nil {
		return nil, err
	}
	is, err := c.instances(ctx, "")
	if err != nil {
		return nil, err
	}
	var out []provider.Machine
	for _, i := range is {
		if machineName(i) != "" {
			out = append(out, machineOf(i))
		}
	}
	return out, nil
}

// DeleteMachine terminates the machine's instances (taken out of the load
// balancer first).
func (p *AWS) DeleteMachine(ctx context.Context, pc provider.Cluster, name string) error {
	c, err := p.cluster(pc)
	if err != nil {
		return err
	}
	is, err := c.instances(ctx, name)
	if err != nil || len(is) == 0 {
		return err
	}
	var ids []string
	for _, i := range is {
		id, group := awssdk.ToString(i.InstanceId), tagOf(i.Tags, TagGroup)
		if group == "" {
			ids = append(ids, id)
			continue
		}
		left, err := p.leaveGroup(ctx, c, group, id)
		if err != nil {
			return err
		}
		if !left {
			ids = append(ids, id)
		}
		// The group of a pool the spec no longer has goes with its last
		// instance.
		pool := tagOf(i.Tags, TagPool)
		if slices.ContainsFunc(c.Spec.WorkerPools, func(wp v1.WorkerPool) bool { return wp.Name == pool }) {
			continue
		}
		if err := p.deletePools(ctx, c, false); err != nil {
			return err
		}
	}
	if len(ids) == 0 {
		return nil
	}
	if err := p.deregisterTargets(ctx, c, ids); err != nil {
		return err
	}
	p.log.Info("terminating instances", "cluster", c.Project+"/"+c.Name, "machine", name, "instances", ids)
	if _, err := c.api.ec2.TerminateInstances(ctx, &ec2.TerminateInstancesInput{InstanceIds: ids}); err != nil {
		return classify(err, "", "terminate the instances of machine %s (%s)", name, joinIDs(ids))
	}
	return nil
}

// ensureBastion launches the bastion, the only SSH entry, in the first
// zone's public subnet.
func (p *AWS) ensureBastion(ctx context.Context, c *cluster, n *vpcNet) error {
	f := append(c.filter(partBastion), ec2types.Filter{Name: awssdk.String("instance-state-name"), Values: live})
	out, err := c.api.ec2.DescribeInstances(ctx, &ec2.DescribeInstancesInput{Filters: f})
	if err != nil {
		return classify(err, "", "find the bastion of cluster %s", c.Name)
	}
	for _, r := range out.Reservations {
		if len(r.Instances) > 0 {
			return nil
		}
	}
	version := p.version(c)
	image, err := p.image(ctx, c, version)
	if err != nil {
		return err
	}
	subnet, zone := n.firstPublic()
	p.log.Info("launching bastion", "cluster", c.Project+"/"+c.Name, "zone", zone)
	_, err = c.api.ec2.RunInstances(ctx, &ec2.RunInstancesInput{
		ImageId: &image, InstanceType: BastionInstanceType, MinCount: awssdk.Int32(1), MaxCount: awssdk.Int32(1),
		SubnetId: &subnet, SecurityGroupIds: []string{n.groups[sgBastion]}, KeyName: awssdk.String(c.short("key")),
		ClientToken:       awssdk.String(c.short("bastion")),
		TagSpecifications: c.tagSpec(ec2types.ResourceTypeInstance, partBastion, TagZone, zone),
	})
	if err != nil {
		return classify(err, "", "launch the bastion of cluster %s", c.Name)
	}
	return nil
}

// registerTargets puts control-plane instances behind the load balancer,
// when it exists (EnsureLoadBalancer registers those launched before it).
func (p *AWS) registerTargets(ctx context.Context, c *cluster, ids []string) error {
	tg, err := p.targetGroup(ctx, c)
	if err != nil || tg == "" || len(ids) == 0 {
		return err
	}
	var ts []elbtypes.TargetDescription
	for _, id := range ids {
		ts = append(ts, elbtypes.TargetDescription{Id: awssdk.String(id), Port: awssdk.Int32(APIServerPort)})
	}
	if _, err := c.api.elb.RegisterTargets(ctx, &elb.RegisterTargetsInput{TargetGroupArn: &tg, Targets: ts}); err != nil {
		return classify(err, "", "register %s with the load balancer of cluster %s", joinIDs(ids), c.Name)
	}
	return nil
}

func (p *AWS) deregisterTargets(ctx context.Context, c *cluster, ids []string) error {
	tg, err := p.targetGroup(ctx, c)
	if err != nil || tg == "" {
		return err
	}
	var ts []elbtypes.TargetDescription
	for _, id := range ids {
		ts = append(ts, elbtypes.TargetDescription{Id: awssdk.String(id), Port: awssdk.Int32(APIServerPort)})
	}
	_, err = c.api.elb.DeregisterTargets(ctx, &elb.DeregisterTargetsInput{TargetGroupArn: &tg, Targets: ts})
	if err != nil && APICode(err) != "InvalidTarget" {
		return classify(err, "", "take %s out of the load balancer of cluster %s", joinIDs(ids), c.Name)
	}
	return nil
}
