package validate

import (
	"fmt"
	"net/netip"
	"strings"

	v1 "kiln.dev/kiln/api/v1"
)

// Hosts are the hosts of a bring-your-own-host cluster as a person
// configured them: how many took each role, and the names of those that
// joined but have no role yet (DISCOVERED, APPROVED).
type Hosts struct {
	ControlPlanes, Workers int
	Unconfigured           []string
}

// HostsOf counts the hosts of a cluster made of hosts users bring: those
// with a role that were configured (or went further: provisioning, ready,
// not ready, failed), and by name those that joined without a role.
func HostsOf(nodes []v1.Node) Hosts {
	var h Hosts
	for _, n := range nodes {
		switch {
		case Configured(n) && n.Role == v1.RoleControlPlane:
			h.ControlPlanes++
		case Configured(n) && n.Role == v1.RoleWorker:
			h.Workers++
		case n.State == v1.NodeDiscovered || n.State == v1.NodeApproved:
			h.Unconfigured = append(h.Unconfigured, n.Name)
		}
	}
	return h
}

// Configured reports whether a host has its role: configured, or further
// (provisioning, ready, not ready, failed).
func Configured(n v1.Node) bool {
	switch n.State {
	case v1.NodeConfigured, v1.NodeProvisioning, v1.NodeReady, v1.NodeNotReady, v1.NodeFailed:
		return n.Role != ""
	}
	return false
}

// Configuration names the shape a spec asks for: converged (the control
// plane runs workloads, no workers) or dedicated (at least one worker),
// single or multi control plane.
func Configuration(spec *v1.ClusterSpec) string {
	size := "single"
	if spec.ControlPlane.Size > 1 {
		size = "multi"
	}
	if spec.ControlPlane.Dedicated {
		return "dedicated " + size + " control plane"
	}
	return "converged " + size + " control plane"
}

// HostCounts checks the configured hosts against the spec's configuration
// before provisioning: a converged cluster is exactly its control-plane
// hosts (1, 3 or 5); a dedicated one also has at least one worker. It
// returns nil when they match, otherwise a NodeCountMismatch that says what
// is missing or extra and how to fix it.
func HostCounts(spec *v1.ClusterSpec, h Hosts) *v1.Error {
	cp := spec.ControlPlane.Size
	var fix []string
	switch {
	case h.ControlPlanes < cp:
		fix = append(fix, fmt.Sprintf("configure %s more as control plane", hostsN(cp-h.ControlPlanes)))
	case h.ControlPlanes > cp:
		fix = append(fix, fmt.Sprintf("%s too many %s the control-plane role: remove the extra, or give them the worker role",
			hostsN(h.ControlPlanes-cp), have(h.ControlPlanes-cp)))
	}
	switch {
	case spec.ControlPlane.Dedicated && h.Workers == 0:
		fix = append(fix, "configure at least 1 host as worker")
	case !spec.ControlPlane.Dedicated && h.Workers > 0:
		fix = append(fix, fmt.Sprintf("a converged cluster has no workers: set spec.controlPlane.dedicated for %s, or remove %s",
			hostsN(h.Workers), pronoun(h.Workers)))
	}
	if len(fix) == 0 {
		return nil
	}
	msg := fmt.Sprintf("a %s needs %s; configured: %d control plane, %d worker%s; %s",
		Configuration(spec), needs(spec), h.ControlPlanes, h.Workers, plural(h.Workers), strings.Join(fix, "; "))
	if len(h.Unconfigured) > 0 {
		msg += fmt.Sprintf(" (joined without a role: %s; kiln node configure CLUSTER NODE --role ...)", strings.Join(h.Unconfigured, ", "))
	}
	return &v1.Error{Code: v1.CodeNodeCountMismatch, Target: "nodes", Message: msg}
}

func needs(spec *v1.ClusterSpec) string {
	s := fmt.Sprintf("%d control-plane host%s", spec.ControlPlane.Size, plural(spec.ControlPlane.Size))
	if spec.ControlPlane.Dedicated {
		return s + " and at least 1 worker"
	}
	return s + " and no workers"
}

func have(n int) string {
	if n == 1 {
		return "has"
	}
	return "have"
}

func hostsN(n int) string {
	if n == 1 {
		return "1 host"
	}
	return fmt.Sprintf("%d hosts", n)
}

func pronoun(n int) string {
	if n == 1 {
		return "it"
	}
	return "them"
}

func plural(n int) string {
	if n == 1 {
		return ""
	}
	return "s"
}

// PoolOnHosts checks spec.network.loadBalancerPool against the configured
// hosts before provisioning: it must lie inside the subnet of every host's
// address (the prefix of the interface holding it, from the host's facts)
// and hold none of their addresses, since the hosts answer ARP for its
// addresses on that link (MetalLB's layer 2). A host whose facts give no
// such prefix is passed over. nil without a pool or when it fits;
// otherwise an InvalidParameter on the field naming each host at fault.
func PoolOnHosts(spec *v1.ClusterSpec, nodes []v1.Node) *v1.Error {
	raw := spec.Network.LoadBalancerPool
	if raw == "" {
		return nil
	}
	const target = "spec.network.loadBalancerPool"
	pool, err := ParseLoadBalancerPool(raw)
	if err != nil {
		return &v1.Error{Code: v1.CodeInvalidParameter, Target: target, Message: err.Error()}
	}
	var off []string
	for _, n := range nodes {
		addr, err := netip.ParseAddr(n.Address)
		if err != nil || !Configured(n) {
			continue
		}
		if pool.Contains(addr) {
			off = append(off, fmt.Sprintf("%s's address %s is in it", n.Name, addr))
		} else if subnet, ok := hostSubnet(n, addr); ok && !pool.Within(subnet) {
			off = append(off, fmt.Sprintf("%s is on %s", n.Name, subnet))
		}
	}
	if len(off) == 0 {
		return nil
	}
	return &v1.Error{Code: v1.CodeInvalidParameter, Target: target, Message: fmt.Sprintf(
		"%s must lie on the subnet of every host's address and hold none of them (the hosts answer ARP for its addresses): %s; the pool cannot change: configure hosts on its subnet, or create the cluster again with another pool",
		raw, strings.Join(off, "; "))}
}

// hostSubnet is the prefix of the node's interface address that is addr,
// from its facts.
func hostSubnet(n v1.Node, addr netip.Addr) (netip.Prefix, bool) {
	if n.Facts == nil {
		return netip.Prefix{}, false
	}
	for _, itf := range n.Facts.Interfaces {
		for _, a := range itf.Addresses {
			if p, err := netip.ParsePrefix(a); err == nil && p.Addr() == addr {
				return p.Masked(), true
			}
		}
	}
	return netip.Prefix{}, false
}
