package gcp

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"net/netip"
	"regexp"
	"slices"
	"strconv"
	"strings"
)

// Instances (zonal): made with a machine type of their zone's catalog, a
// boot disk from a node image, one network interface on a subnetwork of
// the zone's region (its address from the subnetwork's range), labels,
// network tags and metadata (startup-script among them). Their status
// goes PROVISIONING, then RUNNING when the insert's operation ends;
// stop makes them STOPPING, then TERMINATED; start STAGING, then RUNNING.
// With Options.Machines each is a machine (machines.go), and its
// operations end when the machine has done what they ask. A region's
// CPUS quota counts the vCPUs of its instances that are not TERMINATED:
// an insert or start past it ends in QUOTA_EXCEEDED and changes nothing.

// isInstance reports whether path is an instance's.
func isInstance(path string) bool {
	return strings.Contains(path, "/zones/") && strings.Contains(path, "/instances/")
}

// instanceRefs are the paths an instance's network interfaces' field
// (network, subnetwork) name.
func instanceRefs(c *call, d doc, field string) []string {
	nics, _ := objects(d, "networkInterfaces")
	var out []string
	for _, n := range nics {
		if ref := str(n, field); ref != "" {
			out = append(out, refPath(c, ref, "", ""))
		}
	}
	return out
}

// setStatus sets an instance's status, with the time it started or
// stopped.
func setStatus(d doc, status, now string) {
	d["status"] = status
	switch status {
	case "RUNNING":
		d["lastStartTimestamp"] = now
	case "TERMINATED":
		d["lastStopTimestamp"] = now
	}
}

// ImageName is the name of the image of a node image's version, as
// instances name it in their boot disk's sourceImage
// (projects/P/global/images/kiln-node-v1-36-3): "kiln-node-" and the
// version, lower-cased, dots and pluses made dashes.
func ImageName(version string) string {
	return "kiln-node-" + strings.NewReplacer(".", "-", "+", "-", "_", "-").Replace(strings.ToLower(version))
}

// imageVersion is the node image version a sourceImage names, if the
// local Compute Engine has it; any name is good when it has no images
// (no Machines and no Options.Images: instances are records only).
func (s *Server) imageVersion(ref string) (string, bool) {
	n := lastSegment(ref)
	for v := range s.images {
		if ImageName(v) == n {
			return v, true
		}
	}
	return "", len(s.images) == 0 && s.opts.Machines == nil
}

// Label keys and values, as Compute allows them.
var (
	labelKey   = regexp.MustCompile(`^[a-z][a-z0-9_-]{0,62}$`)
	labelValue = regexp.MustCompile(`^[a-z0-9_-]{0,63}$`)
	metaKey    = regexp.MustCompile(`^[a-zA-Z0-9_-]{1,128}$`)
)

// fingerprint is a fingerprint of v, as Compute answers them (base64 of
// 8 bytes; here hex, which no client reads).
func fingerprint(v any) string {
	b, _ := json.Marshal(v)
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:8])
}

// checkLabels checks d's labels (field names them in errors) and fills in
// its labelFingerprint.
func checkLabels(d doc, field string) error {
	v, there := d["labels"]
	if !there || v == nil {
		d["labelFingerprint"] = fingerprint(map[string]string{})
		return nil
	}
	m, ok := v.(map[string]any)
	if !ok || len(m) > 64 {
		return invalid("Invalid value for field '%s.labels': want a map of at most 64 labels.", field)
	}
	for k, val := range m {
		vs, ok := val.(string)
		if !labelKey.MatchString(k) || !ok || !labelValue.MatchString(vs) {
			return invalid("Invalid value for field '%s.labels': '%s'. Label keys and values can only contain lowercase letters, numeric characters, underscores and dashes (keys start with a letter), at most 63 characters.", field, k)
		}
	}
	d["labelFingerprint"] = fingerprint(m)
	return nil
}

// checkMetadata checks d's metadata items and fills in what Compute does.
func checkMetadata(d doc, field string) error {
	md, _ := d["metadata"].(map[string]any)
	if md == nil {
		md = map[string]any{}
	}
	items, ok := objects(md, "items")
	if !ok {
		return invalid("Invalid value for field '%s.metadata.items': want a list of {key, value}.", field)
	}
	seen, size := map[string]bool{}, 0
	for _, it := range items {
		k := str(it, "key")
		if !metaKey.MatchString(k) || seen[k] {
			return invalid("Invalid value for field '%s.metadata.items': '%s'. Keys are 1 to 128 of letters, digits, '-' and '_', each once.", field, k)
		}
		seen[k] = true
		size += len(k) + len(str(it, "value"))
	}
	if size > 512<<10 {
		return invalid("Invalid value for field '%s.metadata': the metadata is larger than 512 KB.", field)
	}
	md["kind"], md["fingerprint"] = "compute#metadata", fingerprint(items)
	d["metadata"] = md
	return nil
}

