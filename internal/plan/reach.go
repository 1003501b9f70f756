package plan

import (
	"context"
	"fmt"

	v1 "kiln.dev/kiln/api/v1"
	"kiln.dev/kiln/internal/kubeapi"
	"kiln.dev/kiln/internal/plan/clusterapi"
	"kiln.dev/kiln/internal/plan/machines"
	"kiln.dev/kiln/internal/provider"
	"kiln.dev/kiln/internal/store"
	"kiln.dev/kiln/internal/trust"
)

// How the runner reaches a cluster's machines and nodes: what the provider
// can do besides machines (hosts users bring, machines that stop by
// themselves), the nodes' agents (their bootstrap data, waking them,
// forgetting them), and the cluster's Kubernetes API.

// hostsJoin reports whether the cluster is made of hosts users bring (the
// edge provider): its nodes are the hosts a person configured, not the
// machines the spec names.
func (x *run) hostsJoin() bool {
	h, ok := x.p.(provider.Hosted)
	return ok && h.HostsJoin()
}

// StopReporter is an optional capability of a provider whose machines can
// stop by themselves (the local provider's agent processes; docker's
// containers): StoppedMachines returns the cluster's machines whose agent is
// not running, and how each stopped. The steps that wait for nodes use it
// (machines.Work.WatchMachines): each attempt first starts again the
// machines it waits for that have stopped, and fails at once, retryable,
// when one stops while it waits, instead of waiting out its timeout. Check
// for it with a type assertion.
type StopReporter = machines.StopReporter

// Bootstrapper gives the bootstrap data of a cluster's machines: its
// activation credential and passphrase (the agent gateway's Credentials).
type Bootstrapper interface {
	Credentials(ctx context.Context, k store.Key) (v1.AgentCredentials, string, error)
}

// Agents wakes a node's agent session when an instruction is written for it
// (the gateway in the same process). Optional: without it, sessions find new
// instructions on their next poll.
type Agents interface {
	Notify(k store.Key, node string)
}

// NodeForgetter is an Agents that also refuses the certificates of a node
// whose record is about to be deleted, and ends its session at once (the
// gateway: (*gateway.Gateway).ForgetNode). Optional: without it, a deleted
// node's session ends at its next heartbeat, and is refused after that.
type NodeForgetter interface {
	ForgetNode(ctx context.Context, k store.Key, node string, why trust.Why) error
}

// agentless is implemented by providers whose machines run no agent (sim):
// their clusters need no CA, credential or passphrase.
type agentless interface{ Agentless() bool }

// usesAgents reports whether the cluster's machines run agents that install
// Kubernetes (every provider but agentless ones such as sim).
func (x *run) usesAgents() bool {
	a, ok := x.p.(agentless)
	return (!ok || !a.Agentless()) && !x.attached()
}

// kubeClient talks to the cluster's API through its endpoint as an admin,
// with a certificate that lasts an hour.
func (x *run) kubeClient(ctx context.Context) (*kubeapi.Client, error) {
	endpoint, err := x.endpoint(ctx)
	if err != nil {
		return nil, fmt.Errorf("find endpoint: %w", err)
	}
	return clusterapi.KubeClient(ctx, x.secrets, x.cl.Key(), endpoint, "kiln:plan")
}
