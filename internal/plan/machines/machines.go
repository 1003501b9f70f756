// Package machines is the step family of a cluster's machines and pools:
// machines made (ensure-control-plane-machines, ensure-worker-machines) and
// their nodes brought to be registered and approved (wait-nodes-registered,
// approve-nodes); pools scaled (remove-surplus-machines, newest first, each
// node drained) and the control plane shrunk (shrink-control-plane, one
// etcd member at a time), rolled out (roll-out-workers) and the control plane
// upgraded in place (upgrade-control-plane); machines deleted, forcibly too
// (delete-worker-machines, delete-control-plane-machines); the hosts users
// bring checked, reset and removed (check-node-configuration, reset-nodes,
// remove-nodes); and the repair steps the health check begins
// (restart-stopped-control-plane, replace-unhealthy-nodes). Work is what
// the runner and other families ask of the machines (making them, waiting
// for their nodes, watching that they keep running, removing them).
// Installing Kubernetes on a node is the install family's, which this
// family asks for through Run; the step lists stay the runner's.
package machines

import (
	"context"
	"encoding/json"
	"time"

	"kiln.dev/kiln/internal/kubeapi"
	"kiln.dev/kiln/internal/plan/step"
	"kiln.dev/kiln/internal/provider"
	"kiln.dev/kiln/internal/store"
	"kiln.dev/kiln/internal/trust"
)

// Run is what the machines family needs of its run.
type Run interface {
	step.Context
	// Provider is the cluster's provider, ProviderCluster the cluster as
	// it knows it; Pools is the provider's pools when they are groups
	// the cloud names machines of, else nil.
	Provider() provider.Provider
	ProviderCluster() provider.Cluster
	Pools() provider.Pools
	// UsesAgents: the cluster's nodes run Kiln's agents (and Kubernetes).
	UsesAgents() bool
	// HostsJoin: the cluster's nodes are hosts users bring (edge).
	HostsJoin() bool
	// Forcing: the run is a forced delete.
	Forcing() bool
	// Fence is the run's lease, which every write is fenced with.
	Fence() store.Fence
	// Timing is how long waits last and how often they look.
	Timing() Timing
	// CancelRequested is closed once the run noticed a cancel request;
	// Cancelable is ctx, also cancelled (with cause
	// step.ErrCancelRequested) then.
	CancelRequested() <-chan struct{}
	Cancelable(ctx context.Context) (context.Context, func())
	// Bootstrap is the data the cluster's machines join with; nil when
	// they need none.
	Bootstrap(ctx context.Context) (*provider.Bootstrap, error)
	// Nodes are the cluster's node records, by name; NodeRecords writes
	// them (each write an event too).
	Nodes(ctx context.Context) (map[string]*store.Node, error)
	NodeRecords() NodeStore
	// Forgetter refuses the certificates of nodes removed; nil when the
	// cluster's nodes run no agents or nothing can refuse them.
	Forgetter() NodeForgetter
	// EventOn appends an event about one node, best effort.
	EventOn(ctx context.Context, typ, reason, node, msg string)
	// KubeClient is the cluster's API as an admin.
	KubeClient(ctx context.Context) (*kubeapi.Client, error)
	// KubernetesReady waits until Kubernetes reports machines' nodes Ready.
	KubernetesReady(ctx context.Context, ms []provider.MachineSpec) error
	// InstallNodes brings machines' nodes to be configured and installs
	// Kubernetes on them (one at a time when sequential); Installer
	// returns what installs one node, the i-th of its role.
	InstallNodes(ctx context.Context, ms []provider.MachineSpec, sequential bool) error
	Installer(ctx context.Context) (func(ctx context.Context, i int, m provider.MachineSpec) error, error)
	// Instructions are the instructions issued to node; Order issues one
	// of kind and waits for its result, the node PROVISIONING meanwhile
	// with doing as its message.
	Instructions(ctx context.Context, node string) ([]*store.Instruction, error)
	Order(ctx context.Context, n *store.Node, kind, doing string, params func() (json.RawMessage, error)) (*store.Instruction, error)
	// AskPart issues one of kind to n and waits for its result, leaving
	// the node's state as it is; part tells a step's instructions to one
	// node apart ("" for its only one).
	AskPart(ctx context.Context, n *store.Node, kind, part string, params func() (json.RawMessage, error)) (*store.Instruction, error)
	// SetNodeState writes a node's state and message.
	SetNodeState(ctx context.Context, name, state, msg string) error
}

// Timing is how long the family's waits last (NodeTimeout) and how often
// they look at nodes (NodePoll) and at Kubernetes (InstructionPoll).
type Timing struct {
	NodeTimeout     time.Duration
	NodePoll        time.Duration
	InstructionPoll time.Duration
}

// NodeStore is what the family writes of the node records.
type NodeStore interface {
	GetNode(ctx context.Context, k store.Key, name string) (*store.Node, error)
	PutNode(ctx context.Context, n *store.Node, c store.Cond, events ...*store.Event) error
	DeleteNode(ctx context.Context, k store.Key, name string, c store.Cond) error
}

// NodeForgetter refuses the certificates of a node whose record is about
// to be deleted (plan.NodeForgetter).
type NodeForgetter interface {
	ForgetNode(ctx context.Context, k store.Key, node string, why trust.Why) error
}

// StopReporter is a provider that says which of a cluster's machines
// stopped (plan.StopReporter).
type StopReporter interface {
	StoppedMachines(ctx context.Context, c provider.Cluster) ([]provider.StoppedMachine, error)
}

// Steps are the machines family's steps of one run.
type Steps struct {
	r  Run
	cl *store.Cluster
	op *store.Operation
	w  Work
}

// New returns the machines steps of the run r.
func New(r Run) Steps { return Steps{r: r, cl: r.Cluster(), op: r.Operation(), w: NewWork(r)} }

// Work is what the runner, its other families and the steps ask of the
// run's machines and their nodes.
type Work struct {
	r  Run
	cl *store.Cluster
	op *store.Operation
}

// NewWork returns the machine work of the run r.
func NewWork(r Run) Work { return Work{r: r, cl: r.Cluster(), op: r.Operation()} }

// fenced is a write's condition: the run's lease.
func (w Work) fenced() store.Cond {
	f := w.r.Fence()
	return store.Cond{Fence: &f}
}
