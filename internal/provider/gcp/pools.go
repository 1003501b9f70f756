package gcp

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"slices"
	"strings"
	"sync"

	compute "cloud.google.com/go/compute/apiv1"
	"cloud.google.com/go/compute/apiv1/computepb"
	"google.golang.org/api/iterator"
	"google.golang.org/protobuf/proto"

	v1 "kiln.dev/kiln/api/v1"
	"kiln.dev/kiln/internal/failure"
	"kiln.dev/kiln/internal/provider"
)

// A worker pool is a regional managed instance group (groupName) made
// from an instance template of the pool's settings (templateName: its
// revision, machine type and image), as Cluster API's GCP provider makes
// MachinePools: the group makes its instances across the pool's zones
// (or the region's), each named from the group's base name and four
// characters Compute picks, which is also the machine's name (its node
// joins as its hostname). GrowPool raises the group's targetSize;
// DeleteMachine deletes one instance through the group (deleteInstances),
// which lowers it; a group left empty of a pool the spec no longer has is
// deleted, then its templates.

var _ provider.Pools = (*GCP)(nil)

// groupName is the group of pool (also its instances' base name: at most
// 58 characters, so that theirs fit 63).
func (c *cluster) groupName(pool string) string { return fitName(c.prefix+"-"+pool, 58) }

// templateName is pool's template for m: its settings' hash in the name,
// since a template cannot be changed.
func (g *GCP) templateName(c *cluster, m provider.MachineSpec) string {
	sum := sha256.Sum256([]byte(m.Revision + "\n" + m.InstanceType + "\n" + g.image(c)))
	return fitName(c.prefix+"-"+m.Pool, 63-7) + "-" + hex.EncodeToString(sum[:3])
}

// poolLock serialises the calls on one pool's group: two GrowPools
// counting its machines at once would both raise it.
func (g *GCP) poolLock(c *cluster, pool string) func() {
	v, _ := g.pools.LoadOrStore(c.id+"/"+pool, &sync.Mutex{})
	mu := v.(*sync.Mutex)
	mu.Lock()
	return mu.Unlock
}

// GrowPool raises pool m.Pool's group to the machines of have it still
// has plus add, made from m's template, and waits until Compute has made
// them. Machines the group has that have does not name (a call cut
// short) count first.
func (g *GCP) GrowPool(ctx context.Context, pc provider.Cluster, m provider.MachineSpec, have []string, add int) ([]provider.Machine, error) {
	c, err := g.cluster(ctx, pc)
	if err != nil {
		return nil, err
	}
	defer c.api.Close()
	defer g.poolLock(c, m.Pool)()
	group := c.groupName(m.Pool)
	key := "instanceGroupManagers/" + c.region + "/" + group
	// The group's operation an earlier attempt began ends first: its
	// instances then count as they are.
	if err := g.resume(ctx, c, key); err != nil && !isNotFound(err) {
		return nil, classify(err, c.api.account, "resize the group %s of pool %s", group, m.Pool)
	}
	members, err := g.members(ctx, c, group)
	if err != nil {
		return nil, err
	}
	fresh := func() []*computepb.Instance {
		var out []*computepb.Instance
		for _, in := range members {
			if !slices.Contains(have, in.GetName()) {
				out = append(out, in)
			}
		}
		return out
	}
	if need := add - len(fresh()); need > 0 {
		zones, err := g.zones(ctx, c, m)
		if err != nil {
			return nil, err
		}
		typ := m.InstanceType
		if typ == "" {
			typ = DefaultMachineType
		}
		if err := g.checkType(ctx, c, m, typ, zones); err != nil {
			return nil, err
		}
		tpl, err := g.ensureTemplate(ctx, c, m)
		if err != nil {
			return nil, err
		}
		if err := g.ensureGroup(ctx, c, m, tpl, len(members)+need); err != nil {
			return nil, err
		}
		if members, err = g.members(ctx, c, group); err != nil {
			return nil, err
		}
	}
	out := []provider.Machine{}
	for _, in := range fresh() {
		if len(out) == add {
			break
		}
		out = append(out, machineOf(in))
	}
	return out, nil
}

