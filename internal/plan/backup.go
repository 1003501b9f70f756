package plan

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
	"kiln.dev/kiln/internal/distro/kubeapi"
	distrolocal "kiln.dev/kiln/internal/distro/local"
	"kiln.dev/kiln/internal/failure"
	"kiln.dev/kiln/internal/plan/step"
	"kiln.dev/kiln/internal/snapshots"
	"kiln.dev/kiln/internal/store"
)

// Backup and restore steps (docs/backups.md).
const (
	// StepTakeSnapshot has a control-plane node's agent take an etcd
	// snapshot and upload it; kilnd seals it into the backup location.
	StepTakeSnapshot = "take-snapshot"
	// StepCheckBackup reads the stored snapshot back and checks it against
	// what was taken (a backup), or against its record before anything is
	// stopped (a restore).
	StepCheckBackup = "check-backup"
	// StepPruneBackups deletes the scheduled backups beyond spec.backup.keep.
	StepPruneBackups = "prune-backups"
	// StepStageSnapshot has every control-plane node download the snapshot
	// and check it; nothing is stopped yet.
	StepStageSnapshot = "stage-snapshot"
	// StepStopControlPlane stops the control plane's components, etcd last,
	// on every control-plane node.
	StepStopControlPlane = "stop-control-plane"
	// StepRestoreEtcd restores every member's data from the snapshot, as
	// one new etcd cluster, and starts etcd.
	StepRestoreEtcd = "restore-etcd"
	// StepStartControlPlane starts the other components again and waits
	// until they are healthy.
	StepStartControlPlane = "start-control-plane"
	// StepRemoveForeignNodes deletes, from a cluster made from another's
	// backup, the Node objects of that cluster's machines.
	StepRemoveForeignNodes = "remove-foreign-nodes"
)

// backupSteps take a backup.
var backupSteps = []string{StepTakeSnapshot, StepCheckBackup, StepPruneBackups}

// restoreSteps put a backup back: nothing is stopped until the snapshot
// is checked and staged on every control-plane node.
var restoreSteps = []string{
	StepCheckBackup,
	StepStageSnapshot,
	StepStopControlPlane,
	StepRestoreEtcd,
	StepStartControlPlane,
	StepWaitNodesReady,
}

// CreateFromBackupSteps make a cluster whose etcd is restored from a
// backup once its control plane is installed, before its workers join.
func CreateFromBackupSteps() []string {
	i := slices.Index(createSteps, StepInstallControlPlane) + 1
	restore := []string{StepCheckBackup, StepStageSnapshot, StepStopControlPlane, StepRestoreEtcd, StepStartControlPlane, StepRemoveForeignNodes}
	return slices.Concat(createSteps[:i], restore, createSteps[i:])
}

// BackupStore is what the backup steps need of the backups' records.
type BackupStore interface {
	GetBackup(ctx context.Context, project, cluster, name string) (*store.Backup, error)
	PutBackup(ctx context.Context, b *store.Backup, c store.Cond) error
	ListBackups(ctx context.Context, project, cluster string, pg store.Page) ([]*store.Backup, string, error)
	DeleteBackup(ctx context.Context, project, cluster, name string, c store.Cond) error
}

// backupSource names the backup the run takes or restores: the
// operation's of this cluster, or spec.restoreFrom's.
func (x *run) backupSource() (cluster, name string) {
	if rf := x.cl.Spec.RestoreFrom; x.op.Kind == v1.KindCreate && rf != nil {
		return rf.Cluster, rf.Backup
	}
	return x.cl.Name, x.op.Backup
}

// canBackUp refuses clusters whose etcd Kiln's agents do not run.
func (x *run) canBackUp() error {
	switch {
	case x.attached():
		return failure.Terminal(v1.CodeInvalidParameter, "cluster %s is attached: Kiln does not reach its etcd, so it takes no backup of it", x.cl.Name)
	case !x.usesAgents():
		return failure.Terminal(v1.CodeInvalidParameter, "the %s provider's clusters run no etcd: there is nothing to back up", x.cl.Spec.Provider)
	case x.r.opts.Snapshots == nil:
		return failure.Terminal(v1.CodeInternal, "this kilnd keeps no backups (no snapshot vault configured)")
	}
	return nil
}

