package plan

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"time"

	v1 "kiln.dev/kiln/api/v1"
	"kiln.dev/kiln/internal/kubeapi"
	"kiln.dev/kiln/internal/plan/attached"
	"kiln.dev/kiln/internal/plan/backup"
	"kiln.dev/kiln/internal/plan/certs"
	"kiln.dev/kiln/internal/plan/hibernate"
	"kiln.dev/kiln/internal/plan/install"
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

// view is a run as step.Context, and EventOn, which the machines and
// install families both ask for.
type view struct{ x *run }

func (v view) Cluster() *store.Cluster     { return v.x.cl }
func (v view) Operation() *store.Operation { return v.x.op }
func (v view) Log() *slog.Logger           { return v.x.log }
func (v view) Now() time.Time              { return v.x.r.opts.Now() }
func (v view) Note(msg string)             { v.x.note = msg }
func (v view) Canceling() bool             { return v.x.canceling() }

func (v view) Event(ctx context.Context, typ, reason, msg string) { v.x.event(ctx, typ, reason, msg) }

// EventOn appends an event about one node to the cluster's timeline; best
// effort, as every event.
func (v view) EventOn(ctx context.Context, typ, reason, node, msg string) {
	x := v.x
	if ctx.Err() != nil {
		return
	}
	e := x.newEvent(typ, reason, msg)
	e.Node = node
	if err := x.events.AppendEvent(ctx, e); err != nil {
		x.log.Warn("could not append event", "reason", reason, "err", err)
	}
}

// Progress puts what each node is doing into the running step's
// message ("c-cp-0: apiserver-ready: Running; c-default-0: installed"), so
// the operation shows every node's step. Nodes install in parallel, hence
// the lock.
func (v view) Progress(ctx context.Context, node, what string) {
	x := v.x
	x.progressMu.Lock()
	defer x.progressMu.Unlock()
	if x.progress == nil {
		x.progress = map[string]string{}
	}
	if x.progress[node] == what {
		return
	}
	x.progress[node] = what
	i := slices.IndexFunc(x.op.Steps, func(s v1.Step) bool { return s.Name == x.step })
	if i < 0 {
		return
	}
	var parts []string
	for _, n := range slices.Sorted(maps.Keys(x.progress)) {
		parts = append(parts, n+": "+x.progress[n])
	}
	x.op.Steps[i].Message = strings.Join(parts, "; ")
	if err := x.save(ctx, false); err != nil {
		x.log.Debug("could not show node progress", "err", err)
	}
}

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
	return b.x.installs().Ask(ctx, n, kind, params)
}

func (b backupRun) AskPart(ctx context.Context, n *store.Node, kind, part string, params func() (json.RawMessage, error)) (*store.Instruction, error) {
	return b.x.installs().AskPart(ctx, n, kind, part, params)
}

func (b backupRun) ControlPlaneTargets(ctx context.Context) ([]provider.MachineSpec, error) {
	return b.x.fleet().ControlPlaneTargets(ctx)
}

func (b backupRun) KubeClient(ctx context.Context) (*kubeapi.Client, error) {
	return b.x.kubeClient(ctx)
}

func (b backupRun) KubernetesReady(ctx context.Context, ms []provider.MachineSpec) error {
	return b.x.installs().KubernetesReady(ctx, ms)
}

func (b backupRun) FreshlyReady(ctx context.Context, nodes []*store.Node, since time.Time) error {
	return b.x.installs().FreshlyReady(ctx, nodes, since)
}

// certsRun is a run as certs.Run.
type certsRun struct{ view }

// CAStore is the store as changing a CA rotation needs it: it updates
// cluster secrets by compare-and-swap (store.ClusterSecretUpdater, which
// the SQL store has and store.Store does not declare). Without it, every
// step of a rotation fails saying so.
func (c certsRun) CAStore() trust.CASecretStore {
	x := c.x
	if u, ok := x.r.opts.Store.(store.ClusterSecretUpdater); ok {
		return struct {
			trust.SecretReader
			store.ClusterSecretUpdater
		}{x.r.opts.Store, u}
	}
	return noSecretUpdates{x.r.opts.Store}
}

func (c certsRun) Fence() store.Fence               { return c.x.fence }
func (c certsRun) UsesAgents() bool                 { return c.x.usesAgents() }
func (c certsRun) UsesKubeadm() bool                { return c.x.installs().UsesKubeadm() }
func (c certsRun) InstructionPoll() time.Duration   { return c.x.r.opts.InstructionPoll }
func (c certsRun) CancelRequested() <-chan struct{} { return c.x.canceled }

func (c certsRun) RollNodes(ctx context.Context, since time.Time, doing string) ([]string, error) {
	return c.x.installs().RollNodes(ctx, since, doing)
}

