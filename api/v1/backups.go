package v1

import "time"

// Operation kinds of backups.
const (
	// KindBackup takes an etcd snapshot on a control-plane node through its
	// agent, checks it and stores it, sealed, in the project's backup
	// location (kiln backup create, or spec.backup.schedule).
	KindBackup = "backup"
	// KindRestore puts a backup's etcd snapshot back on the cluster's
	// control plane: checked and staged on every control-plane node first,
	// then the control plane stopped, etcd restored and started again
	// (kiln cluster restore).
	KindRestore = "restore"
)

// Backup states.
const (
	BackupCreating  = "Creating"
	BackupSucceeded = "Succeeded"
	BackupFailed    = "Failed"
)

// Backup is an etcd snapshot of a cluster, sealed (AES-256-GCM under kilnd's
// keyring) in its project's backup location. Its record outlives the
// cluster: a deleted cluster's backups stay until deleted, and a new
// cluster can be made from one (spec.restoreFrom).
type Backup struct {
	Name string `json:"name"`
	ID   string `json:"id"`
	ETag string `json:"etag"`
	// Cluster is the name of the cluster it was taken of.
	Cluster string `json:"cluster"`
	// State is BackupCreating, BackupSucceeded or BackupFailed.
	State string `json:"state"`
	// Operation is the backup operation that takes it.
	Operation string `json:"operation,omitempty"`
	// Scheduled says it was taken by spec.backup.schedule (and is pruned
	// by spec.backup.keep); a backup a user asked for is kept until deleted.
	Scheduled bool `json:"scheduled,omitempty"`
	// Node is the control-plane node whose etcd member it was taken from.
	Node string `json:"node,omitempty"`
	// Location says where it is kept: "directory" (the data volume of the
	// control plane, kilnd's data dir) or s3://BUCKET/PREFIX.
	Location string `json:"location,omitempty"`
	// Size is the snapshot's size, SHA256 its digest (of the snapshot, not
	// of the sealed object): checked when it is stored and before a restore.
	Size   int64  `json:"size,omitempty"`
	SHA256 string `json:"sha256,omitempty"`
	// Etcd is what etcd says of the snapshot.
	Etcd *EtcdSnapshotStatus `json:"etcd,omitempty"`
	// KubernetesVersion and Network are the cluster's when it was taken: a
	// cluster made from the backup has them.
	KubernetesVersion string   `json:"kubernetesVersion,omitempty"`
	Network           *Network `json:"network,omitempty"`
	// Error says why a Failed backup failed.
	Error     string     `json:"error,omitempty"`
	CreatedAt time.Time  `json:"createdAt"`
	EndTime   *time.Time `json:"endTime,omitempty"`
}

// EtcdSnapshotStatus is etcd's status of a snapshot file (etcdutl snapshot
// status): the hash of its key space, its revision, how many keys and
// bytes it holds, and the etcd storage version that wrote it.
type EtcdSnapshotStatus struct {
	Hash      uint32 `json:"hash"`
	Revision  int64  `json:"revision"`
	TotalKeys int    `json:"totalKeys"`
	TotalSize int64  `json:"totalSize"`
	Version   string `json:"version,omitempty"`
}

// BackupSchedule is spec.backup: backups taken by themselves.
type BackupSchedule struct {
	// Schedule is a cron expression of five fields, in UTC
	// ("0 */6 * * *": every six hours).
	Schedule string `json:"schedule"`
	// Keep is how many scheduled backups are kept, newest first (default 7);
	// older ones are deleted once a new one has succeeded.
	Keep int `json:"keep,omitempty"`
}

// DefaultBackupKeep is spec.backup.keep when it is not given.
const DefaultBackupKeep = 7

// RestoreFrom is spec.restoreFrom: the cluster is made from a backup (kiln
// cluster create --from-backup CLUSTER/BACKUP). Its control plane is
// installed, then its etcd restored from the snapshot before the workers
// join.
type RestoreFrom struct {
	Cluster string `json:"cluster"`
	Backup  string `json:"backup"`
}

