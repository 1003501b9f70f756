package gcp

import (
	"context"

	"cloud.google.com/go/compute/apiv1/computepb"
	"google.golang.org/protobuf/proto"
)

// nat is the router's Cloud NAT: addresses Google allocates, for every
// range of the cluster's subnetwork (the nodes' and the pods').
func (c *cluster) nat(subnet string) *computepb.RouterNat {
	return &computepb.RouterNat{
		Name: proto.String(c.prefix + suffixNAT), NatIpAllocateOption: proto.String("AUTO_ONLY"),
		SourceSubnetworkIpRangesToNat: proto.String("LIST_OF_SUBNETWORKS"),
		Subnetworks: []*computepb.RouterNatSubnetworkToNat{{
			Name: proto.String(subnet), SourceIpRangesToNat: []string{"ALL_IP_RANGES"},
		}},
	}
}

// ensureRouter finds or makes the Cloud Router with the cluster's NAT;
// a router whose NAT is not the cluster's (gone, changed by hand) gets it
// back with a patch.
func (g *GCP) ensureRouter(ctx context.Context, c *cluster, network, subnet string) error {
	name := c.prefix + suffixRouter
	key := "routers/" + c.region + "/" + name
	what := "make the router " + name + " with Cloud NAT in " + c.region
	if err := g.resume(ctx, c, key); err != nil {
		return classify(err, c.api.account, "%s", what)
	}
	want := c.nat(subnet)
	for {
		got, err := c.api.routers.Get(ctx, &computepb.GetRouterRequest{Project: c.api.project, Region: c.region, Router: name})
		if err == nil {
			if err := c.owns(got.GetDescription(), "router "+name); err != nil {
				return err
			}
			if len(got.GetNats()) == 1 && sameNAT(got.GetNats()[0], want) {
				return nil
			}
			g.log.Info("patching the router's NAT back", "cluster", c.Project+"/"+c.Name, "router", name)
			op, err := c.api.routers.Patch(ctx, &computepb.PatchRouterRequest{Project: c.api.project, Region: c.region, Router: name,
				RouterResource: &computepb.Router{Nats: []*computepb.RouterNat{want}}})
			return classify(g.await(ctx, c, key, "regions/"+c.region, op, err), c.api.account, "patch the router %s's NAT", name)
		}
		if !isNotFound(err) {
			return classify(err, c.api.account, "find the router %s", name)
		}
		g.log.Info("creating router with Cloud NAT", "cluster", c.Project+"/"+c.Name, "router", name, "region", c.region)
		op, err := c.api.routers.Insert(ctx, &computepb.InsertRouterRequest{Project: c.api.project, Region: c.region, RouterResource: &computepb.Router{
			Name: proto.String(name), Description: proto.String(c.owner("router")), Network: proto.String(network),
			Nats: []*computepb.RouterNat{want},
		}})
		if err := g.await(ctx, c, key, "regions/"+c.region, op, err); err != nil && !isAlreadyExists(err) {
			return classify(err, c.api.account, "%s", what)
		}
	}
}

func sameNAT(got, want *computepb.RouterNat) bool {
	if got.GetName() != want.GetName() || got.GetNatIpAllocateOption() != want.GetNatIpAllocateOption() ||
		got.GetSourceSubnetworkIpRangesToNat() != want.GetSourceSubnetworkIpRangesToNat() || len(got.GetSubnetworks()) != 1 {
		return false
	}
	gs, ws := got.GetSubnetworks()[0], want.GetSubnetworks()[0]
	return lastSegment(gs.GetName()) == lastSegment(ws.GetName()) && len(gs.GetSourceIpRangesToNat()) == 1 &&
		gs.GetSourceIpRangesToNat()[0] == ws.GetSourceIpRangesToNat()[0]
}

// lastSegment is the name at the end of a resource's URL.
func lastSegment(u string) string {
	for i := len(u) - 1; i >= 0; i-- {
		if u[i] == '/' {
			return u[i+1:]
		}
	}
	return u
}