func (c certsRun) NodeGroups(ctx context.Context) ([][]provider.MachineSpec, error) {
	return c.x.installs().NodeGroups(ctx)
}

func (c certsRun) KubeClient(ctx context.Context) (*kubeapi.Client, error) {
	return c.x.kubeClient(ctx)
}

func (c certsRun) GetClusterSecret(ctx context.Context, k store.Key, name string) ([]byte, error) {
	return c.x.secrets.GetClusterSecret(ctx, k, name)
}

func (c certsRun) PutClusterSecret(ctx context.Context, k store.Key, name string, value []byte, cond store.Cond) error {
	return c.x.secrets.PutClusterSecret(ctx, k, name, value, cond)
}

// Agentless: the provider's machines run no agent.
func (c certsRun) Agentless() bool {
	a, ok := c.x.p.(agentless)
	return ok && a.Agentless()
}

// fleet is the run's machine work (package machines).
func (x *run) fleet() machines.Work { return machines.NewWork(machinesRun{view{x}}) }

// hibernateRun is a run as hibernate.Run.
type hibernateRun struct{ view }

func (h hibernateRun) UsesAgents() bool                  { return h.x.usesAgents() }
func (h hibernateRun) ProviderCluster() provider.Cluster { return h.x.pc }
func (h hibernateRun) Stopper() provider.Stopper         { return h.x.stops }
func (h hibernateRun) ControlPlaneMachines() []provider.MachineSpec {
	return machines.ControlPlaneMachines(h.x.cl)
}

func (h hibernateRun) DrainBeforeDelete(ctx context.Context) error {
	return h.x.fleet().DrainBeforeDelete(ctx)
}

func (h hibernateRun) KubernetesReady(ctx context.Context, ms []provider.MachineSpec) error {
	return h.x.installs().KubernetesReady(ctx, ms)
}

func (h hibernateRun) Nodes(ctx context.Context) (map[string]*store.Node, error) {
	return h.x.nodes(ctx)
}

func (h hibernateRun) KubeClient(ctx context.Context) (*kubeapi.Client, error) {
	return h.x.kubeClient(ctx)
}

func (h hibernateRun) EnsureMachines(ctx context.Context, ms []provider.MachineSpec) error {
	_, err := h.x.fleet().EnsureMachines(ctx, ms)
	return err
}

// RemoveNode removes a node; kc nil leaves its Node object.
func (h hibernateRun) RemoveNode(ctx context.Context, name string, machine, record bool, kc *kubeapi.Client) error {
	var del machines.NodeDeleter // nil, not a nil *kubeapi.Client, when kc is
	if kc != nil {
		del = kc
	}
	return h.x.fleet().RemoveNode(ctx, name, machine, record, del)
}

