package gcp

import (
	"crypto/rand"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
)

// Instance templates (global) and regional managed instance groups: a
// group makes targetSize instances from its template across the zones of
// its distributionPolicy (evenly), named BASE-xxxx (its
// baseInstanceName and four characters it picks), each with the metadata
// key created-by naming the group. resize makes or deletes instances to
// the new size (the newest go first), deleteInstances deletes the ones
// named and lowers the size by as many, and a group's delete deletes its
// instances. A template a group uses cannot be deleted.

// instanceTemplate's fields a template's properties take from an
// instance's (machineType is a name here, as in Compute).
func prepareTemplate(s *Server, c *call, d, old doc) error {
	if old != nil {
		return invalid("Invalid value for field 'resource': instance templates cannot be changed; make another.")
	}
	props, _ := d["properties"].(map[string]any)
	if props == nil {
		return invalid("Invalid value for field 'resource.properties': ''. A template has properties.")
	}
	mt := str(props, "machineType")
	if _, ok := machineTypeOf(mt); !ok || strings.Contains(mt, "/") {
		return invalid("Invalid value for field 'resource.properties.machineType': '%s'. Give the name of a machine type Compute offers.", mt)
	}
	if err := checkLabels(props, "resource.properties"); err != nil {
		return err
	}
	if err := checkMetadata(props, "resource.properties"); err != nil {
		return err
	}
	nics, ok := objects(props, "networkInterfaces")
	if !ok || len(nics) != 1 || str(nics[0], "subnetwork") == "" {
		return invalid("Invalid value for field 'resource.properties.networkInterfaces': the local Compute Engine makes templates with one network interface on a subnetwork.")
	}
	subPath := refPath(c, str(nics[0], "subnetwork"), "", "subnetworks")
	sub, ok := s.st.Resources[subPath]
	if !ok || !strings.Contains(subPath, "/subnetworks/") {
		return invalid("Invalid value for field 'resource.properties.networkInterfaces[0].subnetwork': '%s'. The referenced subnetwork resource cannot be found.", str(nics[0], "subnetwork"))
	}
	if !allowed(c.account, c.project, "compute.subnetworks.use") {
		return forbidden("compute.subnetworks.use", subPath)
	}
	nics[0]["subnetwork"], nics[0]["network"] = c.link(subPath), str(sub, "network")
	disks, ok := objects(props, "disks")
	if !ok || len(disks) == 0 || disks[0]["boot"] != true {
		return invalid("Invalid value for field 'resource.properties.disks': a template needs a boot disk, its first.")
	}
	ip, _ := disks[0]["initializeParams"].(map[string]any)
	if _, ok := s.imageVersion(str(ip, "sourceImage")); !ok || str(ip, "sourceImage") == "" {
		return notFound(refPath(c, str(ip, "sourceImage"), "global", "images"))
	}
	return nil
}

// templateInUse names a group that uses the template c names.
func templateInUse(s *Server, c *call) string {
	for _, p := range slicesSorted(s.st.Resources) {
		if strings.Contains(p, "/instanceGroupManagers/") && refPath(c, str(s.st.Resources[p], "instanceTemplate"), "global", "instanceTemplates") == c.path() {
			return p
		}
	}
	return ""
}

// baseName is a group's baseInstanceName as Compute allows it.
func validBase(b string) bool { return len(b) <= 58 && name.MatchString(b) }

