package plan

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"time"

	"kiln.dev/kiln/internal/kubeapi"
	"kiln.dev/kiln/internal/plan/attached"
	"kiln.dev/kiln/internal/plan/backup"
	"kiln.dev/kiln/internal/plan/certs"
	"kiln.dev/kiln/internal/plan/hibernate"
	"kiln.dev/kiln/internal/plan/machines"
	"kiln.dev/kiln/internal/plan/profile"
	"kiln.dev/kiln/internal/provider"
	"kiln.dev/kiln/internal/snapshots"
	"kiln.dev/kiln/internal/store"
	"kiln.dev/kiln/internal/trust"
)

// What the step families see of a run. view implements step.Context; a
// type per family adds what that family's interface (attached.Run, ...)
// asks for, and nothing else of the runner.

// view is a run as step.Context.
type view struct{ x *run }

func (v view) Cluster() *store.Cluster     { return v.x.cl }
func (v view) Operation() *store.Operation { return v.x.op }
func (v view) Log() *slog.Logger           { return v.x.log }
func (v view) Now() time.Time              { return v.x.r.opts.Now() }
func (v view) Note(msg string)             { v.x.note = msg }
func (v view) Canceling() bool             { return v.x.canceling() }

func (v view) Progress(ctx context.Context, part, what string) { v.x.showProgress(ctx, part, what) }

func (v view) Event(ctx context.Context, typ, reason, msg string) { v.x.event(ctx, typ, reason, msg) }

// SaveStatus writes the cluster's status, fenced.
func (v view) SaveStatus(ctx context.Context, field string) error {
	x := v.x
	if err := x.ops.PutClusterStatus(ctx, x.cl, store.Cond{Fence: &x.fence}); err != nil {
		return fmt.Errorf("save status.%s: %w", field, err)
	}
	return nil
}

// attachedRun is a run as attached.Run.
type attachedRun struct{ view }

func (a attachedRun) Fence() store.Fence { return a.x.fence }

func (a attachedRun) GetProjectSecret(ctx context.Context, project, name string) (*store.ProjectSecret, error) {
	return a.x.r.opts.Store.GetProjectSecret(ctx, project, name)
}

func (a attachedRun) PutClusterSecret(ctx context.Context, k store.Key, name string, value []byte, c store.Cond) error {
	return a.x.secrets.PutClusterSecret(ctx, k, name, value, c)
}

func (a attachedRun) Nodes() attached.NodeStore { return a.x.nodeRecords }

// profileRun is a run as profile.Run.
type profileRun struct{ view }

// RunsKubernetes: the cluster's nodes run agents that install it, or it
// is an attached cluster.
func (p profileRun) RunsKubernetes() bool                         { return p.x.usesAgents() || p.x.attached() }
func (p profileRun) Packs() profile.PackApplier                   { return p.x.r.opts.Packs }
func (p profileRun) Endpoint(ctx context.Context) (string, error) { return p.x.endpoint(ctx) }

func (p profileRun) GetProfile(ctx context.Context, project, name string) (*store.Profile, error) {
	return p.x.r.opts.Store.GetProfile(ctx, project, name)
}

func (p profileRun) GetProjectSecret(ctx context.Context, project, name string) (*store.ProjectSecret, error) {
	return p.x.r.opts.Store.GetProjectSecret(ctx, project, name)
}

func (p profileRun) GetClusterSecret(ctx context.Context, k store.Key, name string) ([]byte, error) {
	return p.x.secrets.GetClusterSecret(ctx, k, name)
}

// backupRun is a run as backup.Run.
type backupRun struct{ view }

func (b backupRun) Attached() bool              { return b.x.attached() }
func (b backupRun) UsesAgents() bool            { return b.x.usesAgents() }
func (b backupRun) Snapshots() *snapshots.Vault { return b.x.r.opts.Snapshots }
func (b backupRun) Backups() backup.Store       { return b.x.r.opts.Store }

func (b backupRun) Node(ctx context.Context, name string) (*store.Node, error) {
	return b.x.nodeRecords.GetNode(ctx, b.x.cl.Key(), name)
}

func (b backupRun) Nodes(ctx context.Context) (map[string]*store.Node, error) { return b.x.nodes(ctx) }

func (b backupRun) Ask(ctx context.Context, n *store.Node, kind string, params func() (json.RawMessage, error)) (*store.Instruction, error) {
	return b.x.ask(ctx, n, kind, params)
}

func (b backupRun) AskPart(ctx context.Context, n *store.Node, kind, part string, params func() (json.RawMessage, error)) (*store.Instruction, error) {
	return b.x.askPart(ctx, n, kind, part, params)
}

func (b backupRun) ControlPlaneTargets(ctx context.Context) ([]provider.MachineSpec, error) {
	return b.x.controlPlaneTargets(ctx)
}

func (b backupRun) KubeClient(ctx context.Context) (*kubeapi.Client, error) {
	return b.x.kubeClient(ctx)
}

