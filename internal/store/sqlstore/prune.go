package sqlstore

import (
	"context"
	"fmt"

	"kiln.dev/kiln/internal/store"
)

// pruneBatch is how many rows one prune statement deletes: a short write
// transaction each, so that a large backlog never stalls other writers.
const pruneBatch = 5000

// Prune deletes events and audit entries older than their cutoffs, and
// tokens that expired or were revoked before theirs, a batch at a time.
func (s *Store) Prune(ctx context.Context, c store.Cutoffs) (store.Pruned, error) {
	var out store.Pruned
	for _, p := range []struct {
		what  string
		on    bool
		n     *int64
		query string
		args  []any
	}{
		{"events", !c.Events.IsZero(), &out.Events,
			`DELETE FROM events WHERE id IN (SELECT id FROM events WHERE time < ? LIMIT ?)`,
			[]any{toNanos(c.Events), pruneBatch}},
		{"audit entries", !c.Audit.IsZero(), &out.Audit,
			`DELETE FROM audit WHERE id IN (SELECT id FROM audit WHERE time < ? LIMIT ?)`,
			[]any{toNanos(c.Audit), pruneBatch}},
		{"tokens", !c.Tokens.IsZero(), &out.Tokens,
			`DELETE FROM tokens WHERE id IN (SELECT id FROM tokens
				WHERE expires_at < ? OR (revoked_at <> 0 AND revoked_at < ?) LIMIT ?)`,
			[]any{toNanos(c.Tokens), toNanos(c.Tokens), pruneBatch}},
	} {
		if !p.on {
			continue
		}
		for {
			res, err := s.write.ExecContext(ctx, s.q(p.query), p.args...)
			if err != nil {
				return out, fmt.Errorf("prune %s: %w", p.what, err)
			}
			n, err := res.RowsAffected()
			if err != nil {
				return out, fmt.Errorf("prune %s: %w", p.what, err)
			}
			*p.n += n
			if n < pruneBatch {
				break
			}
		}
	}
	return out, nil
}
