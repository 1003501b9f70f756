package gcp

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"cloud.google.com/go/compute/apiv1/computepb"
	"google.golang.org/api/iterator"
	"google.golang.org/protobuf/proto"

	v1 "kiln.dev/kiln/api/v1"
	"kiln.dev/kiln/internal/failure"
	"kiln.dev/kiln/internal/provider"
	"kiln.dev/kiln/internal/provider/bootscript"
)

// Machines are instances in the cluster's region, on its subnetwork with
// no external address (egress through the Cloud NAT), tagged with the
// node tag (and the control plane's), booting the node image of the
// cluster's Kubernetes version (ImageName) with a startup-script that
// runs its agent. A control-plane machine is an instance of its own,
// named from the cluster's Prefix and the machine's name, in the zone the
// spec gives (its own, or the control plane's zones in turn by its
// number, or the region's). A pool's machines are its group's
// (pools.go). Every instance is labelled with the cluster (LabelCluster,
// LabelClusterUID), its role, pool, machine and revision: ListMachines
// finds them by those labels.

// Labels of a machine's instance.
const (
	LabelCluster    = "kiln-cluster"     // the cluster's Prefix
	LabelClusterUID = "kiln-cluster-uid" // its identity (labelValue of clusterID)
	LabelMachine    = "kiln-machine"     // a control-plane machine's name (a pool's machine is its instance's)
	LabelRole       = "kiln-role"
	LabelPool       = "kiln-pool"
	LabelRevision   = "kiln-revision"
)

// metaStartup is the metadata key of the script an instance runs at boot.
const metaStartup = "startup-script"

// BootScript is what a machine boots with (Options.BootScript).
type BootScript func(ctx context.Context, m bootscript.Machine) (string, error)

// agentBoot is the default boot script: the node image's kiln-agent with
// the join files inline (bootscript.Inline), as the aws and azure
// providers write them when no staging location is set. In instance
// metadata they are readable to whoever may read the instance
// (compute.instances.get, a project viewer): the staging of join data
// that only the cluster's service account reads, through the metadata
// server, is left (docs/provider-gcp.md).
func agentBoot(_ context.Context, m bootscript.Machine) (string, error) {
	return bootscript.Inline(m)
}

// ImageName is the node image of a Kubernetes version: "kiln-node-" and
// the version, lower-cased, dots and pluses made dashes (an image name is
// an RFC 1035 name), as the local Compute Engine names them.
func ImageName(version string) string {
	return "kiln-node-" + strings.NewReplacer(".", "-", "+", "-", "_", "-").Replace(strings.ToLower(version))
}

// version is the Kubernetes version the cluster's machines boot: the
// spec's, or the newest there are images of.
func (g *GCP) version(c *cluster) string {
	if v := c.Spec.KubernetesVersion; v != "" || len(g.opts.Versions) == 0 {
		return v
	}
	return g.opts.Versions[len(g.opts.Versions)-1]
}

// image is the sourceImage of the cluster's machines.
func (g *GCP) image(c *cluster) string {
	p := g.opts.ImageProject
	if p == "" {
		p = c.api.project
	}
	return "projects/" + p + "/global/images/" + ImageName(g.version(c))
}

// Distributions says what the machines install: the node image's
// distribution (kiln-kube), at the versions there are images of.
func (g *GCP) Distributions() map[string][]string {
	return map[string][]string{v1.DistroKiln: slices.Clone(g.opts.Versions)}
}

// fitName is name cut to max characters when longer, ending with 8 hex
// digits of a hash of all of it so that two long names stay apart.
func fitName(name string, max int) string {
	if len(name) <= max {
		return name
	}
	sum := sha256.Sum256([]byte(name))
	return strings.TrimRight(name[:max-9], "-") + "-" + hex.EncodeToString(sum[:4])
}

// instanceName is the instance of a control-plane machine: the cluster's
// Prefix and the machine's name (without the cluster's name it starts
// with), at most 63 characters.
func (c *cluster) instanceName(machine string) string {
	rest, ok := strings.CutPrefix(machine, c.Name+"-")
	if !ok {
		rest = machine
	}
	return fitName(c.prefix+"-"+rest, 63)
}

// labelValue is s as a label's value allows (lowercase letters, digits,
// '-' and '_', at most 63): other characters made '_'.
func labelValue(s string) string {
	b := []byte(strings.ToLower(s))
	for i, ch := range b {
		if !(ch >= 'a' && ch <= 'z' || ch >= '0' && ch <= '9' || ch == '-' || ch == '_') {
			b[i] = '_'
		}
	}
	return string(b[:min(len(b), 63)])
}

