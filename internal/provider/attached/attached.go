// Package attached is the provider of clusters Kiln did not make: a cluster
// attached through its kubeconfig (kiln cluster attach), which Kiln
// observes (its nodes, version and health, read through its API) and gives
// profiles, but whose machines are not Kiln's. It makes, lists and deletes
// no machines: a plan that would is refused before it starts (validation),
// and this provider refuses it again if asked.
package attached

import (
	"context"

	v1 "kiln.dev/kiln/api/v1"
	"kiln.dev/kiln/internal/failure"
	"kiln.dev/kiln/internal/provider"
)

// Name is the provider's name in spec.provider.
const Name = "attached"

// Attached is the attached provider. It holds no state: the cluster's API is
// reached with the kubeconfig its spec.attach names.
type Attached struct{}

var (
	_ provider.Provider  = Attached{}
	_ provider.Describer = Attached{}
)

// Attached says the cluster is one Kiln did not make.
func (Attached) Attached() bool { return true }

// Describe offers nothing to choose: no regions, zones, instance types or
// load balancers, and no credentials to check.
func (Attached) Describe(ctx context.Context, _ *provider.Account, _ string) (provider.Offer, error) {
	return provider.Offer{}, ctx.Err()
}

// EnsureNetwork has nothing to make: the cluster has its network.
func (Attached) EnsureNetwork(ctx context.Context, _ provider.Cluster) (provider.Network, error) {
	return provider.Network{}, ctx.Err()
}

// DeleteNetwork has nothing to delete.
func (Attached) DeleteNetwork(ctx context.Context, _ provider.Cluster) error { return ctx.Err() }

// EnsureMachine refuses: an attached cluster's machines are not Kiln's.
func (Attached) EnsureMachine(_ context.Context, _ provider.Cluster, m provider.MachineSpec) (provider.Machine, error) {
	return provider.Machine{}, failure.Terminal(v1.CodeInvalidParameter,
		"the attached provider makes no machines (asked for %s): an attached cluster's machines are its own", m.Name)
}

// ListMachines lists none.
func (Attached) ListMachines(ctx context.Context, _ provider.Cluster) ([]provider.Machine, error) {
	return nil, ctx.Err()
}

// DeleteMachine has nothing to delete.
func (Attached) DeleteMachine(ctx context.Context, _ provider.Cluster, _ string) error {
	return ctx.Err()
}
