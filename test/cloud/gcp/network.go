package gcp

import (
	"encoding/json"
	"net/netip"
	"slices"
	"strconv"
	"strings"
)

// The networking resources: custom-mode VPC networks (global),
// subnetworks with secondary ranges (regional), firewall rules (global)
// and Cloud Routers with Cloud NAT (regional), each checked as Compute
// checks it and kept with the references between them: a network that a
// subnetwork, a firewall rule or a router uses cannot be deleted, nor a
// subnetwork a router's NAT names.

// kind is a collection of resources and what Compute checks of them.
type kind struct {
	coll  string // the URL's collection: networks
	kind  string // compute#network
	noun  string // in messages: network
	scope string // "global" or "regions"
	// prepare checks a resource about to be written (old is what it
	// replaces, nil for an insert) and fills in what Compute does.
	prepare func(s *Server, c *call, d, old doc) error
	// inUse names a resource that uses the one c names, or "".
	inUse func(s *Server, c *call) string
	// inserted and deleted keep other resources' views (a network's
	// subnetworks) in step.
	inserted, deleted func(s *Server, c *call, d doc)
	// admit, when set, is how an insert's operation ends when Compute
	// would not make it after all (a quota): nil to make it.
	admit func(s *Server, c *call, d doc) *FailedOperation
}

// in reports whether the call's scope is the kind's.
func (k *kind) in(c *call) bool {
	if k.scope == "global" {
		return c.scope == "global"
	}
	return strings.HasPrefix(c.scope, k.scope+"/")
}

// kinds are the collections of resources, by the URL's name.
var kinds = func() map[string]*kind {
	m := map[string]*kind{}
	for _, k := range []*kind{
		{coll: "networks", kind: "compute#network", noun: "network", scope: "global", prepare: prepareNetwork, inUse: networkInUse},
		{coll: "subnetworks", kind: "compute#subnetwork", noun: "subnetwork", scope: "regions", prepare: prepareSubnetwork,
			inUse: subnetworkInUse, inserted: subnetworkInserted, deleted: subnetworkDeleted},
		{coll: "firewalls", kind: "compute#firewall", noun: "firewall", scope: "global", prepare: prepareFirewall},
		{coll: "routers", kind: "compute#router", noun: "router", scope: "regions", prepare: prepareRouter},
		{coll: "instances", kind: "compute#instance", noun: "instance", scope: "zones", prepare: prepareInstance,
			inserted: instanceInserted, deleted: instanceDeleted, admit: admitInstance},
		{coll: "instanceTemplates", kind: "compute#instanceTemplate", noun: "instance template", scope: "global",
			prepare: prepareTemplate, inUse: templateInUse},
		{coll: "instanceGroupManagers", kind: "compute#instanceGroupManager", noun: "instance group manager", scope: "regions",
			prepare: prepareGroup, inserted: groupInserted, deleted: groupDeleted, admit: admitGroup},
	} {
		m[k.coll] = k
	}
	return m
}()

// refPath is the path under compute/v1 of a reference in a body: a full
// URL (any host), projects/P/..., a path in the call's project
// (global/networks/N), or a bare name of collection coll in scope.
func refPath(c *call, ref, scope, coll string) string {
	if _, rest, ok := strings.Cut(ref, "/compute/v1/"); ok {
		return rest
	}
	switch {
	case strings.HasPrefix(ref, "projects/"):
		return ref
	case strings.HasPrefix(ref, "global/"), strings.HasPrefix(ref, "regions/"), strings.HasPrefix(ref, "zones/"):
		return "projects/" + c.project + "/" + ref
	}
	return "projects/" + c.project + "/" + scope + "/" + coll + "/" + ref
}

// str is d's string field f ("" when not a string).
func str(d doc, f string) string { v, _ := d[f].(string); return v }

// num is d's number field f, def when absent; ok false when not a whole
// number.
func num(d doc, f string, def int) (int, bool) {
	switch v := d[f].(type) {
	case nil:
		return def, true
	case json.Number:
		n, err := strconv.Atoi(v.String())
		return n, err == nil
	case float64:
		return int(v), v == float64(int(v))
	case int:
		return v, true
	case string: // proto's int64 fields are strings in JSON
		n, err := strconv.Atoi(v)
		return n, err == nil
	}
	return 0, false
}

