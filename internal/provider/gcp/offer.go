package gcp

import (
	"cmp"
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"

	"cloud.google.com/go/compute/apiv1/computepb"
	"google.golang.org/api/cloudresourcemanager/v1"

	v1 "kiln.dev/kiln/api/v1"
	"kiln.dev/kiln/internal/provider"
)

// The dry run (provider.Describer, provider.Preflighter): what Compute
// offers the account's project in a region, and what a cluster needs that
// the account may not do or the region may not hold, found before
// anything is made.

// DefaultMachineType is the machine type of a part whose spec names none.
const DefaultMachineType = "e2-standard-2"

// NeededPermissions are the IAM permissions the provider uses, in the
// order a create first uses them (the deletes' last).
var NeededPermissions = []string{
	"compute.regions.get",
	"compute.networks.get", "compute.networks.create", "compute.globalOperations.get",
	"compute.subnetworks.get", "compute.subnetworks.create", "compute.regionOperations.get",
	"compute.firewalls.get", "compute.firewalls.create", "compute.networks.updatePolicy", "compute.firewalls.update",
	"compute.routers.get", "compute.routers.create", "compute.routers.update",
	"compute.zoneOperations.get", "compute.subnetworks.use", "compute.images.useReadOnly",
	"compute.instances.list", "compute.instances.get", "compute.instances.create", "compute.instances.setMetadata",
	"compute.instances.setLabels", "compute.instances.setTags", "compute.instances.start", "compute.instances.stop",
	"compute.instanceTemplates.get", "compute.instanceTemplates.list", "compute.instanceTemplates.create", "compute.instanceTemplates.useReadOnly",
	"compute.instanceGroupManagers.get", "compute.instanceGroupManagers.list", "compute.instanceGroupManagers.create", "compute.instanceGroupManagers.update",
	"compute.instanceGroupManagers.delete", "compute.instanceTemplates.delete", "compute.instances.delete",
	"compute.routers.delete", "compute.firewalls.delete", "compute.subnetworks.delete", "compute.networks.delete",
}

// catalogue is what a region offers: its zones, each zone's machine
// types, and its quotas.
type catalogue struct {
	zones  []string
	types  map[string]map[string]provider.InstanceType // zone, name
	quotas map[string]*computepb.Quota                 // by metric
}

// offered reads the region's catalogue; ok is false when the project is
// not offered the region.
func offered(ctx context.Context, api *clients, region string) (cat catalogue, ok bool, err error) {
	r, err := api.regions.Get(ctx, &computepb.GetRegionRequest{Project: api.project, Region: region})
	if isNotFound(err) {
		return cat, false, nil
	}
	if err != nil {
		return cat, false, classify(err, api.account, "read region %s of project %s", region, api.project)
	}
	cat = catalogue{types: map[string]map[string]provider.InstanceType{}, quotas: map[string]*computepb.Quota{}}
	for _, q := range r.GetQuotas() {
		cat.quotas[q.GetMetric()] = q
	}
	for _, z := range r.GetZones() {
		zone := lastSegment(z)
		cat.zones = append(cat.zones, zone)
		cat.types[zone] = map[string]provider.InstanceType{}
		for mt, err := range api.types.List(ctx, &computepb.ListMachineTypesRequest{Project: api.project, Zone: zone}).All() {
			if err != nil {
				return cat, false, classify(err, api.account, "list the machine types of zone %s", zone)
			}
			cat.types[zone][mt.GetName()] = provider.InstanceType{Name: mt.GetName(), VCPUs: int(mt.GetGuestCpus()), MemoryMiB: int(mt.GetMemoryMb())}
		}
	}
	slices.Sort(cat.zones)
	return cat, true, nil
}

// Describe says what Compute offers the account's project in region (the
// account's, else DefaultRegion): the project's regions, the region's
// zones, and the machine types offered in any of them.
func (g *GCP) Describe(ctx context.Context, a *provider.Account, region string) (provider.Offer, error) {
	api, err := g.clientsFor(ctx, a)
	if err != nil {
		return provider.Offer{}, err
	}
	defer api.Close()
	region = cmp.Or(region, a.Credentials[v1.GCPRegion], DefaultRegion)
	o := provider.Offer{DefaultInstanceType: DefaultMachineType, NodeNetwork: DefaultNodeCIDR}
	for r, err := range api.regions.List(ctx, &computepb.ListRegionsRequest{Project: api.project}).All() {
		if err != nil {
			return provider.Offer{}, classify(err, api.account, "list the regions of project %s", api.project)
		}
		o.Regions = append(o.Regions, r.GetName())
	}
	cat, ok, err := offered(ctx, api, region)
	if err != nil || !ok {
		return o, err
	}
	o.Zones = cat.zones
	types := map[string]provider.InstanceType{}
	for _, zt := range cat.types {
		maps.Copy(types, zt)
	}
	for _, name := range slices.Sorted(maps.Keys(types)) {
		o.InstanceTypes = append(o.InstanceTypes, types[name])
	}
	return o, nil
}

// part is a part of the cluster for the dry run: where in the spec, how
// many machines of which type in which zones.
type part struct {
	at, typeAt, zonesAt string
	count               int
	typ                 string
	zones               []string
}

func parts(spec v1.ClusterSpec) []part {
	out := []part{{"spec.controlPlane.size", "spec.controlPlane.instanceType", "spec.controlPlane.zones", spec.ControlPlane.Size,
		cmp.Or(spec.ControlPlane.InstanceType, DefaultMachineType), spec.ControlPlane.Zones}}
	for i, wp := range spec.WorkerPools {
		at := fmt.Sprintf("spec.workerPools[%d]", i)
		out = append(out, part{at + ".size", at + ".instanceType", at + ".zones", wp.Size, cmp.Or(wp.InstanceType, DefaultMachineType), wp.Zones})
	}
	return out
}

