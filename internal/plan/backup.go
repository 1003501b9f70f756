package plan

import (
	"slices"

	v1 "kiln.dev/kiln/api/v1"
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

// leavesCluster reports an operation that changed nothing of the
// cluster: a backup, or a restore that stopped nothing yet (its backup
// did not check out). When it fails or is canceled the cluster is as it
// was, Succeeded; the operation (and a backup's record) says what went
// wrong.
func leavesCluster(op *store.Operation) bool {
	switch op.Kind {
	case v1.KindBackup:
		return true
	case v1.KindRestore:
		i := slices.IndexFunc(op.Steps, func(s v1.Step) bool { return s.Name == StepStopControlPlane })
		return i >= 0 && op.Steps[i].State == v1.StepPending
	}
	return false
}