// objects is d's array field f of objects; ok false when f is there but
// no array of objects.
func objects(d doc, f string) ([]doc, bool) {
	v, there := d[f]
	if !there || v == nil {
		return nil, true
	}
	arr, ok := v.([]any)
	if !ok {
		return nil, false
	}
	out := make([]doc, 0, len(arr))
	for _, e := range arr {
		m, ok := e.(map[string]any)
		if !ok {
			return nil, false
		}
		out = append(out, m)
	}
	return out, true
}

// stringsOf is d's array field f of strings.
func stringsOf(d doc, f string) ([]string, bool) {
	v, there := d[f]
	if !there || v == nil {
		return nil, true
	}
	arr, ok := v.([]any)
	if !ok {
		return nil, false
	}
	out := make([]string, 0, len(arr))
	for _, e := range arr {
		s, ok := e.(string)
		if !ok {
			return nil, false
		}
		out = append(out, s)
	}
	return out, true
}

// networkRef resolves d's network field to an existing network's path,
// written back as its URL; field names the field in errors.
func (s *Server) networkRef(c *call, d doc, field string) (string, error) {
	ref := str(d, "network")
	if ref == "" {
		return "", invalid("Invalid value for field '%s': ''. The network is required.", field)
	}
	p := refPath(c, ref, "global", "networks")
	if _, ok := s.st.Resources[p]; !ok || !strings.HasPrefix(p, "projects/"+c.project+"/global/networks/") {
		return "", invalid("Invalid value for field '%s': '%s'. The referenced network resource cannot be found.", field, ref)
	}
	d["network"] = c.link(p)
	return p, nil
}

// sameRef reports whether two references name one resource.
func sameRef(c *call, a, b string) bool {
	return a != "" && b != "" && refPath(c, a, "", "") == refPath(c, b, "", "")
}

func prepareNetwork(s *Server, c *call, d, old doc) error {
	if _, ok := d["IPv4Range"]; ok {
		return invalid("Invalid value for field 'resource.IPv4Range': legacy networks are not made; make a custom-mode network (autoCreateSubnetworks false).")
	}
	if auto, ok := d["autoCreateSubnetworks"].(bool); !ok || auto {
		return invalid("Invalid value for field 'resource.autoCreateSubnetworks': the local Compute Engine makes custom-mode networks only: set autoCreateSubnetworks to false and make subnetworks.")
	}
	mtu, ok := num(d, "mtu", 1460)
	if !ok || mtu < 1300 || mtu > 8896 {
		return invalid("Invalid value for field 'resource.mtu': '%v'. Must be between 1300 and 8896.", d["mtu"])
	}
	d["mtu"] = mtu
	rc, _ := d["routingConfig"].(map[string]any)
	if rc == nil {
		rc = map[string]any{}
	}
	switch m := str(rc, "routingMode"); m {
	case "":
		rc["routingMode"] = "REGIONAL"
	case "REGIONAL", "GLOBAL":
	default:
		return invalid("Invalid value for field 'resource.routingConfig.routingMode': '%s'. Must be REGIONAL or GLOBAL.", m)
	}
	d["routingConfig"] = rc
	if _, ok := d["networkFirewallPolicyEnforcementOrder"]; !ok {
		d["networkFirewallPolicyEnforcementOrder"] = "AFTER_CLASSIC_FIREWALL"
	}
	if old != nil {
		d["subnetworks"] = old["subnetworks"]
	} else {
		delete(d, "subnetworks")
	}
	return nil
}

// networkInUse names a subnetwork, firewall rule, router or instance on
// the network c names.
func networkInUse(s *Server, c *call) string {
	var users []string
	for p, d := range s.st.Resources {
		if (strings.Contains(p, "/subnetworks/") || strings.Contains(p, "/firewalls/") || strings.Contains(p, "/routers/")) &&
			strings.HasPrefix(p, "projects/"+c.project+"/") && refPath(c, str(d, "network"), "global", "networks") == c.path() {
			users = append(users, p)
		}
		if isInstance(p) && strings.HasPrefix(p, "projects/"+c.project+"/") && slices.Contains(instanceRefs(c, d, "network"), c.path()) {
			users = append(users, p)
		}
	}
	if len(users) == 0 {
		return ""
	}
	slices.Sort(users)
	return users[0]
}