// metadataValue is the value of an instance's metadata key ("" for none).
func metadataValue(d doc, key string) string {
	md, _ := d["metadata"].(map[string]any)
	items, _ := objects(md, "items")
	for _, it := range items {
		if str(it, "key") == key {
			return str(it, "value")
		}
	}
	return ""
}

// machineTypeOf is the catalog's machine type a reference names (a URL,
// zones/Z/machineTypes/T, or T).
func machineTypeOf(ref string) (MachineType, bool) {
	n := lastSegment(ref)
	i := slices.IndexFunc(MachineTypes, func(t MachineType) bool { return t.Name == n })
	if i < 0 {
		return MachineType{}, false
	}
	return MachineTypes[i], true
}

// offered reports whether machine type t is offered in zone.
func offered(t MachineType, zone string) bool {
	return t.Zones == nil || slices.Contains(t.Zones, zone[strings.LastIndex(zone, "-")+1:])
}

func prepareInstance(s *Server, c *call, d, old doc) error {
	if old != nil {
		return invalid("Invalid value for field 'resource': the local Compute Engine changes an instance by its methods (start, stop), not by update.")
	}
	return s.prepareInstance(c, d, "")
}

// prepareInstance checks a new instance and fills in what Compute does:
// its zone, machine type URL, interface (network, address), disks and
// status. creator is the group that makes it ("" for a caller's insert,
// whose permission to use the subnetwork is checked).
func (s *Server) prepareInstance(c *call, d doc, creator string) error {
	_, zone, _ := strings.Cut(c.scope, "/")
	region := s.zones[zone]
	t, ok := machineTypeOf(str(d, "machineType"))
	if str(d, "machineType") == "" || !ok || !offered(t, zone) {
		return invalid("Invalid value for field 'resource.machineType': '%s'. Machine type with name '%s' does not exist in zone '%s'.", str(d, "machineType"), lastSegment(str(d, "machineType")), zone)
	}
	d["machineType"] = c.link("projects/" + c.project + "/zones/" + zone + "/machineTypes/" + t.Name)
	if err := checkLabels(d, "resource"); err != nil {
		return err
	}
	if err := checkMetadata(d, "resource"); err != nil {
		return err
	}
	if tags, _ := d["tags"].(map[string]any); tags != nil {
		items, ok := stringsOf(tags, "items")
		if !ok {
			return invalid("Invalid value for field 'resource.tags.items': want a list of network tags.")
		}
		for _, tg := range items {
			if !name.MatchString(tg) {
				return invalid("Invalid value for field 'resource.tags.items': '%s'. Must be a match of regex '(?:[a-z](?:[-a-z0-9]{0,61}[a-z0-9])?)'", tg)
			}
		}
		tags["fingerprint"] = fingerprint(items)
	}
	nics, ok := objects(d, "networkInterfaces")
	if !ok || len(nics) != 1 {
		return invalid("Invalid value for field 'resource.networkInterfaces': the local Compute Engine makes instances with one network interface.")
	}
	nic := nics[0]
	subRef := str(nic, "subnetwork")
	if subRef == "" {
		return invalid("Invalid value for field 'resource.networkInterfaces[0].subnetwork': ''. A subnetwork must be specified for a custom-mode network.")
	}
	subPath := refPath(c, subRef, "regions/"+region, "subnetworks")
	sub, ok := s.st.Resources[subPath]
	if !ok || !strings.HasPrefix(subPath, "projects/"+c.project+"/regions/"+region+"/subnetworks/") {
		return invalid("Invalid value for field 'resource.networkInterfaces[0].subnetwork': '%s'. The referenced subnetwork resource cannot be found in region %s.", subRef, region)
	}
	if creator == "" && !allowed(c.account, c.project, "compute.subnetworks.use") {
		return forbidden("compute.subnetworks.use", subPath)
	}
	if n := str(nic, "network"); n != "" && !sameRef(c, n, str(sub, "network")) {
		return invalid("Invalid value for field 'resource.networkInterfaces[0].network': '%s'. The subnetwork is not of this network.", n)
	}
	if _, ok := nic["accessConfigs"]; ok {
		return invalid("Invalid value for field 'resource.networkInterfaces[0].accessConfigs': the local Compute Engine gives instances no external address (the cluster's egress is its Cloud NAT).")
	}
	addr, err := s.allocate(subPath, sub, str(nic, "networkIP"))
	if err != nil {
		return err
	}
	nic["subnetwork"], nic["network"], nic["networkIP"] = c.link(subPath), str(sub, "network"), addr.String()
	nic["name"], nic["kind"], nic["stackType"] = "nic0", "compute#networkInterface", "IPV4_ONLY"
	nic["fingerprint"] = fingerprint(addr.String())
	disks, ok := objects(d, "disks")
	if !ok || len(disks) == 0 || disks[0]["boot"] != true {
		return invalid("Invalid value for field 'resource.disks': an instance needs a boot disk, its first.")
	}
	for i, dk := range disks {
		ip, _ := dk["initializeParams"].(map[string]any)
		if i == 0 {
			src := str(ip, "sourceImage")
			if src == "" {
				return invalid("Invalid value for field 'resource.disks[0].initializeParams.sourceImage': ''. The boot disk is made from an image.")
			}
			if _, ok := s.imageVersion(src); !ok {
				return notFound(refPath(c, src, "global", "images"))
			}
		}
		dn := str(dk, "deviceName")
		if dn == "" {
			dn = "persistent-disk-" + strconv.Itoa(i)
		}
		dk["deviceName"], dk["index"], dk["kind"] = dn, i, "compute#attachedDisk"
		dk["source"] = c.link("projects/" + c.project + "/zones/" + zone + "/disks/" + c.name + map[bool]string{true: "", false: "-" + strconv.Itoa(i)}[i == 0])
		for f, v := range map[string]any{"type": "PERSISTENT", "mode": "READ_WRITE", "autoDelete": true, "interface": "SCSI"} {
			if _, ok := dk[f]; !ok {
				dk[f] = v
			}
		}
	}
	d["zone"] = c.link("projects/" + c.project + "/zones/" + zone)
	d["status"], d["cpuPlatform"] = "PROVISIONING", "Intel Broadwell"
	for f, v := range map[string]any{"canIpForward": false, "deletionProtection": false, "startRestricted": false,
		"scheduling": map[string]any{"onHostMaintenance": "MIGRATE", "automaticRestart": true, "preemptible": false, "provisioningModel": "STANDARD"}} {
		if _, ok := d[f]; !ok {
			d[f] = v
		}
	}
	if creator != "" {
		md := d["metadata"].(map[string]any)
		items, _ := md["items"].([]any)
		md["items"] = append(items, map[string]any{"key": "created-by", "value": creator})
		md["fingerprint"] = fingerprint(md["items"])
	}
	return nil
}

