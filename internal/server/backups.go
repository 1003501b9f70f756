package server

import (
	"context"
	"errors"
	"fmt"
	"net/http"

	v1 "kiln.dev/kiln/api/v1"
	"kiln.dev/kiln/internal/names"
	"kiln.dev/kiln/internal/store"
)

// BackupStore is what the backup handlers need: the records (a backup's
// operation writes them) and the removal of one.
type BackupStore interface {
	GetBackup(ctx context.Context, project, cluster, name string) (*store.Backup, error)
	ListBackups(ctx context.Context, project, cluster string, pg store.Page) ([]*store.Backup, string, error)
	DeleteBackup(ctx context.Context, project, cluster, name string, c store.Cond) error
}

// Snapshots removes a backup's stored snapshot (snapshots.Vault).
type Snapshots interface {
	Delete(ctx context.Context, b *store.Backup) error
}

// backupRequest is the body of POST .../backups: all optional.
type backupRequest struct {
	Name string `json:"name,omitempty"`
}

// restoreRequest is the body of POST .../restore.
type restoreRequest struct {
	Backup string `json:"backup"`
}

// createBackup begins a backup operation (POST .../clusters/{c}/backups,
// body {"name": ...} or none): 202 with the backup, Creating, and the
// operation's URL. The name defaults to CLUSTER-YYYYMMDD-HHMMSS.
func (s *Server) createBackup(w http.ResponseWriter, r *http.Request) error {
	body, err := readOptionalBody(r)
	if err != nil {
		return err
	}
	var in backupRequest
	if body != nil {
		if err := decodeStrict(body, &in); err != nil {
			return err
		}
	}
	key := clusterKey(r)
	if in.Name == "" {
		in.Name = fmt.Sprintf("%s-%s", key.Name, s.now().UTC().Format("20060102-150405"))
	}
	if !names.IsDNSLabel(in.Name, 63) {
		return badRequest("name", "backup name %q must be a DNS label: lower-case letters, digits and '-', at most 63, starting and ending with a letter or digit", in.Name)
	}
	cl, op, err := s.beginAction(r, v1.KindBackup, s.refuseBackup(r), func(ctx context.Context, cl *store.Cluster) error {
		if st := cl.Status.ProvisioningState; st != v1.StateSucceeded {
			return conflict(clusterRef(r), "cluster", "is %s: only a cluster whose last operation succeeded is backed up; retry or change it first", st)
		}
		if _, err := s.backups.GetBackup(ctx, key.Project, key.Name, in.Name); err == nil {
			return conflict(ref{kind: "backup", name: in.Name, project: key.Project}, "name", "exists already: give the new backup another name")
		} else if !errors.Is(err, store.ErrNotFound) {
			return err
		}
		return nil
	}, func(op *store.Operation) { op.Backup = in.Name })
	if err != nil {
		return err
	}
	s.log.InfoContext(r.Context(), "operation started", "requestId", requestID(r.Context()),
		"cluster", cl.Key().String(), "operation", op.ID, "kind", op.Kind, "backup", in.Name)
	h := w.Header()
	h.Set("Azure-AsyncOperation", s.operationURL(r, op.ID))
	h.Set("Location", s.operationURL(r, op.ID))
	h.Set("Retry-After", "1")
	writeJSON(w, http.StatusAccepted, v1.Backup{Name: in.Name, ID: backupPath(key, in.Name), Cluster: key.Name,
		State: v1.BackupCreating, Operation: op.ID, CreatedAt: op.StartTime})
	return nil
}

// refuseBackup refuses, with 409, a cluster whose etcd Kiln does not run.
func (s *Server) refuseBackup(r *http.Request) func(cl *store.Cluster) error {
	return func(cl *store.Cluster) error {
		o := clusterRef(r)
		switch {
		case s.providers.Attached(cl.Spec.Provider):
			return conflict(o, "cluster", "is attached: Kiln does not reach its etcd, so it takes no backup of it and restores none")
		case s.agentless(cl.Spec.Provider):
			return conflict(o, "cluster", "runs no etcd (the %s provider's clusters run no Kubernetes): there is nothing to back up or restore", cl.Spec.Provider)
		}
		return nil
	}
}