func prepareSubnetwork(s *Server, c *call, d, old doc) error {
	if old != nil && !sameRef(c, str(d, "network"), str(old, "network")) {
		return invalid("Invalid value for field 'resource.network': the network of a subnetwork cannot be changed.")
	}
	netPath, err := s.networkRef(c, d, "resource.network")
	if err != nil {
		return err
	}
	primary, err := cidr(str(d, "ipCidrRange"), "resource.ipCidrRange")
	if err != nil {
		return err
	}
	if old != nil && str(old, "ipCidrRange") != str(d, "ipCidrRange") {
		return invalid("Invalid value for field 'resource.ipCidrRange': the primary range of a subnetwork is changed by expandIpCidrRange, which the local Compute Engine does not have.")
	}
	type rng struct {
		name string
		p    netip.Prefix
	}
	ranges := []rng{{"", primary}}
	secs, ok := objects(d, "secondaryIpRanges")
	if !ok {
		return invalid("Invalid value for field 'resource.secondaryIpRanges': want a list of {rangeName, ipCidrRange}.")
	}
	for i, sr := range secs {
		f := "resource.secondaryIpRanges[" + strconv.Itoa(i) + "]"
		n := str(sr, "rangeName")
		if !name.MatchString(n) {
			return invalid("Invalid value for field '%s.rangeName': '%s'. Must be a match of regex '(?:[a-z](?:[-a-z0-9]{0,61}[a-z0-9])?)'", f, n)
		}
		p, err := cidr(str(sr, "ipCidrRange"), f+".ipCidrRange")
		if err != nil {
			return err
		}
		if slices.ContainsFunc(ranges, func(r rng) bool { return r.name == n }) {
			return invalid("Invalid value for field '%s.rangeName': '%s'. Secondary range names must be unique in a subnetwork.", f, n)
		}
		ranges = append(ranges, rng{n, p})
	}
	for i, a := range ranges {
		for _, b := range ranges[:i] {
			if a.p.Overlaps(b.p) {
				return invalid("Invalid IPCidrRange: %s conflicts with existing range %s of subnetwork '%s'.", a.p, b.p, c.name)
			}
		}
	}
	// Ranges are unique across the whole network, every region.
	for p, o := range s.st.Resources {
		if !strings.Contains(p, "/subnetworks/") || p == c.path() || refPath(c, str(o, "network"), "global", "networks") != netPath {
			continue
		}
		theirs := []string{str(o, "ipCidrRange")}
		os, _ := objects(o, "secondaryIpRanges")
		for _, sr := range os {
			theirs = append(theirs, str(sr, "ipCidrRange"))
		}
		for _, t := range theirs {
			tp, err := netip.ParsePrefix(t)
			if err != nil {
				continue
			}
			for _, a := range ranges {
				if a.p.Overlaps(tp) {
					return invalid("Invalid IPCidrRange: %s conflicts with existing subnetwork '%s' in region '%s'.", a.p, str(o, "name"), lastSegment(str(o, "region")))
				}
			}
		}
	}
	d["region"] = c.link("projects/" + c.project + "/regions/" + c.region())
	d["gatewayAddress"] = primary.Addr().Next().String()
	for f, v := range map[string]any{"purpose": "PRIVATE", "stackType": "IPV4_ONLY", "privateIpGoogleAccess": false} {
		if _, ok := d[f]; !ok {
			d[f] = v
		}
	}
	return nil
}

// cidr is an IPv4 range as a subnetwork's (from /8 to /29, no host bits).
func cidr(v, field string) (netip.Prefix, error) {
	p, err := netip.ParsePrefix(v)
	switch {
	case v == "":
		return p, invalid("Invalid value for field '%s': ''. The range is required.", field)
	case err != nil || !p.Addr().Is4():
		return p, invalid("Invalid value for field '%s': '%s'. Must be an IPv4 CIDR range.", field, v)
	case p.Masked() != p:
		return p, invalid("Invalid value for field '%s': '%s'. Must be a CIDR range with no host bits set: %s.", field, v, p.Masked())
	case p.Bits() < 8 || p.Bits() > 29:
		return p, invalid("Invalid value for field '%s': '%s'. The prefix length must be from /8 to /29.", field, v)
	}
	return p, nil
}

func lastSegment(u string) string { return u[strings.LastIndex(u, "/")+1:] }

func subnetworkInserted(s *Server, c *call, d doc) {
	n := s.st.Resources[refPath(c, str(d, "network"), "global", "networks")]
	subs, _ := stringsOf(n, "subnetworks")
	n["subnetworks"] = toAny(append(subs, str(d, "selfLink")))
}

