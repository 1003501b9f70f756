package server

import (
	"context"
	"time"

	v1 "kiln.dev/kiln/api/v1"
	"kiln.dev/kiln/internal/auth"
	"kiln.dev/kiln/internal/store"
	"kiln.dev/kiln/internal/trust"
)

// What the frontend needs of the store, one interface per resource it
// serves. A handler reaches the store only through its resource's (the
// Server keeps one field of each), so a handler's test can fake that one
// alone; store.Store satisfies them all (internal/daemon asserts it).

// ProjectStore is what the project handlers need.
type ProjectStore interface {
	PutProject(ctx context.Context, p *v1.Project, c store.Cond) error
	GetProject(ctx context.Context, name string) (*v1.Project, error)
	ListProjects(ctx context.Context, pg store.Page) ([]*v1.Project, string, error)
	DeleteProject(ctx context.Context, name string, c store.Cond) error
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
	RequestCancel(ctx context.Context, id string, req v1.CancelRequest) (*store.Operation, bool, error)
}

// NodeStore is what the node handlers need: nodes, their approval and
// role, and their logs.
type NodeStore interface {
	GetNode(ctx context.Context, k store.Key, name string) (*store.Node, error)
	ListNodes(ctx context.Context, k store.Key, pg store.Page) ([]*store.Node, string, error)
	PutNode(ctx context.Context, n *store.Node, c store.Cond, events ...*store.Event) error
	ListNodeLogs(ctx context.Context, k store.Key, node string, f store.LogFilter, pg store.Page) ([]v1.LogLine, string, error)
}

// CloudAccountStore is what the cloud account handlers need.
type CloudAccountStore interface {
	PutCloudAccount(ctx context.Context, a *store.CloudAccount, c store.Cond) error
	GetCloudAccount(ctx context.Context, project, name string) (*store.CloudAccount, error)
	ListCloudAccounts(ctx context.Context, project string, pg store.Page) ([]*store.CloudAccount, string, error)
	DeleteCloudAccount(ctx context.Context, project, name string, c store.Cond) error
}

// ProjectSecretStore is what the project secret handlers need.
type ProjectSecretStore interface {
	PutProjectSecret(ctx context.Context, ps *store.ProjectSecret, c store.Cond) error
	GetProjectSecret(ctx context.Context, project, name string) (*store.ProjectSecret, error)
	ListProjectSecrets(ctx context.Context, project string, pg store.Page) ([]*store.ProjectSecret, string, error)
	DeleteProjectSecret(ctx context.Context, project, name string, c store.Cond) error
}

// ProfileStore is what the cluster profile handlers need.
type ProfileStore interface {
	PutProfile(ctx context.Context, p *store.Profile, c store.Cond) error
	GetProfile(ctx context.Context, project, name string) (*store.Profile, error)
	ListProfiles(ctx context.Context, project string, pg store.Page) ([]*store.Profile, string, error)
	DeleteProfile(ctx context.Context, project, name string, c store.Cond) error
}

// EventStore is what the handlers that read a cluster's events, or record
// one (a cancel, a node approved, a kubeconfig issued), need.
type EventStore interface {
	ListEvents(ctx context.Context, k store.Key, pg store.Page) ([]*store.Event, string, error)
	AppendEvent(ctx context.Context, e *store.Event) error
}

// IdentityStore is what authentication (auth.Store) and the identity
// handlers need: users, members, service accounts and tokens.
type IdentityStore interface {
	auth.Store
	PutUser(ctx context.Context, u *v1.User, c store.Cond) error
	ListUsers(ctx context.Context, pg store.Page) ([]*v1.User, string, error)
	DeleteUser(ctx context.Context, name string, c store.Cond) error
	PutMember(ctx context.Context, m *store.Member, c store.Cond) error
	ListMembers(ctx context.Context, project string, pg store.Page) ([]*store.Member, string, error)
	Memberships(ctx context.Context, user string) ([]*store.Member, error)
	DeleteMember(ctx context.Context, project, user string, c store.Cond) error
	PutServiceAccount(ctx context.Context, sa *store.ServiceAccount, c store.Cond) error
	ListServiceAccounts(ctx context.Context, project string, pg store.Page) ([]*store.ServiceAccount, string, error)
	DeleteServiceAccount(ctx context.Context, project, name string, c store.Cond) error
	CreateToken(ctx context.Context, t *store.Token) error
	ListTokens(ctx context.Context, principal string, pg store.Page) ([]*store.Token, string, error)
	RevokeToken(ctx context.Context, principal, id string, at time.Time) error
}

// AuditStore is what the audit middleware and the audit log's reader need.
type AuditStore interface {
	AppendAudit(ctx context.Context, e *v1.AuditEntry) error
	ListAudit(ctx context.Context, f store.AuditFilter, pg store.Page) ([]*v1.AuditEntry, string, error)
}

// DiagnosticsStore is what the diagnostics handlers need (gathering is
// Options.Diagnose's).
type DiagnosticsStore interface {
	GetDiagnostics(ctx context.Context, id string) (*store.Diagnostics, error)
	GetDiagnosticsBundle(ctx context.Context, id string) ([]byte, error)
	ListDiagnostics(ctx context.Context, k store.Key, pg store.Page) ([]*store.Diagnostics, string, error)
	DeleteDiagnostics(ctx context.Context, id string) error
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
}

func storesOf(st Store) stores {
	return stores{projects: st, clusters: st, operations: st, nodes: st, accounts: st, projectSecrets: st, diagnostics: st, backups: st, profiles: st,
		jobs: st, events: st, identity: st, audits: st, secrets: st, pinger: st}
}
