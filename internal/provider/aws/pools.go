package aws

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	awssdk "github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/autoscaling"
	astypes "github.com/aws/aws-sdk-go-v2/service/autoscaling/types"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
	ec2types "github.com/aws/aws-sdk-go-v2/service/ec2/types"

	v1 "kiln.dev/kiln/api/v1"
	"kiln.dev/kiln/internal/cost"
	"kiln.dev/kiln/internal/failure"
	"kiln.dev/kiln/internal/provider"
)

// A worker pool is a launch template and an Auto Scaling group, both named
// c.short("pool-"+pool). Each revision of the pool (provider.MachineSpec.
// Revision: its instance type, zones, labels, taints and the Kubernetes
// version) is a version of the template, described by the revision; the
// group launches the newest. The group's instances are named by their ids:
// they boot with resource-based hostnames, and their agents join as the
// node of that name. Scaling is the group's desired capacity (GrowPool
// raises it; DeleteMachine takes one instance out with it one less), spot
// is the group's instances distribution, and a rolling replace is a new
// template version whose instances replace the old ones one by one.

// TagGroup is the tag Auto Scaling puts on the instances it launches.
const TagGroup = "aws:autoscaling:groupName"

const partPool = "pool"

// How long GrowPool waits for a group to launch its instances, and how
// often it looks.
var (
	poolTimeout = 5 * time.Minute
	poolEvery   = time.Second
)

var _ provider.Pools = (*AWS)(nil)

// poolLock serializes the calls on one pool's group: two GrowPools counting
// its instances at once would both raise it.
func (p *AWS) poolLock(c *cluster, pool string) func() {
	v, _ := p.pools.LoadOrStore(c.id+"/"+pool, &sync.Mutex{})
	mu := v.(*sync.Mutex)
	mu.Lock()
	return mu.Unlock
}

// GrowPool raises pool m.Pool's group to the instances of have it still
// has plus add, at the template version of m.Revision, and waits, within
// poolTimeout, until it has launched them.
func (p *AWS) GrowPool(ctx context.Context, pc provider.Cluster, m provider.MachineSpec, have []string, add int) ([]provider.Machine, error) {
	c, err := p.cluster(pc)
	if err != nil {
		return nil, err
	}
	if add <= 0 {
		return nil, nil
	}
	unlock := p.poolLock(c, m.Pool)
	defer unlock()
	g, err := p.ensurePool(ctx, c, m)
	if err != nil {
		return nil, err
	}
	name := c.short(partPool + "-" + m.Pool)
	start := time.Now()
	deadline := start.Add(poolTimeout)
	onDemand, note := false, ""
	seen := map[string]bool{} // failed activities already acted on
	for {
		live := liveInstances(g)
		kept := 0
		var added []string
		for _, id := range live {
			if slices.Contains(have, id) {
				kept++
			} else {
				added = append(added, id)
			}
		}
		if len(added) >= add {
			ms, err := p.poolMachines(ctx, c, added[:add])
			for i := range ms {
				ms[i].Note = note
			}
			return ms, err
		}
		if want := int32(kept + add); awssdk.ToInt32(g.DesiredCapacity) < want {
			p.log.Info("raising the pool's group", "cluster", c.Project+"/"+c.Name, "pool", m.Pool, "group", name, "from", awssdk.ToInt32(g.DesiredCapacity), "to", want)
			in := &autoscaling.UpdateAutoScalingGroupInput{AutoScalingGroupName: &name, DesiredCapacity: &want}
			if awssdk.ToInt32(g.MaxSize) < want {
				in.MaxSize = &want
			}
			if _, err := c.api.asg.UpdateAutoScalingGroup(ctx, in); err != nil {
				return nil, classify(err, "", "raise the Auto Scaling group %s of pool %s to %d", name, m.Pool, want)
			}
		}
		err := p.launchFailed(ctx, c, name, m, start, seen)
		if errors.Is(err, errNoSpot) && spotFallback(c, m.Pool) && !onDemand {
			// Spot refused: the group launches on-demand instead, this time.
			p.log.Warn("no spot capacity for the pool; launching on-demand", "cluster", c.Project+"/"+c.Name, "pool", m.Pool, "group", name)
			if err := p.setOnDemand(ctx, c, g, m, 100); err != nil {
				return nil, err
			}
			onDemand = true
			note = fmt.Sprintf("launched on-demand: AWS had no spot capacity for %s in the pool's zones (spot.fallbackOnDemand)", instanceType(m))
			continue
		}
		if err != nil {
			// The group would go on trying: it is set back to what it has,
			// and the operation says what to change.
			back := int32(kept + len(added))
			if _, uerr := c.api.asg.UpdateAutoScalingGroup(ctx, &autoscaling.UpdateAutoScalingGroupInput{AutoScalingGroupName: &name, DesiredCapacity: &back}); uerr != nil {
				p.log.Warn("could not set the group back after its launch failed", "group", name, "err", uerr)
			}
			return nil, err
		}
		if time.Now().After(deadline) {
			return nil, failure.Retryable(v1.CodeTimeout, nil, "the Auto Scaling group %s of pool %s launched %d of %d instances within %s%s",
				name, m.Pool, len(added), add, poolTimeout, p.lastFailure(ctx, c, name, time.Time{}, nil))
		}
		if err := wait(ctx, poolEvery); err != nil {
			return nil, err
		}
		if g, err = p.group(ctx, c, name); err != nil {
			return nil, err
		}
		if g == nil {
			return nil, failure.Retryable(v1.CodeProviderError, nil, "the Auto Scaling group %s of pool %s went away while it was launching", name, m.Pool)
		}
	}
}

