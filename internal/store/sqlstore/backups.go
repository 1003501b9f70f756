package sqlstore

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"

	v1 "kiln.dev/kiln/api/v1"
	"kiln.dev/kiln/internal/store"
)

// backupsT are the backups' documents, keyed by project, the name of the
// cluster they were taken of, and name. The table's foreign key is the
// project's only: a backup outlives its cluster.
var backupsT = docTable{table: "backups", kind: "backup", parent: []string{"project", "cluster"}}

// backupDoc is a backup's document: the API's Backup and what only Kiln
// reads of it.
type backupDoc struct {
	v1.Backup
	ClusterUID string   `json:"clusterUID,omitempty"`
	Object     string   `json:"object,omitempty"`
	Keys       []string `json:"keys,omitempty"`
}

// PutBackup creates or replaces a backup's record; its project must exist,
// its cluster need not.
func (s *Store) PutBackup(ctx context.Context, b *store.Backup, c store.Cond) error {
	d := &backupDoc{Backup: b.Backup, ClusterUID: b.ClusterUID, Object: b.Object, Keys: b.Keys}
	etag, created, err := s.putDoc(ctx, backupsT, []string{b.Project, b.Cluster}, b.Name, b.CreatedAt, d, c)
	if err != nil {
		return err
	}
	b.ETag, b.CreatedAt = etag, created
	return nil
}

// GetBackup reads a backup's record.
func (s *Store) GetBackup(ctx context.Context, project, cluster, name string) (*store.Backup, error) {
	d, err := s.getDoc(ctx, backupsT, []string{project, cluster}, name)
	if err != nil {
		return nil, err
	}
	return decodeBackup(project, cluster)(d)
}

// ListBackups lists the backups filed under a cluster's name, newest first,
// then by name. A page token is the created time and name of the last
// backup of the previous page.
func (s *Store) ListBackups(ctx context.Context, project, cluster string, pg store.Page) ([]*store.Backup, string, error) {
	wrap := func(err error) error { return fmt.Errorf("list backups of cluster %s/%s: %w", project, cluster, err) }
	tok, err := decodeToken(pg.Token)
	if err != nil {
		return nil, "", wrap(err)
	}
	query := `SELECT name, etag, created_at, data FROM backups WHERE project = ? AND cluster = ?`
	args := []any{project, cluster}
	if tok != "" {
		created, name, ok := backupPosition(tok)
		if !ok {
			return nil, "", wrap(fmt.Errorf("%w %q", store.ErrBadPageToken, pg.Token))
		}
		query += ` AND (created_at < ? OR (created_at = ? AND name > ?))`
		args = append(args, created, created, name)
	}
	scan := func(r scanner) (backupRow, error) {
		var b backupRow
		err := r.Scan(&b.name, &b.etag, &b.nanos, &b.data)
		b.created = fromNanos(b.nanos)
		return b, err
	}
	rows, next, err := queryPage(ctx, s, query+` ORDER BY created_at DESC, name LIMIT ?`, args, limitOf(pg),
		scan, func(b backupRow) string { return strconv.FormatInt(b.nanos, 10) + "/" + b.name })
	if err != nil {
		return nil, "", wrap(err)
	}
	out := make([]*store.Backup, 0, len(rows))
	for _, r := range rows {
		b, err := decodeBackup(project, cluster)(r.doc)
		if err != nil {
			return nil, "", wrap(err)
		}
		out = append(out, b)
	}
	return out, next, nil
}

// backupRow is a row of the backup list: its document and its created
// time as stored, which its page token carries.
type backupRow struct {
	doc
	nanos int64
}

// backupPosition reads a backup list's position, "CREATED/NAME" (CREATED
// in nanoseconds); ok is false when pos is not one.
func backupPosition(pos string) (created int64, name string, ok bool) {
	c, name, ok := strings.Cut(pos, "/")
	if !ok {
		return 0, "", false
	}
	created, err := strconv.ParseInt(c, 10, 64)
	return created, name, err == nil
}

// DeleteBackup deletes a backup's record.
func (s *Store) DeleteBackup(ctx context.Context, project, cluster, name string, c store.Cond) error {
	return s.deleteDoc(ctx, backupsT, []string{project, cluster}, name, c)
}

func decodeBackup(project, cluster string) func(doc) (*store.Backup, error) {
	return func(d doc) (*store.Backup, error) {
		var bd backupDoc
		if err := decodeDoc(backupsT, d, &bd); err != nil {
			return nil, err
		}
		b := &store.Backup{Project: project, ClusterUID: bd.ClusterUID, Object: bd.Object, Keys: bd.Keys, Backup: bd.Backup}
		b.Name, b.Cluster, b.ETag, b.CreatedAt = d.name, cluster, d.etag, d.created
		return b, nil
	}
}

// BackupKeys counts the backups by the ids of the keys their objects are
// sealed under (store.Backup.Keys; a backup sealed under two counts under
// each).
func (s *Store) BackupKeys(ctx context.Context) (map[string]int, error) {
	rows, err := s.read.QueryContext(ctx, `SELECT data FROM backups`)
	if err != nil {
		return nil, fmt.Errorf("count the keys of backups: %w", err)
	}
	defer rows.Close()
	counts := map[string]int{}
	for rows.Next() {
		var data string
		if err := rows.Scan(&data); err != nil {
			return nil, err
		}
		var d struct {
			Keys []string `json:"keys"`
		}
		if err := json.Unmarshal([]byte(data), &d); err != nil {
			return nil, fmt.Errorf("decode a backup's keys: %w", err)
		}
		for _, id := range d.Keys {
			counts[id]++
		}
	}
	return counts, rows.Err()
}
