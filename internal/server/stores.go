package server

import (
	"context"

	v1 "kiln.dev/kiln/api/v1"
	"kiln.dev/kiln/internal/store"
	"kiln.dev/kiln/internal/trust"
)

// What the frontend needs of the store, one interface per resource it
// serves: the store's own interface of that resource where the handlers use
// all of it, a smaller one where they use part. A handler reaches the store
// only through its resource's (the Server keeps one field of each), so a
// handler's test can fake that one alone; the store kilnd opens satisfies
// them all (internal/daemon asserts it).

// ProjectStore is what the project handlers need: all of store.Projects.
type ProjectStore interface {
	store.Projects
}

// ClusterStore is what the cluster handlers need: a change is recorded
// with its operation in one BeginOperation.
type ClusterStore interface {
	GetCluster(ctx context.Context, k store.Key) (*store.Cluster, error)
	ListClusters(ctx context.Context, project string, pg store.Page) ([]*store.Cluster, string, error)
	BeginOperation(ctx context.Context, cl *store.Cluster, op *store.Operation, c store.Cond) error
}

// OperationStore is what the operation handlers need.
type OperationStore interface {
	GetOperation(ctx context.Context, id string) (*store.Operation, error)
	OperationStatus(ctx context.Context, id string) (string, error)
	ListOperations(ctx context.Context, k store.Key, pg store.Page) ([]*store.Operation, string, error)
	RequestCancel(ctx context.Context, id string, req v1.CancelRequest, event func(*store.Operation) *store.Event) (*store.Operation, bool, error)
}

// NodeStore is what the node handlers need: nodes, their approval and
// role, and their logs.
type NodeStore interface {
	GetNode(ctx context.Context, k store.Key, name string) (*store.Node, error)
	ListNodes(ctx context.Context, k store.Key, pg store.Page) ([]*store.Node, string, error)
	ListClustersNodes(ctx context.Context, project string, clusters []string) (map[string][]*store.Node, error)
	PutNode(ctx context.Context, n *store.Node, c store.Cond, events ...*store.Event) error
	ListNodeLogs(ctx context.Context, k store.Key, node string, f store.LogFilter, pg store.Page) ([]v1.LogLine, string, error)
}

// CloudAccountStore is what the cloud account handlers need: all of
// store.CloudAccounts.
type CloudAccountStore interface {
	store.CloudAccounts
}

// ProjectSecretStore is what the project secret handlers need: all of
// store.ProjectSecrets.
type ProjectSecretStore interface {
	store.ProjectSecrets
}

// ProfileStore is what the cluster profile handlers need: all of
// store.Profiles.
type ProfileStore interface {
	store.Profiles
}

// EventStore is what the handlers that read a cluster's events, or record
// one (a cancel, a node approved, a kubeconfig issued), need: all of
// store.Events.
type EventStore interface {
	store.Events
}

// IdentityStore is what authentication (auth.Store, a part of it) and the
// identity handlers need: all of store.Identities (users, members, service
// accounts and tokens).
type IdentityStore interface {
	store.Identities
}

// AuditStore is what the audit middleware and the audit log's reader need:
// all of store.Audit.
type AuditStore interface {
	store.Audit
}

// DiagnosticsStore is what the diagnostics handlers need (gathering is
// Options.Diagnose's).
type DiagnosticsStore interface {
	GetDiagnostics(ctx context.Context, id string) (*store.Diagnostics, error)
	GetDiagnosticsBundle(ctx context.Context, id string) ([]byte, error)
	ListDiagnostics(ctx context.Context, k store.Key, pg store.Page) ([]*store.Diagnostics, string, error)
	DeleteDiagnostics(ctx context.Context, id string) error
}

// FleetStore is what the fleet's sums (GET /v1/fleet) need.
type FleetStore interface {
	FleetSummary(ctx context.Context, q store.FleetQuery) (*v1.Fleet, error)
}

// CostStore is what the cost history (GET /v1/cost) needs.
type CostStore interface {
	CostHistory(ctx context.Context, q store.CostQuery) (*v1.CostHistory, error)
}

// Pinger is what /readyz needs: whether the store answers.
type Pinger interface {
	Ping(ctx context.Context) error
}

// Store is everything the frontend needs of the store: Options.Store.
// Dynamic validation reads through it too (dynamic.Store), and a
// kubeconfig reads its cluster's CA (trust.SecretReader).
type Store interface {
	ProjectStore
	ClusterStore
	OperationStore
	NodeStore
	CloudAccountStore
	ProjectSecretStore
	ProfileStore
	JobStore
	EventStore
	IdentityStore
	AuditStore
	DiagnosticsStore
	BackupStore
	FleetStore
	CostStore
	trust.SecretReader
	Pinger
}

// stores are the Server's views of its Store, one per resource.
type stores struct {
	projects   ProjectStore
	clusters   ClusterStore
	operations OperationStore
	nodes      NodeStore
	accounts   CloudAccountStore
	profiles   ProfileStore
	jobs       JobStore
	events     EventStore
	identity   IdentityStore
	audits     AuditStore
	secrets    trust.SecretReader
	pinger     Pinger

	// projectSecrets are the project's (kiln secret); secrets, above, the
	// clusters' CAs and keys.
	projectSecrets ProjectSecretStore
	diagnostics    DiagnosticsStore
	backups        BackupStore
	fleet          FleetStore
	costs          CostStore
}

func storesOf(st Store) stores {
	return stores{projects: st, clusters: st, operations: st, nodes: st, accounts: st, projectSecrets: st, diagnostics: st, backups: st, fleet: st, costs: st, profiles: st,
		jobs: st, events: st, identity: st, audits: st, secrets: st, pinger: st}
}