// members are the instances of the group (none when it is not there),
// oldest first, as listManagedInstances names them.
func (g *GCP) members(ctx context.Context, c *cluster, group string) ([]*computepb.Instance, error) {
	var links []string
	it := c.api.groups.ListManagedInstances(ctx, &computepb.ListManagedInstancesRegionInstanceGroupManagersRequest{
		Project: c.api.project, Region: c.region, InstanceGroupManager: group})
	for {
		mi, err := it.Next()
		if err == iterator.Done {
			break
		}
		if isNotFound(err) {
			return nil, nil
		}
		if err != nil {
			return nil, classify(err, c.api.account, "list the instances of the group %s", group)
		}
		links = append(links, mi.GetInstance())
	}
	if len(links) == 0 {
		return nil, nil
	}
	all, err := g.instances(ctx, c)
	if err != nil {
		return nil, err
	}
	var out []*computepb.Instance
	for _, l := range links {
		if i := slices.IndexFunc(all, func(in *computepb.Instance) bool { return sameLink(in.GetSelfLink(), l) }); i >= 0 {
			out = append(out, all[i])
		}
	}
	return out, nil
}

// sameLink reports whether two URLs of Compute's name one resource
// (whatever their hosts).
func sameLink(a, b string) bool {
	_, pa, _ := strings.Cut(a, "/compute/v1/")
	_, pb, _ := strings.Cut(b, "/compute/v1/")
	return pa != "" && pa == pb
}

// templateOwner is the description of pool's templates.
func (c *cluster) templateOwner(pool string) string {
	return c.owner("instance template of pool " + pool)
}

// ensureTemplate finds or makes pool m.Pool's template for m, and returns
// its URL.
func (g *GCP) ensureTemplate(ctx context.Context, c *cluster, m provider.MachineSpec) (string, error) {
	name := g.templateName(c, m)
	key := "instanceTemplates/" + name
	if err := g.resume(ctx, c, key); err != nil && !isNotFound(err) {
		return "", classify(err, c.api.account, "make the instance template %s of pool %s", name, m.Pool)
	}
	for range 2 {
		got, err := c.api.templates.Get(ctx, &computepb.GetInstanceTemplateRequest{Project: c.api.project, InstanceTemplate: name})
		if err == nil {
			if err := c.owns(got.GetDescription(), "instance template "+name); err != nil {
				return "", err
			}
			return got.GetSelfLink(), nil
		}
		if !isNotFound(err) {
			return "", classify(err, c.api.account, "find the instance template %s", name)
		}
		wm := m
		wm.Role = v1.RoleWorker
		p, err := g.properties(ctx, c, wm)
		if err != nil {
			return "", err
		}
		g.log.Info("creating instance template", "cluster", c.Project+"/"+c.Name, "pool", m.Pool, "template", name, "type", p.GetMachineType())
		op, err := c.api.templates.Insert(ctx, &computepb.InsertInstanceTemplateRequest{Project: c.api.project, InstanceTemplateResource: &computepb.InstanceTemplate{
			Name: proto.String(name), Description: proto.String(c.templateOwner(m.Pool)), Properties: p}})
		if err := g.await(ctx, c, key, "global", op, err); err != nil && !isAlreadyExists(err) {
			return "", g.machineError(classify(err, c.api.account, "make the instance template %s of pool %s", name, m.Pool), c, m)
		}
	}
	return "", failure.Terminal(v1.CodeConflict, "the instance template %s of pool %s was made and is not there: another client is deleting it", name, m.Pool)
}

