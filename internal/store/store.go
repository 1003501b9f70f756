// Package store records what users want and what is: projects, clusters,
// nodes, operations, cloud accounts, profiles and events. It also holds the
// leases that backend workers race for.
//
// Two implementations share one SQL code path (sqlstore): SQLite (the default,
// a file under the data dir) and PostgreSQL. storetest is the conformance
// suite both pass.
package store

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/google/uuid"

	v1 "kiln.dev/kiln/api/v1"
)

// Sentinel errors. Callers test them with errors.Is.
var (
	// ErrNotFound: the record does not exist.
	ErrNotFound = errors.New("not found")
	// ErrExists: Cond.IfNoneMatch was "*" and the record exists.
	ErrExists = errors.New("already exists")
	// ErrPreconditionFailed: Cond.IfMatch did not match the record's etag.
	ErrPreconditionFailed = errors.New("etag does not match")
	// ErrLeaseLost: a fenced write or renewal carried a token that is no
	// longer the cluster's current lease.
	ErrLeaseLost = errors.New("lease lost")
	// ErrNoWork: ClaimCluster found nothing claimable.
	ErrNoWork = errors.New("nothing to claim")
	// ErrNotEmpty: a project still holds clusters.
	ErrNotEmpty = errors.New("not empty")
	// ErrBadPageToken: Page.Token is not one this store handed out.
	ErrBadPageToken = errors.New("invalid page token")
	// ErrEnded: RequestCancel found the operation terminal already.
	ErrEnded = errors.New("operation has ended")
)

// ConflictError says a change was refused because another operation is
// still running on the same cluster. errors.Is(err, ErrConflict) holds.
type ConflictError struct {
	Operation string // id of the running operation
	State     string // the cluster's provisioning state
}

// ErrConflict is matched by every *ConflictError.
var ErrConflict = errors.New("conflict")

func (e *ConflictError) Error() string {
	return fmt.Sprintf("cluster is %s: operation %s is still running", e.State, e.Operation)
}

func (e *ConflictError) Is(target error) bool { return target == ErrConflict }

// Fence is the proof of a lease that a worker carries on every write.
type Fence struct {
	Owner string
	Token int64
}

// Lease is a cluster's lease as stored.
type Lease struct {
	Owner  string
	Token  int64 // increases by one on every claim; never reused
	Expiry time.Time
	// TakenFrom is the owner whose lease the last claim took over because
	// it had expired (its holder died or stopped renewing); "" when that
	// claim found the lease free (released, or a new operation's). Set
	// by ClaimCluster; writers' values are ignored.
	TakenFrom string
}

// Fence returns the fence a holder of this lease writes with.
func (l Lease) Fence() Fence { return Fence{Owner: l.Owner, Token: l.Token} }

// Cond says when a write may happen. The zero value always may.
type Cond struct {
	// IfMatch is the etag the record must have; "*" means it must exist.
	IfMatch string
	// IfNoneMatch "*" means the record must not exist.
	IfNoneMatch string
	// Fence, when set, is the cluster lease the writer must still hold
	// (for nodes: the lease of their cluster).
	Fence *Fence
}

// Page asks for one page of a list. Lists are ordered by name (operations and
// events by id, which sorts by time). Limit 0 means the store's default (100);
// more than 1000 is capped at 1000.
type Page struct {
	Limit int
	Token string // from the previous page's next token; "" for the first page
}

// Key names a cluster.
type Key struct {
	Project string
	Name    string
}

func (k Key) String() string { return k.Project + "/" + k.Name }

// Cluster is a cluster record: the API object plus backend bookkeeping.
type Cluster struct {
	Project string
	Name    string
	ETag    string // set by the store on every write
	Spec    v1.ClusterSpec
	Status  v1.ClusterStatus
	// Lease and Dequeues are the store's; writers' values are ignored.
	Lease    Lease
	Dequeues int // claims since the last step that made progress
	// UID is the cluster's identity, set by the store when it creates the
	// record (a UUIDv7) and kept while the record lives: a cluster created
	// again under the name of a deleted one has another. Its operations
	// and events are filed under it. Writers' values are ignored.
	UID string
}

// Key returns the cluster's key.
func (c *Cluster) Key() Key { return Key{Project: c.Project, Name: c.Name} }