// liveInstances are the ids of a group's instances that count toward its
// capacity (not leaving it), oldest launch first as AWS lists them.
func liveInstances(g *astypes.AutoScalingGroup) []string {
	var out []string
	for _, i := range g.Instances {
		s := string(i.LifecycleState)
		if strings.HasPrefix(s, "Terminating") || strings.HasPrefix(s, "Detach") || s == "Terminated" || s == "Detached" {
			continue
		}
		out = append(out, awssdk.ToString(i.InstanceId))
	}
	return out
}

// lastFailure is ": " and the group's latest failed activity since since,
// for an error saying why it launched nothing; "" when there is none.
// An activity seen is skipped; the one returned is added to seen.
func (p *AWS) lastFailure(ctx context.Context, c *cluster, group string, since time.Time, seen map[string]bool) string {
	out, err := c.api.asg.DescribeScalingActivities(ctx, &autoscaling.DescribeScalingActivitiesInput{AutoScalingGroupName: &group, MaxRecords: awssdk.Int32(10)})
	if err != nil {
		return ""
	}
	for _, a := range out.Activities {
		if id := awssdk.ToString(a.ActivityId); a.StatusCode == astypes.ScalingActivityStatusCodeFailed && !awssdk.ToTime(a.StartTime).Before(since) && !seen[id] {
			if seen != nil {
				seen[id] = true
			}
			return ": " + awssdk.ToString(a.StatusMessage)
		}
	}
	return ""
}

// launchFailed is the terminal failure of a group's launches since start
// that waiting does not mend, as its activities say (Auto Scaling tries
// every zone of the group itself): the vCPU quota, no capacity for the
// instance type in any of its zones, a permission the account lacks.
func (p *AWS) launchFailed(ctx context.Context, c *cluster, group string, m provider.MachineSpec, start time.Time, seen map[string]bool) error {
	msg := p.lastFailure(ctx, c, group, start.Add(-time.Second), seen)
	if msg == "" {
		return nil
	}
	i := slices.IndexFunc(c.Spec.WorkerPools, func(wp v1.WorkerPool) bool { return wp.Name == m.Pool })
	var e *failure.Error
	switch lower := strings.ToLower(msg); {
	case strings.Contains(lower, "vcpu limit"):
		e = failure.Terminal(v1.CodeQuotaExceeded, "the Auto Scaling group %s of pool %s could not launch %s (VcpuLimitExceeded)%s; ask AWS for a higher quota or make the pool smaller", group, m.Pool, instanceType(m), msg)
	case strings.Contains(lower, "no spot capacity"):
		e = failure.Terminal(v1.CodeQuotaExceeded, "the Auto Scaling group %s of pool %s found no spot capacity for %s in any of its zones%s; set spot.fallbackOnDemand, or choose another instance type or zone", group, m.Pool, instanceType(m), msg)
		e.Err = errNoSpot
	case strings.Contains(lower, "sufficient") && strings.Contains(lower, "capacity"):
		e = failure.Terminal(v1.CodeQuotaExceeded, "the Auto Scaling group %s of pool %s found no capacity for %s in any of its zones (InsufficientInstanceCapacity)%s; choose another instance type or zone", group, m.Pool, instanceType(m), msg)
	case strings.Contains(lower, "not authorized"):
		e = failure.Terminal(v1.CodeForbidden, "the Auto Scaling group %s of pool %s may not launch instances with the cloud account's credentials%s", group, m.Pool, msg)
		e.Target = "spec.cloudAccount"
		return e
	default:
		return nil
	}
	e.Target = fmt.Sprintf("spec.workerPools[%d].instanceType", i)
	return e
}