// readBackup reads the run's backup record.
func (x *run) readBackup(ctx context.Context) (*store.Backup, error) {
	of, name := x.backupSource()
	b, err := x.r.opts.Store.GetBackup(ctx, x.cl.Project, of, name)
	if errors.Is(err, store.ErrNotFound) {
		return nil, failure.Terminal(v1.CodeNotFound, "backup %s of cluster %s does not exist", name, of)
	}
	return b, err
}

// takeSnapshot records the backup (Creating), has the first Ready
// control-plane node's agent take an etcd snapshot and upload it, and
// records what the agent says it took.
func (x *run) takeSnapshot(ctx context.Context) error {
	if err := x.canBackUp(); err != nil {
		return err
	}
	k := x.cl.Key()
	b, err := x.r.opts.Store.GetBackup(ctx, k.Project, k.Name, x.op.Backup)
	switch {
	case errors.Is(err, store.ErrNotFound):
		if b, err = x.newBackup(ctx); err != nil {
			return err
		}
	case err != nil:
		return err
	case b.Operation != x.op.ID:
		return failure.Terminal(v1.CodeConflict, "backup %s of cluster %s exists already (taken by operation %s)", b.Name, k.Name, b.Operation)
	}
	if b.SHA256 != "" {
		return step.Skipped("the snapshot of backup %s was taken on node %s", b.Name, b.Node)
	}
	n, err := x.nodeRecords.GetNode(ctx, k, b.Node)
	if err != nil {
		return fmt.Errorf("node %s: %w", b.Node, err)
	}
	x.showProgress(ctx, n.Name, "taking an etcd snapshot")
	in, err := x.ask(ctx, n, v1.InstructionEtcdSnapshot, func() (json.RawMessage, error) {
		return json.Marshal(v1.EtcdSnapshotParams{Backup: b.Name, KubernetesVersion: x.cl.Spec.KubernetesVersion})
	})
	if err != nil {
		return err
	}
	var res v1.EtcdSnapshotResult
	if err := json.Unmarshal(in.Result.Data, &res); err != nil || res.SHA256 == "" {
		return failure.Terminal(v1.CodeProviderError, "node %s took the snapshot but said nothing of it (result data %q): is its agent older than this kilnd?", n.Name, in.Result.Data)
	}
	b.Size, b.SHA256, b.Etcd = res.Size, res.SHA256, &res.Etcd
	if err := x.r.opts.Store.PutBackup(ctx, b, store.Cond{IfMatch: b.ETag}); err != nil {
		return fmt.Errorf("record backup %s: %w", b.Name, err)
	}
	x.note = fmt.Sprintf("node %s took a snapshot of %d bytes at etcd revision %d", n.Name, res.Size, res.Etcd.Revision)
	return nil
}

// newBackup records the operation's backup, Creating, on the first
// control-plane node that is Ready.
func (x *run) newBackup(ctx context.Context) (*store.Backup, error) {
	k := x.cl.Key()
	node, err := x.snapshotNode(ctx)
	if err != nil {
		return nil, err
	}
	loc, err := x.r.opts.Snapshots.Location(ctx, k.Project)
	if err != nil {
		return nil, failure.Terminal(v1.CodeInvalidParameter, "the backup location of project %s: %v", k.Project, err)
	}
	net := x.cl.Spec.Network
	b := &store.Backup{
		Project:    k.Project,
		ClusterUID: x.cl.UID,
		Object:     snapshots.ObjectKey(k.Project, k.Name, x.cl.UID, x.op.Backup),
		Backup: v1.Backup{
			Name: x.op.Backup, Cluster: k.Name, State: v1.BackupCreating, Operation: x.op.ID,
			Scheduled: x.op.Reason != "", Node: node, Location: loc.String(),
			KubernetesVersion: x.cl.Spec.KubernetesVersion, Network: &net,
		},
	}
	if err := x.r.opts.Store.PutBackup(ctx, b, store.Cond{IfNoneMatch: "*"}); err != nil {
		return nil, fmt.Errorf("record backup %s: %w", b.Name, err)
	}
	return b, nil
}

// snapshotNode is the first control-plane node, by name, that is Ready.
func (x *run) snapshotNode(ctx context.Context) (string, error) {
	nodes, err := x.nodes(ctx)
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
		return "", failure.Terminal(v1.CodeInvalidParameter, "cluster %s has no control-plane node to take an etcd snapshot on", x.cl.Name)
	}
	return "", failure.Retryable(v1.CodeUnavailable, nil, "no control-plane node is READY to take an etcd snapshot on (%s)", strings.Join(states, "; "))
}

