// Package edge is the provider of bring-your-own hosts: data-center and edge
// machines that someone prepared. Kiln makes no machines, networks or load
// balancers for them. Creating an edge cluster makes its activation material
// (a credential and a passphrase); a host runs the cluster's installer
// (kiln cluster installer), registers, is approved and given a role, and
// `kiln cluster provision` installs Kubernetes on the configured hosts with
// the distribution the spec names. docs/edge.md tells the whole flow.
package edge

import (
	"context"
	"slices"

	v1 "kiln.dev/kiln/api/v1"
	"kiln.dev/kiln/internal/failure"
	"kiln.dev/kiln/internal/provider"
)

// Name is the provider's name in spec.provider.
const Name = "edge"

// Edge is the edge provider. It holds no state: the hosts are the
// cluster's node records.
type Edge struct {
	// Versions is the catalogue of Kubernetes versions, oldest first, by
	// distribution (kilnd hands it distro.Versions()). The provider offers
	// the distributions hosts install (local and kubeadm) at the versions it
	// lists; with none listed, it offers no distribution.
	Versions map[string][]string
}

// distributions are the distributions hosts install: local (kiln-kube, for
// hosts on this machine: network namespaces, containers) or kubeadm (real
// hosts).
var distributions = []string{v1.DistroLocal, v1.DistroKubeadm}

var (
	_ provider.Provider   = Edge{}
	_ provider.Hosted     = Edge{}
	_ provider.Installing = Edge{}
	_ provider.Describer  = Edge{}
)

// HostsJoin says edge clusters are made of the hosts users bring.
func (Edge) HostsJoin() bool { return true }

// Distributions: hosts install the local distribution or kubeadm, at the
// versions of the catalogue (Versions).
func (e Edge) Distributions() map[string][]string {
	out := map[string][]string{}
	for _, d := range distributions {
		if vs, ok := e.Versions[d]; ok {
			out[d] = slices.Clone(vs)
		}
	}
	return out
}

// Describe offers nothing to choose: no regions, zones, instance types,
// spot capacity or load balancers, and no credentials to check.
func (Edge) Describe(ctx context.Context, _ *provider.Account, _ string) (provider.Offer, error) {
	return provider.Offer{}, ctx.Err()
}

// EnsureNetwork has nothing to make: hosts come with their network.
func (Edge) EnsureNetwork(ctx context.Context, _ provider.Cluster) (provider.Network, error) {
	return provider.Network{}, ctx.Err()
}

// DeleteNetwork has nothing to delete.
func (Edge) DeleteNetwork(ctx context.Context, _ provider.Cluster) error { return ctx.Err() }

// EnsureMachine refuses: an edge cluster's plans never ask for machines.
func (Edge) EnsureMachine(_ context.Context, _ provider.Cluster, m provider.MachineSpec) (provider.Machine, error) {
	return provider.Machine{}, failure.Terminal(v1.CodeInvalidParameter,
		"the edge provider makes no machines (asked for %s): hosts join with the cluster's installer", m.Name)
}

// ListMachines lists none: the hosts are node records, not machines Kiln
// made.
func (Edge) ListMachines(ctx context.Context, _ provider.Cluster) ([]provider.Machine, error) {
	return nil, ctx.Err()
}

// DeleteMachine has nothing to delete: a host stays its owner's.
func (Edge) DeleteMachine(ctx context.Context, _ provider.Cluster, _ string) error { return ctx.Err() }