// poolMachines describes a group's instances as machines.
func (p *AWS) poolMachines(ctx context.Context, c *cluster, ids []string) ([]provider.Machine, error) {
	var out []provider.Machine
	err := visible(ctx, "instances "+joinIDs(ids), func() (bool, error) {
		res, err := c.api.ec2.DescribeInstances(ctx, &ec2.DescribeInstancesInput{InstanceIds: ids})
		if err != nil {
			return false, err
		}
		out = out[:0]
		for _, r := range res.Reservations {
			for _, i := range r.Instances {
				out = append(out, machineOf(i))
			}
		}
		return len(out) == len(ids), nil
	})
	return out, err
}

// group describes the named group; nil when there is none (or it is being
// deleted).
func (p *AWS) group(ctx context.Context, c *cluster, name string) (*astypes.AutoScalingGroup, error) {
	out, err := c.api.asg.DescribeAutoScalingGroups(ctx, &autoscaling.DescribeAutoScalingGroupsInput{AutoScalingGroupNames: []string{name}})
	if err != nil {
		return nil, classify(err, "", "find the Auto Scaling group %s of cluster %s", name, c.Name)
	}
	for _, g := range out.AutoScalingGroups {
		if awssdk.ToString(g.Status) == "" {
			return &g, nil
		}
	}
	return nil, nil
}