// Operation is an asynchronous change to a cluster.
type Operation struct {
	ID        string // UUIDv7, so ids sort by creation time
	Project   string
	Cluster   string
	Kind      string // v1.KindCreate, v1.KindUpdate, v1.KindDelete
	Status    string // v1.OpInProgress, ...
	StartTime time.Time
	EndTime   *time.Time
	Steps     []v1.Step
	Error     *v1.Error
	// RetryOf and Force are set when the operation is begun and never
	// change: the operation it retries, and a forced delete.
	RetryOf string
	Force   bool
	// Leftovers is what a forced delete may have left behind; written by
	// SaveOperation and FinishOperation.
	Leftovers []v1.Leftover
	// CancelRequested is written only by RequestCancel; other writes keep
	// it as stored.
	CancelRequested *v1.CancelRequest
	// ClusterUID is the UID of the cluster, set by BeginOperation: the
	// operation is that cluster's, not its name's.
	ClusterUID string
	// Reason and Nodes are set when the operation is begun and never
	// change: why Kiln began it by itself, and the nodes a scale-down
	// removes (v1.OperationProperties).
	Reason string
	Nodes  []string
	// Pools are the pool sizes an autoscale operation changed, set when
	// it is begun (v1.OperationProperties.Pools).
	Pools []v1.PoolResize
	// Backup is the backup a backup operation takes or a restore
	// operation puts back; set when it is begun.
	Backup string
	// Checkpoints are what running steps keep for their provider
	// (provider.Checkpoint), by step name: stored with the steps, never
	// in an API response (they may hold the cloud's URLs). The runner
	// drops a step's when it succeeds.
	Checkpoints map[string]map[string]string
	// Audit, when set, is the audit entry of the request that begins the
	// operation: BeginOperation inserts it in the same transaction (and
	// sets its ID), so the change and its record commit together. It is
	// not stored with the operation.
	Audit *v1.AuditEntry
}

// Node is a node record.
type Node struct {
	Project string
	v1.Node // Node.Cluster names its cluster; Node.ETag is set by the store
}

// Job is a job record (v1.Job.Cluster names its cluster; ETag and
// CreatedAt are set by the store).
type Job struct {
	Project string
	v1.Job
	// Log is the end of its pod's log, kept when it ended (the pod goes
	// with its node when the cluster hibernates); not part of the API's
	// Job.
	Log string
}

// CloudAccount is a cloud account record. Credentials are stored; the API
// never returns them.
type CloudAccount struct {
	Project string
	v1.CloudAccount
}

// ProjectSecret is a project secret record. Data is stored (sealed); the
// API never returns it.
type ProjectSecret struct {
	Project string
	v1.Secret
}

// Diagnostics is a diagnostics bundle's record (its tar.gz is read apart:
// GetDiagnosticsBundle).
type Diagnostics struct {
	Project, Cluster string
	v1.Diagnostics
}

// MaxDiagnostics is how many diagnostics bundles the store keeps per
// cluster: a put beyond it deletes the oldest.
const MaxDiagnostics = 10

// Backup is a backup's record: the API's view plus where its sealed object
// is. Backup.Cluster names the cluster it was taken of; Name, ETag and
// CreatedAt are the record's.
type Backup struct {
	Project    string
	ClusterUID string // uid of the cluster it was taken of
	Object     string // the key of its sealed snapshot in the location
	v1.Backup
	// Keys are the ids of kilnd's keys its object is sealed under
	// (recorded when it is checked): kilnd rotate-key keeps them in the key
	// file while the backup is there (BackupKeys).
	Keys []string
}

// Backups are the records of clusters' backups, filed under the project
// and the name of the cluster they were taken of. They outlive their
// cluster (a cluster deleted, or made again under its name, keeps them) and
// go with their project.
type Backups interface {
	// PutBackup creates (Cond.IfNoneMatch "*": only a new one) or replaces
	// (Cond.IfMatch: the etag it must have) b; the project must exist. It
	// sets b.ETag and, on create, b.CreatedAt (to now when zero; a replace
	// keeps the stored one).
	PutBackup(ctx context.Context, b *Backup, c Cond) error
	// GetBackup reads a backup (ErrNotFound).
	GetBackup(ctx context.Context, project, cluster, name string) (*Backup, error)
	// ListBackups lists the backups filed under a cluster's name, newest
	// first (CreatedAt descending, then by name).
	ListBackups(ctx context.Context, project, cluster string, pg Page) ([]*Backup, string, error)
	// DeleteBackup deletes a backup's record (ErrNotFound whatever c says
	// when there is none).
	DeleteBackup(ctx context.Context, project, cluster, name string, c Cond) error
}

