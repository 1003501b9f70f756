package local

import (
	"context"
	"slices"

	v1 "kiln.dev/kiln/api/v1"
	"kiln.dev/kiln/internal/provider"
)

// Distributions: the local provider's machines install the local
// distribution (kiln-kube), at the versions of Options.Versions (any
// well-formed version when it is nil).
func (l *Local) Distributions() map[string][]string {
	return map[string][]string{v1.DistroLocal: slices.Clone(l.opts.Versions)}
}

// Describe says what the local provider offers: machines are processes on
// this host, so there are no regions, zones, instance types or spot
// capacity, and it needs no credentials. Each cluster gets a load balancer;
// machines take addresses from the loopback pool.
func (l *Local) Describe(ctx context.Context, _ *provider.Account, _ string) (provider.Offer, error) {
	return provider.Offer{LoadBalancers: true, NodeNetwork: covering(l.opts.AddressPool)}, ctx.Err()
}