// ensurePool finds or makes the pool's launch template, with a version of
// m.Revision, and its group, launching that version in the private subnets
// of the pool's zones (the cluster's when it names none).
func (p *AWS) ensurePool(ctx context.Context, c *cluster, m provider.MachineSpec) (*astypes.AutoScalingGroup, error) {
	i := slices.IndexFunc(c.Spec.WorkerPools, func(wp v1.WorkerPool) bool { return wp.Name == m.Pool })
	if i < 0 {
		return nil, failure.Terminal(v1.CodeInvalidParameter, "cluster %s has no worker pool %q to launch machines in", c.Name, m.Pool)
	}
	pool := c.Spec.WorkerPools[i]
	n, err := p.network(ctx, c)
	if err != nil {
		return nil, err
	}
	if n.groups[sgWorker] == "" {
		if err := p.ensureSecurityGroups(ctx, c, n); err != nil {
			return nil, err
		}
	}
	template, version, err := p.ensureTemplate(ctx, c, n, m, i)
	if err != nil {
		return nil, err
	}
	zones := pool.Zones
	if len(zones) == 0 {
		zones = n.zones
	}
	var subnets []string
	for _, z := range zones {
		if n.private[z] == "" {
			return nil, failure.Terminal(v1.CodeInvalidParameter, "cluster %s has no private subnet in zone %s for pool %s", c.Name, z, pool.Name)
		}
		subnets = append(subnets, n.private[z])
	}
	spec := &astypes.LaunchTemplateSpecification{LaunchTemplateId: &template, Version: awssdk.String(strconv.FormatInt(version, 10))}
	var mixed *astypes.MixedInstancesPolicy
	if pool.Spot != nil {
		mixed, spec = spotPolicy(spec, m, pool.Spot, 0, c.api.region), nil
	}
	name := c.short(partPool + "-" + m.Pool)
	g, err := p.group(ctx, c, name)
	if err != nil {
		return nil, err
	}
	if g == nil {
		var tags []astypes.Tag
		for k, v := range c.tags(partPool, TagPool, m.Pool, TagRole, v1.RoleWorker) {
			tags = append(tags, astypes.Tag{Key: awssdk.String(k), Value: awssdk.String(v), PropagateAtLaunch: awssdk.Bool(false),
				ResourceId: &name, ResourceType: awssdk.String("auto-scaling-group")})
		}
		p.log.Info("creating the pool's Auto Scaling group", "cluster", c.Project+"/"+c.Name, "pool", m.Pool, "group", name, "zones", zones)
		_, err := c.api.asg.CreateAutoScalingGroup(ctx, &autoscaling.CreateAutoScalingGroupInput{
			AutoScalingGroupName: &name, MinSize: awssdk.Int32(0), MaxSize: awssdk.Int32(int32(max(pool.Size, 1))), DesiredCapacity: awssdk.Int32(0),
			LaunchTemplate: spec, MixedInstancesPolicy: mixed, VPCZoneIdentifier: awssdk.String(strings.Join(subnets, ",")), Tags: tags,
		})
		if err != nil && APICode(err) != "AlreadyExists" {
			return nil, classify(err, fmt.Sprintf("spec.workerPools[%d]", i), "create the Auto Scaling group %s of pool %s", name, m.Pool)
		}
		if err := visible(ctx, "Auto Scaling group "+name, func() (bool, error) {
			g, err = p.group(ctx, c, name)
			return g != nil, err
		}); err != nil {
			return nil, err
		}
		return g, nil
	}
	if groupLaunches(g, template, version, pool.Spot != nil) && slices.Equal(strings.Split(awssdk.ToString(g.VPCZoneIdentifier), ","), subnets) {
		return g, nil
	}
	p.log.Info("pointing the pool's group at its revision", "cluster", c.Project+"/"+c.Name, "pool", m.Pool, "group", name, "version", version)
	_, err = c.api.asg.UpdateAutoScalingGroup(ctx, &autoscaling.UpdateAutoScalingGroupInput{AutoScalingGroupName: &name,
		LaunchTemplate: spec, MixedInstancesPolicy: mixed, VPCZoneIdentifier: awssdk.String(strings.Join(subnets, ","))})
	if err != nil {
		return nil, classify(err, fmt.Sprintf("spec.workerPools[%d]", i), "update the Auto Scaling group %s of pool %s", name, m.Pool)
	}
	return p.group(ctx, c, name)
}

// spotPolicy is a spot pool's mixed instances policy: onDemand percent of
// its instances on-demand (0, or 100 when spot capacity was refused and
// the pool falls back), the rest spot at its max price in region.
func spotPolicy(spec *astypes.LaunchTemplateSpecification, m provider.MachineSpec, spot *v1.Spot, onDemand int32, region string) *astypes.MixedInstancesPolicy {
	return &astypes.MixedInstancesPolicy{
		LaunchTemplate: &astypes.LaunchTemplate{LaunchTemplateSpecification: spec,
			Overrides: []astypes.LaunchTemplateOverrides{{InstanceType: awssdk.String(instanceType(m))}}},
		InstancesDistribution: &astypes.InstancesDistribution{
			OnDemandBaseCapacity: awssdk.Int32(0), OnDemandPercentageAboveBaseCapacity: &onDemand,
			SpotAllocationStrategy: awssdk.String("price-capacity-optimized"),
			SpotMaxPrice:           awssdk.String(spotMaxPrice(region, instanceType(m), spot.MaxPricePercent)),
		},
	}
}

// errNoSpot marks a launch that failed for want of spot capacity.
var errNoSpot = errors.New("no spot capacity")