// agentless reports a provider whose machines run no agent (sim).
func (s *Server) agentless(name string) bool {
	a, ok := s.providers[name].(interface{ Agentless() bool })
	return ok && a.Agentless()
}

// restoreCluster begins a restore operation (POST .../clusters/{c}/restore,
// body {"backup": NAME}): the backup, of this cluster and Succeeded, is
// checked and staged on every control-plane node before anything is
// stopped.
func (s *Server) restoreCluster(w http.ResponseWriter, r *http.Request) error {
	body, err := readBody(r)
	if err != nil {
		return err
	}
	var in restoreRequest
	if err := decodeStrict(body, &in); err != nil {
		return err
	}
	if in.Backup == "" {
		return newError(http.StatusBadRequest, v1.CodeMissingParameter, "backup", "name the backup to restore: {\"backup\": NAME} (kiln backup list CLUSTER)")
	}
	key := clusterKey(r)
	cl, op, err := s.beginAction(r, v1.KindRestore, s.refuseBackup(r), func(ctx context.Context, cl *store.Cluster) error {
		if st := cl.Status.ProvisioningState; st != v1.StateSucceeded && st != v1.StateFailed {
			return conflict(clusterRef(r), "cluster", "is %s: a restore needs its control plane installed (Succeeded, or Failed after it)", st)
		}
		b, err := s.backups.GetBackup(ctx, key.Project, key.Name, in.Backup)
		if errors.Is(err, store.ErrNotFound) {
			return missing(ref{kind: "backup", name: in.Backup, project: key.Project, cluster: key.Name}).withHint("kiln backup list " + key.Name)
		} else if err != nil {
			return err
		}
		return restorable(b, cl, "backup")
	}, func(op *store.Operation) { op.Backup = in.Backup })
	if err != nil {
		return err
	}
	s.accepted(w, r, cl, op, http.StatusAccepted)
	return nil
}

// restorable refuses backup b for cluster cl (409 or 400 at target): not
// Succeeded, of another Kubernetes version, of an earlier cluster of the
// name.
func restorable(b *store.Backup, cl *store.Cluster, target string) error {
	o := ref{kind: "backup", name: b.Name, project: b.Project}
	switch {
	case b.State != v1.BackupSucceeded:
		return conflict(o, target, "is %s: only a Succeeded backup is restored", b.State)
	case b.KubernetesVersion != cl.Spec.KubernetesVersion:
		return badRequest("spec.kubernetesVersion", "backup %s was taken of Kubernetes %s, cluster %s runs %s: a backup is restored on the version it was taken of",
			b.Name, b.KubernetesVersion, cl.Name, cl.Spec.KubernetesVersion)
	case b.Cluster == cl.Name && cl.UID != "" && b.ClusterUID != cl.UID:
		return conflict(o, target, "was taken of an earlier cluster named %s, since deleted: make a new cluster from it (kiln cluster create NEW --from-backup %s/%s)",
			cl.Name, b.Cluster, b.Name)
	}
	return nil
}

// backupDefaults gives a new cluster made from a backup (spec.restoreFrom)
// the backup's Kubernetes version and pod and service CIDRs where its spec
// names none. A backup that is not there is left to checkRestoreFrom.
func (s *Server) backupDefaults(ctx context.Context, project string, spec *v1.ClusterSpec) error {
	rf := spec.RestoreFrom
	if rf == nil || rf.Cluster == "" || rf.Backup == "" {
		return nil
	}
	b, err := s.backups.GetBackup(ctx, project, rf.Cluster, rf.Backup)
	if errors.Is(err, store.ErrNotFound) {
		return nil
	} else if err != nil {
		return err
	}
	if spec.KubernetesVersion == "" {
		spec.KubernetesVersion = b.KubernetesVersion
	}
	if n := b.Network; n != nil {
		if spec.Network.PodCIDR == "" {
			spec.Network.PodCIDR = n.PodCIDR
		}
		if spec.Network.ServiceCIDR == "" {
			spec.Network.ServiceCIDR = n.ServiceCIDR
		}
	}
	return nil
}