// Profile is a profile record: every version of one profile. The
// embedded Profile is the newest version, with the record's Name, ETag and
// CreatedAt; Versions holds them all, oldest first (the newest is last).
type Profile struct {
	Project string
	v1.Profile
	Versions []v1.Profile
}

// At returns version n of the profile, or nil.
func (p *Profile) At(n int) *v1.Profile {
	for i := range p.Versions {
		if p.Versions[i].Version == n {
			return &p.Versions[i]
		}
	}
	return nil
}

// LatestPublished returns the newest published version, or nil.
func (p *Profile) LatestPublished() *v1.Profile {
	for i := len(p.Versions) - 1; i >= 0; i-- {
		if p.Versions[i].Published {
			return &p.Versions[i]
		}
	}
	return nil
}

// SetVersions sets Versions, sorted by version, and the embedded Profile to
// the newest (keeping the record's Name, ETag and CreatedAt).
func (p *Profile) SetVersions(vs []v1.Profile) {
	slices.SortFunc(vs, func(a, b v1.Profile) int { return a.Version - b.Version })
	p.Versions = vs
	name, etag, created := p.Name, p.ETag, p.CreatedAt
	p.Profile = v1.Profile{}
	if len(vs) > 0 {
		p.Profile = vs[len(vs)-1]
	}
	p.Name, p.ETag, p.CreatedAt = name, etag, created
}

// Event is one entry of a cluster's timeline. ID and Time are set by the
// store when zero. ClusterUID files it under that cluster; when empty, the
// store files it under the cluster that has the name now (or, when there is
// none, the last one deleted under it) and sets it.
type Event struct {
	Project    string
	Cluster    string
	ClusterUID string
	v1.Event
}

// Instruction is an instruction for a node's agent, with its result once
// the agent has reported one.
type Instruction struct {
	Project string
	Cluster string
	Node    string
	v1.Instruction
	CreatedAt time.Time // set by the store
	Result    *v1.InstructionResult
	ResultAt  *time.Time
}

// MaxNodeLogLines is how many log lines the store keeps per node.
const MaxNodeLogLines = 10000

// LogFilter narrows what ListNodeLogs reads; the zero value reads every
// line.
type LogFilter struct {
	// Streams keeps the lines of these streams only ("agent", "etcd",
	// "kubelet", ...); none keeps all.
	Streams []string
	// Since keeps the lines at or after it; zero keeps all.
	Since time.Time
	// Tail starts the read at the Tail-th newest line that matches (after
	// the page token's position), so it reads the newest Tail; 0 starts
	// at the position.
	Tail int
}

// Store is everything a Kiln control plane keeps: the sum of the store's
// per-resource interfaces below, and what is the whole database's (Ping,
// Close). No part of Kiln holds it: each holds the per-resource interfaces
// it uses, or an interface of its own sized to its use. It is for kilnd's
// wiring, which opens the store and hands it out, and for storetest.
type Store interface {
	Projects
	Clusters
	Leases
	Operations
	Nodes
	NodeLogs
	Jobs
	Instructions
	ClusterSecrets
	Events
	CloudAccounts
	ProjectSecrets
	Profiles
	DiagnosticsBundles
	Backups
	Identities
	Audit
	Replicas
	Pruner
	Fleet
	CostRecord

	// Ping checks the database answers (for /readyz).
	Ping(ctx context.Context) error
	Close() error
}