// spotFallback reports whether the pool falls back to on-demand.
func spotFallback(c *cluster, pool string) bool {
	i := slices.IndexFunc(c.Spec.WorkerPools, func(wp v1.WorkerPool) bool { return wp.Name == pool })
	return i >= 0 && c.Spec.WorkerPools[i].Spot != nil && c.Spec.WorkerPools[i].Spot.FallbackOnDemand
}

// setOnDemand makes the spot pool's group launch onDemand percent of its
// instances on-demand, from the template version it launches.
func (p *AWS) setOnDemand(ctx context.Context, c *cluster, g *astypes.AutoScalingGroup, m provider.MachineSpec, onDemand int32) error {
	i := slices.IndexFunc(c.Spec.WorkerPools, func(wp v1.WorkerPool) bool { return wp.Name == m.Pool })
	mp := g.MixedInstancesPolicy
	if i < 0 || c.Spec.WorkerPools[i].Spot == nil || mp == nil || mp.LaunchTemplate == nil {
		return nil
	}
	name, lt := awssdk.ToString(g.AutoScalingGroupName), mp.LaunchTemplate.LaunchTemplateSpecification
	spec := &astypes.LaunchTemplateSpecification{LaunchTemplateId: lt.LaunchTemplateId, Version: lt.Version} // AWS takes the id or the name, not both
	_, err := c.api.asg.UpdateAutoScalingGroup(ctx, &autoscaling.UpdateAutoScalingGroupInput{AutoScalingGroupName: &name,
		MixedInstancesPolicy: spotPolicy(spec, m, c.Spec.WorkerPools[i].Spot, onDemand, c.api.region)})
	return classify(err, "", "set the share of on-demand instances of the Auto Scaling group %s to %d%%", name, onDemand)
}

// groupLaunches reports whether group g launches version of template, as
// spot (first: none on-demand) or not.
func groupLaunches(g *astypes.AutoScalingGroup, template string, version int64, spot bool) bool {
	want := strconv.FormatInt(version, 10)
	if spot {
		mp := g.MixedInstancesPolicy
		return mp != nil && mp.LaunchTemplate != nil && mp.LaunchTemplate.LaunchTemplateSpecification != nil &&
			awssdk.ToString(mp.LaunchTemplate.LaunchTemplateSpecification.LaunchTemplateId) == template &&
			awssdk.ToString(mp.LaunchTemplate.LaunchTemplateSpecification.Version) == want &&
			mp.InstancesDistribution != nil && awssdk.ToInt32(mp.InstancesDistribution.OnDemandPercentageAboveBaseCapacity) == 0
	}
	return g.MixedInstancesPolicy == nil && g.LaunchTemplate != nil &&
		awssdk.ToString(g.LaunchTemplate.LaunchTemplateId) == template && awssdk.ToString(g.LaunchTemplate.Version) == want
}

