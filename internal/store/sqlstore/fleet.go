package sqlstore

import (
	"context"
	"database/sql"
	"fmt"
	"time"

	"kiln.dev/kiln/internal/store"
)

// CountClusters counts the clusters by state and provider in one grouped
// query, which the index clusters_provider (provider, provisioning_state,
// ...) serves without reading the rows.
func (s *Store) CountClusters(ctx context.Context) ([]store.ClusterCount, error) {
	rows, err := s.read.QueryContext(ctx, `SELECT provider, provisioning_state, COUNT(*) FROM clusters
		GROUP BY provider, provisioning_state ORDER BY provider, provisioning_state`)
	if err != nil {
		return nil, fmt.Errorf("count clusters: %w", err)
	}
	defer rows.Close()
	var out []store.ClusterCount
	for rows.Next() {
		var c store.ClusterCount
		if err := rows.Scan(&c.Provider, &c.State, &c.Count); err != nil {
			return nil, fmt.Errorf("count clusters: %w", err)
		}
		out = append(out, c)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("count clusters: %w", err)
	}
	return out, nil
}

// CountWaiting counts the claimable clusters: the claim's own condition,
// served by its partial index clusters_claim.
func (s *Store) CountWaiting(ctx context.Context) (int, error) {
	var n int
	err := s.read.QueryRowContext(ctx, s.q(`SELECT COUNT(*) FROM clusters
		WHERE `+claimableStates+` AND lease_expiry < ?`), s.nowNanos()).Scan(&n)
	if err != nil {
		return 0, fmt.Errorf("count waiting clusters: %w", err)
	}
	return n, nil
}

// CertificateExpiries reads status.certificates.notAfter of every cluster
// that has one, in the database (Dialect.JSONText), not the whole status.
func (s *Store) CertificateExpiries(ctx context.Context) ([]store.CertificateExpiry, error) {
	wrap := func(err error) error { return fmt.Errorf("list certificate expiries: %w", err) }
	notAfter := s.d.JSONText("status", "certificates", "notAfter")
	// No WHERE on the expression: SQLite would parse each status twice.
	rows, err := s.read.QueryContext(ctx, `SELECT project, name, `+notAfter+` FROM clusters ORDER BY project, name`)
	if err != nil {
		return nil, wrap(err)
	}
	defer rows.Close()
	var out []store.CertificateExpiry
	for rows.Next() {
		var e store.CertificateExpiry
		var at sql.NullString
		if err := rows.Scan(&e.Project, &e.Name, &at); err != nil {
			return nil, wrap(err)
		}
		if !at.Valid {
			continue // the certificate check has not recorded this cluster's yet
		}
		if e.NotAfter, err = time.Parse(time.RFC3339Nano, at.String); err != nil {
			return nil, wrap(fmt.Errorf("cluster %s: %w", e.Key, err))
		}
		out = append(out, e)
	}
	if err := rows.Err(); err != nil {
		return nil, wrap(err)
	}
	return out, nil
}