// Fleet is what the metrics read of the whole store when they are
// scraped: counts, each one query whatever the fleet's size, and the
// certificate expiries the certificate check recorded. Every process
// reading the same store reads the same numbers.
type Fleet interface {
	// CountClusters counts the clusters by provisioning state and
	// provider, in one grouped query (served by an index).
	CountClusters(ctx context.Context) ([]ClusterCount, error)
	// CountWaiting counts the clusters with an operation waiting for a
	// worker: Creating, Updating or Deleting with no live lease (free, or
	// expired), what the next claims would take.
	CountWaiting(ctx context.Context) (int, error)
	// CertificateExpiries lists, by project and name, every cluster's
	// earliest certificate expiry as the certificate check recorded it
	// (status.certificates); clusters without one are left out.
	CertificateExpiries(ctx context.Context) ([]CertificateExpiry, error)
	// FleetSummary adds up the clusters and operations of the projects q
	// names for the console's fleet page (v1.Fleet): grouped queries,
	// none of which reads every row into Go, over the operations begun in
	// the two weeks before q.Now.
	FleetSummary(ctx context.Context, q FleetQuery) (*v1.Fleet, error)
}

// FleetQuery says what FleetSummary adds up: the clusters and operations
// of Projects, or of every project when All; the windows end at Now.
type FleetQuery struct {
	All      bool
	Projects []string
	Now      time.Time
}

// CostRecord is the record of what each cluster's estimate (status.cost)
// said over time: cost intervals, kept after the cluster is deleted until
// retention prunes them. FinishOperation writes them, in the transaction
// that ends an operation: when the operation leaves the cluster with an
// estimate other than the one in force (from its spec and state, by
// internal/cost), the interval in force ends and one begins, now; a
// cluster's first begins when its first operation began (a create's
// machines are made during it); a delete that finishes ends the one in
// force. A cluster whose provider the price table does not price has
// none.
type CostRecord interface {
	// CostHistory adds up the intervals of the projects q names that were
	// in force during [q.From, q.To), each cut to the window, by cluster
	// (deleted ones marked) and by project, dearest first.
	CostHistory(ctx context.Context, q CostQuery) (*v1.CostHistory, error)
}

// CostQuery says what CostHistory adds up: the clusters of Projects, or
// of every project when All, over [From, To).
type CostQuery struct {
	All      bool
	Projects []string
	From, To time.Time
}

// ClusterCount is how many clusters are in State of Provider.
type ClusterCount struct {
	State, Provider string
	Count           int
}

// CertificateExpiry is when the first certificate of a cluster expires.
type CertificateExpiry struct {
	Key
	NotAfter time.Time
}

// Projects are the tenants everything else is filed under.
type Projects interface {
	PutProject(ctx context.Context, p *v1.Project, c Cond) error
	GetProject(ctx context.Context, name string) (*v1.Project, error)
	ListProjects(ctx context.Context, pg Page) ([]*v1.Project, string, error)
	// DeleteProject refuses with ErrNotEmpty while the project has clusters;
	// it deletes the project's cloud accounts, secrets, profiles and
	// backups with it.
	DeleteProject(ctx context.Context, name string, c Cond) error
}

// Clusters are the cluster records. A change to a cluster is written with
// its operation (BeginOperation).
type Clusters interface {
	GetCluster(ctx context.Context, k Key) (*Cluster, error)
	ListClusters(ctx context.Context, project string, pg Page) ([]*Cluster, string, error)
	// ListClustersWhere lists the clusters of every project that f
	// selects, by project and name: what a backend's periodic parts look
	// at, without reading the rest of the fleet.
	ListClustersWhere(ctx context.Context, f ClusterFilter, pg Page) ([]*Cluster, string, error)
	// BeginOperation writes the cluster (creating or replacing it, spec and
	// status as given) and inserts op, in one transaction. It refuses with a
	// *ConflictError when the stored cluster is Creating, Updating or
	// Deleting. The written cluster's lease is free, its dequeue count zero,
	// so a worker can claim it at once. cl.ETag is set to the new etag,
	// cl.UID and op.ClusterUID to the cluster's uid: a new one for a new
	// record, the stored one for a replaced record. op.Audit, when set, is
	// inserted in the same transaction.
	BeginOperation(ctx context.Context, cl *Cluster, op *Operation, c Cond) error
	// PutClusterStatus writes cl.Status, fenced by c.Fence; or, without a
	// fence, conditioned on c.IfMatch for a cluster no operation runs on
	// (ErrPreconditionFailed otherwise).
	PutClusterStatus(ctx context.Context, cl *Cluster, c Cond) error
}