// allocate is an instance's address in the subnetwork at subPath: want
// when given (in the range and free), else the first free one. Compute
// keeps the first two addresses of a range (the network's and its
// gateway's) and the last two.
func (s *Server) allocate(subPath string, sub doc, want string) (netip.Addr, error) {
	p, err := netip.ParsePrefix(str(sub, "ipCidrRange"))
	if err != nil {
		return netip.Addr{}, invalid("The subnetwork '%s' has no range.", subPath)
	}
	used := map[netip.Addr]bool{}
	for ip, d := range s.st.Resources {
		if !isInstance(ip) {
			continue
		}
		nics, _ := objects(d, "networkInterfaces")
		for _, n := range nics {
			if a, err := netip.ParseAddr(str(n, "networkIP")); err == nil && strings.HasSuffix(str(n, "subnetwork"), "/compute/v1/"+subPath) {
				used[a] = true
			}
		}
	}
	first := p.Addr().Next().Next()
	b := p.Addr().As4()
	n := binary.BigEndian.Uint32(b[:]) | (1<<(32-p.Bits()) - 1) // the range's last address
	binary.BigEndian.PutUint32(b[:], n)
	last := netip.AddrFrom4(b).Prev() // the second-to-last is kept too
	if want != "" {
		a, err := netip.ParseAddr(want)
		if err != nil || !p.Contains(a) || a.Less(first) || !a.Less(last) {
			return netip.Addr{}, invalid("Invalid value for field 'resource.networkInterfaces[0].networkIP': '%s'. The address is not in the subnetwork's usable range %s.", want, p)
		}
		if used[a] {
			return netip.Addr{}, errorf(http.StatusBadRequest, "invalid", "IP '%s' is already being used by another resource.", want)
		}
		return a, nil
	}
	for a := first; a.Less(last); a = a.Next() {
		if !used[a] {
			return a, nil
		}
	}
	return netip.Addr{}, errorf(http.StatusBadRequest, "ipSpaceExhausted", "IP space of '%s' is exhausted.", subPath)
}

func instanceInserted(s *Server, c *call, d doc) {
	if s.opts.Machines != nil {
		s.st.Machines[c.path()] = &machine{ID: str(d, "id"), Want: powerRunning}
	}
	s.after(c.path(), "RUNNING", powerRunning)
}

