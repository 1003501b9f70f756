package sqlstore

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// PutReplica records name alive until now+ttl, and forgets the replicas
// whose records expired (they stopped without saying so).
func (s *Store) PutReplica(ctx context.Context, name string, ttl time.Duration) error {
	if name == "" {
		return errors.New("put replica: empty name")
	}
	now := s.nowNanos()
	err := s.writeOne(ctx, func(ctx context.Context, q execer) error {
		if _, err := q.ExecContext(ctx, s.q(`DELETE FROM replicas WHERE expires_at <= ?`), now); err != nil {
			return err
		}
		_, err := q.ExecContext(ctx, s.q(`INSERT INTO replicas (name, expires_at) VALUES (?, ?)
			ON CONFLICT (name) DO UPDATE SET expires_at = excluded.expires_at`), name, now+int64(ttl))
		return err
	})
	if err != nil {
		return fmt.Errorf("put replica %s: %w", name, err)
	}
	return nil
}

// ListReplicas names the replicas alive now, sorted.
func (s *Store) ListReplicas(ctx context.Context) ([]string, error) {
	rows, err := s.read.QueryContext(ctx, s.q(`SELECT name FROM replicas WHERE expires_at > ? ORDER BY name`), s.nowNanos())
	if err != nil {
		return nil, fmt.Errorf("list replicas: %w", err)
	}
	defer rows.Close()
	var names []string
	for rows.Next() {
		var n string
		if err := rows.Scan(&n); err != nil {
			return nil, fmt.Errorf("list replicas: %w", err)
		}
		names = append(names, n)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("list replicas: %w", err)
	}
	return names, nil
}

// DeleteReplica removes name's record; none is no error.
func (s *Store) DeleteReplica(ctx context.Context, name string) error {
	err := s.writeOne(ctx, func(ctx context.Context, q execer) error {
		_, err := q.ExecContext(ctx, s.q(`DELETE FROM replicas WHERE name = ?`), name)
		return err
	})
	if err != nil {
		return fmt.Errorf("delete replica %s: %w", name, err)
	}
	return nil
}