// checkBackup reads the stored snapshot back to its end. A backup's is
// compared with what the agent took, then the backup is Succeeded; a
// restore's with its record: a snapshot changed, cut or lost since fails
// the restore here, before anything is stopped.
func (x *run) checkBackup(ctx context.Context) error {
	if err := x.canBackUp(); err != nil {
		return err
	}
	b, err := x.readBackup(ctx)
	if err != nil {
		return err
	}
	if x.op.Kind != v1.KindBackup {
		return x.checkRestorable(ctx, b)
	}
	if b.State == v1.BackupSucceeded {
		return step.Skipped("backup %s was checked", b.Name)
	}
	got, err := x.r.opts.Snapshots.Check(ctx, b)
	if err != nil {
		if snapshots.Damaged(err) {
			return failure.Terminal(v1.CodeProviderError, "backup %s as stored is not the snapshot node %s took: %v", b.Name, b.Node, err)
		}
		return failure.Retryable(v1.CodeUnavailable, err, "read backup %s back from %s: %v", b.Name, b.Location, err)
	}
	now := x.r.opts.Now().UTC()
	b.State, b.EndTime, b.Keys = v1.BackupSucceeded, &now, got.Keys
	if err := x.r.opts.Store.PutBackup(ctx, b, store.Cond{IfMatch: b.ETag}); err != nil {
		return fmt.Errorf("record backup %s: %w", b.Name, err)
	}
	x.event(ctx, "Normal", "BackupSucceeded", fmt.Sprintf("backup %s: %d bytes at etcd revision %d, sealed in %s", b.Name, got.Size, etcdRevision(b), b.Location))
	x.note = fmt.Sprintf("%d bytes, sha256 %s, read back from %s", got.Size, got.SHA256, b.Location)
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
func (x *run) checkRestorable(ctx context.Context, b *store.Backup) error {
	switch {
	case b.State != v1.BackupSucceeded:
		return failure.Terminal(v1.CodeConflict, "backup %s is %s: only a Succeeded backup is restored", b.Name, b.State)
	case b.KubernetesVersion != "" && b.KubernetesVersion != x.cl.Spec.KubernetesVersion:
		return failure.Terminal(v1.CodeInvalidParameter, "backup %s was taken of Kubernetes %s, cluster %s runs %s: restore it on the same version",
			b.Name, b.KubernetesVersion, x.cl.Name, x.cl.Spec.KubernetesVersion)
	}
	got, err := x.r.opts.Snapshots.Check(ctx, b)
	if err != nil {
		if snapshots.Damaged(err) {
			return failure.Terminal(v1.CodeInvalidParameter, "backup %s cannot be restored: its stored snapshot does not check out (%v); nothing was stopped", b.Name, err)
		}
		if errors.Is(err, snapshots.ErrElsewhere) {
			return failure.Terminal(v1.CodeConflict, "%v; nothing was stopped", err)
		}
		return failure.Retryable(v1.CodeUnavailable, err, "read backup %s from %s: %v", b.Name, b.Location, err)
	}
	x.note = fmt.Sprintf("backup %s checks out: %d bytes, sha256 %s", b.Name, got.Size, got.SHA256)
	return nil
}

// pruneBackups deletes the cluster's oldest scheduled backups beyond
// spec.backup.keep, once this one succeeded. A user's backups stay.
func (x *run) pruneBackups(ctx context.Context) error {
	if x.op.Reason == "" {
		return step.Skipped("backup %s was asked for: only scheduled backups are pruned", x.op.Backup)
	}
	keep := v1.DefaultBackupKeep
	if s := x.cl.Spec.Backup; s != nil && s.Keep > 0 {
		keep = s.Keep
	}
	all, err := listAll(ctx, x.r.opts.Store, x.cl.Project, x.cl.Name)
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
		if b.State == v1.BackupFailed && b.CreatedAt.After(x.r.opts.Now().Add(-7*24*time.Hour)) {
			continue // a recent failure stays visible for a week
		}
		if err := x.r.opts.Snapshots.Delete(ctx, b); err != nil {
			return failure.Retryable(v1.CodeUnavailable, err, "prune backup %s: %v", b.Name, err)
		}
		if err := x.r.opts.Store.DeleteBackup(ctx, b.Project, b.Cluster, b.Name, store.Cond{IfMatch: b.ETag}); err != nil && !errors.Is(err, store.ErrNotFound) {
			return fmt.Errorf("prune backup %s: %w", b.Name, err)
		}
		pruned = append(pruned, b.Name)
	}
	if len(pruned) == 0 {
		return step.Skipped("%d scheduled backup(s), keep %d: none pruned", kept, keep)
	}
	x.event(ctx, "Normal", "BackupsPruned", fmt.Sprintf("pruned %s: spec.backup.keep is %d", strings.Join(pruned, ", "), keep))
	x.note = "pruned " + strings.Join(pruned, ", ")
	return nil
}

