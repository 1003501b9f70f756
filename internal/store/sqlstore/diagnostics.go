package sqlstore

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"

	"kiln.dev/kiln/internal/store"
)

// PutDiagnostics writes a diagnostics bundle of its cluster, then deletes
// the cluster's bundles beyond the newest store.MaxDiagnostics, in one
// transaction. An id that exists is ErrExists; a cluster that does not,
// ErrNotFound.
func (s *Store) PutDiagnostics(ctx context.Context, d *store.Diagnostics, bundle []byte) error {
	if d.CreatedAt.IsZero() {
		d.CreatedAt = s.now()
	}
	d.CreatedAt = d.CreatedAt.UTC()
	data, err := json.Marshal(&d.Diagnostics)
	if err != nil {
		return fmt.Errorf("put diagnostics %s: %w", d.ID, err)
	}
	err = s.inTx(ctx, func(ctx context.Context, tx *sql.Tx) error {
		_, err := tx.ExecContext(ctx, s.q(`INSERT INTO diagnostics (id, project, cluster, created_at, data, bundle) VALUES (?, ?, ?, ?, ?, ?)`),
			d.ID, d.Project, d.Cluster, toNanos(d.CreatedAt), string(data), bundle)
		switch s.constraint(err) {
		case ForeignKey:
			return store.ErrNotFound
		case Unique:
			return store.ErrExists
		}
		if err != nil {
			return err
		}
		_, err = tx.ExecContext(ctx, s.q(`DELETE FROM diagnostics WHERE project = ? AND cluster = ? AND id NOT IN
			(SELECT id FROM diagnostics WHERE project = ? AND cluster = ? ORDER BY created_at DESC, id DESC LIMIT ?)`),
			d.Project, d.Cluster, d.Project, d.Cluster, store.MaxDiagnostics)
		return err
	})
	if err != nil {
		return fmt.Errorf("put diagnostics %s of cluster %s/%s: %w", d.ID, d.Project, d.Cluster, err)
	}
	return nil
}

const diagnosticsCols = `project, cluster, data`

func scanDiagnostics(r scanner) (*store.Diagnostics, error) {
	var d store.Diagnostics
	var data string
	if err := r.Scan(&d.Project, &d.Cluster, &data); err != nil {
		return nil, err
	}
	if err := json.Unmarshal([]byte(data), &d.Diagnostics); err != nil {
		return nil, fmt.Errorf("decode diagnostics: %w", err)
	}
	return &d, nil
}

// GetDiagnostics reads a diagnostics bundle's record.
func (s *Store) GetDiagnostics(ctx context.Context, id string) (*store.Diagnostics, error) {
	d, err := scanDiagnostics(s.read.QueryRowContext(ctx, s.q(`SELECT `+diagnosticsCols+` FROM diagnostics WHERE id = ?`), id))
	if errors.Is(err, sql.ErrNoRows) {
		err = store.ErrNotFound
	}
	if err != nil {
		return nil, fmt.Errorf("get diagnostics %s: %w", id, err)
	}
	return d, nil
}

// GetDiagnosticsBundle reads a diagnostics bundle's tar.gz.
func (s *Store) GetDiagnosticsBundle(ctx context.Context, id string) ([]byte, error) {
	var b []byte
	err := s.read.QueryRowContext(ctx, s.q(`SELECT bundle FROM diagnostics WHERE id = ?`), id).Scan(&b)
	if errors.Is(err, sql.ErrNoRows) {
		err = store.ErrNotFound
	}
	if err != nil {
		return nil, fmt.Errorf("get the bundle of diagnostics %s: %w", id, err)
	}
	return b, nil
}

// ListDiagnostics lists a cluster's diagnostics bundles, newest first: at
// most store.MaxDiagnostics, so one page (the token is never set).
func (s *Store) ListDiagnostics(ctx context.Context, k store.Key, _ store.Page) ([]*store.Diagnostics, string, error) {
	rows, err := s.read.QueryContext(ctx, s.q(`SELECT `+diagnosticsCols+` FROM diagnostics WHERE project = ? AND cluster = ?
		ORDER BY created_at DESC, id DESC`), k.Project, k.Name)
	if err != nil {
		return nil, "", fmt.Errorf("list diagnostics of cluster %s: %w", k, err)
	}
	defer rows.Close()
	var out []*store.Diagnostics
	for rows.Next() {
		d, err := scanDiagnostics(rows)
		if err != nil {
			return nil, "", fmt.Errorf("list diagnostics of cluster %s: %w", k, err)
		}
		out = append(out, d)
	}
	if err := rows.Err(); err != nil {
		return nil, "", fmt.Errorf("list diagnostics of cluster %s: %w", k, err)
	}
	return out, "", nil
}

// DeleteDiagnostics deletes a diagnostics bundle.
func (s *Store) DeleteDiagnostics(ctx context.Context, id string) error {
	res, err := s.write.ExecContext(ctx, s.q(`DELETE FROM diagnostics WHERE id = ?`), id)
	if err == nil {
		var n int64
		if n, err = res.RowsAffected(); err == nil && n == 0 {
			err = store.ErrNotFound
		}
	}
	if err != nil {
		return fmt.Errorf("delete diagnostics %s: %w", id, err)
	}
	return nil
}
