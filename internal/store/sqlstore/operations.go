package sqlstore

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"sync"

	v1 "kiln.dev/kiln/api/v1"
	"kiln.dev/kiln/internal/store"
)

const operationCols = `id, project, cluster, kind, status, start_time, end_time, steps, error,
	retry_of, forced, leftovers, cancel_requested_at, cancel_requested_by, cluster_uid, reason, nodes, backup, pools`

// opRow is an operation's columns as written.
type opRow struct {
	steps, errJSON, leftovers string
	nodes, pools              string // JSON, written once
	end                       int64
	forced                    int64
}

func encodeOperation(op *store.Operation) (opRow, error) {
	steps, err := encodeSteps(op.Steps, op.Checkpoints)
	if err != nil {
		return opRow{}, err
	}
	r := opRow{steps: steps}
	if op.Error != nil {
		e, err := json.Marshal(op.Error)
		if err != nil {
			return opRow{}, err
		}
		r.errJSON = string(e)
	}
	if op.EndTime != nil {
		r.end = toNanos(*op.EndTime)
	}
	if len(op.Leftovers) > 0 {
		l, err := json.Marshal(op.Leftovers)
		if err != nil {
			return opRow{}, err
		}
		r.leftovers = string(l)
	}
	if op.Force {
		r.forced = 1
	}
	if len(op.Nodes) > 0 {
		n, err := json.Marshal(op.Nodes)
		if err != nil {
			return opRow{}, err
		}
		r.nodes = string(n)
	}
	if len(op.Pools) > 0 {
		p, err := json.Marshal(op.Pools)
		if err != nil {
			return opRow{}, err
		}
		r.pools = string(p)
	}
	return r, nil
}

func scanOperation(r scanner) (*store.Operation, error) {
	op := new(store.Operation)
	var start, end, forced, cancelAt int64
	var steps, errJSON, leftovers, cancelBy, nodes, pools string
	if err := r.Scan(&op.ID, &op.Project, &op.Cluster, &op.Kind, &op.Status, &start, &end, &steps, &errJSON,
		&op.RetryOf, &forced, &leftovers, &cancelAt, &cancelBy, &op.ClusterUID, &op.Reason, &nodes, &op.Backup, &pools); err != nil {
		return nil, err
	}
	if pools != "" {
		if err := json.Unmarshal([]byte(pools), &op.Pools); err != nil {
			return nil, fmt.Errorf("decode pools: %w", err)
		}
	}
	if nodes != "" {
		if err := json.Unmarshal([]byte(nodes), &op.Nodes); err != nil {
			return nil, fmt.Errorf("decode nodes: %w", err)
		}
	}
	op.Force = forced != 0
	if cancelAt != 0 {
		op.CancelRequested = &v1.CancelRequest{By: cancelBy, Time: fromNanos(cancelAt)}
	}
	if leftovers != "" {
		if err := json.Unmarshal([]byte(leftovers), &op.Leftovers); err != nil {
			return nil, fmt.Errorf("decode leftovers: %w", err)
		}
	}
	op.StartTime = fromNanos(start)
	if end != 0 {
		t := fromNanos(end)
		op.EndTime = &t
	}
	var err error
	if op.Steps, op.Checkpoints, err = decodeSteps(steps); err != nil {
		return nil, fmt.Errorf("decode steps: %w", err)
	}
	if errJSON != "" {
		op.Error = new(v1.Error)
		if err := json.Unmarshal([]byte(errJSON), op.Error); err != nil {
			return nil, fmt.Errorf("decode error: %w", err)
		}
	}
	return op, nil
}

func (s *Store) insertOperation(ctx context.Context, tx *sql.Tx, op *store.Operation) error {
	r, err := encodeOperation(op)
	if err != nil {
		return err
	}
	// A new operation has no cancel request: only RequestCancel writes one.
	_, err = tx.ExecContext(ctx, s.q(`INSERT INTO operations (`+operationCols+`)
		VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, 0, '', ?, ?, ?, ?, ?)`),
		op.ID, op.Project, op.Cluster, op.Kind, op.Status, toNanos(op.StartTime), r.end, r.steps, r.errJSON,
		op.RetryOf, r.forced, r.leftovers, op.ClusterUID, op.Reason, r.nodes, op.Backup, r.pools)
	if s.constraint(err) == Unique {
		return fmt.Errorf("operation %s: %w", op.ID, store.ErrExists)
	}
	return err
}

