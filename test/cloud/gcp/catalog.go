package gcp

import (
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"maps"
	"net/http"
	"slices"
	"strings"
)

// The project and what it is offered: regions with their quotas, zones,
// and machine types per zone. They are read-only, as Compute's are.

// MachineType is a machine type the local Compute Engine offers.
type MachineType struct {
	Name      string
	CPUs      int
	MemoryMiB int
	Shared    bool
	// Zones are the zone suffixes ("a") it is offered in; nil is every
	// zone.
	Zones []string
}

// MachineTypes are the machine types offered: the n2 family in the first
// two zones of a region only, so that a type not offered in a zone is
// there to be refused.
var MachineTypes = []MachineType{
	{Name: "e2-medium", CPUs: 2, MemoryMiB: 4096, Shared: true},
	{Name: "e2-standard-2", CPUs: 2, MemoryMiB: 8192},
	{Name: "e2-standard-4", CPUs: 4, MemoryMiB: 16384},
	{Name: "n2-standard-2", CPUs: 2, MemoryMiB: 8192, Zones: []string{"a", "b"}},
	{Name: "n2-standard-4", CPUs: 4, MemoryMiB: 16384, Zones: []string{"a", "b"}},
}

// Quotas are each region's quotas, as Compute lists them in a region's
// quotas (limits; the usage is counted from what the region holds where
// the local Compute Engine has it).
var Quotas = map[string]float64{"CPUS": 24, "IN_USE_ADDRESSES": 8, "INSTANCE_GROUP_MANAGERS": 50, "SUBNETWORKS": 100, "ROUTERS": 10}

// catalogID is a stable id for a catalog entry.
func catalogID(s string) string {
	sum := sha256.Sum256([]byte(s))
	return fmt.Sprint(binary.BigEndian.Uint64(sum[:8]) >> 4)
}

// catalog answers the project, its regions and zones, and machine types.
func (s *Server) catalog(c *call, r *http.Request) (any, int, error) {
	if r.Method != http.MethodGet {
		return nil, 0, methodNotAllowed(r)
	}
	scopeKind, scopeName, _ := strings.Cut(c.scope, "/")
	var all map[string]doc
	switch {
	case c.scope == "" && c.coll == "":
		return s.projectDoc(c), http.StatusOK, nil
	case c.scope == "" && c.coll == "regions":
		all = s.regionDocs(c)
	case c.scope == "" && c.coll == "zones":
		all = s.zoneDocs(c)
	case c.coll == "" && scopeKind == "regions":
		return s.regionDocs(c)[c.path()], http.StatusOK, nil
	case c.coll == "" && scopeKind == "zones":
		return s.zoneDocs(c)[c.path()], http.StatusOK, nil
	case scopeKind == "zones" && c.coll == "machineTypes" && c.action == "":
		all = s.machineTypeDocs(c, scopeName)
		if c.name != "" {
			d, ok := all[c.path()]
			if !ok {
				return nil, 0, notFound(c.path())
			}
			return d, http.StatusOK, nil
		}
	default:
		return nil, 0, errorf(http.StatusNotFound, "notFound", "The local Compute Engine has no %s %s", r.Method, r.URL.Path)
	}
	kind := map[string]string{"regions": "compute#regionList", "zones": "compute#zoneList", "machineTypes": "compute#machineTypeList"}[c.coll]
	return list(s, c, r, kind, func(p string) (doc, bool) { d, ok := all[p]; return d, ok }, all)
}

func (s *Server) projectDoc(c *call) doc {
	var quotas []any
	for _, m := range []string{"NETWORKS", "FIREWALLS"} {
		n := 0
		for p := range s.st.Resources {
			if strings.HasPrefix(p, c.path()+"/global/"+strings.ToLower(m)+"/") {
				n++
			}
		}
		quotas = append(quotas, map[string]any{"metric": m, "limit": map[string]float64{"NETWORKS": 15, "FIREWALLS": 200}[m], "usage": n})
	}
	return doc{"kind": "compute#project", "name": c.project, "id": catalogID("project/" + c.project), "selfLink": c.link(c.path()),
		"defaultServiceAccount": catalogID("number/" + c.project)[:12] + "-compute@developer.gserviceaccount.com",
		"quotas":                quotas, "xpnProjectStatus": "UNSPECIFIED_XPN_PROJECT_STATUS"}
}

func (s *Server) regionDocs(c *call) map[string]doc {
	out := map[string]doc{}
	for _, rg := range s.opts.Regions {
		p := "projects/" + c.project + "/regions/" + rg.Name
		var zones, quotas []any
		for _, z := range rg.Zones {
			zones = append(zones, c.link("projects/"+c.project+"/zones/"+rg.Name+"-"+z))
		}
		for _, m := range slices.Sorted(maps.Keys(Quotas)) {
			quotas = append(quotas, map[string]any{"metric": m, "limit": s.quota(m), "usage": s.usage(c.project, rg.Name, m)})
		}
		out[p] = doc{"kind": "compute#region", "name": rg.Name, "id": catalogID(p), "selfLink": c.link(p), "status": "UP",
			"description": rg.Name, "zones": zones, "quotas": quotas}
	}
	return out
}

// usage is how much of a regional quota the project uses.
func (s *Server) usage(project, region, metric string) int {
	if metric == "CPUS" {
		return s.cpus(project, region)
	}
	coll := map[string]string{"SUBNETWORKS": "subnetworks", "ROUTERS": "routers", "INSTANCE_GROUP_MANAGERS": "instanceGroupManagers"}[metric]
	if coll == "" {
		return 0
	}
	n := 0
	for p := range s.st.Resources {
		if strings.HasPrefix(p, "projects/"+project+"/regions/"+region+"/"+coll+"/") {
			n++
		}
	}
	return n
}

func (s *Server) zoneDocs(c *call) map[string]doc {
	out := map[string]doc{}
	for _, rg := range s.opts.Regions {
		for _, z := range rg.Zones {
			zn := rg.Name + "-" + z
			p := "projects/" + c.project + "/zones/" + zn
			out[p] = doc{"kind": "compute#zone", "name": zn, "id": catalogID(p), "selfLink": c.link(p), "status": "UP",
				"description": zn, "region": c.link("projects/" + c.project + "/regions/" + rg.Name)}
		}
	}
	return out
}

func (s *Server) machineTypeDocs(c *call, zone string) map[string]doc {
	out := map[string]doc{}
	suffix := zone[strings.LastIndex(zone, "-")+1:]
	for _, t := range MachineTypes {
		if t.Zones != nil && !slices.Contains(t.Zones, suffix) {
			continue
		}
		p := "projects/" + c.project + "/zones/" + zone + "/machineTypes/" + t.Name
		out[p] = doc{"kind": "compute#machineType", "name": t.Name, "id": catalogID(t.Name), "selfLink": c.link(p), "zone": zone,
			"guestCpus": t.CPUs, "memoryMb": t.MemoryMiB, "isSharedCpu": t.Shared, "maximumPersistentDisks": 128,
			"maximumPersistentDisksSizeGb": "263168", "description": fmt.Sprintf("%d vCPUs, %d GB RAM", t.CPUs, t.MemoryMiB/1024)}
	}
	return out
}
