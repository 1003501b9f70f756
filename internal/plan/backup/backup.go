// Package backup is the step family of backups and restores
// (docs/backups.md): a control-plane node's agent takes an etcd snapshot,
// kilnd seals it into the backup location (package snapshots) and reads
// it back; a restore stages, stops, restores and starts every
// control-plane member at once. Its step lists (backup, restore, create
// from a backup) stay the runner's.
package backup

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	v1 "kiln.dev/kiln/api/v1"
	distrolocal "kiln.dev/kiln/internal/distro/local"
	"kiln.dev/kiln/internal/failure"
	"kiln.dev/kiln/internal/kubeapi"
	"kiln.dev/kiln/internal/plan/step"
	"kiln.dev/kiln/internal/provider"
	"kiln.dev/kiln/internal/snapshots"
	"kiln.dev/kiln/internal/store"
)

// Run is what the backup and restore steps need of their run.
type Run interface {
	step.Context
	// Attached and UsesAgents say whose etcd the cluster runs: an
	// attached cluster's is not Kiln's; without agents there is none.
	Attached() bool
	UsesAgents() bool
	// Snapshots keeps the snapshots; nil when this kilnd keeps none.
	Snapshots() *snapshots.Vault
	// Backups are the backups' records.
	Backups() Store
	// Node and Nodes read the cluster's node records.
	Node(ctx context.Context, name string) (*store.Node, error)
	Nodes(ctx context.Context) (map[string]*store.Node, error)
	// Ask gives a node an instruction that leaves its state as it is and
	// waits for its result; AskPart is Ask for one of several a step
	// gives the node, part telling them apart.
	Ask(ctx context.Context, n *store.Node, kind string, params func() (json.RawMessage, error)) (*store.Instruction, error)
	AskPart(ctx context.Context, n *store.Node, kind, part string, params func() (json.RawMessage, error)) (*store.Instruction, error)
	// ControlPlaneTargets are the control-plane machines the run acts on.
	ControlPlaneTargets(ctx context.Context) ([]provider.MachineSpec, error)
	// KubeClient is the cluster's API as an admin.
	KubeClient(ctx context.Context) (*kubeapi.Client, error)
	// KubernetesReady waits until Kubernetes reports machines' nodes Ready.
	KubernetesReady(ctx context.Context, machines []provider.MachineSpec) error
	// FreshlyReady waits until every node's kubelet has said it is Ready
	// since since.
	FreshlyReady(ctx context.Context, nodes []*store.Node, since time.Time) error
}

// Steps are the backup family's steps of one run.
type Steps struct {
	r  Run
	cl *store.Cluster
	op *store.Operation
}

// New returns the backup steps of the run r.
func New(r Run) Steps { return Steps{r: r, cl: r.Cluster(), op: r.Operation()} }

// Store is what the backup steps need of the backups' records.
type Store interface {
	GetBackup(ctx context.Context, project, cluster, name string) (*store.Backup, error)
	PutBackup(ctx context.Context, b *store.Backup, c store.Cond) error
	ListBackups(ctx context.Context, project, cluster string, pg store.Page) ([]*store.Backup, string, error)
	DeleteBackup(ctx context.Context, project, cluster, name string, c store.Cond) error
}

// source names the backup the run takes or restores: the
// operation's of this cluster, or spec.restoreFrom's.
func (s Steps) source() (cluster, name string) {
	if rf := s.cl.Spec.RestoreFrom; s.op.Kind == v1.KindCreate && rf != nil {
		return rf.Cluster, rf.Backup
	}
	return s.cl.Name, s.op.Backup
}

// canBackUp refuses clusters whose etcd Kiln's agents do not run.
func (s Steps) canBackUp() error {
	switch {
	case s.r.Attached():
		return failure.Terminal(v1.CodeInvalidParameter, "cluster %s is attached: Kiln does not reach its etcd, so it takes no backup of it", s.cl.Name)
	case !s.r.UsesAgents():
		return failure.Terminal(v1.CodeInvalidParameter, "the %s provider's clusters run no etcd: there is nothing to back up", s.cl.Spec.Provider)
	case s.r.Snapshots() == nil:
		return failure.Terminal(v1.CodeInternal, "this kilnd keeps no backups (no snapshot vault configured)")
	}
	return nil
}

