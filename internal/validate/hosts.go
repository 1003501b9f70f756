package validate

import (
	"fmt"
	"net"
	"net/netip"
	"slices"
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

// Installed reports whether a host has Kubernetes installed by an earlier
// provision that finished on it (Ready or NotReady).
func Installed(n v1.Node) bool { return n.State == v1.NodeReady || n.State == v1.NodeNotReady }

// HostsAdded checks the hosts configured on a cluster that has Kubernetes
// installed already (a host Ready or NotReady) before a provision joins
// them, and names them (by name; nil when nothing is installed yet, which
// is a first provision). A host added is one with a role that is not
// installed. Refused, the cluster unchanged:
//   - a host added whose prechecks failed (its agent reported a failed
//     check after it was approved): Conflict on nodes/NAME.prechecks;
//   - control-plane hosts added that would leave an even number of etcd
//     members once they joined (2 tolerate no more failures than 1, 4 no
//     more than 3): NodeCountMismatch on nodes/NAME.role, NAME the last
//     added control-plane host.
func HostsAdded(nodes []v1.Node) ([]string, *v1.Error) {
	sorted := slices.SortedFunc(slices.Values(nodes), func(a, b v1.Node) int { return strings.Compare(a.Name, b.Name) })
	var installedCPs, added, addedCPs []string
	installed := false
	for _, n := range sorted {
		switch {
		case Installed(n):
			installed = true
			if n.Role == v1.RoleControlPlane {
				installedCPs = append(installedCPs, n.Name)
			}
		case Configured(n):
			added = append(added, n.Name)
			if n.Role == v1.RoleControlPlane {
				addedCPs = append(addedCPs, n.Name)
			}
		}
	}
	if !installed {
		return nil, nil
	}
	for _, n := range sorted {
		if Installed(n) || !Configured(n) {
			continue
		}
		var failed []string
		for _, p := range n.Prechecks {
			if p.Result == v1.PrecheckFail {
				failed = append(failed, p.Name)
			}
		}
		if len(failed) > 0 {
			return added, &v1.Error{Code: v1.CodeConflict, Target: "nodes/" + n.Name + ".prechecks",
				Message: fmt.Sprintf("host %s cannot join the cluster: its prechecks failed (%s); fix the host and run its agent again, "+
					"or remove it from the cluster", n.Name, strings.Join(failed, ", "))}
		}
	}
	if total := len(installedCPs) + len(addedCPs); len(addedCPs) > 0 && total%2 == 0 {
		last := addedCPs[len(addedCPs)-1]
		return added, &v1.Error{Code: v1.CodeNodeCountMismatch, Target: "nodes/" + last + ".role",
			Message: fmt.Sprintf("adding %s to the control plane (%s) would leave %d etcd members, an even number, which tolerates "+
				"no more failures than %d: add control-plane hosts so that the count stays odd (1, 3 or 5), or configure %s as a worker",
				hostsN(len(addedCPs)), strings.Join(addedCPs, ", "), total, total-1, last)}
	}
	return added, nil
}

// NodeRemoval checks the removal of host name (one of nodes) from a
// cluster made of hosts users bring that stays: nil when it may go,
// otherwise a NodeCountMismatch that says why not, on nodes/NAME.role for
// a control-plane host and nodes/NAME for a worker. A host with no
// Kubernetes installed may always go. Refused: an installed control-plane
// host whose removal would leave no etcd member (reset or delete the
// cluster instead) or an even number of them, or that is the cluster's
// endpoint (the installed control-plane host whose address:6443 is
// endpoint, status.endpoint; without one, the first installed by name);
// the last installed worker of a dedicated control plane.
func NodeRemoval(spec *v1.ClusterSpec, endpoint string, nodes []v1.Node, name string) *v1.Error {
	var target *v1.Node
	var cps []string
	endpointHost := ""
	workers := 0
	for i, n := range nodes {
		if n.Name == name {
			target = &nodes[i]
		}
		switch {
		case !Installed(n):
		case n.Role == v1.RoleControlPlane:
			cps = append(cps, n.Name)
			if endpoint != "" && net.JoinHostPort(n.Address, "6443") == endpoint {
				endpointHost = n.Name
			}
		case n.Role == v1.RoleWorker:
			workers++
		}
	}
	if target == nil || !Installed(*target) {
		return nil
	}
	slices.Sort(cps)
	if endpointHost == "" && len(cps) > 0 {
		endpointHost = cps[0]
	}
	if target.Role == v1.RoleControlPlane {
		left := len(cps) - 1
		switch {
		case left == 0:
			return &v1.Error{Code: v1.CodeNodeCountMismatch, Target: "nodes/" + name + ".role",
				Message: fmt.Sprintf("removing %s would leave no control-plane node (no etcd member): reset the cluster (kiln cluster reset) or delete it instead", name)}
		case left%2 == 0:
			return &v1.Error{Code: v1.CodeNodeCountMismatch, Target: "nodes/" + name + ".role",
				Message: fmt.Sprintf("removing %s would leave %d etcd members, an even number, which tolerates no more failures than %d: "+
					"the control plane shrinks two nodes at a time (5 -> 3 -> 1), which one removal cannot do", name, left, left-1)}
		case endpointHost == name:
			return &v1.Error{Code: v1.CodeNodeCountMismatch, Target: "nodes/" + name + ".role",
				Message: fmt.Sprintf("%s is the cluster's API endpoint (its first control-plane node): kubeconfigs and nodes reach the cluster through it", name)}
		}
		return nil
	}
	if spec.ControlPlane.Dedicated && workers == 1 {
		return &v1.Error{Code: v1.CodeNodeCountMismatch, Target: "nodes/" + name,
			Message: fmt.Sprintf("%s is the last worker of a dedicated control plane, which needs at least 1: add a worker first (kiln cluster provision joins it)", name)}
	}
	return nil
}