// checkSpecRestoreFrom checks spec.restoreFrom of a create; a change
// names none but the one the cluster was made with (it is read at create
// only).
func (s *Server) checkSpecRestoreFrom(ctx context.Context, existing, cl *store.Cluster, op *store.Operation) error {
	if op.Kind == v1.KindCreate {
		return s.checkRestoreFrom(ctx, cl.Project, cl)
	}
	if rf := cl.Spec.RestoreFrom; rf != nil && existing != nil && (existing.Spec.RestoreFrom == nil || *existing.Spec.RestoreFrom != *rf) {
		return newError(http.StatusBadRequest, v1.CodeImmutableField, "spec.restoreFrom",
			"spec.restoreFrom is read when the cluster is created: cluster %s exists; restore a backup with POST .../restore (kiln cluster restore)", cl.Name)
	}
	return nil
}

// checkRestoreFrom refuses a new cluster's spec.restoreFrom that names no
// Succeeded backup of the project, or one its spec cannot take.
func (s *Server) checkRestoreFrom(ctx context.Context, project string, cl *store.Cluster) error {
	rf := cl.Spec.RestoreFrom
	if rf == nil {
		return nil
	}
	if rf.Cluster == "" || rf.Backup == "" {
		return newError(http.StatusBadRequest, v1.CodeMissingParameter, "spec.restoreFrom", "spec.restoreFrom names a backup by its cluster and name: {\"cluster\": C, \"backup\": B}")
	}
	if cl.Spec.Distribution == v1.DistroKubeadm {
		return badRequest("spec.restoreFrom", "a cluster of the kubeadm distribution is not made from a backup: its nodes join with kubeadm's bootstrap token and cluster-info, "+
			"which a backup holds of the cluster it was taken of; restore a kubeadm cluster's own backups in place (kiln cluster restore)")
	}
	if s.providers.Attached(cl.Spec.Provider) || s.hostsJoin(cl.Spec.Provider) || s.agentless(cl.Spec.Provider) {
		return badRequest("spec.restoreFrom", "a cluster of the %s provider (distribution %q) is not made from a backup: Kiln restores the etcd of the clusters whose control plane it installs (local, docker, aws)",
			cl.Spec.Provider, cl.Spec.Distribution)
	}
	b, err := s.backups.GetBackup(ctx, project, rf.Cluster, rf.Backup)
	if errors.Is(err, store.ErrNotFound) {
		return newError(http.StatusBadRequest, v1.CodeInvalidParameter, "spec.restoreFrom",
			"backup %s of cluster %s does not exist in project %s (kiln backup list %s)", rf.Backup, rf.Cluster, project, rf.Cluster)
	} else if err != nil {
		return err
	}
	if err := restorable(b, cl, "spec.restoreFrom"); err != nil {
		return err
	}
	if n := b.Network; n != nil && (n.PodCIDR != cl.Spec.Network.PodCIDR || n.ServiceCIDR != cl.Spec.Network.ServiceCIDR) {
		return badRequest("spec.network", "backup %s was taken of a cluster with pod CIDR %s and service CIDR %s: a cluster made from it has the same (its Services keep their addresses)",
			b.Name, n.PodCIDR, n.ServiceCIDR)
	}
	return nil
}

// backupPath is a backup's id.
func backupPath(k store.Key, name string) string {
	return clusterPath(k.Project, k.Name) + "/backups/" + name
}

// backupOut is what the API shows of a backup record.
func backupOut(b *store.Backup) v1.Backup {
	out := b.Backup
	out.ID = backupPath(store.Key{Project: b.Project, Name: b.Cluster}, b.Name)
	return out
}