// read reads the run's backup record.
func (s Steps) read(ctx context.Context) (*store.Backup, error) {
	of, name := s.source()
	b, err := s.r.Backups().GetBackup(ctx, s.cl.Project, of, name)
	if errors.Is(err, store.ErrNotFound) {
		return nil, failure.Terminal(v1.CodeNotFound, "backup %s of cluster %s does not exist", name, of)
	}
	return b, err
}

// TakeSnapshot (take-snapshot) records the backup (Creating), has the first Ready
// control-plane node's agent take an etcd snapshot and upload it, and
// records what the agent says it took.
func (s Steps) TakeSnapshot(ctx context.Context) error {
	if err := s.canBackUp(); err != nil {
		return err
	}
	k := s.cl.Key()
	b, err := s.r.Backups().GetBackup(ctx, k.Project, k.Name, s.op.Backup)
	switch {
	case errors.Is(err, store.ErrNotFound):
		if b, err = s.newBackup(ctx); err != nil {
			return err
		}
	case err != nil:
		return err
	case b.Operation != s.op.ID:
		return failure.Terminal(v1.CodeConflict, "backup %s of cluster %s exists already (taken by operation %s)", b.Name, k.Name, b.Operation)
	}
	if b.SHA256 != "" {
		return step.Skipped("the snapshot of backup %s was taken on node %s", b.Name, b.Node)
	}
	n, err := s.r.Node(ctx, b.Node)
	if err != nil {
		return fmt.Errorf("node %s: %w", b.Node, err)
	}
	s.r.Progress(ctx, n.Name, "taking an etcd snapshot")
	in, err := s.r.Ask(ctx, n, v1.InstructionEtcdSnapshot, func() (json.RawMessage, error) {
		return json.Marshal(v1.EtcdSnapshotParams{Backup: b.Name, KubernetesVersion: s.cl.Spec.KubernetesVersion})
	})
	if err != nil {
		return err
	}
	var res v1.EtcdSnapshotResult
	if err := json.Unmarshal(in.Result.Data, &res); err != nil || res.SHA256 == "" {
		return failure.Terminal(v1.CodeProviderError, "node %s took the snapshot but said nothing of it (result data %q): is its agent older than this kilnd?", n.Name, in.Result.Data)
	}
	b.Size, b.SHA256, b.Etcd = res.Size, res.SHA256, &res.Etcd
	if err := s.r.Backups().PutBackup(ctx, b, store.Cond{IfMatch: b.ETag}); err != nil {
		return fmt.Errorf("record backup %s: %w", b.Name, err)
	}
	s.r.Note(fmt.Sprintf("node %s took a snapshot of %d bytes at etcd revision %d", n.Name, res.Size, res.Etcd.Revision))
	return nil
}

// newBackup records the operation's backup, Creating, on the first
// control-plane node that is Ready.
func (s Steps) newBackup(ctx context.Context) (*store.Backup, error) {
	k := s.cl.Key()
	node, err := s.snapshotNode(ctx)
	if err != nil {
		return nil, err
	}
	loc, err := s.r.Snapshots().Location(ctx, k.Project)
	if err != nil {
		return nil, failure.Terminal(v1.CodeInvalidParameter, "the backup location of project %s: %v", k.Project, err)
	}
	net := s.cl.Spec.Network
	b := &store.Backup{
		Project:    k.Project,
		ClusterUID: s.cl.UID,
		Object:     snapshots.ObjectKey(k.Project, k.Name, s.cl.UID, s.op.Backup),
		Backup: v1.Backup{
			Name: s.op.Backup, Cluster: k.Name, State: v1.BackupCreating, Operation: s.op.ID,
			Scheduled: s.op.Reason != "", Node: node, Location: loc.String(),
			KubernetesVersion: s.cl.Spec.KubernetesVersion, Network: &net,
		},
	}
	if err := s.r.Backups().PutBackup(ctx, b, store.Cond{IfNoneMatch: "*"}); err != nil {
		return nil, fmt.Errorf("record backup %s: %w", b.Name, err)
	}
	return b, nil
}

// snapshotNode is the first control-plane node, by name, that is Ready.
func (s Steps) snapshotNode(ctx context.Context) (string, error) {
	nodes, err := s.r.Nodes(ctx)
	if err != nil {
		return "", err
	}
	var states []string
	for _, name := range slices.Sorted(maps.Keys(nodes)) {
		n := nodes[name]
		if n.Role != v1.RoleControlPlane {
			continue
		}
		if n.State == v1.NodeReady {
			return name, nil
		}
		states = append(states, name+" is "+n.State)
	}
	if len(states) == 0 {
		return "", failure.Terminal(v1.CodeInvalidParameter, "cluster %s has no control-plane node to take an etcd snapshot on", s.cl.Name)
	}
	return "", failure.Retryable(v1.CodeUnavailable, nil, "no control-plane node is READY to take an etcd snapshot on (%s)", strings.Join(states, "; "))
}