// Preflight checks, before anything is made, what Compute can answer: the
// account's service account has every permission the provider uses
// (testIamPermissions on the project: the first it lacks is named); the
// region is offered; each part's zones are the region's and its machine
// type is offered in each of them (in every zone of the region when it
// names none); the region's CPUS quota has room for every machine, and
// its INSTANCE_GROUP_MANAGERS quota for a group per pool. Each
// finding names the spec's field.
func (g *GCP) Preflight(ctx context.Context, pc provider.Cluster) ([]v1.Error, error) {
	c, err := g.cluster(ctx, pc)
	if err != nil {
		return nil, err
	}
	defer c.api.Close()
	var findings []v1.Error
	denied, err := permissionFinding(ctx, c)
	if err != nil {
		return nil, err
	}
	if denied != nil {
		findings = append(findings, *denied)
	}
	cat, ok, err := offered(ctx, c.api, c.region)
	if err != nil {
		return nil, err
	}
	if !ok {
		return append(findings, v1.Error{Code: v1.CodeInvalidParameter, Target: "spec.region", Message: fmt.Sprintf(
			"region %q is not offered to project %s (cloud account %q); choose another spec.region", c.region, c.api.project, c.Account.Name)}), nil
	}
	cpus, largest := 0, part{}
	largestCPUs := -1
	for _, p := range parts(c.Spec) {
		zones := p.zones
		if len(zones) == 0 {
			zones = cat.zones
		}
		var bad []string
		for _, z := range zones {
			if !slices.Contains(cat.zones, z) {
				bad = append(bad, z)
			}
		}
		if len(bad) > 0 {
			findings = append(findings, v1.Error{Code: v1.CodeInvalidParameter, Target: p.zonesAt, Message: fmt.Sprintf(
				"zone %s is not in region %s; its zones are %s", bad[0], c.region, strings.Join(cat.zones, ", "))})
			continue
		}
		var t provider.InstanceType
		for _, z := range zones {
			zt, ok := cat.types[z][p.typ]
			if !ok {
				findings = append(findings, v1.Error{Code: v1.CodeInvalidParameter, Target: p.typeAt, Message: fmt.Sprintf(
					"Compute does not offer machine type %s in zone %s to project %s; choose another %s, or zones where it is offered", p.typ, z, c.api.project, p.typeAt)})
				t = provider.InstanceType{}
				break
			}
			t = zt
		}
		if t.Name == "" {
			continue
		}
		cpus += p.count * t.VCPUs
		if p.count*t.VCPUs > largestCPUs {
			largest, largestCPUs = p, p.count*t.VCPUs
		}
	}
	if q, ok := cat.quotas["CPUS"]; ok && float64(cpus) > q.GetLimit()-q.GetUsage() {
		findings = append(findings, v1.Error{Code: v1.CodeQuotaExceeded, Target: largest.at, Message: fmt.Sprintf(
			"the cluster needs %d vCPUs in region %s and the project's CPUS quota there has room for %.0f (limit %.0f, %.0f in use): %.0f more; ask Google Cloud for a higher quota or make a smaller cluster",
			cpus, c.region, q.GetLimit()-q.GetUsage(), q.GetLimit(), q.GetUsage(), float64(cpus)-(q.GetLimit()-q.GetUsage()))})
	}
	// A regional managed instance group per pool.
	if q, ok := cat.quotas["INSTANCE_GROUP_MANAGERS"]; ok && float64(len(c.Spec.WorkerPools)) > q.GetLimit()-q.GetUsage() {
		findings = append(findings, v1.Error{Code: v1.CodeQuotaExceeded, Target: "spec.workerPools", Message: fmt.Sprintf(
			"the cluster's %d worker pools are each a managed instance group in region %s and the project's INSTANCE_GROUP_MANAGERS quota there has room for %.0f (limit %.0f, %.0f in use); ask Google Cloud for a higher quota or use fewer pools",
			len(c.Spec.WorkerPools), c.region, q.GetLimit()-q.GetUsage(), q.GetLimit(), q.GetUsage())})
	}
	return findings, nil
}

// permissionFinding is a Forbidden finding naming the first of
// NeededPermissions the account's service account lacks on the project,
// as testIamPermissions answers (nil when it has them all).
func permissionFinding(ctx context.Context, c *cluster) (*v1.Error, error) {
	resp, err := c.api.crm.Projects.TestIamPermissions(c.api.project, &cloudresourcemanager.TestIamPermissionsRequest{Permissions: NeededPermissions}).Context(ctx).Do()
	if err != nil {
		return nil, classify(err, c.api.account, "test the permissions of cloud account %q on project %s", c.Account.Name, c.api.project)
	}
	var missing []string
	for _, p := range NeededPermissions {
		if !slices.Contains(resp.Permissions, p) {
			missing = append(missing, p)
		}
	}
	if len(missing) == 0 {
		return nil, nil
	}
	more := ""
	if len(missing) > 1 {
		more = fmt.Sprintf(" (and %d more)", len(missing)-1)
	}
	return &v1.Error{Code: v1.CodeForbidden, Target: "spec.cloudAccount", Message: fmt.Sprintf(
		"the service account %s of cloud account %q lacks the permission %s%s on project %s; grant it a role that has them (roles/compute.networkAdmin, roles/compute.securityAdmin and roles/compute.instanceAdmin.v1 together do)",
		c.api.email, c.Account.Name, missing[0], more, c.api.project)}, nil
}

// The dry run's capabilities, for when kilnd registers the provider.
var (
	_ provider.Describer   = (*GCP)(nil)
	_ provider.Preflighter = (*GCP)(nil)
)