// opSet is what a running operation's writer changes: never the cancel
// request, which is RequestCancel's. Its arguments, and the operation's
// key, are opRow.setArgs.
const opSet = `status = ?, steps = ?, error = ?, end_time = ?, leftovers = ?`

// setArgs are the arguments of opSet followed by op's id, project and
// cluster.
func (r opRow) setArgs(op *store.Operation) []any {
	return []any{op.Status, r.steps, r.errJSON, r.end, r.leftovers, op.ID, op.Project, op.Cluster}
}

// updateOperation writes op's status, steps, error, end time and
// leftovers; never its cancel request, which is RequestCancel's.
func (s *Store) updateOperation(ctx context.Context, tx *sql.Tx, op *store.Operation) error {
	r, err := encodeOperation(op)
	if err != nil {
		return err
	}
	res, err := tx.ExecContext(ctx, s.q(`UPDATE operations SET `+opSet+`
		WHERE id = ? AND project = ? AND cluster = ?`), r.setArgs(op)...)
	if err != nil {
		return err
	}
	n, err := res.RowsAffected()
	if err != nil {
		return err
	}
	if n == 0 {
		return fmt.Errorf("operation %s: %w", op.ID, store.ErrNotFound)
	}
	return nil
}

// GetOperation reads an operation; ErrNotFound for an unknown id.
func (s *Store) GetOperation(ctx context.Context, id string) (*store.Operation, error) {
	op, err := scanOperation(s.read.QueryRowContext(ctx, s.q(`SELECT `+operationCols+` FROM operations WHERE id = ?`), id))
	if errors.Is(err, sql.ErrNoRows) {
		err = store.ErrNotFound
	}
	if err != nil {
		return nil, fmt.Errorf("get operation %s: %w", id, err)
	}
	return op, nil
}

// OperationStatus returns an operation's status alone: what a long-poll
// that waits for the end reads at each change, without decoding its steps.
func (s *Store) OperationStatus(ctx context.Context, id string) (string, error) {
	var status string
	err := s.read.QueryRowContext(ctx, s.q(`SELECT status FROM operations WHERE id = ?`), id).Scan(&status)
	if errors.Is(err, sql.ErrNoRows) {
		err = store.ErrNotFound
	}
	if err != nil {
		return "", fmt.Errorf("get the status of operation %s: %w", id, err)
	}
	return status, nil
}

// RequestCancel records the first request to cancel an operation that has
// not ended; see store.Store.
func (s *Store) RequestCancel(ctx context.Context, id string, req v1.CancelRequest, event func(*store.Operation) *store.Event) (*store.Operation, bool, error) {
	wrap := func(err error) error { return fmt.Errorf("request cancel of operation %s: %w", id, err) }
	if req.By == "" || req.Time.IsZero() {
		return nil, false, wrap(errors.New("who asked and when are required"))
	}
	var (
		op       *store.Operation
		recorded bool
	)
	err := s.inTx(ctx, func(ctx context.Context, tx *sql.Tx) error {
		recorded = false
		// The conditional UPDATE is the check: a terminal operation or one
		// asked to cancel already is left as it is.
		res, err := tx.ExecContext(ctx, s.q(`UPDATE operations SET cancel_requested_at = ?, cancel_requested_by = ?
			WHERE id = ? AND cancel_requested_at = 0 AND status NOT IN (?, ?, ?)`),
			toNanos(req.Time), req.By, id, v1.OpSucceeded, v1.OpFailed, v1.OpCanceled)
		if err != nil {
			return err
		}
		n, err := res.RowsAffected()
		if err != nil {
			return err
		}
		recorded = n == 1
		op, err = scanOperation(tx.QueryRowContext(ctx, s.q(`SELECT `+operationCols+` FROM operations WHERE id = ?`), id))
		if errors.Is(err, sql.ErrNoRows) {
			return store.ErrNotFound
		}
		if err != nil || !recorded || event == nil {
			return err
		}
		// The request's event in the same commit: a worker that sees the
		// request writes its own events after this one.
		if ev := event(op); ev != nil {
			return s.insertEvents(ctx, tx, op.ClusterUID, []*store.Event{ev})
		}
		return nil
	})
	if err != nil {
		return nil, false, wrap(err)
	}
	if !recorded && v1.Terminal(op.Status) {
		return op, false, wrap(store.ErrEnded)
	}
	if recorded {
		s.changed(operationChanged(op))
	}
	return op, recorded, nil
}

