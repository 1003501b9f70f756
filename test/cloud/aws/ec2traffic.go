package aws

import (
	"context"
	"net/netip"
	"slices"
	"strings"
)

// The VPC's router for traffic that is not between the VPC's own
// addresses (pods' addresses behind their nodes): the instances of a VPC
// share one Docker network, and a machine could send a packet for a pod
// range straight to another machine; AWS delivers it only when the route
// table of the sender's subnet routes the range to an instance (and the
// sender's source/destination check lets it send what is not its own
// address). Machines that implement trafficRouter enforce that on the
// network; the compute loop gives them the rules after each step.

// trafficRouter is what Machines may do besides: make each VPC's network
// carry only the traffic its routes allow.
type trafficRouter interface {
	RouteTraffic(ctx context.Context, vpcs []vpcTraffic) error
}

// vpcTraffic is what a VPC's network lets through besides traffic between
// its own addresses.
type vpcTraffic struct {
	VPCID string
	CIDR  string
	// Checked are the machines whose source/destination check is on: they
	// send nothing whose source is not their own address.
	Checked []machineAddr
	// Allowed are (sender, destination range) pairs: a route of the
	// sender's subnet's table to an instance that runs.
	Allowed []allowed
}

// machineAddr is an instance (its machine) and its address.
type machineAddr struct {
	Instance string
	IP       string
}

// allowed is a sender (an instance's machine) and a range it may send to.
type allowed struct {
	Instance string
	Dest     string
}

// traffic is every VPC's traffic rules from the route tables and
// instances. Callers hold s.mu.
func (s *Server) traffic() []vpcTraffic {
	n := s.net()
	tableOf := map[string]*routeTable{} // subnet -> its table (else the VPC's main one)
	for _, t := range n.RouteTables {
		for _, a := range t.Associations {
			if a.SubnetID != "" {
				tableOf[a.SubnetID] = t
			}
		}
	}
	var out []vpcTraffic
	for _, v := range n.VPCs {
		vt := vpcTraffic{VPCID: v.ID, CIDR: v.CIDR}
		for _, i := range s.st.EC2.Compute.Instances {
			if i.VPCID != v.ID || i.State == "terminated" {
				continue
			}
			if !i.NoSourceDestCheck {
				vt.Checked = append(vt.Checked, machineAddr{Instance: i.ID, IP: i.PrivateIP})
			}
			t := tableOf[i.SubnetID]
			if t == nil {
				t = n.RouteTables[v.MainTable]
			}
			if t == nil {
				continue
			}
			for _, r := range t.Routes {
				if r.InstanceID != "" && s.routeState(t, r) == "active" {
					vt.Allowed = append(vt.Allowed, allowed{Instance: i.ID, Dest: r.Destination})
				}
			}
		}
		if len(vt.Checked)+len(vt.Allowed) == 0 {
			continue
		}
		slices.SortFunc(vt.Checked, func(a, b machineAddr) int { return strings.Compare(a.Instance, b.Instance) })
		slices.SortFunc(vt.Allowed, func(a, b allowed) int { return strings.Compare(a.Instance+a.Dest, b.Instance+b.Dest) })
		out = append(out, vt)
	}
	slices.SortFunc(out, func(a, b vpcTraffic) int { return strings.Compare(a.VPCID, b.VPCID) })
	return out
}

// validPrefix reports whether p is an IPv4 CIDR (what goes into a rule).
func validPrefix(p string) bool {
	pf, err := netip.ParsePrefix(p)
	return err == nil && pf.Addr().Is4()
}
