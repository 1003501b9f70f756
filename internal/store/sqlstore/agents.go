package sqlstore

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"

	v1 "kiln.dev/kiln/api/v1"
	"kiln.dev/kiln/internal/store"
)

// PutClusterSecret writes a secret of cluster k, fenced by its lease.
func (s *Store) PutClusterSecret(ctx context.Context, k store.Key, name string, value []byte, c store.Cond) error {
	wrap := func(err error) error { return fmt.Errorf("put secret %s of cluster %s: %w", name, k, err) }
	if c.Fence == nil {
		return wrap(errors.New("a cluster secret is written by the cluster's lease holder: Cond.Fence is required"))
	}
	if c.IfMatch != "" {
		return wrap(errors.New("cluster secrets have no etag: IfMatch does not apply"))
	}
	value, err := s.seal(secretsCol, value, k.Project, k.Name, name)
	if err != nil {
		return wrap(err)
	}
	err = s.inTx(ctx, func(ctx context.Context, tx *sql.Tx) error {
		if err := s.checkFence(ctx, tx, k, *c.Fence); err != nil {
			return err
		}
		var one int
		err := tx.QueryRowContext(ctx, s.q(`SELECT 1 FROM cluster_secrets WHERE project = ? AND cluster = ? AND name = ?`),
			k.Project, k.Name, name).Scan(&one)
		switch {
		case err == nil && c.IfNoneMatch == "*":
			return store.ErrExists
		case err == nil:
			_, err = tx.ExecContext(ctx, s.q(`UPDATE cluster_secrets SET value = ? WHERE project = ? AND cluster = ? AND name = ?`),
				value, k.Project, k.Name, name)
			return err
		case !errors.Is(err, sql.ErrNoRows):
			return err
		}
		_, err = tx.ExecContext(ctx, s.q(`INSERT INTO cluster_secrets (project, cluster, name, value) VALUES (?, ?, ?, ?)`),
			k.Project, k.Name, name, value)
		return err
	})
	if err != nil {
		return wrap(err)
	}
	s.changed(store.Change{Kind: store.ChangeSecret, Project: k.Project, Cluster: k.Name, Secret: name})
	return nil
}

// GetClusterSecret reads a secret of cluster k.
func (s *Store) GetClusterSecret(ctx context.Context, k store.Key, name string) ([]byte, error) {
	var value []byte
	err := s.read.QueryRowContext(ctx, s.q(`SELECT value FROM cluster_secrets WHERE project = ? AND cluster = ? AND name = ?`),
		k.Project, k.Name, name).Scan(&value)
	if errors.Is(err, sql.ErrNoRows) {
		err = store.ErrNotFound
	}
	if err == nil {
		value, err = s.open(secretsCol, value, k.Project, k.Name, name)
	}
	if err != nil {
		return nil, fmt.Errorf("get secret %s of cluster %s: %w", name, k, err)
	}
	return value, nil
}

const instructionCols = `id, project, cluster, node, kind, params, created_at, result, result_at`

// scanInstruction reads a row of instructionCols, opening its params.
func (s *Store) scanInstruction(r scanner) (*store.Instruction, error) {
	var (
		in                store.Instruction
		params            []byte
		result            string
		created, resultAt int64
	)
	if err := r.Scan(&in.ID, &in.Project, &in.Cluster, &in.Node, &in.Kind, &params, &created, &result, &resultAt); err != nil {
		return nil, err
	}
	if len(params) > 0 {
		plain, err := s.open(paramsCol, params, in.ID)
		if err != nil {
			return nil, err
		}
		in.Params = json.RawMessage(plain)
	}
	in.CreatedAt = fromNanos(created)
	if result != "" {
		in.Result = new(v1.InstructionResult)
		if err := json.Unmarshal([]byte(result), in.Result); err != nil {
			return nil, fmt.Errorf("decode result of instruction %s: %w", in.ID, err)
		}
		t := fromNanos(resultAt)
		in.ResultAt = &t
	}
	return &in, nil
}