func instanceDeleted(s *Server, c *call, d doc) {
	if m := s.st.Machines[c.path()]; m != nil {
		m.Want = waitRemoved
	}
	s.after(c.path(), "", waitRemoved)
}

// cpus is the vCPUs of the instances of region in project that are not
// TERMINATED: the CPUS quota's usage.
func (s *Server) cpus(project, region string) int {
	n := 0
	for p, d := range s.st.Resources {
		if !isInstance(p) || !strings.HasPrefix(p, "projects/"+project+"/zones/") || str(d, "status") == "TERMINATED" {
			continue
		}
		zone := strings.Split(p, "/")[3]
		if s.zones[zone] != region {
			continue
		}
		if t, ok := machineTypeOf(str(d, "machineType")); ok {
			n += t.CPUs
		}
	}
	return n
}

// quota is a regional quota's limit.
func (s *Server) quota(metric string) float64 {
	if v, ok := s.opts.Quotas[metric]; ok {
		return v
	}
	return Quotas[metric]
}

// admitCPUs is the failure of an operation that would use more vCPUs in
// region than its CPUS quota leaves, or nil.
func (s *Server) admitCPUs(coll, project, region string, more int) *FailedOperation {
	limit := s.quota("CPUS")
	if float64(s.cpus(project, region)+more) <= limit {
		return nil
	}
	return &FailedOperation{Collection: coll, Code: "QUOTA_EXCEEDED", HTTPStatus: http.StatusForbidden,
		Message: fmt.Sprintf("Quota 'CPUS' exceeded.  Limit: %.1f in region %s.", limit, region)}
}

func admitInstance(s *Server, c *call, d doc) *FailedOperation {
	t, _ := machineTypeOf(str(d, "machineType"))
	_, zone, _ := strings.Cut(c.scope, "/")
	return s.admitCPUs("instances", c.project, s.zones[zone], t.CPUs)
}

// action answers a method of a resource (POST .../NAME/METHOD).
func (s *Server) action(c *call, r *http.Request) (any, int, error) {
	d, ok := s.st.Resources[c.path()]
	if !ok {
		return nil, 0, notFound(c.path())
	}
	if r.Method != http.MethodPost {
		return nil, 0, methodNotAllowed(r)
	}
	switch c.coll + "." + c.action {
	case "instances.start":
		return s.startInstance(c, d)
	case "instances.stop":
		return s.stopInstance(c, d)
	case "instanceGroupManagers.resize":
		return s.resizeGroup(c, r, d)
	case "instanceGroupManagers.deleteInstances":
		return s.deleteGroupInstances(c, r, d)
	case "instanceGroupManagers.listManagedInstances":
		return s.listManagedInstances(c, d), http.StatusOK, nil
	}
	return nil, 0, errorf(http.StatusNotFound, "notFound", "The local Compute Engine has no method %s of %s", c.action, c.coll)
}

// startInstance starts a TERMINATED instance (STAGING, then RUNNING); a
// running one is left as it is.
func (s *Server) startInstance(c *call, d doc) (any, int, error) {
	path := c.path()
	fail := s.takeFailure(c.coll)
	if fail == nil && str(d, "status") == "TERMINATED" {
		fail = admitInstance(s, c, d)
		if fail == nil {
			d["status"] = "STAGING"
			if m := s.st.Machines[path]; m != nil {
				m.Want = powerRunning
			}
			s.after(path, "RUNNING", powerRunning)
		}
	}
	s.dirty = true
	return s.newOperation(c, "start", path, d["id"], fail), http.StatusOK, nil
}

// stopInstance stops an instance (STOPPING, then TERMINATED); its disk
// stays.
func (s *Server) stopInstance(c *call, d doc) (any, int, error) {
	path := c.path()
	fail := s.takeFailure(c.coll)
	if fail == nil && str(d, "status") != "TERMINATED" {
		d["status"] = "STOPPING"
		if m := s.st.Machines[path]; m != nil {
			m.Want = powerStopped
		}
		s.after(path, "TERMINATED", powerStopped)
	}
	s.dirty = true
	return s.newOperation(c, "stop", path, d["id"], fail), http.StatusOK, nil
}

// deepCopy copies a document through JSON.
func deepCopy(d doc) doc {
	b, _ := json.Marshal(d)
	var out doc
	dec := json.NewDecoder(strings.NewReader(string(b)))
	dec.UseNumber()
	_ = dec.Decode(&out)
	return out
}

// zonesOf are the names of region's zones.
func (s *Server) zonesOf(region string) []string {
	var out []string
	for _, z := range s.regions[region].Zones {
		out = append(out, region+"-"+z)
	}
	return out
}