// ensureTemplate finds or makes the pool's launch template and its version
// of m.Revision, returning the template's id and the version's number.
func (p *AWS) ensureTemplate(ctx context.Context, c *cluster, n *vpcNet, m provider.MachineSpec, pool int) (string, int64, error) {
	name := c.short(partPool + "-" + m.Pool)
	out, err := c.api.ec2.DescribeLaunchTemplates(ctx, &ec2.DescribeLaunchTemplatesInput{LaunchTemplateNames: []string{name}})
	if err != nil && !strings.HasPrefix(APICode(err), "InvalidLaunchTemplateName.NotFound") {
		return "", 0, classify(err, "", "find the launch template %s of pool %s", name, m.Pool)
	}
	if err == nil && len(out.LaunchTemplates) > 0 {
		id := awssdk.ToString(out.LaunchTemplates[0].LaunchTemplateId)
		versions, err := c.api.ec2.DescribeLaunchTemplateVersions(ctx, &ec2.DescribeLaunchTemplateVersionsInput{LaunchTemplateId: &id})
		if err != nil {
			return "", 0, classify(err, "", "list the versions of launch template %s", name)
		}
		for _, v := range versions.LaunchTemplateVersions {
			if awssdk.ToString(v.VersionDescription) == m.Revision {
				return id, awssdk.ToInt64(v.VersionNumber), nil
			}
		}
		data, err := p.templateData(ctx, c, n, m)
		if err != nil {
			return "", 0, err
		}
		p.log.Info("adding a launch template version", "cluster", c.Project+"/"+c.Name, "pool", m.Pool, "template", name, "revision", m.Revision)
		v, err := c.api.ec2.CreateLaunchTemplateVersion(ctx, &ec2.CreateLaunchTemplateVersionInput{LaunchTemplateId: &id,
			VersionDescription: &m.Revision, LaunchTemplateData: data, ClientToken: awssdk.String(c.short(m.Pool + "-" + m.Revision))})
		if err != nil {
			return "", 0, classify(err, fmt.Sprintf("spec.workerPools[%d]", pool), "add version %s to launch template %s", m.Revision, name)
		}
		return id, awssdk.ToInt64(v.LaunchTemplateVersion.VersionNumber), nil
	}
	data, err := p.templateData(ctx, c, n, m)
	if err != nil {
		return "", 0, err
	}
	p.log.Info("creating the pool's launch template", "cluster", c.Project+"/"+c.Name, "pool", m.Pool, "template", name, "revision", m.Revision)
	t, err := c.api.ec2.CreateLaunchTemplate(ctx, &ec2.CreateLaunchTemplateInput{LaunchTemplateName: &name, VersionDescription: &m.Revision,
		LaunchTemplateData: data, TagSpecifications: c.tagSpec(ec2types.ResourceTypeLaunchTemplate, partPool, TagPool, m.Pool),
		ClientToken: awssdk.String(c.short(m.Pool + "-" + m.Revision))})
	if err != nil {
		return "", 0, classify(err, fmt.Sprintf("spec.workerPools[%d]", pool), "create the launch template %s of pool %s", name, m.Pool)
	}
	return awssdk.ToString(t.LaunchTemplate.LaunchTemplateId), 1, nil
}

// templateData is what the pool's instances of m's revision launch: the
// node image, the instance type, the workers' security group and
// instance profile, user data that joins each as the node named by its
// instance id (resource-based hostnames), and the tags that find them.
func (p *AWS) templateData(ctx context.Context, c *cluster, n *vpcNet, m provider.MachineSpec) (*ec2types.RequestLaunchTemplateData, error) {
	version := p.version(c)
	image, err := p.image(ctx, c, version)
	if err != nil {
		return nil, err
	}
	um := Machine{Project: c.Project, Cluster: c.Name, Role: v1.RoleWorker, Pool: m.Pool, Version: version, Region: c.api.region, Bootstrap: m.Bootstrap}
	if um.JoinFrom, err = p.stage(ctx, c, um); err != nil {
		return nil, err
	}
	script, err := p.opts.UserData(ctx, um)
	if err != nil {
		return nil, failure.Retryable(v1.CodeProviderError, err, "cannot prepare the user data of pool %s", m.Pool)
	}
	extra := []string{TagRole, v1.RoleWorker, TagPool, m.Pool}
	if m.Revision != "" {
		extra = append(extra, TagRevision, m.Revision)
	}
	var tags []ec2types.LaunchTemplateTagSpecificationRequest
	for _, s := range c.tagSpec(ec2types.ResourceTypeInstance, "machine", extra...) {
		tags = append(tags, ec2types.LaunchTemplateTagSpecificationRequest{ResourceType: s.ResourceType, Tags: s.Tags})
	}
	return &ec2types.RequestLaunchTemplateData{
		ImageId: &image, InstanceType: ec2types.InstanceType(instanceType(m)), KeyName: awssdk.String(c.short("key")),
		IamInstanceProfile:    &ec2types.LaunchTemplateIamInstanceProfileSpecificationRequest{Name: awssdk.String(c.roleName(sgWorker))},
		SecurityGroupIds:      []string{n.groups[sgWorker]},
		UserData:              awssdk.String(base64.StdEncoding.EncodeToString([]byte(script))),
		PrivateDnsNameOptions: &ec2types.LaunchTemplatePrivateDnsNameOptionsRequest{HostnameType: ec2types.HostnameTypeResourceName},
		TagSpecifications:     tags,
	}, nil
}