func prepareGroup(s *Server, c *call, d, old doc) error {
	tplPath := refPath(c, str(d, "instanceTemplate"), "global", "instanceTemplates")
	tpl, ok := s.st.Resources[tplPath]
	if !ok || !strings.Contains(tplPath, "/global/instanceTemplates/") {
		return invalid("Invalid value for field 'resource.instanceTemplate': '%s'. The referenced instance template resource cannot be found.", str(d, "instanceTemplate"))
	}
	if !allowed(c.account, c.project, "compute.instanceTemplates.useReadOnly") {
		return forbidden("compute.instanceTemplates.useReadOnly", tplPath)
	}
	d["instanceTemplate"] = c.link(tplPath)
	base := str(d, "baseInstanceName")
	if !validBase(base) {
		return invalid("Invalid value for field 'resource.baseInstanceName': '%s'. Must be a match of regex '[a-z][-a-z0-9]{0,57}'", base)
	}
	size, ok := num(d, "targetSize", -1)
	if !ok || size < 0 {
		return invalid("Invalid value for field 'resource.targetSize': '%v'. Must be a whole number, 0 or more.", d["targetSize"])
	}
	if old != nil {
		if was, _ := num(old, "targetSize", 0); was != size {
			return invalid("Invalid value for field 'resource.targetSize': the local Compute Engine changes a group's size by resize.")
		}
		if base != str(old, "baseInstanceName") {
			return invalid("Invalid value for field 'resource.baseInstanceName': it cannot be changed.")
		}
	}
	d["targetSize"] = size
	region := c.region()
	dp, _ := d["distributionPolicy"].(map[string]any)
	if dp == nil {
		dp = map[string]any{}
	}
	zs, ok := objects(dp, "zones")
	if !ok {
		return invalid("Invalid value for field 'resource.distributionPolicy.zones': want a list of {zone}.")
	}
	if len(zs) == 0 {
		for _, z := range s.zonesOf(region) {
			zs = append(zs, map[string]any{"zone": z})
		}
	}
	t, _ := machineTypeOf(str(tpl["properties"].(map[string]any), "machineType"))
	var zones []any
	for i, z := range zs {
		zn := lastSegment(str(z, "zone"))
		if s.zones[zn] != region {
			return invalid("Invalid value for field 'resource.distributionPolicy.zones[%d].zone': '%s'. The zone is not in region %s.", i, str(z, "zone"), region)
		}
		if !offered(t, zn) {
			return invalid("Invalid value for field 'resource.distributionPolicy.zones[%d].zone': '%s'. Machine type '%s' of the template is not offered in zone %s.", i, zn, t.Name, zn)
		}
		zones = append(zones, map[string]any{"zone": c.link("projects/" + c.project + "/zones/" + zn)})
	}
	dp["zones"] = zones
	if str(dp, "targetShape") == "" {
		dp["targetShape"] = "EVEN"
	}
	d["distributionPolicy"] = dp
	d["region"] = c.link("projects/" + c.project + "/regions/" + region)
	d["instanceGroup"] = c.link("projects/" + c.project + "/regions/" + region + "/instanceGroups/" + c.name)
	if _, ok := d["updatePolicy"]; !ok {
		d["updatePolicy"] = map[string]any{"type": "OPPORTUNISTIC", "instanceRedistributionType": "PROACTIVE", "minimalAction": "REPLACE",
			"maxSurge": map[string]any{"fixed": 3, "calculated": 3}, "maxUnavailable": map[string]any{"fixed": 3, "calculated": 3}}
	}
	d["status"] = map[string]any{"isStable": true}
	d["fingerprint"] = fingerprint(d["instanceTemplate"])
	return nil
}

// templateCPUs is the vCPUs of one instance of the group's template.
func (s *Server) templateCPUs(c *call, g doc) int {
	tpl := s.st.Resources[refPath(c, str(g, "instanceTemplate"), "global", "instanceTemplates")]
	props, _ := tpl["properties"].(map[string]any)
	t, _ := machineTypeOf(str(props, "machineType"))
	return t.CPUs
}

func admitGroup(s *Server, c *call, d doc) *FailedOperation {
	size, _ := num(d, "targetSize", 0)
	return s.admitCPUs("instanceGroupManagers", c.project, c.region(), size*s.templateCPUs(c, d))
}

func groupInserted(s *Server, c *call, d doc) {
	size, _ := num(d, "targetSize", 0)
	s.growGroup(c, d, size)
}

func groupDeleted(s *Server, c *call, d doc) {
	for _, p := range s.members(c.path()) {
		s.removeInstance(c, p)
	}
}

// members are the paths of the instances the group at path made, oldest
// first.
func (s *Server) members(path string) []string {
	var out []string
	for p, d := range s.st.Resources {
		if isInstance(p) && metadataValue(d, "created-by") == path {
			out = append(out, p)
		}
	}
	slices.SortFunc(out, func(a, b string) int {
		ia, _ := strconv.ParseUint(str(s.st.Resources[a], "id"), 10, 64)
		ib, _ := strconv.ParseUint(str(s.st.Resources[b], "id"), 10, 64)
		return compareUint(ia, ib)
	})
	return out
}

