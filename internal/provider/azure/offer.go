package azure

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/Azure/azure-sdk-for-go/sdk/resourcemanager/compute/armcompute/v7"

	v1 "kiln.dev/kiln/api/v1"
	"kiln.dev/kiln/internal/provider"
)

var (
	_ provider.Describer   = (*Azure)(nil)
	_ provider.Preflighter = (*Azure)(nil)
)

// sku is a virtual machine size as Compute's resource SKUs say it in one
// region: its vCPUs and memory, its family (what its quota counts), and
// whether the subscription may have it there and in which zones not.
type sku struct {
	provider.InstanceType
	family     string
	restricted bool     // not in the region at all
	notInZones []string // not in these zones
}

// skus lists the virtual machine sizes of region (resource SKUs), by name,
// and the region's zones; the regions any size is in besides. It is the
// first call of a dry run, so credentials that do not sign in fail it.
func (n *Azure) skus(ctx context.Context, c *clients, region string) (map[string]sku, []string, []string, error) {
	out := map[string]sku{}
	var zones, regions []string
	pages := c.compute.NewResourceSKUsClient().NewListPager(nil)
	for pages.More() {
		page, err := pages.NextPage(ctx)
		if err != nil {
			return nil, nil, nil, classify(err, c.account, "list the virtual machine sizes Azure offers cloud account %q", c.account)
		}
		for _, s := range page.Value {
			if !strings.EqualFold(deref(s.ResourceType), "virtualMachines") {
				continue
			}
			for _, l := range s.Locations {
				if r := strings.ToLower(deref(l)); !slices.Contains(regions, r) {
					regions = append(regions, r)
				}
			}
			if !slices.ContainsFunc(s.Locations, func(l *string) bool { return strings.EqualFold(deref(l), region) }) {
				continue
			}
			k := sku{InstanceType: provider.InstanceType{Name: deref(s.Name)}, family: deref(s.Family)}
			for _, cp := range s.Capabilities {
				v := deref(cp.Value)
				switch deref(cp.Name) {
				case "vCPUs":
					k.VCPUs, _ = strconv.Atoi(v)
				case "MemoryGB":
					gb, _ := strconv.ParseFloat(v, 64)
					k.MemoryMiB = int(gb * 1024)
				}
			}
			for _, li := range s.LocationInfo {
				if strings.EqualFold(deref(li.Location), region) {
					for _, z := range li.Zones {
						if !slices.Contains(zones, deref(z)) {
							zones = append(zones, deref(z))
						}
					}
				}
			}
			for _, r := range s.Restrictions {
				switch {
				case r.Type != nil && *r.Type == armcompute.ResourceSKURestrictionsTypeLocation:
					k.restricted = true
				case r.Type != nil && *r.Type == armcompute.ResourceSKURestrictionsTypeZone && r.RestrictionInfo != nil:
					for _, z := range r.RestrictionInfo.Zones {
						k.notInZones = append(k.notInZones, deref(z))
					}
				}
			}
			out[k.Name] = k
		}
	}
	slices.Sort(zones)
	slices.Sort(regions)
	return out, zones, regions, nil
}

// Describe signs in with the account and returns what Azure offers it in
// region: the regions its virtual machine sizes are in, the region's zones
// and the sizes the subscription may have there; each cluster gets a load
// balancer (the API's).
func (n *Azure) Describe(ctx context.Context, a *provider.Account, region string) (provider.Offer, error) {
	api, err := n.clientsFor(a)
	if err != nil {
		return provider.Offer{}, err
	}
	region = cmp.Or(region, a.Credentials[v1.AzureRegion], DefaultRegion)
	sizes, zones, regions, err := n.skus(ctx, api, region)
	if err != nil {
		return provider.Offer{}, err
	}
	o := provider.Offer{Regions: regions, Zones: zones, DefaultInstanceType: DefaultVMSize, NodeNetwork: DefaultVNetCIDR, LoadBalancers: true}
	for _, s := range sizes {
		if !s.restricted {
			o.InstanceTypes = append(o.InstanceTypes, s.InstanceType)
		}
	}
	slices.SortFunc(o.InstanceTypes, func(a, b provider.InstanceType) int { return strings.Compare(a.Name, b.Name) })
	return o, nil
}

// part is a part of the cluster for the dry run: where in the spec, how
// many machines of which size in which zones.
type part struct {
	at, sizeAt string
	count      int
	size       string
	zones      []string
}

func parts(spec v1.ClusterSpec) []part {
	out := []part{{"spec.controlPlane.size", "spec.controlPlane.instanceType", spec.ControlPlane.Size, cmp.Or(spec.ControlPlane.InstanceType, DefaultVMSize), spec.ControlPlane.Zones}}
	for i, wp := range spec.WorkerPools {
		out = append(out, part{fmt.Sprintf("spec.workerPools[%d].size", i), fmt.Sprintf("spec.workerPools[%d].instanceType", i), wp.Size, cmp.Or(wp.InstanceType, DefaultVMSize), wp.Zones})
	}
	return out
}

