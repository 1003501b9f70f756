package azure

import (
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
)

// What Compute says it offers and allows, for a dry run: the resource
// SKUs (each size with its regions, zones, vCPUs and memory, and the
// restrictions Faults.SKURestrictions puts on it), and each region's usages
// (vCPUs of virtual machines, in all and by size family, against
// Faults.CoresQuota and FamilyCoresQuota), which creates are held to.

// DefaultCoresQuota is a region's vCPU quota, in all and per size family,
// when Faults names none: a new subscription's usual one is smaller (10 to
// 20), generous here so that tests make clusters.
const DefaultCoresQuota = 100

// zones of every region.
var allZones = []string{"1", "2", "3"}

// restricted reports the restriction on size in region (zone "" for the
// whole region): "" when none, "Location" or "Zone". Callers hold s.mu.
func (s *Server) restricted(size, region, zone string) string {
	for _, r := range s.faults.SKURestrictions {
		parts := strings.Split(r, "/")
		if len(parts) < 2 || !strings.EqualFold(parts[0], size) || normalizeLocation(parts[1]) != region {
			continue
		}
		if len(parts) == 2 {
			return "Location"
		}
		if zone != "" && parts[2] == zone {
			return "Zone"
		}
	}
	return ""
}

// skuDoc is a size as Compute's resource SKUs list answers it in region.
func (s *Server) skuDoc(z vmSize, region string) doc {
	var restrictions []any
	var zoneOut []string
	for _, zone := range allZones {
		if s.restricted(z.Name, region, zone) == "Zone" {
			zoneOut = append(zoneOut, zone)
		}
	}
	if s.restricted(z.Name, region, "") == "Location" {
		restrictions = append(restrictions, map[string]any{"type": "Location", "values": []string{region},
			"restrictionInfo": map[string]any{"locations": []string{region}}, "reasonCode": "NotAvailableForSubscription"})
	}
	if len(zoneOut) > 0 {
		restrictions = append(restrictions, map[string]any{"type": "Zone", "values": []string{region},
			"restrictionInfo": map[string]any{"locations": []string{region}, "zones": zoneOut}, "reasonCode": "NotAvailableForSubscription"})
	}
	if restrictions == nil {
		restrictions = []any{}
	}
	return doc{"resourceType": "virtualMachines", "name": z.Name, "tier": "Standard", "size": strings.TrimPrefix(z.Name, "Standard_"),
		"family": z.Family, "locations": []string{region},
		"locationInfo": []any{map[string]any{"location": region, "zones": allZones}},
		"capabilities": []any{map[string]any{"name": "vCPUs", "value": strconv.Itoa(z.Cores)},
			map[string]any{"name": "MemoryGB", "value": strconv.FormatFloat(float64(z.MemoryMB)/1024, 'f', -1, 64)}},
		"restrictions": restrictions}
}

// listSKUs answers GET /subscriptions/SUB/providers/Microsoft.Compute/skus,
// for every region or for the one $filter=location eq 'REGION' names.
func (s *Server) listSKUs(c *call) (reply, error) {
	if c.r.Method != http.MethodGet {
		return reply{}, methodNotAllowed(c)
	}
	regions := slices.Sorted(func(yield func(string) bool) {
		for r := range s.regions {
			if !yield(r) {
				return
			}
		}
	})
	if f := c.r.URL.Query().Get("$filter"); f != "" {
		loc, ok := strings.CutPrefix(strings.TrimSpace(f), "location eq ")
		if !ok {
			return reply{}, badRequest("InvalidFilter", "The filter '%s' is not supported: only location eq 'REGION'.", f)
		}
		regions = []string{normalizeLocation(strings.Trim(loc, "'"))}
	}
	var out []any
	for _, r := range regions {
		if !s.regions[r] {
			continue
		}
		for _, z := range vmSizes {
			out = append(out, s.skuDoc(z, r))
		}
	}
	if out == nil {
		out = []any{}
	}
	return reply{status: http.StatusOK, body: map[string]any{"value": out}}, nil
}

