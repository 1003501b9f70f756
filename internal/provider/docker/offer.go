package docker

import (
	"context"
	"slices"

	"kiln.dev/kiln/internal/provider"
)

// Distributions: the machines install Options.Distribution, at the versions
// of Options.Versions whose node image is on the engine (any well-formed
// version when Versions is nil).
func (d *Docker) Distributions() map[string][]string {
	return map[string][]string{d.opts.Distribution: slices.Clone(d.versions)}
}

// Describe says what the docker provider offers: machines are containers
// on this host, so there are no regions, zones, instance types or spot
// capacity, and it needs no credentials. Each cluster gets a load balancer;
// machines take addresses from the subnet pool.
func (d *Docker) Describe(ctx context.Context, _ *provider.Account, _ string) (provider.Offer, error) {
	return provider.Offer{LoadBalancers: true, NodeNetwork: d.opts.SubnetPool}, ctx.Err()
}