// ensureGroup makes pool m.Pool's group from tpl with size instances, or
// brings the one there to tpl and size.
func (g *GCP) ensureGroup(ctx context.Context, c *cluster, m provider.MachineSpec, tpl string, size int) error {
	name := c.groupName(m.Pool)
	key := "instanceGroupManagers/" + c.region + "/" + name
	scope := "regions/" + c.region
	got, err := c.api.groups.Get(ctx, &computepb.GetRegionInstanceGroupManagerRequest{Project: c.api.project, Region: c.region, InstanceGroupManager: name})
	if isNotFound(err) {
		igm := &computepb.InstanceGroupManager{Name: proto.String(name), Description: proto.String(c.owner("pool " + m.Pool)),
			InstanceTemplate: proto.String(tpl), BaseInstanceName: proto.String(name), TargetSize: proto.Int32(int32(size))}
		if i := slices.IndexFunc(c.Spec.WorkerPools, func(wp v1.WorkerPool) bool { return wp.Name == m.Pool }); i >= 0 && len(c.Spec.WorkerPools[i].Zones) > 0 {
			igm.DistributionPolicy = &computepb.DistributionPolicy{}
			for _, z := range c.Spec.WorkerPools[i].Zones {
				igm.DistributionPolicy.Zones = append(igm.DistributionPolicy.Zones, &computepb.DistributionPolicyZoneConfiguration{Zone: proto.String("zones/" + z)})
			}
		}
		g.log.Info("creating instance group", "cluster", c.Project+"/"+c.Name, "pool", m.Pool, "group", name, "size", size)
		op, err := c.api.groups.Insert(ctx, &computepb.InsertRegionInstanceGroupManagerRequest{Project: c.api.project, Region: c.region, InstanceGroupManagerResource: igm})
		if err := g.await(ctx, c, key, scope, op, err); err != nil {
			return g.machineError(classify(err, c.api.account, "make the group %s of pool %s with %d instances", name, m.Pool, size), c, m)
		}
		return nil
	}
	if err != nil {
		return classify(err, c.api.account, "find the group %s of pool %s", name, m.Pool)
	}
	if err := c.owns(got.GetDescription(), "instance group "+name); err != nil {
		return err
	}
	if old := got.GetInstanceTemplate(); !sameLink(old, tpl) {
		g.log.Info("setting the instance template of a group", "cluster", c.Project+"/"+c.Name, "group", name, "template", lastSegment(tpl))
		op, err := c.api.groups.Patch(ctx, &computepb.PatchRegionInstanceGroupManagerRequest{Project: c.api.project, Region: c.region, InstanceGroupManager: name,
			InstanceGroupManagerResource: &computepb.InstanceGroupManager{InstanceTemplate: proto.String(tpl)}})
		if err := g.await(ctx, c, key, scope, op, err); err != nil {
			return classify(err, c.api.account, "set the template of the group %s of pool %s", name, m.Pool)
		}
	}
	if int(got.GetTargetSize()) == size {
		return nil
	}
	g.log.Info("resizing instance group", "cluster", c.Project+"/"+c.Name, "pool", m.Pool, "group", name, "from", got.GetTargetSize(), "to", size)
	op, err := c.api.groups.Resize(ctx, &computepb.ResizeRegionInstanceGroupManagerRequest{Project: c.api.project, Region: c.region, InstanceGroupManager: name, Size: int32(size)})
	if err := g.await(ctx, c, key, scope, op, err); err != nil {
		return classify(err, c.api.account, "resize the group %s of pool %s to %d instances", name, m.Pool, size)
	}
	return nil
}

// deleteMember deletes a pool's instance through its group, and the
// group (then its templates) when that leaves it empty and the spec has
// the pool no more.
func (g *GCP) deleteMember(ctx context.Context, c *cluster, in *computepb.Instance, group string) error {
	key := "instanceGroupManagers/" + c.region + "/" + group
	if err := g.resume(ctx, c, key); err != nil && !isNotFound(err) {
		return classify(err, c.api.account, "delete the instance %s of the group %s", in.GetName(), group)
	}
	g.log.Info("deleting instance through its group", "cluster", c.Project+"/"+c.Name, "instance", in.GetName(), "group", group)
	op, err := c.api.groups.DeleteInstances(ctx, &computepb.DeleteInstancesRegionInstanceGroupManagerRequest{Project: c.api.project, Region: c.region,
		InstanceGroupManager: group, RegionInstanceGroupManagersDeleteInstancesRequestResource: &computepb.RegionInstanceGroupManagersDeleteInstancesRequest{
			Instances: []string{in.GetSelfLink()}}})
	if err := g.await(ctx, c, key, "regions/"+c.region, op, err); err != nil && !isNotFound(err) {
		return classify(err, c.api.account, "delete the instance %s of the group %s", in.GetName(), group)
	}
	pool := in.GetLabels()[LabelPool]
	if slices.ContainsFunc(c.Spec.WorkerPools, func(wp v1.WorkerPool) bool { return labelValue(wp.Name) == pool }) {
		return nil
	}
	got, err := c.api.groups.Get(ctx, &computepb.GetRegionInstanceGroupManagerRequest{Project: c.api.project, Region: c.region, InstanceGroupManager: group})
	switch {
	case isNotFound(err):
		return nil
	case err != nil:
		return classify(err, c.api.account, "find the group %s", group)
	case got.GetTargetSize() > 0:
		return nil
	}
	return g.deletePools(ctx, c, func(desc string) bool { return desc == c.owner("pool "+pool) || desc == c.templateOwner(pool) })
}