// ListOperations lists the operations of the cluster named k by id (oldest
// first): those of the cluster that has the name now or, when none has,
// of the last one deleted under it (historyUID). They outlive the cluster.
func (s *Store) ListOperations(ctx context.Context, k store.Key, pg store.Page) ([]*store.Operation, string, error) {
	wrap := func(err error) error { return fmt.Errorf("list operations of cluster %s: %w", k, err) }
	uid, after, err := s.historyPage(ctx, k, pg.Token)
	if err != nil {
		return nil, "", wrap(err)
	}
	out, next, err := queryPage(ctx, s, listOperationsQuery, []any{k.Project, k.Name, uid, after}, limitOf(pg),
		scanOperation, func(op *store.Operation) string { return historyKey(uid, op.ID) })
	if err != nil {
		return nil, "", wrap(err)
	}
	return out, next, nil
}

// listOperationsQuery is a page of a cluster's operations (project,
// cluster, cluster uid, after, limit), served by the index
// operations_cluster.
const listOperationsQuery = `SELECT ` + operationCols + ` FROM operations
	WHERE project = ? AND cluster = ? AND cluster_uid = ? AND id > ? ORDER BY id LIMIT ?`

// SaveOperation records progress of a running operation, fenced by the lease
// of its cluster. A terminal status is refused: only FinishOperation ends an
// operation, so that it never reads Succeeded before the cluster's final
// write has committed.
//
// It is the write a worker makes twice a step, so it is one statement
// wherever it can be: saveOpQuery; with progress, saveOpProgressQuery on
// PostgreSQL. SQLite's WITH holds no UPDATE: there, a write with progress
// is saveOpQuery conditional on a dequeue count at zero already (every
// checkpoint after a run's first), and otherwise a transaction of
// saveOpQuery and the reset of the count. Events make it a transaction of
// the write and their inserts: a step's checkpoint and its event commit
// together, one commit instead of two.
func (s *Store) SaveOperation(ctx context.Context, op *store.Operation, f store.Fence, progress bool, events ...*store.Event) error {
	wrap := func(err error) error { return fmt.Errorf("save operation %s: %w", op.ID, err) }
	if v1.Terminal(op.Status) {
		return wrap(fmt.Errorf("status %s is terminal: use FinishOperation", op.Status))
	}
	if err := s.saveOperation(ctx, op, f, progress, events); err != nil {
		return wrap(err)
	}
	s.changed(operationChanged(op))
	return nil
}

// saveOpQuery writes an operation (opSet and its key, then the arguments
// of fence) if fence (fenceCond, or more) holds on its cluster's row.
// forUpdate (PostgreSQL) locks that row until the statement commits, so no
// claim takes the lease in between; a claim that committed first fails the
// fence when the lock reads the row again.
func saveOpQuery(fence, forUpdate string) string {
	return `UPDATE operations SET ` + opSet + `
		WHERE id = ? AND project = ? AND cluster = ?
		AND EXISTS (SELECT 1 FROM clusters WHERE ` + fence + forUpdate + `)` + savedCancel
}

// savedCancel is what a checkpoint returns: the operation's cancel
// request, so that the run learns of one with its write.
const savedCancel = `
		RETURNING cancel_requested_at, cancel_requested_by`

// saveOpProgressQuery is saveOpQuery that also resets the cluster's dequeue
// count, in one statement for PostgreSQL (fenceCond, the operation's key,
// then opSet and its key again). The UPDATE of clusters is the fence, as
// FOR UPDATE is in saveOpQuery; it is conditional on the operation, so a
// write refused for an unknown operation leaves the count alone, as a
// rolled-back transaction would.
const saveOpProgressQuery = `WITH lease AS (
		UPDATE clusters SET dequeues = 0
		WHERE ` + fenceCond + `
		AND EXISTS (SELECT 1 FROM operations WHERE id = ? AND project = ? AND cluster = ?)
		RETURNING 1)
	UPDATE operations SET ` + opSet + `
		WHERE id = ? AND project = ? AND cluster = ? AND EXISTS (SELECT 1 FROM lease)` + savedCancel