// labels are the labels of the cluster's instances of role (and pool).
func (c *cluster) labels(role, pool, revision string) map[string]string {
	l := map[string]string{LabelCluster: c.prefix, LabelClusterUID: labelValue(c.id), LabelRole: role}
	if pool != "" {
		l[LabelPool] = labelValue(pool)
	}
	if revision != "" {
		l[LabelRevision] = labelValue(revision)
	}
	return l
}

// ours reports whether an instance is the cluster's, by its labels.
func (c *cluster) ours(in *computepb.Instance) bool {
	l := in.GetLabels()
	return l[LabelCluster] == c.prefix && l[LabelClusterUID] == labelValue(c.id)
}

// instances are the cluster's instances in every zone (an aggregated
// list, its labels read here: the filter is left to the client).
func (g *GCP) instances(ctx context.Context, c *cluster) ([]*computepb.Instance, error) {
	var out []*computepb.Instance
	it := c.api.instances.AggregatedList(ctx, &computepb.AggregatedListInstancesRequest{Project: c.api.project})
	for {
		pair, err := it.Next()
		if err == iterator.Done {
			break
		}
		if err != nil {
			return nil, classify(err, c.api.account, "list the instances of project %s", c.api.project)
		}
		for _, in := range pair.Value.GetInstances() {
			if c.ours(in) {
				out = append(out, in)
			}
		}
	}
	slices.SortFunc(out, func(a, b *computepb.Instance) int { return strings.Compare(a.GetName(), b.GetName()) })
	return out, nil
}

// machineName is the machine an instance is: its label's, or a pool's
// instance's own name (the name its node joins as).
func machineName(in *computepb.Instance) string {
	if n := in.GetLabels()[LabelMachine]; n != "" {
		return n
	}
	return in.GetName()
}

// groupOf is the path of the group that made an instance ("" for none):
// its metadata's created-by.
func groupOf(in *computepb.Instance) string {
	for _, it := range in.GetMetadata().GetItems() {
		if it.GetKey() == "created-by" {
			return it.GetValue()
		}
	}
	return ""
}

// resourcePath is a Compute URL's resource path
// (projects/P/zones/Z/instances/N): an ID that does not change with the
// endpoint it was read at.
func resourcePath(link string) string {
	if _, p, ok := strings.Cut(link, "/compute/v1/"); ok {
		return p
	}
	return link
}

// machineOf is the machine an instance is.
func machineOf(in *computepb.Instance) provider.Machine {
	l := in.GetLabels()
	m := provider.Machine{MachineSpec: provider.MachineSpec{Name: machineName(in), Role: l[LabelRole], Pool: l[LabelPool],
		Revision: l[LabelRevision], Zone: lastSegment(in.GetZone()), InstanceType: lastSegment(in.GetMachineType())}, ID: resourcePath(in.GetSelfLink())}
	if nics := in.GetNetworkInterfaces(); len(nics) > 0 {
		m.Address = nics[0].GetNetworkIP()
	}
	return m
}

// find is the cluster's instance of machine name, if there is one.
func (g *GCP) find(ctx context.Context, c *cluster, name string) (*computepb.Instance, error) {
	all, err := g.instances(ctx, c)
	if err != nil {
		return nil, err
	}
	for _, in := range all {
		if machineName(in) == name {
			return in, nil
		}
	}
	return nil, nil
}

// EnsureMachine finds the machine's instance (started again when it was
// stopped), or makes it: a control-plane machine's in its zone. A pool's
// machine that is not there is its group's to replace.
func (g *GCP) EnsureMachine(ctx context.Context, pc provider.Cluster, m provider.MachineSpec) (provider.Machine, error) {
	c, err := g.cluster(ctx, pc)
	if err != nil {
		return provider.Machine{}, err
	}
	defer c.api.Close()
	name := c.instanceName(m.Name)
	key := "instances/" + name
	if err := g.resume(ctx, c, key); err != nil && !isNotFound(err) {
		return provider.Machine{}, g.machineError(classify(err, c.api.account, "make the instance %s of machine %s", name, m.Name), c, m)
	}
	for attempt := 0; ; attempt++ {
		in, err := g.find(ctx, c, m.Name)
		if err != nil {
			return provider.Machine{}, err
		}
		if in != nil {
			if err := g.startStopped(ctx, c, in); err != nil {
				return provider.Machine{}, err
			}
			return machineOf(in), nil
		}
		if m.Role != v1.RoleControlPlane && m.Pool != "" {
			return provider.Machine{}, failure.Retryable(v1.CodeProviderError, nil,
				"machine %s of pool %s is no instance of cluster %s any more: the pool's group makes its replacement", m.Name, m.Pool, c.Name)
		}
		err = g.makeInstance(ctx, c, m, name)
		switch {
		case isAlreadyExists(err) && attempt > 0:
			return provider.Machine{}, failure.Terminal(v1.CodeConflict, "an instance %s exists in project %s and is not machine %s of cluster %s (its labels differ); Kiln leaves it alone: delete or rename it",
				name, c.api.project, m.Name, c.Name)
		case err != nil && !isAlreadyExists(err):
			return provider.Machine{}, err
		}
	}
}