// Check (check-backup) reads the stored snapshot back to its end. A backup's is
// compared with what the agent took, then the backup is Succeeded; a
// restore's with its record: a snapshot changed, cut or lost since fails
// the restore here, before anything is stopped.
func (s Steps) Check(ctx context.Context) error {
	if err := s.canBackUp(); err != nil {
		return err
	}
	b, err := s.read(ctx)
	if err != nil {
		return err
	}
	if s.op.Kind != v1.KindBackup {
		return s.checkRestorable(ctx, b)
	}
	if b.State == v1.BackupSucceeded {
		return step.Skipped("backup %s was checked", b.Name)
	}
	got, err := s.r.Snapshots().Check(ctx, b)
	if err != nil {
		if snapshots.Damaged(err) {
			return failure.Terminal(v1.CodeProviderError, "backup %s as stored is not the snapshot node %s took: %v", b.Name, b.Node, err)
		}
		return failure.Retryable(v1.CodeUnavailable, err, "read backup %s back from %s: %v", b.Name, b.Location, err)
	}
	now := s.r.Now().UTC()
	b.State, b.EndTime, b.Keys = v1.BackupSucceeded, &now, got.Keys
	if err := s.r.Backups().PutBackup(ctx, b, store.Cond{IfMatch: b.ETag}); err != nil {
		return fmt.Errorf("record backup %s: %w", b.Name, err)
	}
	s.r.Event(ctx, "Normal", "BackupSucceeded", fmt.Sprintf("backup %s: %d bytes at etcd revision %d, sealed in %s", b.Name, got.Size, etcdRevision(b), b.Location))
	s.r.Note(fmt.Sprintf("%d bytes, sha256 %s, read back from %s", got.Size, got.SHA256, b.Location))
	return nil
}

func etcdRevision(b *store.Backup) int64 {
	if b.Etcd == nil {
		return 0
	}
	return b.Etcd.Revision
}

// checkRestorable refuses a backup that cannot be restored on this
// cluster, then reads its snapshot back.
func (s Steps) checkRestorable(ctx context.Context, b *store.Backup) error {
	switch {
	case b.State != v1.BackupSucceeded:
		return failure.Terminal(v1.CodeConflict, "backup %s is %s: only a Succeeded backup is restored", b.Name, b.State)
	case b.KubernetesVersion != "" && b.KubernetesVersion != s.cl.Spec.KubernetesVersion:
		return failure.Terminal(v1.CodeInvalidParameter, "backup %s was taken of Kubernetes %s, cluster %s runs %s: restore it on the same version",
			b.Name, b.KubernetesVersion, s.cl.Name, s.cl.Spec.KubernetesVersion)
	}
	got, err := s.r.Snapshots().Check(ctx, b)
	if err != nil {
		if snapshots.Damaged(err) {
			return failure.Terminal(v1.CodeInvalidParameter, "backup %s cannot be restored: its stored snapshot does not check out (%v); nothing was stopped", b.Name, err)
		}
		if errors.Is(err, snapshots.ErrElsewhere) {
			return failure.Terminal(v1.CodeConflict, "%v; nothing was stopped", err)
		}
		return failure.Retryable(v1.CodeUnavailable, err, "read backup %s from %s: %v", b.Name, b.Location, err)
	}
	s.r.Note(fmt.Sprintf("backup %s checks out: %d bytes, sha256 %s", b.Name, got.Size, got.SHA256))
	return nil
}