// PutInstruction inserts an instruction, fenced by its cluster's lease.
func (s *Store) PutInstruction(ctx context.Context, in *store.Instruction, c store.Cond) error {
	k := store.Key{Project: in.Project, Name: in.Cluster}
	wrap := func(err error) error {
		return fmt.Errorf("put instruction %s for node %s of cluster %s: %w", in.ID, in.Node, k, err)
	}
	if c.Fence == nil {
		return wrap(errors.New("an instruction is issued by the cluster's lease holder: Cond.Fence is required"))
	}
	if in.ID == "" || in.Node == "" || in.Kind == "" {
		return wrap(errors.New("id, node and kind are required"))
	}
	var params []byte
	if len(in.Params) > 0 {
		var err error
		if params, err = s.seal(paramsCol, in.Params, in.ID); err != nil {
			return wrap(err)
		}
	}
	created := s.now().UTC()
	err := s.inTx(ctx, func(ctx context.Context, tx *sql.Tx) error {
		if err := s.checkFence(ctx, tx, k, *c.Fence); err != nil {
			return err
		}
		_, err := tx.ExecContext(ctx, s.q(`INSERT INTO instructions (id, project, cluster, node, kind, params, created_at)
			VALUES (?, ?, ?, ?, ?, ?, ?)`), in.ID, in.Project, in.Cluster, in.Node, in.Kind, string(params), toNanos(created))
		if s.constraint(err) == Unique {
			return store.ErrExists
		}
		return err
	})
	if err != nil {
		return wrap(err)
	}
	in.CreatedAt, in.Result, in.ResultAt = created, nil, nil
	s.changed(store.Change{Kind: store.ChangeInstruction, Project: k.Project, Cluster: k.Name, Node: in.Node})
	return nil
}

// GetInstruction reads one instruction.
func (s *Store) GetInstruction(ctx context.Context, id string) (*store.Instruction, error) {
	in, err := s.scanInstruction(s.read.QueryRowContext(ctx, s.q(`SELECT `+instructionCols+` FROM instructions WHERE id = ?`), id))
	if errors.Is(err, sql.ErrNoRows) {
		err = store.ErrNotFound
	}
	if err != nil {
		return nil, fmt.Errorf("get instruction %s: %w", id, err)
	}
	return in, nil
}

// ListInstructions lists a node's instructions by id.
func (s *Store) ListInstructions(ctx context.Context, k store.Key, node string, pending bool) ([]*store.Instruction, error) {
	query := `SELECT ` + instructionCols + ` FROM instructions WHERE project = ? AND cluster = ? AND node = ?`
	if pending {
		query += ` AND result = ''`
	}
	rows, err := s.read.QueryContext(ctx, s.q(query+` ORDER BY id`), k.Project, k.Name, node)
	if err != nil {
		return nil, fmt.Errorf("list instructions of node %s of cluster %s: %w", node, k, err)
	}
	defer rows.Close()
	var out []*store.Instruction
	for rows.Next() {
		in, err := s.scanInstruction(rows)
		if err != nil {
			return nil, fmt.Errorf("list instructions of node %s of cluster %s: %w", node, k, err)
		}
		out = append(out, in)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("list instructions of node %s of cluster %s: %w", node, k, err)
	}
	return out, nil
}

// SetInstructionResult records a result once, with one conditional UPDATE.
func (s *Store) SetInstructionResult(ctx context.Context, id string, r v1.InstructionResult) error {
	wrap := func(err error) error { return fmt.Errorf("set result of instruction %s: %w", id, err) }
	data, err := json.Marshal(r)
	if err != nil {
		return wrap(err)
	}
	res, err := s.write.ExecContext(ctx, s.q(`UPDATE instructions SET result = ?, result_at = ? WHERE id = ? AND result = ''`),
		string(data), s.nowNanos(), id)
	if err != nil {
		return wrap(err)
	}
	if n, err := res.RowsAffected(); err != nil {
		return wrap(err)
	} else if n == 1 {
		return nil
	}
	// Nothing updated: a result is there already, or there is no such id.
	if _, err := s.GetInstruction(ctx, id); err != nil {
		return wrap(store.ErrNotFound)
	}
	return wrap(store.ErrExists)
}