// Leases are the clusters' leases that backend workers race for.
type Leases interface {
	// ClaimCluster takes the lease of one cluster that is Creating, Updating
	// or Deleting and whose lease has expired (oldest expiry first), with one
	// conditional write: owner set, token incremented, expiry now+ttl,
	// dequeues incremented. Two concurrent claimers never both win the same
	// cluster. It returns ErrNoWork when nothing is claimable.
	ClaimCluster(ctx context.Context, owner string, ttl time.Duration) (*Cluster, error)
	// RenewLease extends the lease to now+ttl, or returns ErrLeaseLost.
	RenewLease(ctx context.Context, k Key, f Fence, ttl time.Duration) error
	// ReleaseLease hands the lease back at once (it becomes claimable), or
	// returns ErrLeaseLost.
	ReleaseLease(ctx context.Context, k Key, f Fence) error
}

// Operations are the asynchronous changes to clusters: begun with their
// cluster (Clusters.BeginOperation), checkpointed and ended by the lease
// holder.
type Operations interface {
	GetOperation(ctx context.Context, id string) (*Operation, error)
	// CancelRequest is GetOperation(id).CancelRequested, reading nothing
	// else.
	CancelRequest(ctx context.Context, id string) (*v1.CancelRequest, error)
	// ListOperations lists the operations of the cluster named k: the
	// one that has the name now or, when none has, the last one deleted
	// under it; never those of another cluster that had the name. A page
	// token goes on with the cluster of the first page.
	ListOperations(ctx context.Context, k Key, pg Page) ([]*Operation, string, error)
	// OperationStatus returns operation id's status alone (ErrNotFound).
	OperationStatus(ctx context.Context, id string) (string, error)
	// SaveOperation writes op's status, steps and error, fenced by the lease
	// of op's cluster. progress=true resets the cluster's dequeue count.
	// events are appended in the same transaction (what the step did), so
	// the timeline never misses a checkpoint's event nor shows one that
	// was not checkpointed. A cancel requested of op (RequestCancel) is
	// set in op.CancelRequested when op has none yet: the writer learns of
	// it with its write.
	SaveOperation(ctx context.Context, op *Operation, f Fence, progress bool, events ...*Event) error
	// FinishOperation, in one transaction and fenced: writes op (which must
	// be terminal), appends events (the operation's end, so that it is in
	// the timeline exactly once), writes cl.Status (or, with deleteCluster,
	// deletes the cluster and its nodes), and releases the lease. Until it
	// commits, a reader sees the operation still InProgress.
	FinishOperation(ctx context.Context, cl *Cluster, op *Operation, f Fence, deleteCluster bool, events ...*Event) error
	// RequestCancel records a request to cancel operation id, unfenced
	// (the API asks; the lease holder acts on it at its next safe point).
	// It records the first request only: a later one returns recorded
	// false and keeps the first. It returns the operation as stored after
	// the call, ErrNotFound for an unknown id, and, for an operation that
	// has ended, the operation with ErrEnded (nothing written).
	RequestCancel(ctx context.Context, id string, req v1.CancelRequest, event func(*Operation) *Event) (op *Operation, recorded bool, err error)
}

// Nodes are the clusters' node records.
type Nodes interface {
	PutNode(ctx context.Context, n *Node, c Cond, events ...*Event) error
	GetNode(ctx context.Context, k Key, name string) (*Node, error)
	ListNodes(ctx context.Context, k Key, pg Page) ([]*Node, string, error)
	DeleteNode(ctx context.Context, k Key, name string, c Cond) error
	// ListStaleNodes lists, across every cluster, the nodes in one of
	// states whose LastHeartbeat is before before, the oldest first (the
	// liveness sweep); nodes without a heartbeat are never listed. It
	// reads only such nodes, not every node.
	ListStaleNodes(ctx context.Context, before time.Time, states []string) ([]*Node, error)
	// ListClustersNodes lists the nodes of project's clusters named, by
	// cluster (a cluster without nodes has no entry), each cluster's by
	// name, in one read: what a list of clusters with their node counts
	// needs.
	ListClustersNodes(ctx context.Context, project string, clusters []string) (map[string][]*Node, error)
}

