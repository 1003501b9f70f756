package validate

import (
	"fmt"
	"maps"
	"math/bits"
	"net/netip"
	"regexp"
	"slices"
	"strings"

	v1 "kiln.dev/kiln/api/v1"
)

// PrivateRanges are where pod, service and node CIDRs may lie: RFC 1918,
// the RFC 6598 shared space and IPv6 unique local addresses.
var PrivateRanges = []netip.Prefix{
	netip.MustParsePrefix("10.0.0.0/8"),
	netip.MustParsePrefix("172.16.0.0/12"),
	netip.MustParsePrefix("192.168.0.0/16"),
	netip.MustParsePrefix("100.64.0.0/10"),
	netip.MustParsePrefix("fc00::/7"),
}

// Sizes of the cluster's ranges. Each node takes one pod range of
// NodePodMask bits from the pod CIDR (the controller manager's
// --node-cidr-mask-size); the service CIDR is bounded by what
// kube-apiserver accepts (at most 2^20 addresses) and what a cluster needs
// (its DNS service is the tenth address).
const (
	NodePodMaskIPv4    = 24
	NodePodMaskIPv6    = 64
	MinServiceMaskIPv4 = 12
	MaxServiceMaskIPv4 = 28
	MinServiceMaskIPv6 = 108
	MaxServiceMaskIPv6 = 124
)

func (e *errs) network(n *v1.Network, nodes int) {
	pod := e.cidr("spec.network.podCIDR", n.PodCIDR)
	svc := e.cidr("spec.network.serviceCIDR", n.ServiceCIDR)
	var node netip.Prefix
	if n.NodeCIDR != "" {
		node = e.cidr("spec.network.nodeCIDR", n.NodeCIDR)
	}
	if pod.IsValid() {
		e.podRange(pod, nodes)
	}
	if svc.IsValid() {
		e.serviceRange(svc)
	}
	if node.IsValid() {
		if hosts := blocks(node, node.Addr().BitLen()) - 2; hosts < nodes {
			e.invalid("spec.network.nodeCIDR", "%s holds %d machine addresses but the cluster can have %d nodes; use a larger range", node, max(hosts, 0), nodes)
		}
	}
	if pod.IsValid() && svc.IsValid() {
		switch {
		case pod.Addr().Is4() != svc.Addr().Is4():
			e.invalid("spec.network.serviceCIDR", "%s and the pod CIDR %s must both be IPv4 or both IPv6", svc, pod)
		case pod.Overlaps(svc):
			e.invalid("spec.network.serviceCIDR", "%s overlaps the pod CIDR %s; pick ranges that do not share addresses", svc, pod)
		}
	}
	if node.IsValid() {
		for _, r := range []struct {
			target string
			p      netip.Prefix
		}{{"spec.network.podCIDR", pod}, {"spec.network.serviceCIDR", svc}} {
			if r.p.IsValid() && r.p.Overlaps(node) {
				e.invalid(r.target, "%s overlaps the node network %s (spec.network.nodeCIDR); pick ranges that do not share addresses", r.p, node)
			}
		}
	}
	if !slices.Contains(CNIs, n.CNI) {
		e.invalid("spec.network.cni", "%q must be one of %s", n.CNI, strings.Join(CNIs, ", "))
	}
	if n.Name != "" && !IsDNSLabel(n.Name, MaxLabel) {
		e.invalid("spec.network.name", "%q must be a network name: a lower-case DNS-1123 label of at most %d characters", n.Name, MaxLabel)
	}
	e.dnsServers(n.DNSServers)
	e.existingVPC(n)
	if n.LoadBalancerPool != "" {
		e.loadBalancerPool(n.LoadBalancerPool, map[string]netip.Prefix{
			"spec.network.podCIDR": pod, "spec.network.serviceCIDR": svc, "spec.network.nodeCIDR": node})
	}
}

var (
	vpcID    = regexp.MustCompile(`^vpc-[0-9a-f]{8,17}$`)
	subnetID = regexp.MustCompile(`^subnet-[0-9a-f]{8,17}$`)
)

// existingVPC checks a VPC the spec names: ids of AWS's shapes, subnets
// with it and only with it, and no node CIDR (the VPC's range is the
// nodes'). Whether they exist is the provider's check.
func (e *errs) existingVPC(n *v1.Network) {
	switch {
	case n.VPCID == "" && len(n.SubnetIDs) > 0:
		e.invalid("spec.network.subnetIDs", "subnets are those of an existing VPC: set spec.network.vpcID too, or remove them to let the provider make the network")
		return
	case n.VPCID == "":
		return
	case !vpcID.MatchString(n.VPCID):
		e.invalid("spec.network.vpcID", "%q is not a VPC id such as vpc-0123456789abcdef0", n.VPCID)
	}
	if len(n.SubnetIDs) == 0 {
		e.missing("spec.network.subnetIDs", "spec.network.subnetIDs is required with spec.network.vpcID: a public and a private subnet of the VPC per zone")
	}
	for i, s := range n.SubnetIDs {
		if !subnetID.MatchString(s) {
			e.invalid(fmt.Sprintf("spec.network.subnetIDs[%d]", i), "%q is not a subnet id such as subnet-0123456789abcdef0", s)
		} else if slices.Contains(n.SubnetIDs[:i], s) {
			e.invalid(fmt.Sprintf("spec.network.subnetIDs[%d]", i), "%s is named twice", s)
		}
	}
	if n.NodeCIDR != "" {
		e.invalid("spec.network.nodeCIDR", "with spec.network.vpcID the nodes are in the VPC's range: remove spec.network.nodeCIDR")
	}
}