func subnetworkDeleted(s *Server, c *call, d doc) {
	n := s.st.Resources[refPath(c, str(d, "network"), "global", "networks")]
	if n == nil {
		return
	}
	subs, _ := stringsOf(n, "subnetworks")
	subs = slices.DeleteFunc(subs, func(u string) bool { return sameRef(c, u, str(d, "selfLink")) })
	if len(subs) == 0 {
		delete(n, "subnetworks")
		return
	}
	n["subnetworks"] = toAny(subs)
}

func toAny(ss []string) []any {
	out := make([]any, len(ss))
	for i, s := range ss {
		out[i] = s
	}
	return out
}

// subnetworkInUse names an instance on the subnetwork c names, or a
// router whose NAT lists it.
func subnetworkInUse(s *Server, c *call) string {
	var users []string
	for p, d := range s.st.Resources {
		if isInstance(p) && strings.HasPrefix(p, "projects/"+c.project+"/") && slices.Contains(instanceRefs(c, d, "subnetwork"), c.path()) {
			users = append(users, p)
		}
	}
	if len(users) > 0 {
		slices.Sort(users)
		return users[0]
	}
	for p, d := range s.st.Resources {
		if !strings.HasPrefix(p, "projects/"+c.project+"/regions/"+c.region()+"/routers/") {
			continue
		}
		nats, _ := objects(d, "nats")
		for _, n := range nats {
			subs, _ := objects(n, "subnetworks")
			for _, sn := range subs {
				if refPath(c, str(sn, "name"), c.scope, "subnetworks") == c.path() {
					return p
				}
			}
		}
	}
	return ""
}

// protocols a firewall rule may name (or a protocol number).
var protocols = []string{"tcp", "udp", "icmp", "esp", "ah", "sctp", "ipip", "all"}

func prepareFirewall(s *Server, c *call, d, old doc) error {
	if str(d, "network") == "" {
		d["network"] = "global/networks/default"
	}
	netPath, err := s.networkRef(c, d, "resource.network")
	if err != nil {
		return err
	}
	if !allowed(c.account, c.project, "compute.networks.updatePolicy") {
		return forbidden("compute.networks.updatePolicy", netPath)
	}
	dir := str(d, "direction")
	switch dir {
	case "":
		dir = "INGRESS"
	case "INGRESS", "EGRESS":
	default:
		return invalid("Invalid value for field 'resource.direction': '%s'. Must be INGRESS or EGRESS.", dir)
	}
	d["direction"] = dir
	prio, ok := num(d, "priority", 1000)
	if !ok || prio < 0 || prio > 65535 {
		return invalid("Invalid value for field 'resource.priority': '%v'. Must be from 0 to 65535.", d["priority"])
	}
	d["priority"] = prio
	allow, ok1 := objects(d, "allowed")
	deny, ok2 := objects(d, "denied")
	if !ok1 || !ok2 || (len(allow) == 0) == (len(deny) == 0) {
		return invalid("Invalid value for field 'resource': a firewall rule has either allowed or denied rules, one of them.")
	}
	field := "resource.allowed"
	if len(deny) > 0 {
		field, allow = "resource.denied", deny
	}
	for i, a := range allow {
		f := field + "[" + strconv.Itoa(i) + "]"
		proto := str(a, "IPProtocol")
		if _, err := strconv.Atoi(proto); err != nil && !slices.Contains(protocols, proto) {
			return invalid("Invalid value for field '%s.IPProtocol': '%s'. Must be one of %s or a protocol number.", f, proto, strings.Join(protocols, ", "))
		}
		ports, ok := stringsOf(a, "ports")
		if !ok {
			return invalid("Invalid value for field '%s.ports': want a list of ports.", f)
		}
		if len(ports) > 0 && proto != "tcp" && proto != "udp" && proto != "sctp" {
			return invalid("Invalid value for field '%s.ports': ports are given for tcp, udp and sctp only.", f)
		}
		for _, p := range ports {
			if !validPorts(p) {
				return invalid("Invalid value for field '%s.ports': '%s'. Must be a port or a range of ports, 0 to 65535.", f, p)
			}
		}
	}
	for _, f := range []string{"sourceRanges", "destinationRanges"} {
		rs, ok := stringsOf(d, f)
		if !ok {
			return invalid("Invalid value for field 'resource.%s': want a list of ranges.", f)
		}
		for _, r := range rs {
			if _, err := netip.ParsePrefix(r); err != nil {
				if _, err := netip.ParseAddr(r); err != nil {
					return invalid("Invalid value for field 'resource.%s': '%s'. Must be a CIDR range or an address.", f, r)
				}
			}
		}
	}
	if dir == "INGRESS" && d["sourceRanges"] == nil && d["sourceTags"] == nil && d["sourceServiceAccounts"] == nil {
		d["sourceRanges"] = []any{"0.0.0.0/0"}
	}
	if dir == "EGRESS" && d["destinationRanges"] == nil {
		d["destinationRanges"] = []any{"0.0.0.0/0"}
	}
	if _, ok := d["disabled"]; !ok {
		d["disabled"] = false
	}
	return nil
}

