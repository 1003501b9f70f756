package client

import (
	"context"
	"net/http"
	"net/url"

	v1 "kiln.dev/kiln/api/v1"
)

func backupsPath(project, cluster string) string { return clusterPath(project, cluster) + "/backups" }

func backupPath(project, cluster, name string) string {
	return backupsPath(project, cluster) + "/" + url.PathEscape(name)
}

// CreateBackup begins a backup of a cluster (POST .../backups): an etcd
// snapshot taken on a control-plane node, checked and kept, sealed, in the
// project's backup location. An empty name lets Kiln name it
// (CLUSTER-YYYYMMDD-HHMMSS). It returns the backup, Creating, and the id of
// the backup operation.
func (c *Client) CreateBackup(ctx context.Context, project, cluster, name string) (*v1.Backup, string, error) {
	var body any
	if name != "" {
		body = struct {
			Name string `json:"name"`
		}{name}
	}
	var out v1.Backup
	h, err := c.do(ctx, http.MethodPost, backupsPath(project, cluster), body, conditions{}, &out)
	if err != nil {
		return nil, "", err
	}
	out.ETag = etagOf(out.ETag, h)
	id := operationIDFromHeader(h)
	if id == "" {
		id = OperationID(out.Operation)
	}
	return &out, id, nil
}

// ListBackups returns the backups of the cluster named cluster, newest
// first: those of a deleted cluster of that name too, since backups
// outlive their cluster.
func (c *Client) ListBackups(ctx context.Context, project, cluster string) ([]v1.Backup, error) {
	return listAll[v1.Backup](ctx, c, backupsPath(project, cluster))
}

// GetBackup returns one backup of a cluster.
func (c *Client) GetBackup(ctx context.Context, project, cluster, name string) (*v1.Backup, error) {
	var out v1.Backup
	h, err := c.do(ctx, http.MethodGet, backupPath(project, cluster, name), nil, conditions{}, &out)
	if err != nil {
		return nil, err
	}
	out.ETag = etagOf(out.ETag, h)
	return &out, nil
}

// DeleteBackup deletes a backup: its record and its stored snapshot. A
// backup still Creating cannot be deleted (409).
func (c *Client) DeleteBackup(ctx context.Context, project, cluster, name string) error {
	return c.del(ctx, backupPath(project, cluster, name))
}

// RestoreCluster begins a restore of a cluster from one of its backups
// (POST .../restore): its control plane is stopped and its etcd put back
// as the snapshot has it, so whatever was written to the cluster after the
// backup was taken is lost. It returns the cluster and the restore
// operation's id.
func (c *Client) RestoreCluster(ctx context.Context, project, cluster, backup string) (*v1.Cluster, string, error) {
	body := struct {
		Backup string `json:"backup"`
	}{backup}
	var out v1.Cluster
	h, err := c.do(ctx, http.MethodPost, clusterPath(project, cluster)+"/restore", body, conditions{}, &out)
	if err != nil {
		return nil, "", err
	}
	fillETag(&out, h)
	return &out, clusterOperation(&out, h), nil
}