// deletePools deletes the cluster's groups whose description match
// takes, then its templates that match: groups first, since Compute
// keeps a template a group uses.
func (g *GCP) deletePools(ctx context.Context, c *cluster, match func(description string) bool) error {
	p, region := c.api.project, c.region
	var groups, templates []string
	git := c.api.groups.List(ctx, &computepb.ListRegionInstanceGroupManagersRequest{Project: p, Region: region})
	for {
		igm, err := git.Next()
		if err == iterator.Done {
			break
		}
		if err != nil {
			return classify(err, c.api.account, "list the instance groups of region %s", region)
		}
		if strings.HasPrefix(igm.GetName(), c.prefix+"-") && c.owns(igm.GetDescription(), "") == nil && match(igm.GetDescription()) {
			groups = append(groups, igm.GetName())
		}
	}
	tit := c.api.templates.List(ctx, &computepb.ListInstanceTemplatesRequest{Project: p})
	for {
		t, err := tit.Next()
		if err == iterator.Done {
			break
		}
		if err != nil {
			return classify(err, c.api.account, "list the instance templates of project %s", p)
		}
		if strings.HasPrefix(t.GetName(), c.prefix+"-") && c.owns(t.GetDescription(), "") == nil && match(t.GetDescription()) {
			templates = append(templates, t.GetName())
		}
	}
	for _, name := range groups {
		if err := g.deletePart(ctx, c, "instanceGroupManagers/"+region+"/"+name, "regions/"+region, "instance group "+name,
			func(ctx context.Context) (string, error) {
				got, err := c.api.groups.Get(ctx, &computepb.GetRegionInstanceGroupManagerRequest{Project: p, Region: region, InstanceGroupManager: name})
				return got.GetDescription(), err
			},
			func(ctx context.Context) (*compute.Operation, error) {
				return c.api.groups.Delete(ctx, &computepb.DeleteRegionInstanceGroupManagerRequest{Project: p, Region: region, InstanceGroupManager: name})
			}); err != nil {
			return err
		}
	}
	for _, name := range templates {
		if err := g.deletePart(ctx, c, "instanceTemplates/"+name, "global", "instance template "+name,
			func(ctx context.Context) (string, error) {
				got, err := c.api.templates.Get(ctx, &computepb.GetInstanceTemplateRequest{Project: p, InstanceTemplate: name})
				return got.GetDescription(), err
			},
			func(ctx context.Context) (*compute.Operation, error) {
				return c.api.templates.Delete(ctx, &computepb.DeleteInstanceTemplateRequest{Project: p, InstanceTemplate: name})
			}); err != nil {
			return err
		}
	}
	return nil
}

// deleteMachines deletes everything of the cluster's machines: its
// groups (their instances with them), its templates, and every instance
// labelled with the cluster (a control-plane machine left).
func (g *GCP) deleteMachines(ctx context.Context, c *cluster) error {
	if err := g.deletePools(ctx, c, func(string) bool { return true }); err != nil {
		return err
	}
	left, err := g.instances(ctx, c)
	if err != nil {
		return err
	}
	for _, in := range left {
		zone, name := lastSegment(in.GetZone()), in.GetName()
		if err := g.deletePart(ctx, c, "instances/"+name, "zones/"+zone, "instance "+name,
			func(ctx context.Context) (string, error) {
				got, err := c.api.instances.Get(ctx, &computepb.GetInstanceRequest{Project: c.api.project, Zone: zone, Instance: name})
				return got.GetDescription(), err
			},
			func(ctx context.Context) (*compute.Operation, error) {
				return c.api.instances.Delete(ctx, &computepb.DeleteInstanceRequest{Project: c.api.project, Zone: zone, Instance: name})
			}); err != nil {
			return err
		}
	}
	return nil
}