func validPorts(p string) bool {
	lo, hi, isRange := strings.Cut(p, "-")
	a, err1 := strconv.Atoi(lo)
	b, err2 := a, error(nil)
	if isRange {
		b, err2 = strconv.Atoi(hi)
	}
	return err1 == nil && err2 == nil && a >= 0 && b <= 65535 && a <= b
}

// NAT settings Compute accepts.
var (
	natAllocate = []string{"AUTO_ONLY", "MANUAL_ONLY"}
	natSources  = []string{"ALL_SUBNETWORKS_ALL_IP_RANGES", "ALL_SUBNETWORKS_ALL_PRIMARY_IP_RANGES", "LIST_OF_SUBNETWORKS"}
	natRanges   = []string{"ALL_IP_RANGES", "PRIMARY_IP_RANGE", "LIST_OF_SECONDARY_IP_RANGES"}
)

func prepareRouter(s *Server, c *call, d, old doc) error {
	if old != nil && !sameRef(c, str(d, "network"), str(old, "network")) {
		return invalid("Invalid value for field 'resource.network': the network of a router cannot be changed.")
	}
	netPath, err := s.networkRef(c, d, "resource.network")
	if err != nil {
		return err
	}
	nats, ok := objects(d, "nats")
	if !ok {
		return invalid("Invalid value for field 'resource.nats': want a list of NAT configurations.")
	}
	seen := map[string]bool{}
	for i, n := range nats {
		f := "resource.nats[" + strconv.Itoa(i) + "]"
		nn := str(n, "name")
		if !name.MatchString(nn) || seen[nn] {
			return invalid("Invalid value for field '%s.name': '%s'. NAT names are RFC 1035 names, unique in the router.", f, nn)
		}
		seen[nn] = true
		alloc := str(n, "natIpAllocateOption")
		if !slices.Contains(natAllocate, alloc) {
			return invalid("Invalid value for field '%s.natIpAllocateOption': '%s'. Must be one of %s.", f, alloc, strings.Join(natAllocate, ", "))
		}
		if ips, _ := stringsOf(n, "natIps"); alloc == "MANUAL_ONLY" && len(ips) == 0 {
			return invalid("Invalid value for field '%s.natIps': MANUAL_ONLY needs at least one address.", f)
		}
		src := str(n, "sourceSubnetworkIpRangesToNat")
		if !slices.Contains(natSources, src) {
			return invalid("Invalid value for field '%s.sourceSubnetworkIpRangesToNat': '%s'. Must be one of %s.", f, src, strings.Join(natSources, ", "))
		}
		subs, ok := objects(n, "subnetworks")
		if !ok || (src == "LIST_OF_SUBNETWORKS") != (len(subs) > 0) {
			return invalid("Invalid value for field '%s.subnetworks': subnetworks are listed with LIST_OF_SUBNETWORKS, and only then.", f)
		}
		for j, sn := range subs {
			sf := f + ".subnetworks[" + strconv.Itoa(j) + "]"
			p := refPath(c, str(sn, "name"), c.scope, "subnetworks")
			sd, ok := s.st.Resources[p]
			if !ok || !strings.HasPrefix(p, "projects/"+c.project+"/"+c.scope+"/subnetworks/") || refPath(c, str(sd, "network"), "global", "networks") != netPath {
				return invalid("Invalid value for field '%s.name': '%s'. The subnetwork must exist in the router's region and network.", sf, str(sn, "name"))
			}
			sn["name"] = c.link(p)
			rs, _ := stringsOf(sn, "sourceIpRangesToNat")
			for _, r := range rs {
				if !slices.Contains(natRanges, r) {
					return invalid("Invalid value for field '%s.sourceIpRangesToNat': '%s'. Must be one of %s.", sf, r, strings.Join(natRanges, ", "))
				}
			}
		}
	}
	d["region"] = c.link("projects/" + c.project + "/regions/" + c.region())
	return nil
}