func compareUint(a, b uint64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// removeInstance deletes the instance at path (a group's). Callers hold
// s.mu.
func (s *Server) removeInstance(c *call, path string) {
	d, ok := s.st.Resources[path]
	if !ok {
		return
	}
	delete(s.st.Resources, path)
	seg := strings.Split(path, "/")
	ic := &call{account: c.account, base: c.base, project: c.project, scope: "zones/" + seg[3], coll: "instances", name: seg[5]}
	instanceDeleted(s, ic, d)
}

// growGroup makes n instances more of the group g (c names it), each in
// the zone of its distribution that has the fewest. Callers hold s.mu.
func (s *Server) growGroup(c *call, g doc, n int) {
	tpl := s.st.Resources[refPath(c, str(g, "instanceTemplate"), "global", "instanceTemplates")]
	dp, _ := g["distributionPolicy"].(map[string]any)
	zs, _ := objects(dp, "zones")
	count := map[string]int{}
	var zones []string
	for _, z := range zs {
		zones = append(zones, lastSegment(str(z, "zone")))
	}
	for _, p := range s.members(c.path()) {
		count[strings.Split(p, "/")[3]]++
	}
	for range n {
		zone := zones[0]
		for _, z := range zones {
			if count[z] < count[zone] {
				zone = z
			}
		}
		props, _ := tpl["properties"].(map[string]any)
		body := deepCopy(props)
		body["name"] = s.memberName(c, str(g, "baseInstanceName"))
		body["machineType"] = "zones/" + zone + "/machineTypes/" + str(body, "machineType")
		if md, ok := body["metadata"].(map[string]any); ok {
			delete(md, "fingerprint")
			delete(md, "kind")
		}
		ic := &call{account: c.account, base: c.base, project: c.project, scope: "zones/" + zone, coll: "instances", name: str(body, "name")}
		if err := s.prepareInstance(ic, body, c.path()); err != nil {
			s.log.Warn("a group could not make an instance", "group", c.path(), "err", err)
			continue
		}
		s.st.Seq++
		body["kind"], body["id"], body["selfLink"] = "compute#instance", fmt.Sprint(resIDBase+s.st.Seq), ic.link(ic.path())
		body["creationTimestamp"] = stamp(s.opts.Now().UTC())
		s.st.Resources[ic.path()] = body
		instanceInserted(s, ic, body)
		count[zone]++
	}
}

// memberName is a new instance's name in the group: BASE-xxxx, unique in
// the project.
func (s *Server) memberName(c *call, base string) string {
	const letters = "abcdefghijklmnopqrstuvwxyz0123456789"
	for {
		b := make([]byte, 4)
		_, _ = rand.Read(b)
		for i := range b {
			b[i] = letters[int(b[i])%len(letters)]
		}
		n := base + "-" + string(b)
		taken := false
		for p := range s.st.Resources {
			if isInstance(p) && strings.HasPrefix(p, "projects/"+c.project+"/") && lastSegment(p) == n {
				taken = true
			}
		}
		if !taken {
			return n
		}
	}
}

// resizeGroup sets a group's targetSize (?size=N): instances are made or
// deleted (the newest first) to it. More vCPUs than the region's CPUS
// quota leaves end the operation in QUOTA_EXCEEDED, the size unchanged.
func (s *Server) resizeGroup(c *call, r *http.Request, g doc) (any, int, error) {
	size, err := strconv.Atoi(r.URL.Query().Get("size"))
	if err != nil || size < 0 {
		return nil, 0, invalid("Invalid value for field 'size': '%s'. Must be a whole number, 0 or more.", r.URL.Query().Get("size"))
	}
	members := s.members(c.path())
	fail := s.takeFailure(c.coll)
	if fail == nil && size > len(members) {
		fail = s.admitCPUs(c.coll, c.project, c.region(), (size-len(members))*s.templateCPUs(c, g))
	}
	if fail == nil {
		g["targetSize"] = size
		if size > len(members) {
			s.growGroup(c, g, size-len(members))
		}
		for i := len(members) - 1; i >= size; i-- {
			s.removeInstance(c, members[i])
		}
	}
	s.dirty = true
	return s.newOperation(c, "compute.regionInstanceGroupManagers.resize", c.path(), g["id"], fail), http.StatusOK, nil
}

// deleteGroupInstances deletes the group's instances the body names
// ({"instances": [URL, ...]}) and lowers its targetSize by as many.
func (s *Server) deleteGroupInstances(c *call, r *http.Request, g doc) (any, int, error) {
	body, err := readBody(r)
	if err != nil {
		return nil, 0, err
	}
	refs, ok := stringsOf(body, "instances")
	if !ok || len(refs) == 0 {
		return nil, 0, invalid("Invalid value for field 'instances': name the instances to delete.")
	}
	members := s.members(c.path())
	var paths []string
	for _, ref := range refs {
		p := refPath(c, ref, "", "")
		if !slices.Contains(members, p) {
			return nil, 0, invalid("Invalid value for field 'instances': '%s'. The instance is not a member of instance group manager '%s'.", ref, c.name)
		}
		paths = append(paths, p)
	}
	fail := s.takeFailure(c.coll)
	if fail == nil {
		for _, p := range paths {
			s.removeInstance(c, p)
		}
		size, _ := num(g, "targetSize", 0)
		g["targetSize"] = max(0, size-len(paths))
	}
	s.dirty = true
	return s.newOperation(c, "compute.regionInstanceGroupManagers.deleteInstances", c.path(), g["id"], fail), http.StatusOK, nil
}

// listManagedInstances answers the group's instances with their status
// and what the group is doing to them (CREATING while PROVISIONING).
func (s *Server) listManagedInstances(c *call, g doc) doc {
	var items []any
	for _, p := range s.members(c.path()) {
		d := s.st.Resources[p]
		action := "NONE"
		switch str(d, "status") {
		case "PROVISIONING", "STAGING":
			action = "CREATING"
		}
		items = append(items, map[string]any{"instance": str(d, "selfLink"), "id": str(d, "id"), "name": str(d, "name"),
			"instanceStatus": str(d, "status"), "currentAction": action})
	}
	out := doc{}
	if len(items) > 0 {
		out["managedInstances"] = items
	}
	return out
}

// slicesSorted are m's keys in order.
func slicesSorted[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

// instanceGroups answers the regional instance groups, read-only: each
// managed group's (its instanceGroup), as gcloud reads them beside the
// groups' managers.
func (s *Server) instanceGroups(c *call, r *http.Request) (any, int, error) {
	if r.Method != http.MethodGet || c.action != "" {
		return nil, 0, methodNotAllowed(r)
	}
	all := map[string]doc{}
	prefix := "projects/" + c.project + "/" + c.scope + "/instanceGroupManagers/"
	for p, g := range s.st.Resources {
		n, ok := strings.CutPrefix(p, prefix)
		if !ok {
			continue
		}
		path := "projects/" + c.project + "/" + c.scope + "/instanceGroups/" + n
		d := doc{"kind": "compute#instanceGroup", "name": n, "id": str(g, "id"), "selfLink": c.link(path),
			"creationTimestamp": g["creationTimestamp"], "region": g["region"], "size": len(s.members(p)),
			"fingerprint": g["fingerprint"], "description": "This instance group is controlled by Regional Instance Group Manager '" + n + "'."}
		tpl := s.st.Resources[refPath(c, str(g, "instanceTemplate"), "global", "instanceTemplates")]
		if props, _ := tpl["properties"].(map[string]any); props != nil {
			if nics, _ := objects(props, "networkInterfaces"); len(nics) > 0 {
				d["network"], d["subnetwork"] = nics[0]["network"], nics[0]["subnetwork"]
			}
		}
		all[path] = d
	}
	if c.name != "" {
		d, ok := all[c.path()]
		if !ok {
			return nil, 0, notFound(c.path())
		}
		return d, http.StatusOK, nil
	}
	return list(s, c, r, "compute#regionInstanceGroupList", func(p string) (doc, bool) { d, ok := all[p]; return d, ok }, all)
}
