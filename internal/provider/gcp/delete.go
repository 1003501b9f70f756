package gcp

import (
	"context"

	compute "cloud.google.com/go/compute/apiv1"
	"cloud.google.com/go/compute/apiv1/computepb"

	"kiln.dev/kiln/internal/provider"
)

// DeleteNetwork deletes what is left of the cluster's machines (its pools'
// groups and templates, instances labelled with it), then its network
// parts in the reverse of their making: the router (and its NAT), the firewall rules, the
// subnetwork, the network. A part that is not there is done (a delete run
// again, one never made, one someone deleted by hand); a part of that name
// that is not the cluster's is left alone. Compute refuses to delete a
// network something still uses (resourceInUseByAnotherResource: machines
// left behind): a retryable error with Compute's message.
func (g *GCP) DeleteNetwork(ctx context.Context, pc provider.Cluster) error {
	c, err := g.cluster(ctx, pc)
	if err != nil {
		return err
	}
	defer c.api.Close()
	// The machines first: Compute keeps a subnetwork an instance uses.
	if err := g.deleteMachines(ctx, c); err != nil {
		return err
	}
	p, region := c.api.project, c.region
	router := c.prefix + suffixRouter
	if err := g.deletePart(ctx, c, "routers/"+region+"/"+router, "regions/"+region, "router "+router,
		func(ctx context.Context) (string, error) {
			r, err := c.api.routers.Get(ctx, &computepb.GetRouterRequest{Project: p, Region: region, Router: router})
			return r.GetDescription(), err
		},
		func(ctx context.Context) (*compute.Operation, error) {
			return c.api.routers.Delete(ctx, &computepb.DeleteRouterRequest{Project: p, Region: region, Router: router})
		}); err != nil {
		return err
	}
	for _, suffix := range []string{suffixAPI, suffixHealth, suffixInternal} {
		fw := c.prefix + suffix
		if err := g.deletePart(ctx, c, "firewalls/"+fw, "global", "firewall rule "+fw,
			func(ctx context.Context) (string, error) {
				f, err := c.api.firewalls.Get(ctx, &computepb.GetFirewallRequest{Project: p, Firewall: fw})
				return f.GetDescription(), err
			},
			func(ctx context.Context) (*compute.Operation, error) {
				return c.api.firewalls.Delete(ctx, &computepb.DeleteFirewallRequest{Project: p, Firewall: fw})
			}); err != nil {
			return err
		}
	}
	subnet := c.prefix + suffixSubnet
	if err := g.deletePart(ctx, c, "subnetworks/"+region+"/"+subnet, "regions/"+region, "subnetwork "+subnet,
		func(ctx context.Context) (string, error) {
			s, err := c.api.subnets.Get(ctx, &computepb.GetSubnetworkRequest{Project: p, Region: region, Subnetwork: subnet})
			return s.GetDescription(), err
		},
		func(ctx context.Context) (*compute.Operation, error) {
			return c.api.subnets.Delete(ctx, &computepb.DeleteSubnetworkRequest{Project: p, Region: region, Subnetwork: subnet})
		}); err != nil {
		return err
	}
	network := c.prefix
	return g.deletePart(ctx, c, "networks/"+network, "global", "network "+network,
		func(ctx context.Context) (string, error) {
			n, err := c.api.networks.Get(ctx, &computepb.GetNetworkRequest{Project: p, Network: network})
			return n.GetDescription(), err
		},
		func(ctx context.Context) (*compute.Operation, error) {
			return c.api.networks.Delete(ctx, &computepb.DeleteNetworkRequest{Project: p, Network: network})
		})
}

// deletePart deletes one part: an operation an earlier attempt began is
// waited on first; then the part is read (not there: done; not the
// cluster's: left alone) and deleted, its operation waited on.
func (g *GCP) deletePart(ctx context.Context, c *cluster, key, scope, what string,
	get func(context.Context) (string, error), del func(context.Context) (*compute.Operation, error)) error {
	if err := g.resume(ctx, c, key); err != nil && !isNotFound(err) {
		return classify(err, c.api.account, "delete the %s", what)
	}
	desc, err := get(ctx)
	switch {
	case isNotFound(err):
		return nil
	case err != nil:
		return classify(err, c.api.account, "find the %s", what)
	}
	if err := c.owns(desc, what); err != nil {
		g.log.Warn("leaving alone a part of the cluster's name that is not its", "cluster", c.Project+"/"+c.Name, "part", what, "description", desc)
		return nil
	}
	g.log.Info("deleting "+what, "cluster", c.Project+"/"+c.Name)
	op, err := del(ctx)
	if err := g.await(ctx, c, key, scope, op, err); err != nil && !isNotFound(err) {
		return classify(err, c.api.account, "delete the %s", what)
	}
	return nil
}
