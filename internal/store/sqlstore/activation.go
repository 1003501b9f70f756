package sqlstore

import (
	"bytes"
	"context"
	"database/sql"
	"errors"
	"fmt"

	"kiln.dev/kiln/internal/store"
)

var _ store.ClusterSecretUpdater = (*Store)(nil)

// UpdateClusterSecrets writes cluster secrets without a fence, in one
// transaction: each record is read (locked for the transaction where the
// dialect locks rows), its condition checked, then replaced or inserted.
// Values are sealed and opened as PutClusterSecret and GetClusterSecret
// do (encryption at rest); conditions compare the opened values.
func (s *Store) UpdateClusterSecrets(ctx context.Context, k store.Key, writes ...store.SecretWrite) error {
	wrap := func(err error) error { return fmt.Errorf("update secrets of cluster %s: %w", k, err) }
	seen := map[string]bool{}
	for _, w := range writes {
		switch {
		case w.Name == "":
			return wrap(errors.New("a secret without a name"))
		case seen[w.Name]:
			return wrap(fmt.Errorf("secret %s written twice", w.Name))
		case w.IfMissing && w.IfValue != nil:
			return wrap(fmt.Errorf("secret %s: IfMissing and IfValue together", w.Name))
		}
		seen[w.Name] = true
	}
	err := s.inTx(ctx, func(ctx context.Context, tx *sql.Tx) error {
		var one int
		err := tx.QueryRowContext(ctx, s.q(`SELECT 1 FROM clusters WHERE project = ? AND name = ?`), k.Project, k.Name).Scan(&one)
		if errors.Is(err, sql.ErrNoRows) {
			return store.ErrNotFound
		} else if err != nil {
			return err
		}
		for _, w := range writes {
			var old []byte
			err := tx.QueryRowContext(ctx, s.q(`SELECT value FROM cluster_secrets WHERE project = ? AND cluster = ? AND name = ?`+s.d.ForUpdate),
				k.Project, k.Name, w.Name).Scan(&old)
			exists := err == nil
			if err != nil && !errors.Is(err, sql.ErrNoRows) {
				return err
			}
			if exists {
				if old, err = s.open(secretsCol, old, k.Project, k.Name, w.Name); err != nil {
					return err
				}
			}
			switch {
			case w.IfMissing && exists:
				return fmt.Errorf("secret %s: %w", w.Name, store.ErrExists)
			case w.IfValue != nil && (!exists || !bytes.Equal(old, w.IfValue)):
				return fmt.Errorf("secret %s: %w", w.Name, store.ErrPreconditionFailed)
			}
			value := w.Value
			if value == nil {
				value = []byte{}
			}
			if value, err = s.seal(secretsCol, value, k.Project, k.Name, w.Name); err != nil {
				return err
			}
			if exists {
				_, err = tx.ExecContext(ctx, s.q(`UPDATE cluster_secrets SET value = ? WHERE project = ? AND cluster = ? AND name = ?`),
					value, k.Project, k.Name, w.Name)
			} else {
				_, err = tx.ExecContext(ctx, s.q(`INSERT INTO cluster_secrets (project, cluster, name, value) VALUES (?, ?, ?, ?)`),
					k.Project, k.Name, w.Name, value)
				switch s.constraint(err) {
				case ForeignKey:
					return store.ErrNotFound // the cluster was deleted since the read
				case Unique:
					// Inserted by a concurrent writer since the read.
					if w.IfMissing {
						return fmt.Errorf("secret %s: %w", w.Name, store.ErrExists)
					}
					return fmt.Errorf("secret %s: written concurrently: %w", w.Name, store.ErrPreconditionFailed)
				}
			}
			if err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return wrap(err)
	}
	for _, w := range writes {
		s.changed(store.Change{Kind: store.ChangeSecret, Project: k.Project, Cluster: k.Name, Secret: w.Name})
	}
	return nil
}
