package plan

import (
	"context"

	v1 "kiln.dev/kiln/api/v1"
	"kiln.dev/kiln/internal/plan/backup"
	"kiln.dev/kiln/internal/store"
	"kiln.dev/kiln/internal/trust"
	"kiln.dev/kiln/internal/validate/dynamic"
)

// What the runner needs of the store, one interface per capability its
// steps use. Every write a run makes is fenced with the lease of the
// cluster it runs. store.Store satisfies them all (internal/daemon asserts
// it).

// OperationStore is how a run keeps its operation: it reads it and
// whether a cancel was asked for, checkpoints every step, and ends it
// together with the cluster's last write.
type OperationStore interface {
	GetOperation(ctx context.Context, id string) (*store.Operation, error)
	CancelRequest(ctx context.Context, id string) (*v1.CancelRequest, error)
	SaveOperation(ctx context.Context, op *store.Operation, f store.Fence, progress bool, events ...*store.Event) error
	FinishOperation(ctx context.Context, cl *store.Cluster, op *store.Operation, f store.Fence, deleteCluster bool, events ...*store.Event) error
	PutClusterStatus(ctx context.Context, cl *store.Cluster, c store.Cond) error
}

// NodeStore is what the machine, wait and install steps need of the
// cluster's node records.
type NodeStore interface {
	GetNode(ctx context.Context, k store.Key, name string) (*store.Node, error)
	PutNode(ctx context.Context, n *store.Node, c store.Cond, events ...*store.Event) error
	ListNodes(ctx context.Context, k store.Key, pg store.Page) ([]*store.Node, string, error)
	DeleteNode(ctx context.Context, k store.Key, name string, c store.Cond) error
}

// InstructionStore is what the install steps need to issue instructions
// to agents and wait on their results.
type InstructionStore interface {
	PutInstruction(ctx context.Context, in *store.Instruction, c store.Cond) error
	GetInstruction(ctx context.Context, id string) (*store.Instruction, error)
	ListInstructions(ctx context.Context, k store.Key, node string, pending bool) ([]*store.Instruction, error)
}

// EventStore is where a run writes the cluster's timeline.
type EventStore interface {
	AppendEvent(ctx context.Context, e *store.Event) error
}

// Store is everything the runner needs of the store: Options.Store. The
// steps also keep the cluster's secrets (trust.SecretStore: its CAs and
// join material), and dynamic validation reads accounts, profiles and the
// project's clusters (dynamic.Store).
type Store interface {
	OperationStore
	NodeStore
	InstructionStore
	EventStore
	trust.SecretStore
	dynamic.Store
	backup.Store
}
