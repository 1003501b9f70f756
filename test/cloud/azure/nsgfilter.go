package azure

import (
	"net/netip"
	"slices"
	"strconv"
	"strings"
)

// What a load balancer forwards passes the network security group of its
// member's subnet, as in Azure: a Standard load balancer keeps the
// client's address, so what a rule forwards comes from the Internet, and a
// subnet's group lets it in only by a rule of its own (Azure's default
// rules let in the virtual network and the load balancer's probes, and
// deny the rest). The group's inbound rules are read by priority, and the
// first that matches decides. A member in a subnet without a group is
// reached (Azure: open). Simplified: a group on the interface itself is
// not read, and service tags other than Internet and VirtualNetwork match
// nothing.

// admits reports whether the security group of subnet (an id; "" for
// none) lets TCP from the Internet in to addr at port.
func (s *Server) admits(subnet string, addr netip.Addr, port int) bool {
	sn, ok := s.st.Resources[key(subnet)]
	if !ok {
		return true
	}
	nsg, ok := s.st.Resources[key(refID(sn.props()["networkSecurityGroup"]))]
	if !ok {
		return true
	}
	rules := s.children(nsg.id(), &kind{typ: typeRule})
	priority := func(d doc) float64 { p, _ := d.props()["priority"].(float64); return p }
	slices.SortFunc(rules, func(a, b doc) int { return int(priority(a) - priority(b)) })
	for _, r := range rules {
		p := r.props()
		if !strings.EqualFold(str(p, "direction"), "Inbound") || !(str(p, "protocol") == "*" || strings.EqualFold(str(p, "protocol"), "Tcp")) {
			continue
		}
		if anyOf(p, "sourceAddressPrefix", func(v string) bool { return v == "*" || strings.EqualFold(v, "Internet") || v == "0.0.0.0/0" }) &&
			anyOf(p, "destinationPortRange", func(v string) bool { return portIn(v, port) }) &&
			anyOf(p, "destinationAddressPrefix", func(v string) bool { return addressIn(s, sn, v, addr) }) {
			return strings.EqualFold(str(p, "access"), "Allow")
		}
	}
	return false
}

// anyOf reports whether the rule's property prop, or one of its plural
// (prop + "es"), matches.
func anyOf(p map[string]any, prop string, match func(string) bool) bool {
	if v := str(p, prop); v != "" && match(v) {
		return true
	}
	for _, v := range refList(p[prop+"es"]) {
		if s, ok := v.(string); ok && match(s) {
			return true
		}
	}
	return false
}

// portIn: "*", "N" or "A-B".
func portIn(r string, port int) bool {
	if r == "*" {
		return true
	}
	lo, hi, ok := strings.Cut(r, "-")
	if !ok {
		hi = lo
	}
	a, err1 := strconv.Atoi(strings.TrimSpace(lo))
	b, err2 := strconv.Atoi(strings.TrimSpace(hi))
	return err1 == nil && err2 == nil && a <= port && port <= b
}

// addressIn: "*", "VirtualNetwork" (the subnet's network), or a prefix or
// address holding addr.
func addressIn(s *Server, sn doc, r string, addr netip.Addr) bool {
	switch {
	case r == "*":
		return true
	case strings.EqualFold(r, "VirtualNetwork"):
		vnet, ok := s.st.Resources[key(parentID(sn.id()))]
		if !ok {
			return false
		}
		for _, raw := range refList(sub(vnet.props(), "addressSpace")["addressPrefixes"]) {
			if v, ok := raw.(string); ok {
				if p, err := netip.ParsePrefix(v); err == nil && p.Contains(addr) {
					return true
				}
			}
		}
		return false
	}
	if p, err := netip.ParsePrefix(r); err == nil {
		return p.Contains(addr)
	}
	a, err := netip.ParseAddr(r)
	return err == nil && a == addr
}