// BackupLocation is a project's backupLocation: where its clusters'
// backups are kept. Without one they are kept in kilnd's data dir
// (DATA_DIR/backups).
type BackupLocation struct {
	S3 *S3Location `json:"s3,omitempty"`
}

// S3Location is an S3 bucket reached with an aws cloud account's
// credentials (and its endpoint, for an S3-compatible server).
type S3Location struct {
	CloudAccount string `json:"cloudAccount"`
	Bucket       string `json:"bucket"`
	Prefix       string `json:"prefix,omitempty"`
}

// Instruction kinds of backups, carried out by a control-plane node's
// agent.
const (
	// InstructionEtcdSnapshot takes a snapshot of the node's etcd member
	// and uploads it to the agent listener (params EtcdSnapshotParams;
	// result data EtcdSnapshotResult).
	InstructionEtcdSnapshot = "etcd-snapshot"
	// InstructionEtcdRestore carries out one phase of a restore (params
	// EtcdRestoreParams).
	InstructionEtcdRestore = "etcd-restore"
)

// AgentSnapshotPath is where an agent uploads the snapshot of an
// etcd-snapshot instruction (PUT) and downloads the snapshot of an
// etcd-restore instruction (GET), on the agent listener, with its node
// certificate: AgentSnapshotPath + instruction id.
const AgentSnapshotPath = "/v1/agent/snapshots/"

// EtcdSnapshotParams are an etcd-snapshot instruction's params.
type EtcdSnapshotParams struct {
	Backup string `json:"backup"`
	// KubernetesVersion is the cluster's: a node whose distribution has no
	// kiln-kube of its own (kubeadm's) fetches kiln-kube of it from Kiln's
	// registry to save and restore snapshots.
	KubernetesVersion string `json:"kubernetesVersion,omitempty"`
}

// EtcdSnapshotResult is what an etcd-snapshot instruction's result carries:
// the uploaded snapshot's size and digest, and etcd's status of it.
type EtcdSnapshotResult struct {
	Size   int64              `json:"size"`
	SHA256 string             `json:"sha256"`
	Etcd   EtcdSnapshotStatus `json:"etcd"`
}

// Restore phases (EtcdRestoreParams.Phase), in order; each phase runs on
// every control-plane node before the next begins.
const (
	// RestoreStage downloads the snapshot, checks its digest and etcd's
	// status of it, and keeps it on the node. Nothing is stopped.
	RestoreStage = "stage"
	// RestoreStop stops the control plane's components, etcd last.
	RestoreStop = "stop"
	// RestoreEtcd moves etcd's data aside, restores the staged snapshot as
	// a member of InitialCluster, and starts etcd.
	RestoreEtcd = "restore"
	// RestoreStart starts the other components again and waits until they
	// are healthy.
	RestoreStart = "start"
	// RestoreKubelet restarts the node's kubelet (on every node, workers
	// too), so that it registers its node with the restored API again: a
	// snapshot may hold no Node of it, or an older one.
	RestoreKubelet = "kubelet"
)

// EtcdRestoreParams are an etcd-restore instruction's params.
type EtcdRestoreParams struct {
	// Cluster and Backup name the backup: of the node's cluster, or of the
	// cluster it is made from (spec.restoreFrom).
	Cluster string `json:"cluster"`
	Backup  string `json:"backup"`
	Phase   string `json:"phase"`
	// SHA256 and Size are the snapshot's, checked when it is staged.
	SHA256 string `json:"sha256"`
	Size   int64  `json:"size"`
	// InitialCluster (name=peerURL,...) and Token make the restored
	// members one new etcd cluster (RestoreEtcd).
	InitialCluster string `json:"initialCluster,omitempty"`
	Token          string `json:"token,omitempty"`
	// KubernetesVersion is the cluster's (EtcdSnapshotParams'
	// KubernetesVersion).
	KubernetesVersion string `json:"kubernetesVersion,omitempty"`
}