// zones are the zones of m's role as the spec names them, else the
// region's; a zone the region does not have is terminal InvalidParameter
// on the role's zones (the dry run says so before anything is made).
func (g *GCP) zones(ctx context.Context, c *cluster, m provider.MachineSpec) ([]string, error) {
	zones, target := c.Spec.ControlPlane.Zones, "spec.controlPlane.zones"
	if m.Role != v1.RoleControlPlane {
		zones, target = nil, "spec.workerPools"
		if i := slices.IndexFunc(c.Spec.WorkerPools, func(wp v1.WorkerPool) bool { return wp.Name == m.Pool }); i >= 0 {
			zones, target = c.Spec.WorkerPools[i].Zones, fmt.Sprintf("spec.workerPools[%d].zones", i)
		}
	}
	if m.Zone != "" {
		zones = []string{m.Zone}
	}
	r, err := c.api.regions.Get(ctx, &computepb.GetRegionRequest{Project: c.api.project, Region: c.region})
	if err != nil {
		return nil, classify(err, c.api.account, "read region %s of project %s", c.region, c.api.project)
	}
	var have []string
	for _, z := range r.GetZones() {
		have = append(have, lastSegment(z))
	}
	slices.Sort(have)
	for _, z := range zones {
		if !slices.Contains(have, z) {
			e := failure.Terminal(v1.CodeInvalidParameter, "zone %s is not in region %s; its zones are %s", z, c.region, strings.Join(have, ", "))
			e.Target = target
			return nil, e
		}
	}
	if len(zones) > 0 {
		return zones, nil
	}
	return have, nil
}

// zoneOf is machine m's zone: its own, or its role's zones in turn by
// its number.
func (g *GCP) zoneOf(ctx context.Context, c *cluster, m provider.MachineSpec) (string, error) {
	zones, err := g.zones(ctx, c, m)
	if err != nil || len(zones) == 0 {
		return "", err
	}
	num, _ := strconv.Atoi(m.Name[strings.LastIndexByte(m.Name, '-')+1:])
	return zones[num%len(zones)], nil
}

// typeTarget is the spec field that names m's machine type.
func typeTarget(spec v1.ClusterSpec, m provider.MachineSpec) string {
	if m.Role == v1.RoleControlPlane {
		return "spec.controlPlane.instanceType"
	}
	if i := slices.IndexFunc(spec.WorkerPools, func(wp v1.WorkerPool) bool { return wp.Name == m.Pool }); i >= 0 {
		return fmt.Sprintf("spec.workerPools[%d].instanceType", i)
	}
	return "spec.workerPools"
}

// checkType refuses a machine type Compute does not offer in one of
// zones, naming the spec's field, before anything is made of it.
func (g *GCP) checkType(ctx context.Context, c *cluster, m provider.MachineSpec, typ string, zones []string) error {
	for _, z := range zones {
		_, err := c.api.types.Get(ctx, &computepb.GetMachineTypeRequest{Project: c.api.project, Zone: z, MachineType: typ})
		if isNotFound(err) {
			e := failure.Terminal(v1.CodeInvalidParameter, "Compute does not offer machine type %s in zone %s to project %s; choose another %s, or zones where it is offered",
				typ, z, c.api.project, typeTarget(c.Spec, m))
			e.Target, e.Err = typeTarget(c.Spec, m), err
			return e
		}
		if err != nil {
			return classify(err, c.api.account, "read machine type %s in zone %s", typ, z)
		}
	}
	return nil
}