// AppendNodeLogs appends lines to a node's log and trims it to the newest
// store.MaxNodeLogLines.
func (s *Store) AppendNodeLogs(ctx context.Context, k store.Key, node string, lines []v1.LogLine) error {
	if len(lines) == 0 {
		return nil
	}
	err := s.inTx(ctx, func(ctx context.Context, tx *sql.Tx) error {
		for _, l := range lines {
			t := l.Time
			if t.IsZero() {
				t = s.now()
			}
			_, err := tx.ExecContext(ctx, s.q(`INSERT INTO node_logs (project, cluster, node, time, stream, line) VALUES (?, ?, ?, ?, ?, ?)`),
				k.Project, k.Name, node, toNanos(t), l.Stream, l.Line)
			if s.constraint(err) == ForeignKey {
				return store.ErrNotFound
			}
			if err != nil {
				return err
			}
		}
		_, err := tx.ExecContext(ctx, s.q(`DELETE FROM node_logs WHERE project = ? AND cluster = ? AND node = ? AND id <
			(SELECT id FROM node_logs WHERE project = ? AND cluster = ? AND node = ? ORDER BY id DESC LIMIT 1 OFFSET ?)`),
			k.Project, k.Name, node, k.Project, k.Name, node, store.MaxNodeLogLines-1)
		return err
	})
	if err != nil {
		return fmt.Errorf("append logs of node %s of cluster %s: %w", node, k, err)
	}
	return nil
}

// ListNodeLogs lists a node's log lines that f keeps, oldest first. The
// next token is always where to go on reading: a log grows. A page that
// reaches the end moves it to the newest line at the start of the read,
// past the lines f left out, so that following a log with a filter does not
// read them again.
func (s *Store) ListNodeLogs(ctx context.Context, k store.Key, node string, f store.LogFilter, pg store.Page) ([]v1.LogLine, string, error) {
	wrap := func(err error) error { return fmt.Errorf("list logs of node %s of cluster %s: %w", node, k, err) }
	after, err := decodeIDToken(pg.Token)
	if err != nil {
		return nil, "", wrap(err)
	}
	var last int64
	err = s.read.QueryRowContext(ctx, s.q(`SELECT COALESCE(MAX(id), 0) FROM node_logs
		WHERE project = ? AND cluster = ? AND node = ?`), k.Project, k.Name, node).Scan(&last)
	if err != nil {
		return nil, "", wrap(err)
	}
	if last <= after {
		return nil, encodeToken(fmt.Sprint(after)), nil // the same position: nothing new
	}
	where := `project = ? AND cluster = ? AND node = ? AND id > ? AND id <= ?`
	args := []any{k.Project, k.Name, node, after, last}
	if len(f.Streams) > 0 {
		where += " AND stream IN (?" + strings.Repeat(", ?", len(f.Streams)-1) + ")"
		for _, st := range f.Streams {
			args = append(args, st)
		}
	}
	if !f.Since.IsZero() {
		where += " AND time >= ?"
		args = append(args, toNanos(f.Since))
	}
	if f.Tail > 0 {
		// Start just before the Tail-th newest line that matches.
		var start int64
		err := s.read.QueryRowContext(ctx, s.q(`SELECT id FROM node_logs WHERE `+where+` ORDER BY id DESC LIMIT 1 OFFSET ?`),
			append(slices.Clone(args), f.Tail-1)...).Scan(&start)
		switch {
		case err == nil:
			args[3] = start - 1
		case !errors.Is(err, sql.ErrNoRows): // fewer match: all of them
			return nil, "", wrap(err)
		}
	}
	type row struct {
		id   int64
		line v1.LogLine
	}
	scan := func(r scanner) (row, error) {
		var x row
		var t int64
		err := r.Scan(&x.id, &t, &x.line.Stream, &x.line.Line)
		x.line.Time = fromNanos(t)
		return x, err
	}
	limit := limitOf(pg)
	rows, more, err := queryPage(ctx, s, `SELECT id, time, stream, line FROM node_logs
		WHERE `+where+` ORDER BY id LIMIT ?`, args, limit, scan, func(x row) string { return fmt.Sprint(x.id) })
	if err != nil {
		return nil, "", wrap(err)
	}
	next := encodeToken(fmt.Sprint(last)) // read to the end
	if more != "" {
		next = more
	}
	out := make([]v1.LogLine, len(rows))
	for i, x := range rows {
		out[i] = x.line
	}
	return out, next, nil
}
