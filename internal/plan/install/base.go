// Package install is the step family that installs Kubernetes on a
// cluster's nodes with its distribution (the local and kiln
// distributions, or kubeadm): install-control-plane, install-workers and
// wait-nodes-ready. Work is what the runner and the other families ask of
// it: nodes installed (InstallNodes, Installer, RollNodes), instructions
// given to a node's agent and awaited (Order, Ask, AskPart), nodes waited
// for until Kubernetes reports them Ready (KubernetesReady, FreshlyReady).
// Making machines and waiting for their nodes to register is the machines
// family's, which this family asks for through Run; the step lists stay
// the runner's.
package install

import (
	"context"
	"time"

	"kiln.dev/kiln/internal/kubeapi"
	"kiln.dev/kiln/internal/plan/step"
	"kiln.dev/kiln/internal/provider"
	"kiln.dev/kiln/internal/store"
	"kiln.dev/kiln/internal/trust"
)

// Run is what the install family needs of its run.
type Run interface {
	step.Context
	// UsesAgents: the cluster's nodes run Kiln's agents (and Kubernetes).
	UsesAgents() bool
	// HostsJoin: the cluster's nodes are hosts users bring (edge).
	HostsJoin() bool
	// Fence is the run's lease, which every write is fenced with.
	Fence() store.Fence
	// Timing is how long waits last and how often they look.
	Timing() Timing
	// Step is the name of the step running now, which its instructions
	// are named after.
	Step() string
	// ProgressOf is what the running step's message says node is doing.
	ProgressOf(node string) string
	// CancelRequested is closed once the run noticed a cancel request.
	CancelRequested() <-chan struct{}
	// Secrets are the cluster's secrets (its CAs, keys, join material).
	Secrets() trust.SecretStore
	// Endpoint is the cluster's API endpoint.
	Endpoint(ctx context.Context) (string, error)
	// KubeClient is the cluster's API as an admin.
	KubeClient(ctx context.Context) (*kubeapi.Client, error)
	// NodeRecords reads and writes the node records (each write an event
	// too); Instructions the nodes' instructions. Notify wakes node's
	// agent session when an instruction is written for it.
	NodeRecords() NodeStore
	Instructions() InstructionStore
	Notify(node string)
	// EventOn appends an event about one node, best effort.
	EventOn(ctx context.Context, typ, reason, node, msg string)
	// ControlPlaneTargets and WorkerTargets are the nodes to install.
	ControlPlaneTargets(ctx context.Context) ([]provider.MachineSpec, error)
	WorkerTargets(ctx context.Context) ([]provider.MachineSpec, error)
	// Converge waits until the node of every machine reached target
	// (configure: moving APPROVED nodes to CONFIGURED with their role).
	Converge(ctx context.Context, want []provider.MachineSpec, target, what string, configure bool) error
	// WatchMachines begins a wait for the named machines' nodes, starting
	// those that stopped again.
	WatchMachines(ctx context.Context, names []string) (Watch, error)
}

// Watch tells a wait for nodes that one of their machines stopped.
type Watch interface {
	Check(ctx context.Context) error
}

// Timing is how long the family's waits last (NodeTimeout), how often
// they look (InstructionPoll), how long an agent may go without a
// heartbeat during an instruction (AgentLost), and, when set, the
// lifetime of the certificates installs issue instead of
// spec.certificateTTLDays (CertificateTTL, a test setting).
type Timing struct {
	NodeTimeout     time.Duration
	InstructionPoll time.Duration
	AgentLost       time.Duration
	CertificateTTL  time.Duration
}

// NodeStore is what the family reads and writes of the node records.
type NodeStore interface {
	GetNode(ctx context.Context, k store.Key, name string) (*store.Node, error)
	PutNode(ctx context.Context, n *store.Node, c store.Cond, events ...*store.Event) error
}

// InstructionStore is what the family reads and writes of the nodes'
// instructions.
type InstructionStore interface {
	PutInstruction(ctx context.Context, in *store.Instruction, c store.Cond) error
	GetInstruction(ctx context.Context, id string) (*store.Instruction, error)
	ListInstructions(ctx context.Context, k store.Key, node string, pending bool) ([]*store.Instruction, error)
}

// Steps are the install family's steps of one run.
type Steps struct {
	r  Run
	cl *store.Cluster
	op *store.Operation
	w  Work
}

// New returns the install steps of the run r.
func New(r Run) Steps { return Steps{r: r, cl: r.Cluster(), op: r.Operation(), w: NewWork(r)} }

// Work is what the runner, its other families and the steps ask of the
// install family.
type Work struct {
	r  Run
	cl *store.Cluster
	op *store.Operation
}

// NewWork returns the install work of the run r.
func NewWork(r Run) Work { return Work{r: r, cl: r.Cluster(), op: r.Operation()} }

// fenced is a write's condition: the run's lease; fencedIf adds the
// record's etag.
func (w Work) fenced() store.Cond { return w.fencedIf("") }

func (w Work) fencedIf(etag string) store.Cond {
	f := w.r.Fence()
	return store.Cond{IfMatch: etag, Fence: &f}
}