// leaveGroup terminates instance id of group, the group's desired capacity
// one less so that it launches no replacement. It reports false when the
// instance is no longer the group's.
func (p *AWS) leaveGroup(ctx context.Context, c *cluster, group, id string) (bool, error) {
	p.log.Info("taking the instance out of its group", "cluster", c.Project+"/"+c.Name, "group", group, "instance", id)
	_, err := c.api.asg.TerminateInstanceInAutoScalingGroup(ctx, &autoscaling.TerminateInstanceInAutoScalingGroupInput{
		InstanceId: &id, ShouldDecrementDesiredCapacity: awssdk.Bool(true)})
	if APICode(err) == "ValidationError" {
		return false, nil // not in a group (any more)
	}
	if err != nil {
		return false, classify(err, "", "terminate instance %s of Auto Scaling group %s", id, group)
	}
	return true, nil
}

// deletePools deletes the cluster's pools' groups (with their instances)
// and launch templates: every one when all is set, else those of pools
// the spec no longer has whose groups are empty.
func (p *AWS) deletePools(ctx context.Context, c *cluster, all bool) error {
	groups, err := p.groups(ctx, c)
	if err != nil {
		return err
	}
	for _, g := range groups {
		pool := tagOfGroup(g, TagPool)
		if !all && (awssdk.ToInt32(g.DesiredCapacity) > 0 || slices.ContainsFunc(c.Spec.WorkerPools, func(wp v1.WorkerPool) bool { return wp.Name == pool })) {
			continue
		}
		name := awssdk.ToString(g.AutoScalingGroupName)
		if awssdk.ToString(g.Status) == "" {
			p.log.Info("deleting the pool's Auto Scaling group", "cluster", c.Project+"/"+c.Name, "pool", pool, "group", name)
			_, err := c.api.asg.DeleteAutoScalingGroup(ctx, &autoscaling.DeleteAutoScalingGroupInput{AutoScalingGroupName: &name, ForceDelete: awssdk.Bool(true)})
			if err != nil && APICode(err) != "ValidationError" {
				return classify(err, "", "delete the Auto Scaling group %s of pool %s", name, pool)
			}
		}
		_, err := c.api.ec2.DeleteLaunchTemplate(ctx, &ec2.DeleteLaunchTemplateInput{LaunchTemplateName: &name})
		if err != nil && !strings.HasPrefix(APICode(err), "InvalidLaunchTemplateName.NotFound") && !notFound(err) {
			return classify(err, "", "delete the launch template %s of pool %s", name, pool)
		}
	}
	return nil
}

// groups are the cluster's Auto Scaling groups, those being deleted too.
func (p *AWS) groups(ctx context.Context, c *cluster) ([]astypes.AutoScalingGroup, error) {
	var out []astypes.AutoScalingGroup
	pages := autoscaling.NewDescribeAutoScalingGroupsPaginator(c.api.asg, &autoscaling.DescribeAutoScalingGroupsInput{
		Filters: []astypes.Filter{{Name: awssdk.String("tag:" + TagCluster), Values: []string{c.id}}}})
	for pages.HasMorePages() {
		page, err := pages.NextPage(ctx)
		if err != nil {
			return nil, classify(err, "", "list the Auto Scaling groups of cluster %s", c.Name)
		}
		out = append(out, page.AutoScalingGroups...)
	}
	return out, nil
}

func tagOfGroup(g astypes.AutoScalingGroup, key string) string {
	for _, t := range g.Tags {
		if awssdk.ToString(t.Key) == key {
			return awssdk.ToString(t.Value)
		}
	}
	return ""
}

// spotMaxPrice is maxPricePercent of the instance type's on-demand price
// in region, Kiln's price table's (internal/cost; us-east-1's where the
// table has none for region), as AWS takes it ("0.0480"); "" (the
// on-demand price, AWS's default cap) when the table does not price the
// type or percent is 0.
func spotMaxPrice(region, instanceType string, percent int) string {
	price, ok := cost.Default().OnDemand("aws", region, instanceType)
	if !ok || percent <= 0 {
		return ""
	}
	return strconv.FormatFloat(price*float64(percent)/100, 'f', 4, 64)
}