// cidr parses a required private network prefix; the zero prefix means it
// does not parse.
func (e *errs) cidr(target, s string) netip.Prefix {
	if s == "" {
		e.missing(target, "%s is required, for example 10.244.0.0/16", target)
		return netip.Prefix{}
	}
	p, err := netip.ParsePrefix(s)
	if err != nil {
		e.invalid(target, "%q is not a CIDR such as 10.244.0.0/16", s)
		return netip.Prefix{}
	}
	if p != p.Masked() {
		e.invalid(target, "%q has host bits set; did you mean %s?", s, p.Masked())
		return netip.Prefix{}
	}
	if !IsPrivate(p) {
		e.invalid(target, "%s is not a private range; use one inside %s", p, joinPrefixes(PrivateRanges))
	}
	return p
}

// IsPrivate reports whether p lies inside one of PrivateRanges.
func IsPrivate(p netip.Prefix) bool {
	for _, r := range PrivateRanges {
		if r.Bits() <= p.Bits() && r.Contains(p.Addr()) {
			return true
		}
	}
	return false
}

// podRange checks that the pod CIDR holds a node range for every node.
func (e *errs) podRange(pod netip.Prefix, nodes int) {
	mask := NodePodMaskIPv4
	if pod.Addr().Is6() {
		mask = NodePodMaskIPv6
	}
	if pod.Bits() > mask {
		e.invalid("spec.network.podCIDR", "%s is smaller than one node's pod range (/%d); use a /%d or larger (/16 is usual)", pod, mask, mask-4)
		return
	}
	if ranges := blocks(pod, mask); nodes > 0 && ranges < nodes {
		e.invalid("spec.network.podCIDR", "%s holds %d node pod ranges (/%d each) but the cluster can have %d nodes; use a /%d or larger",
			pod, ranges, mask, nodes, mask-bits.Len(uint(nodes-1)))
	}
}

func (e *errs) serviceRange(svc netip.Prefix) {
	lo, hi := MinServiceMaskIPv4, MaxServiceMaskIPv4
	if svc.Addr().Is6() {
		lo, hi = MinServiceMaskIPv6, MaxServiceMaskIPv6
	}
	switch {
	case svc.Bits() < lo:
		e.invalid("spec.network.serviceCIDR", "%s is larger than Kubernetes allows; use a /%d or smaller", svc, lo)
	case svc.Bits() > hi:
		e.invalid("spec.network.serviceCIDR", "%s is too small for a cluster's services; use a /%d or larger", svc, hi)
	}
}

func (e *errs) dnsServers(servers []string) {
	if len(servers) > MaxDNSServers {
		e.invalid("spec.network.dnsServers", "%d servers; at most %d are used by a node's resolver", len(servers), MaxDNSServers)
		return
	}
	seen := map[string]bool{}
	for i, s := range servers {
		at := fmt.Sprintf("spec.network.dnsServers[%d]", i)
		addr, ok := DNSServerAddr(s)
		switch {
		case !ok:
			e.invalid(at, "%q must be an IP address, or IP:port, of a DNS server", s)
		case seen[addr.String()]:
			e.invalid(at, "%s is listed twice", s)
		}
		seen[addr.String()] = true
	}
}

// DNSServerAddr parses a DNS server given as IP or IP:port (port 53 when
// absent).
func DNSServerAddr(s string) (netip.AddrPort, bool) {
	if a, err := netip.ParseAddr(s); err == nil && a.Zone() == "" {
		return netip.AddrPortFrom(a, 53), true
	}
	ap, err := netip.ParseAddrPort(s)
	if err != nil || ap.Port() == 0 || ap.Addr().Zone() != "" {
		return netip.AddrPort{}, false
	}
	return ap, true
}

// blocks is how many /mask blocks p holds, 2^(mask-bits) capped at 2^40;
// blocks(p, p.Addr().BitLen()) counts its addresses.
func blocks(p netip.Prefix, mask int) int { return 1 << min(max(mask-p.Bits(), 0), 40) }

// isCIDR reports whether s parses as a network prefix.
func isCIDR(s string) bool {
	_, err := netip.ParsePrefix(s)
	return err == nil
}

func joinPrefixes(ps []netip.Prefix) string {
	out := make([]string, len(ps))
	for i, p := range ps {
		out[i] = p.String()
	}
	return strings.Join(out[:len(out)-1], ", ") + " or " + out[len(out)-1]
}

// MaxLoadBalancerPool is how many addresses spec.network.loadBalancerPool
// may hold (a /16): more than a cluster's Services need, few enough that
// MetalLB's allocator keeps them in memory cheaply.
const MaxLoadBalancerPool = 1 << 16