// subnetwork is the URL of the cluster's subnetwork, the network made
// first when it is missing.
func (g *GCP) subnetwork(ctx context.Context, c *cluster) (string, error) {
	name := c.prefix + suffixSubnet
	get := func() (*computepb.Subnetwork, error) {
		return c.api.subnets.Get(ctx, &computepb.GetSubnetworkRequest{Project: c.api.project, Region: c.region, Subnetwork: name})
	}
	sn, err := get()
	if isNotFound(err) {
		if _, err := g.EnsureNetwork(ctx, c.Cluster); err != nil {
			return "", err
		}
		sn, err = get()
	}
	if err != nil {
		return "", classify(err, c.api.account, "find the subnetwork %s", name)
	}
	if err := c.owns(sn.GetDescription(), "subnetwork "+name); err != nil {
		return "", err
	}
	return sn.GetSelfLink(), nil
}

// bootMachine is what m's boot script is written for.
func (c *cluster) bootMachine(m provider.MachineSpec) bootscript.Machine {
	bm := bootscript.Machine{Project: c.Project, Cluster: c.Name, Name: m.Name, Pool: m.Pool, Bootstrap: m.Bootstrap}
	if m.Pool != "" && m.Role != v1.RoleControlPlane {
		bm.Name = "" // a pool's machines join as their instances' names
	}
	return bm
}

// properties are what an instance of m is made of: its machine type (a
// name; an instance's is zones/Z/machineTypes/T), labels, tags, boot
// disk, interface and startup-script.
func (g *GCP) properties(ctx context.Context, c *cluster, m provider.MachineSpec) (*computepb.InstanceProperties, error) {
	subnet, err := g.subnetwork(ctx, c)
	if err != nil {
		return nil, err
	}
	script, err := g.opts.BootScript(ctx, c.bootMachine(m))
	if err != nil {
		return nil, failure.Retryable(v1.CodeProviderError, err, "cannot prepare the startup-script of machine %s", c.bootMachine(m).Named())
	}
	mt := m.InstanceType
	if mt == "" {
		mt = DefaultMachineType
	}
	tags := []string{NodeTag(c.Project, c.Name)}
	if m.Role == v1.RoleControlPlane {
		tags = append(tags, ControlPlaneTag(c.Project, c.Name))
	}
	labels := c.labels(m.Role, m.Pool, m.Revision)
	if m.Pool == "" || m.Role == v1.RoleControlPlane {
		labels[LabelMachine] = labelValue(m.Name)
	}
	return &computepb.InstanceProperties{
		MachineType: proto.String(mt), Labels: labels, Tags: &computepb.Tags{Items: tags},
		Description: proto.String(c.owner("machine")),
		Metadata:    &computepb.Metadata{Items: []*computepb.Items{{Key: proto.String(metaStartup), Value: proto.String(script)}}},
		Disks: []*computepb.AttachedDisk{{Boot: proto.Bool(true), AutoDelete: proto.Bool(true),
			InitializeParams: &computepb.AttachedDiskInitializeParams{SourceImage: proto.String(g.image(c))}}},
		NetworkInterfaces: []*computepb.NetworkInterface{{Subnetwork: proto.String(subnet)}},
	}, nil
}

// makeInstance makes a control-plane machine's instance, name, in its
// zone, and waits until Compute has.
func (g *GCP) makeInstance(ctx context.Context, c *cluster, m provider.MachineSpec, name string) error {
	zone, err := g.zoneOf(ctx, c, m)
	if err != nil {
		return err
	}
	p, err := g.properties(ctx, c, m)
	if err != nil {
		return err
	}
	if err := g.checkType(ctx, c, m, p.GetMachineType(), []string{zone}); err != nil {
		return err
	}
	g.log.Info("creating instance", "cluster", c.Project+"/"+c.Name, "machine", m.Name, "instance", name, "zone", zone, "type", p.GetMachineType(), "image", g.image(c))
	op, err := c.api.instances.Insert(ctx, &computepb.InsertInstanceRequest{Project: c.api.project, Zone: zone, InstanceResource: &computepb.Instance{
		Name: proto.String(name), Description: p.Description, MachineType: proto.String("zones/" + zone + "/machineTypes/" + p.GetMachineType()),
		Labels: p.Labels, Tags: p.Tags, Metadata: p.Metadata, Disks: p.Disks, NetworkInterfaces: p.NetworkInterfaces,
	}})
	if err := g.await(ctx, c, "instances/"+name, "zones/"+zone, op, err); err != nil {
		if isAlreadyExists(err) {
			return err
		}
		return g.machineError(classify(err, c.api.account, "make the instance %s of machine %s in %s (%s)", name, m.Name, zone, p.GetMachineType()), c, m)
	}
	return nil
}