// coresInUse are the vCPUs of the virtual machines in region, in all and
// by size family; skip is one not to count (being written again).
func (s *Server) coresInUse(region, skip string) (total int, byFamily map[string]int) {
	byFamily = map[string]int{}
	for _, vm := range s.ofType(typeVM) {
		if vm.location() != region || strings.EqualFold(vm.id(), skip) || vm.props()["provisioningState"] == "Deleting" {
			continue
		}
		if z, ok := sizeOf(str(sub(vm.props(), "hardwareProfile"), "vmSize")); ok {
			total += z.Cores
			byFamily[z.Family] += z.Cores
		}
	}
	return total, byFamily
}

func (s *Server) coresQuota() int {
	if s.faults.CoresQuota > 0 {
		return s.faults.CoresQuota
	}
	return DefaultCoresQuota
}

func (s *Server) familyQuota(family string) int {
	if q, ok := s.faults.FamilyCoresQuota[family]; ok {
		return q
	}
	return DefaultCoresQuota
}

// listUsages answers GET .../providers/Microsoft.Compute/locations/LOC/usages.
func (s *Server) listUsages(c *call, region string) (reply, error) {
	if c.r.Method != http.MethodGet {
		return reply{}, methodNotAllowed(c)
	}
	region = normalizeLocation(region)
	if !s.regions[region] {
		return reply{}, errorf(http.StatusNotFound, "NoRegisteredProviderFound", "No registered resource provider found for location '%s'.", region)
	}
	total, byFamily := s.coresInUse(region, "")
	usage := func(name, localized string, current, limit int) map[string]any {
		return map[string]any{"unit": "Count", "currentValue": current, "limit": limit,
			"name": map[string]any{"value": name, "localizedValue": localized}}
	}
	out := []any{usage("cores", "Total Regional vCPUs", total, s.coresQuota())}
	var families []string
	for _, z := range vmSizes {
		if !slices.Contains(families, z.Family) {
			families = append(families, z.Family)
		}
	}
	for _, f := range families {
		out = append(out, usage(f, "Standard "+strings.TrimPrefix(f, "standard")+" vCPUs", byFamily[f], s.familyQuota(f)))
	}
	return reply{status: http.StatusOK, body: map[string]any{"value": out}}, nil
}

// checkCapacity refuses virtual machines of size in region and zones
// (none: no zone) that the subscription may not have: a restricted size
// (409 SkuNotAvailable), or more vCPUs than the quotas leave (409
// OperationNotAllowed). count of them are asked for; skip is a virtual
// machine being written again (its own vCPUs count once). Callers hold
// s.mu.
func (s *Server) checkCapacity(size, region string, zones []string, count int, skip string) error {
	if count <= 0 {
		return nil
	}
	for _, zone := range append([]string{""}, zones...) {
		if r := s.restricted(size, region, zone); r != "" {
			where := fmt.Sprintf("location '%s'", region)
			if r == "Zone" {
				where += fmt.Sprintf(" zones '%s'", zone)
			}
			return errorf(http.StatusConflict, "SkuNotAvailable",
				"The requested VM size for resource 'Following SKUs have failed for Capacity Restrictions: %s' is currently not available in %s for subscription. Please try another size or deploy to a different location or zones. See https://aka.ms/azureskunotavailable for details.", size, where)
		}
	}
	z, ok := sizeOf(size)
	if !ok {
		return nil
	}
	total, byFamily := s.coresInUse(region, skip)
	need := count * z.Cores
	for _, q := range []struct {
		name         string
		limit, usage int
	}{{z.Family, s.familyQuota(z.Family), byFamily[z.Family]}, {"Total Regional", s.coresQuota(), total}} {
		if q.usage+need > q.limit {
			return errorf(http.StatusConflict, "OperationNotAllowed",
				"Operation could not be completed as it results in exceeding approved %s Cores quota. Additional details - Deployment Model: Resource Manager, Location: %s, Current Limit: %d, Current Usage: %d, Additional Required: %d, (Minimum) New Limit Required: %d. Submit a request for Quota increase at https://aka.ms/ProdportalCRP.",
				q.name, region, q.limit, q.usage, need, q.usage+need)
		}
	}
	return nil
}