func (s *Store) saveOperation(ctx context.Context, op *store.Operation, f store.Fence, progress bool, events []*store.Event) error {
	if f.Owner == "" {
		return store.ErrLeaseLost
	}
	r, err := encodeOperation(op)
	if err != nil {
		return err
	}
	k := store.Key{Project: op.Project, Name: op.Cluster}
	saveArgs := append(r.setArgs(op), k.Project, k.Name, f.Owner, f.Token)
	// Progress resets the dequeue count: in the same statement
	// (saveOpProgress, PostgreSQL), else with a second one unless this
	// lease reset it already (only a new claim, a new token which the
	// fence refuses, raises it again).
	reset := progress && s.stmts.saveOpProgress == nil && !s.reset.done(k, f.Token)
	var (
		cancelAt int64
		cancelBy string
	)
	write := func(ctx context.Context, q execer) error {
		var row *sql.Row
		if progress && s.stmts.saveOpProgress != nil {
			args := append([]any{k.Project, k.Name, f.Owner, f.Token, op.ID, op.Project, op.Cluster}, r.setArgs(op)...)
			row = q.StmtContext(ctx, s.stmts.saveOpProgress).QueryRowContext(ctx, args...)
		} else {
			row = q.StmtContext(ctx, s.stmts.saveOp).QueryRowContext(ctx, saveArgs...)
		}
		err := row.Scan(&cancelAt, &cancelBy)
		if errors.Is(err, sql.ErrNoRows) {
			return s.notWritten(ctx, q, op, f)
		}
		if err != nil {
			return err
		}
		if reset {
			if _, err := q.StmtContext(ctx, s.stmts.resetDequeues).ExecContext(ctx, k.Project, k.Name); err != nil {
				return err
			}
		}
		return s.insertEvents(ctx, q, op.ClusterUID, events)
	}
	if len(events) == 0 && !reset && s.group == nil {
		err = write(ctx, dbExecer{s.write}) // one statement: no transaction
	} else {
		err = s.inTx(ctx, func(ctx context.Context, tx *sql.Tx) error { return write(ctx, tx) })
	}
	if err == nil && reset {
		s.reset.set(k, f.Token)
	}
	if err == nil && cancelAt != 0 && op.CancelRequested == nil {
		op.CancelRequested = &v1.CancelRequest{By: cancelBy, Time: fromNanos(cancelAt)}
	}
	return err
}

// execer is where a write goes: a transaction, or the database
// (dbExecer).
type execer interface {
	rowQuerier
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
	StmtContext(ctx context.Context, stmt *sql.Stmt) *sql.Stmt
}

// dbExecer is the database as an execer: its prepared statements as they
// are.
type dbExecer struct{ *sql.DB }

func (dbExecer) StmtContext(_ context.Context, stmt *sql.Stmt) *sql.Stmt { return stmt }

// resetTokens remembers, per cluster, the lease token under which the
// dequeue count was last reset by this process. A claim raises the count
// and the token together, so a token seen here means the count is still
// zero for as long as that lease holds. Forgotten when the lease is
// released; bounded by the clusters this process holds.
type resetTokens struct {
	mu sync.Mutex
	m  map[store.Key]int64
}

func (r *resetTokens) done(k store.Key, token int64) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	t, ok := r.m[k]
	return ok && t == token
}

func (r *resetTokens) set(k store.Key, token int64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.m == nil {
		r.m = map[store.Key]int64{}
	}
	r.m[k] = token
}

func (r *resetTokens) forget(k store.Key) {
	r.mu.Lock()
	defer r.mu.Unlock()
	delete(r.m, k)
}