// NodeLogs are the lines agents send, the newest MaxNodeLogLines kept per
// node, oldest first. A log grows, so ListNodeLogs's next token is always
// where to go on reading (the page token itself when there was nothing
// new; past the lines f left out when the page reached the end); an empty
// page means nothing new that matches yet.
type NodeLogs interface {
	AppendNodeLogs(ctx context.Context, k Key, node string, lines []v1.LogLine) error
	ListNodeLogs(ctx context.Context, k Key, node string, f LogFilter, pg Page) ([]v1.LogLine, string, error)
}

// Jobs are the clusters' jobs, deleted with their cluster. PutJob creates
// or replaces one (Cond.IfNoneMatch "*" creates only); the cluster must
// exist.
type Jobs interface {
	PutJob(ctx context.Context, j *Job, c Cond) error
	GetJob(ctx context.Context, k Key, name string) (*Job, error)
	ListJobs(ctx context.Context, k Key, pg Page) ([]*Job, string, error)
}

// Instructions are the instructions for node agents, with their results.
type Instructions interface {
	// PutInstruction inserts in, fenced by its cluster's lease (c.Fence
	// required); an id that exists is ErrExists, so a step run again finds
	// the instruction it issued instead of issuing a second one.
	PutInstruction(ctx context.Context, in *Instruction, c Cond) error
	GetInstruction(ctx context.Context, id string) (*Instruction, error)
	// ListInstructions lists a node's instructions by id; pending lists
	// only those without a result.
	ListInstructions(ctx context.Context, k Key, node string, pending bool) ([]*Instruction, error)
	// SetInstructionResult records an instruction's result once: a second
	// result is ErrExists, an unknown id ErrNotFound.
	SetInstructionResult(ctx context.Context, id string, r v1.InstructionResult) error
}

// ClusterSecrets are a cluster's secrets (CA keys, credential and
// passphrase hashes, ...): written by the cluster's lease holder (c.Fence
// required; IfNoneMatch "*" writes only a missing one), read by the agent
// gateway, never returned by the API, deleted with their cluster. What is
// changed without the lease is ClusterSecretUpdater's.
type ClusterSecrets interface {
	PutClusterSecret(ctx context.Context, k Key, name string, value []byte, c Cond) error
	GetClusterSecret(ctx context.Context, k Key, name string) ([]byte, error)
}

// Events are the clusters' timelines. AppendEvent files e under
// e.ClusterUID, or when empty under the cluster named e.Cluster, as
// ListEvents reads it (and sets e.ClusterUID). ListEvents lists the events
// of the cluster named k as ListOperations lists its operations.
type Events interface {
	AppendEvent(ctx context.Context, e *Event) error
	ListEvents(ctx context.Context, k Key, pg Page) ([]*Event, string, error)
}

// CloudAccounts are the projects' cloud accounts.
type CloudAccounts interface {
	PutCloudAccount(ctx context.Context, a *CloudAccount, c Cond) error
	GetCloudAccount(ctx context.Context, project, name string) (*CloudAccount, error)
	ListCloudAccounts(ctx context.Context, project string, pg Page) ([]*CloudAccount, string, error)
	DeleteCloudAccount(ctx context.Context, project, name string, c Cond) error
}

// CloudAccountGetter reads a project's cloud account, credentials included.
type CloudAccountGetter interface {
	GetCloudAccount(ctx context.Context, project, name string) (*CloudAccount, error)
}

// FindCloudAccount reads the cloud account a cluster of project names for
// its provider to reach its cloud with: nil and no error when name is empty
// or names no account (the provider says what is missing, and dynamic
// validation refuses it before anything is made); any other error names
// the account.
func FindCloudAccount(ctx context.Context, g CloudAccountGetter, project, name string) (*CloudAccount, error) {
	if name == "" {
		return nil, nil
	}
	a, err := g.GetCloudAccount(ctx, project, name)
	switch {
	case errors.Is(err, ErrNotFound):
		return nil, nil
	case err != nil:
		return nil, fmt.Errorf("get cloud account %q: %w", name, err)
	}
	return a, nil
}

// ProjectSecrets are the projects' secrets, sealed at rest (their whole
// document).
type ProjectSecrets interface {
	PutProjectSecret(ctx context.Context, ps *ProjectSecret, c Cond) error
	GetProjectSecret(ctx context.Context, project, name string) (*ProjectSecret, error)
	ListProjectSecrets(ctx context.Context, project string, pg Page) ([]*ProjectSecret, string, error)
	DeleteProjectSecret(ctx context.Context, project, name string, c Cond) error
}