// Preflight checks, before anything is made, what ARO-RP's dynamic
// validation checks that Azure can answer: the account's application may
// perform every action the cluster needs (permissions.go: the first it
// may not is named); each size the cluster uses is
// offered to the subscription in the region and in the zones its machines
// go to (resource SKUs' restrictions), and the region's vCPU quotas, in
// all and by size family (Compute's usages), have room for the machines
// the cluster does not have yet. Each finding names the spec's field.
func (n *Azure) Preflight(ctx context.Context, pc provider.Cluster) ([]v1.Error, error) {
	c, err := n.cluster(pc)
	if err != nil {
		return nil, err
	}
	sizes, _, _, err := n.skus(ctx, c.api, c.region)
	if err != nil {
		return nil, err
	}
	var findings []v1.Error
	denied, err := n.permissionFinding(ctx, c)
	if err != nil {
		return nil, err
	}
	if denied != nil {
		findings = append(findings, *denied)
	}
	staging, err := n.stagingFinding(ctx, c)
	if err != nil {
		return nil, err
	}
	if staging != nil {
		findings = append(findings, *staging)
	}
	ps := parts(c.Spec)
	for _, p := range ps {
		s, ok := sizes[p.size]
		switch {
		case !ok || s.restricted:
			findings = append(findings, v1.Error{Code: v1.CodeInvalidParameter, Target: p.sizeAt,
				Message: fmt.Sprintf("Azure does not offer size %s to the subscription of cloud account %q in region %s; choose another %s", p.size, c.Account.Name, c.region, p.sizeAt)})
		default:
			for _, z := range p.zones {
				if slices.Contains(s.notInZones, z) {
					findings = append(findings, v1.Error{Code: v1.CodeInvalidParameter, Target: p.sizeAt,
						Message: fmt.Sprintf("Azure does not offer size %s to the subscription of cloud account %q in zone %s of region %s; choose another size or other zones", p.size, c.Account.Name, z, c.region)})
				}
			}
		}
	}
	quota, err := n.quotaFindings(ctx, c, sizes, ps)
	if err != nil {
		return nil, err
	}
	return append(findings, quota...), nil
}

// quotaFindings checks the vCPUs the cluster still needs (its parts' less
// those of its virtual machines) against the region's usages.
func (n *Azure) quotaFindings(ctx context.Context, c *cluster, sizes map[string]sku, ps []part) ([]v1.Error, error) {
	type usage struct{ current, limit int }
	usages := map[string]usage{}
	pages := c.api.compute.NewUsageClient().NewListPager(c.region, nil)
	for pages.More() {
		page, err := pages.NextPage(ctx)
		if err != nil {
			return nil, classify(err, c.api.account, "read the vCPU quotas of region %s", c.region)
		}
		for _, u := range page.Value {
			if u.Name != nil {
				usages[deref(u.Name.Value)] = usage{int(deref(u.CurrentValue)), int(deref(u.Limit))}
			}
		}
	}
	mine, err := n.groupVMs(ctx, c)
	if err != nil {
		return nil, err
	}
	have := map[string]int{} // vCPUs of the cluster's machines, by family and "cores"
	for _, vm := range mine {
		if vm.Properties != nil && vm.Properties.HardwareProfile != nil {
			s := sizes[string(deref(vm.Properties.HardwareProfile.VMSize))]
			have[s.family] += s.VCPUs
			have["cores"] += s.VCPUs
		}
	}
	need := map[string]int{}
	largest := map[string]part{}
	for _, p := range ps {
		s, ok := sizes[p.size]
		if !ok {
			continue
		}
		for _, q := range []string{s.family, "cores"} {
			need[q] += p.count * s.VCPUs
			if l, seen := largest[q]; !seen || p.count*s.VCPUs > l.count*sizes[l.size].VCPUs {
				largest[q] = p
			}
		}
	}
	var findings []v1.Error
	for _, q := range slices.Sorted(func(yield func(string) bool) {
		for k := range need {
			if !yield(k) {
				return
			}
		}
	}) {
		u, ok := usages[q]
		if !ok {
			continue // a quota Azure does not say is not checked
		}
		if more, room := need[q]-have[q], u.limit-u.current; more > room {
			what := q + " vCPUs"
			if q == "cores" {
				what = "Total Regional vCPUs"
			}
			findings = append(findings, v1.Error{Code: v1.CodeQuotaExceeded, Target: largest[q].at, Message: fmt.Sprintf(
				"the cluster needs %d more %s in region %s and the quota has room for %d (limit %d, %d in use); ask Azure for a higher quota or make the cluster smaller",
				more, what, c.region, max(room, 0), u.limit, u.current)})
		}
	}
	return findings, nil
}