// listAll reads every backup of a cluster, newest first.
func listAll(ctx context.Context, st BackupStore, project, cluster string) ([]*store.Backup, error) {
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

// leavesCluster reports an operation that changed nothing of the
// cluster: a backup, or a restore that stopped nothing yet (its backup
// did not check out). When it fails or is canceled the cluster is as it
// was, Succeeded; the operation (and a backup's record) says what went
// wrong.
func (x *run) leavesCluster() bool {
	switch x.op.Kind {
	case v1.KindBackup:
		return true
	case v1.KindRestore:
		i := slices.IndexFunc(x.op.Steps, func(s v1.Step) bool { return s.Name == StepStopControlPlane })
		return i >= 0 && x.op.Steps[i].State == v1.StepPending
	}
	return false
}

// failBackup marks the run's backup Failed with why, once its operation
// failed or was canceled, and deletes what may have been stored of it: a
// failed backup never stands in for a good one.
func (x *run) failBackup(ctx context.Context, why string) {
	if x.op.Kind != v1.KindBackup || x.r.opts.Snapshots == nil {
		return
	}
	b, err := x.r.opts.Store.GetBackup(ctx, x.cl.Project, x.cl.Name, x.op.Backup)
	if err != nil || b.State != v1.BackupCreating {
		return
	}
	if err := x.r.opts.Snapshots.Delete(ctx, b); err != nil {
		x.log.Warn("could not delete the failed backup's snapshot", "backup", b.Name, "err", err)
	}
	now := x.r.opts.Now().UTC()
	b.State, b.Error, b.EndTime = v1.BackupFailed, why, &now
	if err := x.r.opts.Store.PutBackup(ctx, b, store.Cond{IfMatch: b.ETag}); err != nil {
		x.log.Warn("could not record the failed backup", "backup", b.Name, "err", err)
	}
}

// restoreTargets are the control-plane nodes a restore acts on, with the
// etcd cluster their restored members make.
func (x *run) restoreTargets(ctx context.Context) ([]*store.Node, string, error) {
	cps, err := x.controlPlaneTargets(ctx)
	if err != nil {
		return nil, "", err
	}
	var nodes []*store.Node
	var members []string
	for _, m := range cps {
		n, err := x.nodeRecords.GetNode(ctx, x.cl.Key(), m.Name)
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
		return nil, "", failure.Terminal(v1.CodeInvalidParameter, "cluster %s has no control-plane node to restore", x.cl.Name)
	}
	return nodes, strings.Join(members, ","), nil
}

// restorePhase runs one phase of the restore on every control-plane node,
// all at once (etcd's members must all be stopped before any is restored,
// and all restored before a quorum can start).
func (x *run) restorePhase(ctx context.Context, phase, doing string) error {
	if err := x.canBackUp(); err != nil {
		return err
	}
	nodes, members, err := x.restoreTargets(ctx)
	if err != nil {
		return err
	}
	return x.restoreOn(ctx, nodes, members, phase, doing)
}

// restoreOn runs phase on nodes, all at once.
func (x *run) restoreOn(ctx context.Context, nodes []*store.Node, members, phase, doing string) error {
	b, err := x.readBackup(ctx)
	if err != nil {
		return err
	}
	p := v1.EtcdRestoreParams{Cluster: b.Cluster, Backup: b.Name, Phase: phase, SHA256: b.SHA256, Size: b.Size,
		InitialCluster: members, Token: "restore-" + x.op.ID, KubernetesVersion: x.cl.Spec.KubernetesVersion}
	raw, err := json.Marshal(p)
	if err != nil {
		return err
	}
	errs := make([]error, len(nodes))
	done := make(chan int)
	for i, n := range nodes {
		go func() {
			x.showProgress(ctx, n.Name, doing)
			_, errs[i] = x.askPart(ctx, n, v1.InstructionEtcdRestore, phase, func() (json.RawMessage, error) { return raw, nil })
			if errs[i] == nil {
				x.showProgress(ctx, n.Name, phase+" done")
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
		x.event(ctx, "Normal", "EtcdRestored", fmt.Sprintf("etcd restored from backup %s (revision %d) on %d member(s)", b.Name, etcdRevision(b), len(nodes)))
	}
	return nil
}

func (x *run) stageSnapshot(ctx context.Context) error {
	return x.restorePhase(ctx, v1.RestoreStage, "downloading and checking the snapshot")
}

func (x *run) stopControlPlane(ctx context.Context) error {
	return x.restorePhase(ctx, v1.RestoreStop, "stopping the control plane")
}

func (x *run) restoreEtcd(ctx context.Context) error {
	return x.restorePhase(ctx, v1.RestoreEtcd, "restoring etcd")
}

// startControlPlane starts the control plane again, restarts every
// node's kubelet (so that it registers its node with the restored API,
// which may hold no Node of it), and waits until Kubernetes reports the
// control-plane nodes Ready.
func (x *run) startControlPlane(ctx context.Context) error {
	if err := x.restorePhase(ctx, v1.RestoreStart, "starting the control plane"); err != nil {
		return err
	}
	all, err := x.nodes(ctx)
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
	since := x.r.opts.Now().Add(-2 * time.Second)
	if err := x.restoreOn(ctx, installed, "", v1.RestoreKubelet, "restarting the kubelet"); err != nil {
		return err
	}
	if err := x.freshlyReady(ctx, installed, since); err != nil {
		return err
	}
	cps, err := x.controlPlaneTargets(ctx)
	if err != nil {
		return err
	}
	return x.kubernetesReady(ctx, cps)
}

// freshlyReady waits until every node's kubelet has said it is Ready since
// it was restarted: the restored Node objects say what they said when the
// snapshot was taken, Ready or not.
func (x *run) freshlyReady(ctx context.Context, nodes []*store.Node, since time.Time) error {
	kc, err := x.kubeClient(ctx)
	if err != nil {
		return err
	}
	defer kc.Close()
	ctx, cancel := context.WithTimeout(ctx, x.r.opts.NodeTimeout)
	defer cancel()
	tick := time.NewTicker(x.r.opts.InstructionPoll)
	defer tick.Stop()
	for {
		var waiting []string
		got, err := kc.ListNodes(ctx)
		if err == nil {
			byName := map[string]kubeapi.Node{}
			for _, n := range got {
				byName[n.Name] = n
			}
			for _, n := range nodes {
				if !heardSince(byName[n.Name], since) {
					waiting = append(waiting, n.Name)
				}
			}
			if len(waiting) == 0 {
				return nil
			}
		}
		select {
		case <-x.cancelRequested():
			return step.ErrCancelRequested
		case <-ctx.Done():
			if err == nil {
				err = fmt.Errorf("%s not Ready since their kubelets restarted", strings.Join(waiting, ", "))
			}
			return failure.Retryable(v1.CodeTimeout, err, "nodes did not report Ready since their kubelets restarted, within %s: %v", x.r.opts.NodeTimeout, err)
		case <-tick.C:
		}
	}
}

// heardSince reports whether n's kubelet said Ready at or after since.
func heardSince(n kubeapi.Node, since time.Time) bool {
	for _, c := range n.Conditions {
		if c.Type == "Ready" {
			return c.Status == "True" && !c.LastHeartbeatTime.Before(since)
		}
	}
	return false
}

// removeForeignNodes deletes the Node objects the backup brought of the
// cluster it was taken of: their machines are not this cluster's.
func (x *run) removeForeignNodes(ctx context.Context) error {
	kc, err := x.kubeClient(ctx)
	if err != nil {
		return err
	}
	defer kc.Close()
	nodes, err := kc.ListNodes(ctx)
	if err != nil {
		return failure.Retryable(v1.CodeUnavailable, err, "list the cluster's nodes: %v", err)
	}
	ours, err := x.nodes(ctx)
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
	x.note = "removed the nodes that came with the backup: " + strings.Join(removed, ", ")
	return nil
}