// Profiles are the projects' cluster profiles, every version of each.
type Profiles interface {
	PutProfile(ctx context.Context, p *Profile, c Cond) error
	GetProfile(ctx context.Context, project, name string) (*Profile, error)
	ListProfiles(ctx context.Context, project string, pg Page) ([]*Profile, string, error)
	DeleteProfile(ctx context.Context, project, name string, c Cond) error
}

// DiagnosticsBundles are the clusters' diagnostics bundles, each with its
// cluster's (they go with it); the newest MaxDiagnostics kept per cluster.
// ID is the caller's (unique).
type DiagnosticsBundles interface {
	PutDiagnostics(ctx context.Context, d *Diagnostics, bundle []byte) error
	GetDiagnostics(ctx context.Context, id string) (*Diagnostics, error)
	GetDiagnosticsBundle(ctx context.Context, id string) ([]byte, error)
	// ListDiagnostics lists a cluster's bundles, newest first.
	ListDiagnostics(ctx context.Context, k Key, pg Page) ([]*Diagnostics, string, error)
	DeleteDiagnostics(ctx context.Context, id string) error
}

// Replicas are the backends that share the store, each alive while it
// renews its record; the periodic checks divide the clusters among the
// live ones. PutReplica records name alive until now+ttl; ListReplicas
// names those alive now, sorted; DeleteReplica removes name's record (a
// replica that stops hands its share over at once; none is no error).
type Replicas interface {
	PutReplica(ctx context.Context, name string, ttl time.Duration) error
	ListReplicas(ctx context.Context) ([]string, error)
	DeleteReplica(ctx context.Context, name string) error
}

// Pruner deletes what has outlived its retention.
type Pruner interface {
	// Prune deletes what has outlived its retention (see Cutoffs) and
	// returns how many of each it deleted. It deletes in batches, each its
	// own short transaction, so that it never holds the database for long;
	// several processes may prune at once.
	Prune(ctx context.Context, c Cutoffs) (Pruned, error)
}

// Percent is the share of the operation's steps that are done (Succeeded or
// Skipped), 0-100. A terminal Succeeded operation is always 100.
func (o *Operation) Percent() int {
	if o.Status == v1.OpSucceeded {
		return 100
	}
	if len(o.Steps) == 0 {
		return 0
	}
	done := 0
	for _, s := range o.Steps {
		if s.State == v1.StepSucceeded || s.State == v1.StepSkipped {
			done++
		}
	}
	return done * 100 / len(o.Steps)
}

// retainedPrefix starts the message of a step a retry kept.
const retainedPrefix = "done by operation "

// Retry returns a new operation, id, that runs o again from the step
// where o stopped: a retry of o (RetryOf). o must have ended Failed or
// Canceled. Its steps are o's: those o had done stay Succeeded or Skipped,
// with their attempts and times, DoneBy and a message naming the operation
// that ran them (o, or the one before it), so the runner does not run them
// again; the step that failed or was canceled and every step after it are
// Pending again. Kind, cluster, Force, Reason, Nodes and Backup are o's.
func (o *Operation) Retry(id string, now time.Time) *Operation {
	op := &Operation{ID: id, Project: o.Project, Cluster: o.Cluster, Kind: o.Kind, Status: v1.OpInProgress,
		StartTime: now, RetryOf: o.ID, Force: o.Force, Reason: o.Reason, Nodes: slices.Clone(o.Nodes), Backup: o.Backup}
	redo := false
	for _, s := range o.Steps {
		if !redo && (s.State == v1.StepSucceeded || s.State == v1.StepSkipped) {
			if !strings.HasPrefix(s.Message, retainedPrefix) { // a retry of a retry names the first
				msg := retainedPrefix + o.ID + "; not run again"
				if s.Message != "" {
					msg += " (" + s.Message + ")"
				}
				s.Message, s.DoneBy = msg, o.ID
			}
			op.Steps = append(op.Steps, s)
			continue
		}
		redo = true
		op.Steps = append(op.Steps, v1.Step{Name: s.Name, State: v1.StepPending})
	}
	return op
}

