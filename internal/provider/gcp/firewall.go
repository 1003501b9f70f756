package gcp

import (
	"context"
	"slices"
	"strconv"
	"strings"

	"cloud.google.com/go/compute/apiv1/computepb"
	"google.golang.org/protobuf/proto"
)

// firewalls are the cluster's firewall rules on network: the API server's
// port from sources to the control plane, the same from Google's health
// checks, and everything between the cluster's nodes and from its pods.
func (c *cluster) firewalls(network string, sources []string) []*computepb.Firewall {
	node, cp := NodeTag(c.Project, c.Name), ControlPlaneTag(c.Project, c.Name)
	api := []*computepb.Allowed{{IPProtocol: proto.String("tcp"), Ports: []string{strconv.Itoa(APIServerPort)}}}
	rule := func(suffix, part string, allowed []*computepb.Allowed, ranges, sourceTags, targetTags []string) *computepb.Firewall {
		return &computepb.Firewall{
			Name: proto.String(c.prefix + suffix), Description: proto.String(c.owner(part)), Network: proto.String(network),
			Direction: proto.String("INGRESS"), Priority: proto.Int32(1000), Allowed: allowed,
			SourceRanges: ranges, SourceTags: sourceTags, TargetTags: targetTags,
		}
	}
	var podRanges []string
	if p := c.Spec.Network.PodCIDR; p != "" {
		podRanges = []string{p}
	}
	return []*computepb.Firewall{
		rule(suffixAPI, "firewall: the API server", api, sources, nil, []string{cp}),
		rule(suffixHealth, "firewall: health checks of the API server", api, HealthCheckRanges, nil, []string{cp}),
		rule(suffixInternal, "firewall: node to node, pods", []*computepb.Allowed{{IPProtocol: proto.String("all")}}, podRanges, []string{node}, []string{node}),
	}
}

// ensureFirewall finds or makes a rule; one that differs from want in
// what it lets in (a rule opened by hand) is written back whole (an update).
func (g *GCP) ensureFirewall(ctx context.Context, c *cluster, want *computepb.Firewall) error {
	name := want.GetName()
	key := "firewalls/" + name
	what := "make the firewall rule " + name
	if err := g.resume(ctx, c, key); err != nil {
		return classify(err, c.api.account, "%s", what)
	}
	for {
		got, err := c.api.firewalls.Get(ctx, &computepb.GetFirewallRequest{Project: c.api.project, Firewall: name})
		if err == nil {
			if err := c.owns(got.GetDescription(), "firewall rule "+name); err != nil {
				return err
			}
			if sameRule(got, want) {
				return nil
			}
			g.log.Info("writing firewall rule back", "cluster", c.Project+"/"+c.Name, "firewall", name)
			op, err := c.api.firewalls.Update(ctx, &computepb.UpdateFirewallRequest{Project: c.api.project, Firewall: name, FirewallResource: want})
			return classify(g.await(ctx, c, key, "global", op, err), c.api.account, "write the firewall rule %s back", name)
		}
		if !isNotFound(err) {
			return classify(err, c.api.account, "find the firewall rule %s", name)
		}
		g.log.Info("creating firewall rule", "cluster", c.Project+"/"+c.Name, "firewall", name)
		op, err := c.api.firewalls.Insert(ctx, &computepb.InsertFirewallRequest{Project: c.api.project, FirewallResource: want})
		if err := g.await(ctx, c, key, "global", op, err); err != nil && !isAlreadyExists(err) {
			return classify(err, c.api.account, "%s", what)
		}
	}
}

// sameRule reports whether got lets in what want does, no more.
func sameRule(got, want *computepb.Firewall) bool {
	set := func(ss []string) []string { ss = slices.Clone(ss); slices.Sort(ss); return ss }
	allowed := func(as []*computepb.Allowed) []string {
		var out []string
		for _, a := range as {
			out = append(out, a.GetIPProtocol()+":"+strings.Join(set(a.GetPorts()), ","))
		}
		slices.Sort(out)
		return out
	}
	return got.GetDirection() == want.GetDirection() && !got.GetDisabled() &&
		slices.Equal(allowed(got.GetAllowed()), allowed(want.GetAllowed())) && len(got.GetDenied()) == 0 &&
		slices.Equal(set(got.GetSourceRanges()), set(want.GetSourceRanges())) &&
		slices.Equal(set(got.GetSourceTags()), set(want.GetSourceTags())) &&
		slices.Equal(set(got.GetTargetTags()), set(want.GetTargetTags()))
}
