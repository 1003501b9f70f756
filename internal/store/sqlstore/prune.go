package sqlstore

import (
	"context"
	"fmt"

	"kiln.dev/kiln/internal/store"
)

// pruneBatch is how many rows one prune statement deletes: a short write
// transaction each, so that a large backlog never stalls other writers.
const pruneBatch = 5000

// pruneEvents deletes, of the oldest events (a batch, by id, the newest
// left out), those older than the cutoff (batch size, cutoff). Events
// have no index on their time: their ids grow with it (the store stamps
// them as it writes them), so the oldest are found on the primary key.
// An event written with an older time than the one before it waits until
// those before it are pruned.
const pruneEvents = `DELETE FROM events WHERE id IN (SELECT id FROM events
	WHERE id < (SELECT MAX(id) FROM events) ORDER BY id LIMIT ?) AND time < ?`

// pruneOperations deletes operations that ended before the cutoff (cutoff,
// batch size), found by their end (the index operations_ended), but never a
// live cluster's newest (its current or last operation: each found on the
// index operations_cluster) nor one still running.
const pruneOperations = `DELETE FROM operations WHERE id IN (SELECT id FROM operations
	WHERE end_time > 0 AND end_time < ? AND status <> 'InProgress'
	AND id NOT IN (SELECT COALESCE((SELECT MAX(o.id) FROM operations o
		WHERE o.project = c.project AND o.cluster = c.name AND o.cluster_uid = c.uid), '') FROM clusters c)
	LIMIT ?)`

// pruneInstructions deletes instructions whose result came before the
// cutoff (cutoff, batch size), but none of a cluster an operation runs on:
// a step run again finds the instructions it issued by id.
const pruneInstructions = `DELETE FROM instructions WHERE id IN (SELECT i.id FROM instructions i
	WHERE i.result_at > 0 AND i.result_at < ?
	AND NOT EXISTS (SELECT 1 FROM clusters c WHERE c.project = i.project AND c.name = i.cluster
		AND c.` + claimableStates + `)
	LIMIT ?)`

// Prune deletes events, audit entries, ended operations, answered
// instructions and ended cost intervals older than their cutoffs, and tokens that expired or were
// revoked before theirs, a batch at a time.
//
// Events go in id order (pruneEvents): a pass stops at a batch of the
// oldest that is not all past the cutoff, and the newest event always
// stays, so that ids never go back.
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
			pruneEvents, []any{pruneBatch, toNanos(c.Events)}},
		{"audit entries", !c.Audit.IsZero(), &out.Audit,
			`DELETE FROM audit WHERE id IN (SELECT id FROM audit WHERE time < ? LIMIT ?)`,
			[]any{toNanos(c.Audit), pruneBatch}},
		{"tokens", !c.Tokens.IsZero(), &out.Tokens,
			`DELETE FROM tokens WHERE id IN (SELECT id FROM tokens
				WHERE expires_at < ? OR (revoked_at <> 0 AND revoked_at < ?) LIMIT ?)`,
			[]any{toNanos(c.Tokens), toNanos(c.Tokens), pruneBatch}},
		{"operations", !c.Operations.IsZero(), &out.Operations,
			pruneOperations, []any{toNanos(c.Operations), pruneBatch}},
		{"instructions", !c.Instructions.IsZero(), &out.Instructions,
			pruneInstructions, []any{toNanos(c.Instructions), pruneBatch}},
		{"cost intervals", !c.CostIntervals.IsZero(), &out.CostIntervals,
			`DELETE FROM cost_intervals WHERE (cluster_uid, start_time) IN (SELECT cluster_uid, start_time FROM cost_intervals
				WHERE end_time > 0 AND end_time < ? LIMIT ?)`,
			[]any{toNanos(c.CostIntervals), pruneBatch}},
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