// LoadBalancerPool is spec.network.loadBalancerPool parsed: the first and
// last address of its range, both IPv4.
type LoadBalancerPool struct{ First, Last netip.Addr }

// Contains reports whether a is in the pool.
func (p LoadBalancerPool) Contains(a netip.Addr) bool {
	return a.Is4() && p.First.Compare(a) <= 0 && a.Compare(p.Last) <= 0
}

// Within reports whether the whole pool lies inside prefix.
func (p LoadBalancerPool) Within(prefix netip.Prefix) bool {
	return prefix.Contains(p.First) && prefix.Contains(p.Last)
}

// Overlaps reports whether the pool shares an address with prefix.
func (p LoadBalancerPool) Overlaps(prefix netip.Prefix) bool {
	prefix = prefix.Masked()
	if !prefix.Addr().Is4() {
		return false
	}
	return p.Contains(prefix.Addr()) || prefix.Contains(p.First) // prefix starts inside, or holds the pool's start
}

// Range is the pool as FIRST-LAST.
func (p LoadBalancerPool) Range() string { return p.First.String() + "-" + p.Last.String() }

// Size is how many addresses the pool holds.
func (p LoadBalancerPool) Size() int {
	f, l := p.First.As4(), p.Last.As4()
	return int(uint32(l[0])<<24|uint32(l[1])<<16|uint32(l[2])<<8|uint32(l[3])) -
		int(uint32(f[0])<<24|uint32(f[1])<<16|uint32(f[2])<<8|uint32(f[3])) + 1
}

// ParseLoadBalancerPool parses a pool given as a CIDR (192.168.1.240/28,
// every address of it) or as FIRST-LAST (192.168.1.240-192.168.1.250):
// IPv4 unicast addresses, FIRST not after LAST, at most
// MaxLoadBalancerPool of them. The error says what is wrong, for a user.
func ParseLoadBalancerPool(s string) (LoadBalancerPool, error) {
	var p LoadBalancerPool
	if first, last, ok := strings.Cut(s, "-"); ok {
		f, ferr := netip.ParseAddr(strings.TrimSpace(first))
		l, lerr := netip.ParseAddr(strings.TrimSpace(last))
		if ferr != nil || lerr != nil || f.Zone() != "" || l.Zone() != "" {
			return p, fmt.Errorf("%q is not a range FIRST-LAST of IPv4 addresses such as 192.168.1.240-192.168.1.250", s)
		}
		if l.Less(f) {
			return p, fmt.Errorf("%q: the first address %s is after the last %s", s, f, l)
		}
		p = LoadBalancerPool{First: f, Last: l}
	} else {
		pre, err := netip.ParsePrefix(s)
		if err != nil {
			return p, fmt.Errorf("%q is not a CIDR such as 192.168.1.240/28 or a range such as 192.168.1.240-192.168.1.250", s)
		}
		if pre != pre.Masked() {
			return p, fmt.Errorf("%q has host bits set; did you mean %s?", s, pre.Masked())
		}
		last := pre.Addr().As16()
		for i := pre.Bits() + 96; i < 128; i++ { // an IPv4 prefix's host bits, in its 16-byte form
			last[i/8] |= 1 << (7 - i%8)
		}
		p = LoadBalancerPool{First: pre.Addr(), Last: netip.AddrFrom16(last).Unmap()}
	}
	if !p.First.Is4() || !p.Last.Is4() {
		return LoadBalancerPool{}, fmt.Errorf("%q: the pool holds IPv4 addresses only (the kubeadm distribution installs IPv4 clusters)", s)
	}
	for _, a := range []netip.Addr{p.First, p.Last} {
		if a.IsLoopback() || a.IsMulticast() || a.IsUnspecified() || a.IsLinkLocalUnicast() || a == netip.AddrFrom4([4]byte{255, 255, 255, 255}) {
			return LoadBalancerPool{}, fmt.Errorf("%q: %s is not an address a host can answer on (loopback, link-local, multicast or broadcast)", s, a)
		}
	}
	if n := p.Size(); n > MaxLoadBalancerPool {
		return LoadBalancerPool{}, fmt.Errorf("%q holds %d addresses; at most %d (a /16)", s, n, MaxLoadBalancerPool)
	}
	return p, nil
}

// loadBalancerPool checks spec.network.loadBalancerPool: its form, and that
// it shares no address with the pod, service and node ranges (those that
// parsed). Whether it lies on the hosts' subnet is known once hosts
// register: the provision checks it (install's load-balancer step).
func (e *errs) loadBalancerPool(s string, ranges map[string]netip.Prefix) {
	const target = "spec.network.loadBalancerPool"
	p, err := ParseLoadBalancerPool(s)
	if err != nil {
		e.invalid(target, "%v", err)
		return
	}
	for _, field := range slices.Sorted(maps.Keys(ranges)) {
		if r := ranges[field]; r.IsValid() && p.Overlaps(r) {
			e.invalid(target, "%s overlaps %s %s; the load balancers' addresses must be used by nothing else", s, field, r)
		}
	}
}