// Prune (prune-backups) deletes the cluster's oldest scheduled backups beyond
// spec.backup.keep, once this one succeeded. A user's backups stay.
func (s Steps) Prune(ctx context.Context) error {
	if s.op.Reason == "" {
		return step.Skipped("backup %s was asked for: only scheduled backups are pruned", s.op.Backup)
	}
	keep := v1.DefaultBackupKeep
	if s := s.cl.Spec.Backup; s != nil && s.Keep > 0 {
		keep = s.Keep
	}
	all, err := listAll(ctx, s.r.Backups(), s.cl.Project, s.cl.Name)
	if err != nil {
		return err
	}
	var pruned []string
	kept := 0
	for _, b := range all { // newest first
		if !b.Scheduled || b.State == v1.BackupCreating {
			continue
		}
		if b.State == v1.BackupSucceeded && kept < keep {
			kept++
			continue
		}
		if b.State == v1.BackupFailed && b.CreatedAt.After(s.r.Now().Add(-7*24*time.Hour)) {
			continue // a recent failure stays visible for a week
		}
		if err := s.r.Snapshots().Delete(ctx, b); err != nil {
			return failure.Retryable(v1.CodeUnavailable, err, "prune backup %s: %v", b.Name, err)
		}
		if err := s.r.Backups().DeleteBackup(ctx, b.Project, b.Cluster, b.Name, store.Cond{IfMatch: b.ETag}); err != nil && !errors.Is(err, store.ErrNotFound) {
			return fmt.Errorf("prune backup %s: %w", b.Name, err)
		}
		pruned = append(pruned, b.Name)
	}
	if len(pruned) == 0 {
		return step.Skipped("%d scheduled backup(s), keep %d: none pruned", kept, keep)
	}
	s.r.Event(ctx, "Normal", "BackupsPruned", fmt.Sprintf("pruned %s: spec.backup.keep is %d", strings.Join(pruned, ", "), keep))
	s.r.Note("pruned " + strings.Join(pruned, ", "))
	return nil
}

// listAll reads every backup of a cluster, newest first.
func listAll(ctx context.Context, st Store, project, cluster string) ([]*store.Backup, error) {
	var out []*store.Backup
	pg := store.Page{Limit: 500}
	for {
		bs, next, err := st.ListBackups(ctx, project, cluster, pg)
		if err != nil {
			return nil, fmt.Errorf("list backups of cluster %s: %w", cluster, err)
		}
		out = append(out, bs...)
		if next == "" {
			return out, nil
		}
		pg.Token = next
	}
}

// Fail marks the run's backup Failed with why, once its operation
// failed or was canceled, and deletes what may have been stored of it: a
// failed backup never stands in for a good one.
func (s Steps) Fail(ctx context.Context, why string) {
	if s.op.Kind != v1.KindBackup || s.r.Snapshots() == nil {
		return
	}
	b, err := s.r.Backups().GetBackup(ctx, s.cl.Project, s.cl.Name, s.op.Backup)
	if err != nil || b.State != v1.BackupCreating {
		return
	}
	if err := s.r.Snapshots().Delete(ctx, b); err != nil {
		s.r.Log().Warn("could not delete the failed backup's snapshot", "backup", b.Name, "err", err)
	}
	now := s.r.Now().UTC()
	b.State, b.Error, b.EndTime = v1.BackupFailed, why, &now
	if err := s.r.Backups().PutBackup(ctx, b, store.Cond{IfMatch: b.ETag}); err != nil {
		s.r.Log().Warn("could not record the failed backup", "backup", b.Name, "err", err)
	}
}

// restoreTargets are the control-plane nodes a restore acts on, with the
// etcd cluster their restored members make.
func (s Steps) restoreTargets(ctx context.Context) ([]*store.Node, string, error) {
	cps, err := s.r.ControlPlaneTargets(ctx)
	if err != nil {
		return nil, "", err
	}
	var nodes []*store.Node
	var members []string
	for _, m := range cps {
		n, err := s.r.Node(ctx, m.Name)
		if err != nil {
			return nil, "", fmt.Errorf("control-plane node %s: %w", m.Name, err)
		}
		if n.Address == "" {
			return nil, "", failure.Retryable(v1.CodeUnavailable, nil, "control-plane node %s has no address yet", n.Name)
		}
		nodes = append(nodes, n)
		members = append(members, n.Name+"="+distrolocal.EtcdPeerURL(n.Address))
	}
	if len(nodes) == 0 {
		return nil, "", failure.Terminal(v1.CodeInvalidParameter, "cluster %s has no control-plane node to restore", s.cl.Name)
	}
	return nodes, strings.Join(members, ","), nil
}

// restorePhase runs one phase of the restore on every control-plane node,
// all at once (etcd's members must all be stopped before any is restored,
// and all restored before a quorum can start).
func (s Steps) restorePhase(ctx context.Context, phase, doing string) error {
	if err := s.canBackUp(); err != nil {
		return err
	}
	nodes, members, err := s.restoreTargets(ctx)
	if err != nil {
		return err
	}
	return s.restoreOn(ctx, nodes, members, phase, doing)
}