// Each calls f for every item of a paged list, page by page (1000 at a
// time), until the list ends or f or list fails.
func Each[T any](list func(Page) ([]T, string, error), f func(T) error) error {
	pg := Page{Limit: 1000}
	for {
		items, next, err := list(pg)
		if err != nil {
			return err
		}
		for _, it := range items {
			if err := f(it); err != nil {
				return err
			}
		}
		if next == "" {
			return nil
		}
		pg.Token = next
	}
}

// ClusterFilter selects clusters: those in State (a provisioning state,
// required) of one of Providers. Nil Providers is any provider; an empty,
// non-nil list is none.
type ClusterFilter struct {
	State     string
	Providers []string
}

// ClusterLister lists the clusters a filter selects (EachCluster).
type ClusterLister interface {
	ListClustersWhere(ctx context.Context, f ClusterFilter, pg Page) ([]*Cluster, string, error)
}

// EachCluster calls fn with every cluster f selects, a page at a time,
// until fn returns an error.
func EachCluster(ctx context.Context, s ClusterLister, f ClusterFilter, fn func(*Cluster) error) error {
	return Each(func(pg Page) ([]*Cluster, string, error) { return s.ListClustersWhere(ctx, f, pg) }, fn)
}

// Cutoffs say what Prune deletes; a zero time deletes nothing of its kind.
type Cutoffs struct {
	Events time.Time // events older than this
	Audit  time.Time // audit entries older than this
	// Tokens: tokens that expired, or were revoked, before this. Such a
	// token is refused already; only its record goes.
	Tokens time.Time
	// Operations: operations that ended before this, but never a live
	// cluster's newest (its current or last one) nor one still running.
	Operations time.Time
	// Instructions: instructions whose result came before this, but none
	// of a cluster an operation runs on (a step run again finds the
	// instructions it issued by id).
	Instructions time.Time
	// CostIntervals: cost intervals that ended before this (one in force
	// stays).
	CostIntervals time.Time
}

// Pruned counts what a Prune deleted.
type Pruned struct {
	Events, Audit, Tokens, Operations, Instructions, CostIntervals int64
}

// CheckEachCluster calls check with every cluster f selects, going on past a
// cluster's error; the errors come back joined, each naming its cluster.
// It stops when ctx ends. The periodic parts of a backend (the health,
// certificate and autoscale checks) look at the fleet with it.
func CheckEachCluster(ctx context.Context, s ClusterLister, f ClusterFilter, check func(*Cluster) error) error {
	var errs []error
	err := EachCluster(ctx, s, f, func(cl *Cluster) error {
		if err := check(cl); err != nil {
			errs = append(errs, fmt.Errorf("cluster %s: %w", cl.Key(), err))
		}
		return ctx.Err()
	})
	return errors.Join(append(errs, err)...)
}

// Beginner begins operations (BeginBackground).
type Beginner interface {
	BeginOperation(ctx context.Context, cl *Cluster, op *Operation, c Cond) error
}

// BeginBackground begins op (its Kind, Steps, Reason and Nodes set; its
// id, times and status are set here) on next, a cluster read with etag
// and changed as the operation wants, for a part that acts on its own
// (the health check's repair, the autoscaler, the certificate check):
// next is written Updating with op current, conditional on etag. It
// returns false, and no error, when the cluster changed since it was read
// (a user's change, or another replica's operation, won): the next pass
// sees it as it is.
func BeginBackground(ctx context.Context, b Beginner, next *Cluster, etag string, op *Operation, now time.Time) (bool, error) {
	id, err := uuid.NewV7()
	if err != nil {
		return false, err
	}
	now = now.UTC()
	next.Status.ProvisioningState = v1.StateUpdating
	next.Status.FailedProvisioningState = ""
	next.Status.CurrentOperation = id.String()
	next.Status.UpdatedAt = now
	op.ID, op.Project, op.Cluster = id.String(), next.Project, next.Name
	op.Status, op.StartTime = v1.OpInProgress, now
	err = b.BeginOperation(ctx, next, op, Cond{IfMatch: etag})
	var conflict *ConflictError
	if errors.Is(err, ErrPreconditionFailed) || errors.As(err, &conflict) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("begin %s of cluster %s: %w", op.Kind, next.Key(), err)
	}
	return true, nil
}