// machineError says what in the spec a refused instance is about: an
// image Compute does not have is the Kubernetes version.
func (g *GCP) machineError(err error, c *cluster, m provider.MachineSpec) error {
	fe, ok := err.(*failure.Error)
	if !ok || !isNotFound(fe.Err) {
		return err
	}
	e := failure.Terminal(v1.CodeUnsupportedVersion, "project %s has no node image %s for Kubernetes %s (%s); choose a version it has or publish the image there",
		c.api.project, g.image(c), g.version(c), fe.Message)
	e.Target, e.Err = "spec.kubernetesVersion", err
	return e
}

// startStopped starts an instance that was stopped (a hibernated
// cluster's).
func (g *GCP) startStopped(ctx context.Context, c *cluster, in *computepb.Instance) error {
	switch in.GetStatus() {
	case "STOPPING":
		return failure.Retryable(v1.CodeProviderError, nil, "the instance %s is stopping; it is started again once stopped", in.GetName())
	case "TERMINATED":
	default:
		return nil
	}
	zone := lastSegment(in.GetZone())
	g.log.Info("starting instance", "cluster", c.Project+"/"+c.Name, "instance", in.GetName(), "status", in.GetStatus())
	op, err := c.api.instances.Start(ctx, &computepb.StartInstanceRequest{Project: c.api.project, Zone: zone, Instance: in.GetName()})
	return classify(g.await(ctx, c, "instances/"+in.GetName(), "zones/"+zone, op, err), c.api.account, "start the instance %s", in.GetName())
}

// StopMachine stops the machine's instance, its disk kept (provider.Stopper);
// one stopped or not there is done.
func (g *GCP) StopMachine(ctx context.Context, pc provider.Cluster, name string) error {
	c, err := g.cluster(ctx, pc)
	if err != nil {
		return err
	}
	defer c.api.Close()
	in, err := g.find(ctx, c, name)
	if err != nil || in == nil || in.GetStatus() == "TERMINATED" {
		return err
	}
	zone := lastSegment(in.GetZone())
	g.log.Info("stopping instance", "cluster", c.Project+"/"+c.Name, "instance", in.GetName())
	op, err := c.api.instances.Stop(ctx, &computepb.StopInstanceRequest{Project: c.api.project, Zone: zone, Instance: in.GetName()})
	if err := g.await(ctx, c, "instances/"+in.GetName(), "zones/"+zone, op, err); err != nil && !isNotFound(err) {
		return classify(err, c.api.account, "stop the instance %s", in.GetName())
	}
	return nil
}

// ListMachines returns the cluster's machines: its instances, by their
// labels, in every zone.
func (g *GCP) ListMachines(ctx context.Context, pc provider.Cluster) ([]provider.Machine, error) {
	c, err := g.cluster(ctx, pc)
	if err != nil {
		return nil, err
	}
	defer c.api.Close()
	all, err := g.instances(ctx, c)
	if err != nil {
		return nil, err
	}
	out := []provider.Machine{}
	for _, in := range all {
		out = append(out, machineOf(in))
	}
	slices.SortFunc(out, func(a, b provider.Machine) int { return strings.Compare(a.Name, b.Name) })
	return out, nil
}

// DeleteMachine deletes the machine's instance (its boot disk goes with
// it): a pool's through its group (deleteInstances, the group's size one
// less; a group left empty of a pool the spec no longer has goes, then
// its templates), a control-plane machine's itself. One not there is
// deleted already.
func (g *GCP) DeleteMachine(ctx context.Context, pc provider.Cluster, name string) error {
	c, err := g.cluster(ctx, pc)
	if err != nil {
		return err
	}
	defer c.api.Close()
	key := "instances/" + c.instanceName(name)
	if err := g.resume(ctx, c, key); err != nil && !isNotFound(err) {
		return classify(err, c.api.account, "delete the instance of machine %s", name)
	}
	in, err := g.find(ctx, c, name)
	if err != nil || in == nil {
		return err
	}
	if grp := groupOf(in); grp != "" {
		return g.deleteMember(ctx, c, in, lastSegment(grp))
	}
	zone := lastSegment(in.GetZone())
	g.log.Info("deleting instance", "cluster", c.Project+"/"+c.Name, "machine", name, "instance", in.GetName())
	op, err := c.api.instances.Delete(ctx, &computepb.DeleteInstanceRequest{Project: c.api.project, Zone: zone, Instance: in.GetName()})
	if err := g.await(ctx, c, key, "zones/"+zone, op, err); err != nil && !isNotFound(err) {
		return classify(err, c.api.account, "delete the instance %s of machine %s", in.GetName(), name)
	}
	return nil
}

var _ provider.Provider = (*GCP)(nil)
var _ provider.Stopper = (*GCP)(nil)