func (b backupRun) KubernetesReady(ctx context.Context, ms []provider.MachineSpec) error {
	return b.x.kubernetesReady(ctx, ms)
}

func (b backupRun) FreshlyReady(ctx context.Context, nodes []*store.Node, since time.Time) error {
	return b.x.freshlyReady(ctx, nodes, since)
}

// certsRun is a run as certs.Run.
type certsRun struct{ view }

func (c certsRun) UsesAgents() bool                 { return c.x.usesAgents() }
func (c certsRun) UsesKubeadm() bool                { return c.x.usesKubeadm() }
func (c certsRun) CAStore() trust.CASecretStore     { return c.x.caStore() }
func (c certsRun) InstructionPoll() time.Duration   { return c.x.r.opts.InstructionPoll }
func (c certsRun) CancelRequested() <-chan struct{} { return c.x.cancelRequested() }

func (c certsRun) RollNodes(ctx context.Context, since time.Time, doing string) ([]string, error) {
	return c.x.rollNodes(ctx, since, doing)
}

func (c certsRun) NodeGroups(ctx context.Context) ([][]provider.MachineSpec, error) {
	return c.x.nodeGroups(ctx)
}

func (c certsRun) KubeClient(ctx context.Context) (*kubeapi.Client, error) {
	return c.x.kubeClient(ctx)
}

func (c certsRun) GetClusterSecret(ctx context.Context, k store.Key, name string) ([]byte, error) {
	return c.x.secrets.GetClusterSecret(ctx, k, name)
}

// machineWork is what the hibernate and machines families both ask of
// the run's machines and nodes.
type machineWork struct{ view }

func (m machineWork) UsesAgents() bool                  { return m.x.usesAgents() }
func (m machineWork) ProviderCluster() provider.Cluster { return m.x.pc }
func (m machineWork) ControlPlaneMachines() []provider.MachineSpec {
	return controlPlaneMachines(m.x.cl)
}

func (m machineWork) KubernetesReady(ctx context.Context, ms []provider.MachineSpec) error {
	return m.x.kubernetesReady(ctx, ms)
}

func (m machineWork) Nodes(ctx context.Context) (map[string]*store.Node, error) {
	return m.x.nodes(ctx)
}

func (m machineWork) KubeClient(ctx context.Context) (*kubeapi.Client, error) {
	return m.x.kubeClient(ctx)
}

// RemoveNode removes a node; kc nil leaves its Node object.
func (m machineWork) RemoveNode(ctx context.Context, name string, machine, record bool, kc *kubeapi.Client) error {
	var del nodeDeleter // nil, not a nil *kubeapi.Client, when kc is
	if kc != nil {
		del = kc
	}
	return m.x.removeNode(ctx, name, machine, record, del)
}

// hibernateRun is a run as hibernate.Run.
type hibernateRun struct{ machineWork }

func (h hibernateRun) Stopper() provider.Stopper                   { return h.x.stops }
func (h hibernateRun) DrainBeforeDelete(ctx context.Context) error { return h.x.drainBeforeDelete(ctx) }

func (h hibernateRun) EnsureMachines(ctx context.Context, ms []provider.MachineSpec) error {
	_, err := h.x.ensureMachines(ctx, ms)
	return err
}

func (h hibernateRun) Workers(ctx context.Context) ([]hibernate.Worker, error) {
	members, err := h.x.workerMembers(ctx)
	if err != nil {
		return nil, err
	}
	out := make([]hibernate.Worker, len(members))
	for i, m := range members {
		out[i] = hibernate.Worker{Name: m.Name, Machine: m.Machine}
	}
	return out, nil
}

// machinesRun is a run as machines.Run.
type machinesRun struct{ machineWork }

func (m machinesRun) Provider() provider.Provider              { return m.x.p }
func (m machinesRun) ControlPlaneUp(ctx context.Context) error { return m.x.controlPlaneUp(ctx) }

func (m machinesRun) EventOn(ctx context.Context, typ, reason, node, msg string) {
	m.x.eventOn(ctx, typ, reason, node, msg)
}

// Drain drains node within timeout, as a drain of the runner's
// (drain.go) shows its progress, and says how it ended.
func (m machinesRun) Drain(ctx context.Context, kc *kubeapi.Client, node string, timeout time.Duration) (string, error) {
	x := m.x
	st, err := kc.Drain(ctx, node, kubeapi.DrainOptions{Timeout: timeout, CordonedBy: x.op.ID, Poll: x.r.opts.InstructionPoll,
		Progress: func(st kubeapi.DrainStatus) { x.showProgress(ctx, node, drainProgress(st)) }})
	return drainSummary(st), err
}

var (
	_ machines.Run  = machinesRun{}
	_ hibernate.Run = hibernateRun{}
	_ certs.Run     = certsRun{}
	_ attached.Run  = attachedRun{}
	_ profile.Run   = profileRun{}
	_ backup.Run    = backupRun{}
)