// restoreOn runs phase on nodes, all at once.
func (s Steps) restoreOn(ctx context.Context, nodes []*store.Node, members, phase, doing string) error {
	b, err := s.read(ctx)
	if err != nil {
		return err
	}
	p := v1.EtcdRestoreParams{Cluster: b.Cluster, Backup: b.Name, Phase: phase, SHA256: b.SHA256, Size: b.Size,
		InitialCluster: members, Token: "restore-" + s.op.ID, KubernetesVersion: s.cl.Spec.KubernetesVersion}
	raw, err := json.Marshal(p)
	if err != nil {
		return err
	}
	errs := make([]error, len(nodes))
	done := make(chan int)
	for i, n := range nodes {
		go func() {
			s.r.Progress(ctx, n.Name, doing)
			_, errs[i] = s.r.AskPart(ctx, n, v1.InstructionEtcdRestore, phase, func() (json.RawMessage, error) { return raw, nil })
			if errs[i] == nil {
				s.r.Progress(ctx, n.Name, phase+" done")
			}
			done <- i
		}()
	}
	for range nodes {
		<-done
	}
	if err := errors.Join(errs...); err != nil {
		return err
	}
	if phase == v1.RestoreEtcd {
		s.r.Event(ctx, "Normal", "EtcdRestored", fmt.Sprintf("etcd restored from backup %s (revision %d) on %d member(s)", b.Name, etcdRevision(b), len(nodes)))
	}
	return nil
}

func (s Steps) StageSnapshot(ctx context.Context) error {
	return s.restorePhase(ctx, v1.RestoreStage, "downloading and checking the snapshot")
}

func (s Steps) StopControlPlane(ctx context.Context) error {
	return s.restorePhase(ctx, v1.RestoreStop, "stopping the control plane")
}

func (s Steps) RestoreEtcd(ctx context.Context) error {
	return s.restorePhase(ctx, v1.RestoreEtcd, "restoring etcd")
}

// StartControlPlane (start-control-plane) starts the control plane again, restarts every
// node's kubelet (so that it registers its node with the restored API,
// which may hold no Node of it), and waits until Kubernetes reports the
// control-plane nodes Ready.
func (s Steps) StartControlPlane(ctx context.Context) error {
	if err := s.restorePhase(ctx, v1.RestoreStart, "starting the control plane"); err != nil {
		return err
	}
	all, err := s.r.Nodes(ctx)
	if err != nil {
		return err
	}
	var installed []*store.Node
	for _, name := range slices.Sorted(maps.Keys(all)) {
		if n := all[name]; n.Role != "" && n.State != v1.NodeDiscovered && n.State != v1.NodeApproved {
			installed = append(installed, n)
		}
	}
	// A margin for the nodes' clocks, which the heartbeats are of.
	since := s.r.Now().Add(-2 * time.Second)
	if err := s.restoreOn(ctx, installed, "", v1.RestoreKubelet, "restarting the kubelet"); err != nil {
		return err
	}
	if err := s.r.FreshlyReady(ctx, installed, since); err != nil {
		return err
	}
	cps, err := s.r.ControlPlaneTargets(ctx)
	if err != nil {
		return err
	}
	return s.r.KubernetesReady(ctx, cps)
}

// RemoveForeignNodes (remove-foreign-nodes) deletes the Node objects the backup brought of the
// cluster it was taken of: their machines are not this cluster's.
func (s Steps) RemoveForeignNodes(ctx context.Context) error {
	kc, err := s.r.KubeClient(ctx)
	if err != nil {
		return err
	}
	defer kc.Close()
	nodes, err := kc.ListNodes(ctx)
	if err != nil {
		return failure.Retryable(v1.CodeUnavailable, err, "list the cluster's nodes: %v", err)
	}
	ours, err := s.r.Nodes(ctx)
	if err != nil {
		return err
	}
	var removed []string
	for _, n := range nodes {
		if _, ok := ours[n.Name]; ok {
			continue
		}
		if err := kc.DeleteNode(ctx, n.Name); err != nil {
			return failure.Retryable(v1.CodeUnavailable, err, "delete node %s, which came with the backup: %v", n.Name, err)
		}
		removed = append(removed, n.Name)
	}
	if len(removed) == 0 {
		return step.Skipped("the backup brought no node of another cluster")
	}
	s.r.Note("removed the nodes that came with the backup: " + strings.Join(removed, ", "))
	return nil
}
