package plan

import (
	"context"
	"fmt"

	"kiln.dev/kiln/internal/kubeapi"
	"kiln.dev/kiln/internal/plan/clusterapi"
	"kiln.dev/kiln/internal/store"
	"kiln.dev/kiln/internal/trust"
)

// How the runner reaches a cluster's nodes: through their agents, and
// through the cluster's Kubernetes API.

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