// notWritten says why a fenced write of op wrote no row: the fence lost
// (store.ErrLeaseLost, as checkFence says), else an unknown operation
// (store.ErrNotFound). The read may come after the write committed or
// rolled back: a lease once lost never comes back (tokens only grow), so a
// fence that holds at the read held at the write.
func (s *Store) notWritten(ctx context.Context, q rowQuerier, op *store.Operation, f store.Fence) error {
	if err := s.readFence(ctx, q, store.Key{Project: op.Project, Name: op.Cluster}, f, ""); err != nil {
		return err
	}
	return fmt.Errorf("operation %s: %w", op.ID, store.ErrNotFound)
}

// FinishOperation ends an operation: in one fenced transaction it writes op
// (terminal; EndTime set to now when nil), appends events, keeps the
// cluster's cost intervals (recordCost, at EndTime), writes cl.Status or
// deletes the cluster and its nodes, and releases the lease. With
// deleteCluster, cl may be nil. On success cl.ETag is the new etag.
func (s *Store) FinishOperation(ctx context.Context, cl *store.Cluster, op *store.Operation, f store.Fence, deleteCluster bool, events ...*store.Event) error {
	k := store.Key{Project: op.Project, Name: op.Cluster}
	wrap := func(err error) error { return fmt.Errorf("finish operation %s on cluster %s: %w", op.ID, k, err) }
	if !v1.Terminal(op.Status) {
		return wrap(fmt.Errorf("status %q is not terminal", op.Status))
	}
	if cl == nil && !deleteCluster {
		return wrap(errors.New("no cluster to write"))
	}
	if cl != nil && cl.Key() != k {
		return wrap(fmt.Errorf("cluster %s is not the operation's", cl.Key()))
	}
	if op.EndTime == nil {
		t := s.now().UTC()
		op.EndTime = &t
	}
	var status []byte
	if !deleteCluster {
		var err error
		if status, err = json.Marshal(cl.Status); err != nil {
			return wrap(err)
		}
	}
	etag := newETag()
	err := s.inTx(ctx, func(ctx context.Context, tx *sql.Tx) error {
		if err := s.checkFence(ctx, tx, k, f); err != nil {
			return err
		}
		if err := s.updateOperation(ctx, tx, op); err != nil {
			return err
		}
		if err := s.insertEvents(ctx, tx, op.ClusterUID, events); err != nil {
			return err
		}
		if err := s.recordCost(ctx, tx, cl, op, deleteCluster, toNanos(*op.EndTime)); err != nil {
			return fmt.Errorf("record the cost interval: %w", err)
		}
		if deleteCluster {
			return s.deleteCluster(ctx, tx, k)
		}
		_, err := tx.ExecContext(ctx, s.q(`UPDATE clusters SET etag = ?, status = ?, provisioning_state = ?,
			lease_owner = '', lease_expiry = 0 WHERE project = ? AND name = ?`),
			etag, string(status), cl.Status.ProvisioningState, k.Project, k.Name)
		return err
	})
	if err != nil {
		return wrap(err)
	}
	if cl != nil && !deleteCluster {
		cl.ETag = etag
		cl.Lease = store.Lease{Token: f.Token}
	}
	s.changed(operationChanged(op))
	return nil
}

// deleteCluster removes a cluster, its nodes and its jobs, keeping its last lease
// token in lease_tombstones for a cluster created later under its name, and
// its uid, under which its history stays the name's until then.
func (s *Store) deleteCluster(ctx context.Context, tx *sql.Tx, k store.Key) error {
	if _, err := tx.ExecContext(ctx, s.q(`INSERT INTO lease_tombstones (project, name, lease_token, uid)
		SELECT project, name, lease_token, uid FROM clusters WHERE project = ? AND name = ?
		ON CONFLICT (project, name) DO UPDATE SET lease_token = excluded.lease_token, uid = excluded.uid`), k.Project, k.Name); err != nil {
		return err
	}
	for _, table := range []string{"nodes", "jobs"} {
		if _, err := tx.ExecContext(ctx, s.q(`DELETE FROM `+table+` WHERE project = ? AND cluster = ?`), k.Project, k.Name); err != nil {
			return err
		}
	}
	_, err := tx.ExecContext(ctx, s.q(`DELETE FROM clusters WHERE project = ? AND name = ?`), k.Project, k.Name)
	return err
}