func (h hibernateRun) Workers(ctx context.Context) ([]hibernate.Worker, error) {
	members, err := h.x.fleet().WorkerMembers(ctx)
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
type machinesRun struct{ view }

func (m machinesRun) Provider() provider.Provider       { return m.x.p }
func (m machinesRun) ProviderCluster() provider.Cluster { return m.x.pc }
func (m machinesRun) Pools() provider.Pools             { return m.x.pools }
func (m machinesRun) UsesAgents() bool                  { return m.x.usesAgents() }
func (m machinesRun) HostsJoin() bool                   { return m.x.hostsJoin() }
func (m machinesRun) Forcing() bool                     { return m.x.forcing() }
func (m machinesRun) Fence() store.Fence                { return m.x.fence }
func (m machinesRun) NodeRecords() machines.NodeStore   { return m.x.nodeRecords }
func (m machinesRun) CancelRequested() <-chan struct{}  { return m.x.canceled }

func (m machinesRun) Timing() machines.Timing {
	o := m.x.r.opts
	return machines.Timing{NodeTimeout: o.NodeTimeout, NodePoll: o.NodePoll, InstructionPoll: o.InstructionPoll}
}

func (m machinesRun) Cancelable(ctx context.Context) (context.Context, func()) {
	return m.x.cancelable(ctx)
}

// Bootstrap is the data the cluster's machines join with; nil when they
// run no agent or the runner has no Bootstrapper.
func (m machinesRun) Bootstrap(ctx context.Context) (*provider.Bootstrap, error) {
	x := m.x
	if !x.usesAgents() || x.r.opts.Bootstrap == nil {
		return nil, nil
	}
	creds, pass, err := x.r.opts.Bootstrap.Credentials(ctx, x.cl.Key())
	if err != nil {
		return nil, fmt.Errorf("the bootstrap data of cluster %s: %w", x.cl.Name, err)
	}
	return &provider.Bootstrap{Credentials: creds, Passphrase: pass}, nil
}

// Forgetter is the runner's Agents as a NodeForgetter, when the
// cluster's nodes run agents.
func (m machinesRun) Forgetter() machines.NodeForgetter {
	if f, ok := m.x.r.opts.Agents.(NodeForgetter); ok && m.x.usesAgents() {
		return f
	}
	return nil
}

func (m machinesRun) Nodes(ctx context.Context) (map[string]*store.Node, error) {
	return m.x.nodes(ctx)
}

func (m machinesRun) KubeClient(ctx context.Context) (*kubeapi.Client, error) {
	return m.x.kubeClient(ctx)
}

func (m machinesRun) KubernetesReady(ctx context.Context, ms []provider.MachineSpec) error {
	return m.x.installs().KubernetesReady(ctx, ms)
}

func (m machinesRun) InstallNodes(ctx context.Context, ms []provider.MachineSpec, sequential bool) error {
	return m.x.installs().InstallNodes(ctx, ms, sequential)
}

func (m machinesRun) Installer(ctx context.Context) (func(ctx context.Context, i int, m provider.MachineSpec) error, error) {
	return m.x.installs().Installer(ctx)
}

func (m machinesRun) Instructions(ctx context.Context, node string) ([]*store.Instruction, error) {
	return m.x.instructions.ListInstructions(ctx, m.x.cl.Key(), node, false)
}

func (m machinesRun) Order(ctx context.Context, n *store.Node, kind, doing string, params func() (json.RawMessage, error)) (*store.Instruction, error) {
	return m.x.installs().Order(ctx, n, kind, doing, params)
}

func (m machinesRun) AskPart(ctx context.Context, n *store.Node, kind, part string, params func() (json.RawMessage, error)) (*store.Instruction, error) {
	return m.x.installs().AskPart(ctx, n, kind, part, params)
}

func (m machinesRun) SetNodeState(ctx context.Context, name, state, msg string) error {
	return m.x.installs().SetNodeState(ctx, name, state, msg)
}

// installs is the run's install work (package install).
func (x *run) installs() install.Work { return install.NewWork(installRun{view{x}}) }

// installRun is a run as install.Run.
type installRun struct{ view }

func (i installRun) UsesAgents() bool                 { return i.x.usesAgents() }
func (i installRun) HostsJoin() bool                  { return i.x.hostsJoin() }
func (i installRun) Fence() store.Fence               { return i.x.fence }
func (i installRun) Step() string                     { return i.x.step }
func (i installRun) CancelRequested() <-chan struct{} { return i.x.canceled }
func (i installRun) Secrets() trust.SecretStore       { return i.x.secrets }
func (i installRun) NodeRecords() install.NodeStore   { return i.x.nodeRecords }
func (i installRun) Instructions() install.InstructionStore {
	return i.x.instructions
}

func (i installRun) Timing() install.Timing {
	o := i.x.r.opts
	return install.Timing{NodeTimeout: o.NodeTimeout, InstructionPoll: o.InstructionPoll, AgentLost: o.AgentLost,
		CertificateTTL: o.ComponentCertificateTTL}
}

// ProgressOf is what the running step's message says node is doing.
func (i installRun) ProgressOf(node string) string {
	x := i.x
	x.progressMu.Lock()
	defer x.progressMu.Unlock()
	return x.progress[node]
}

// Notify wakes node's agent session, when the runner has Agents.
func (i installRun) Notify(node string) {
	if a := i.x.r.opts.Agents; a != nil {
		a.Notify(i.x.cl.Key(), node)
	}
}

func (i installRun) Endpoint(ctx context.Context) (string, error) { return i.x.endpoint(ctx) }

func (i installRun) KubeClient(ctx context.Context) (*kubeapi.Client, error) {
	return i.x.kubeClient(ctx)
}

func (i installRun) ControlPlaneTargets(ctx context.Context) ([]provider.MachineSpec, error) {
	return i.x.fleet().ControlPlaneTargets(ctx)
}

func (i installRun) WorkerTargets(ctx context.Context) ([]provider.MachineSpec, error) {
	return i.x.fleet().WorkerTargets(ctx)
}

func (i installRun) Converge(ctx context.Context, want []provider.MachineSpec, target, what string, configure bool) error {
	return i.x.fleet().Converge(ctx, want, target, what, configure)
}

func (i installRun) WatchMachines(ctx context.Context, names []string) (install.Watch, error) {
	w, err := i.x.fleet().WatchMachines(ctx, names)
	if err != nil {
		return nil, err // not a nil *machines.Watch
	}
	return w, nil
}

var (
	_ install.Run   = installRun{}
	_ machines.Run  = machinesRun{}
	_ hibernate.Run = hibernateRun{}
	_ certs.Run     = certsRun{}
	_ attached.Run  = attachedRun{}
	_ profile.Run   = profileRun{}
	_ backup.Run    = backupRun{}
)