// listBackups lists a cluster's backups, newest first; a deleted
// cluster's too (they outlive it).
func (s *Server) listBackups(w http.ResponseWriter, r *http.Request) error {
	pg, err := page(r)
	if err != nil {
		return err
	}
	if err := s.requireProject(r); err != nil {
		return err
	}
	k := clusterKey(r)
	items, next, err := s.backups.ListBackups(r.Context(), k.Project, k.Name, pg)
	if err != nil {
		return err
	}
	list(w, r, pg, items, next, backupOut)
	return nil
}

// readBackup reads the backup the path names.
func (s *Server) readBackup(r *http.Request) (*store.Backup, error) {
	if err := s.requireProject(r); err != nil {
		return nil, err
	}
	k := clusterKey(r)
	b, err := s.backups.GetBackup(r.Context(), k.Project, k.Name, r.PathValue("backup"))
	if err != nil {
		return nil, toAPIError(err, ref{kind: "backup", name: r.PathValue("backup"), project: k.Project, cluster: k.Name})
	}
	return b, nil
}

func (s *Server) getBackup(w http.ResponseWriter, r *http.Request) error {
	b, err := s.readBackup(r)
	if err != nil {
		return err
	}
	w.Header().Set("ETag", quoteETag(b.ETag))
	writeJSON(w, http.StatusOK, backupOut(b))
	return nil
}

// deleteBackup deletes a backup's snapshot and record at once (204); 409
// while its operation takes it.
func (s *Server) deleteBackup(w http.ResponseWriter, r *http.Request) error {
	if hasBody(r) {
		return invalidRequest("this request takes no body")
	}
	b, err := s.readBackup(r)
	if err != nil {
		return err
	}
	o := ref{kind: "backup", name: b.Name, project: b.Project}
	if b.State == v1.BackupCreating {
		return conflict(o, operationPath(b.Operation), "is being taken by operation %s: delete it once that ends", b.Operation)
	}
	if s.snapshots == nil {
		return newError(http.StatusServiceUnavailable, v1.CodeUnavailable, "",
			"this kilnd process keeps no backups (it has no role that reaches clusters); ask a process of role all or frontend")
	}
	if err := s.snapshots.Delete(r.Context(), b); err != nil {
		return unavailable(fmt.Sprintf("the backup location %s", b.Location)).because(err)
	}
	if err := s.backups.DeleteBackup(r.Context(), b.Project, b.Cluster, b.Name, store.Cond{IfMatch: b.ETag}); err != nil && !errors.Is(err, store.ErrNotFound) {
		return toAPIError(err, o)
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

// checkBackupLocation refuses a project's backupLocation that names no
// bucket, or a cloud account that is not the project's aws one.
func (s *Server) checkBackupLocation(ctx context.Context, project string, loc *v1.BackupLocation) error {
	if loc == nil || loc.S3 == nil {
		return nil
	}
	s3 := loc.S3
	switch {
	case s3.Bucket == "":
		return newError(http.StatusBadRequest, v1.CodeMissingParameter, "backupLocation.s3.bucket", "name the S3 bucket the project's backups are kept in")
	case s3.CloudAccount == "":
		return newError(http.StatusBadRequest, v1.CodeMissingParameter, "backupLocation.s3.cloudAccount", "name the aws cloud account whose credentials reach bucket %s", s3.Bucket)
	}
	a, err := s.accounts.GetCloudAccount(ctx, project, s3.CloudAccount)
	switch {
	case errors.Is(err, store.ErrNotFound):
		return badRequest("backupLocation.s3.cloudAccount", "cloud account %q does not exist in project %s: create it first (kiln cloudaccount create)", s3.CloudAccount, project)
	case err != nil:
		return err
	case a.Provider != "aws":
		return badRequest("backupLocation.s3.cloudAccount", "cloud account %q is of provider %s: an S3 bucket is reached with an aws account", s3.CloudAccount, a.Provider)
	}
	return nil
}
