package sqlstore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"sync"

	"kiln.dev/kiln/internal/priority"
)

// groupCommit runs the checkpoints of concurrent runs in shared
// transactions (Dialect.GroupCommit). SQLite has one writer, and most of a
// small write's cost is its commit: the lock, the WAL frames of every page
// it dirtied, the syscalls. Writes that queue while a transaction runs are
// taken together into the next one and pay for one commit. Each write of a
// group runs under a savepoint of its own, so one that fails (a fence
// refused) leaves nothing behind while the others commit.
//
// Writes a user waits on (priority.Foreground: the API's) have a queue of
// their own, served first in short groups (maxUrgentGroup): such a write
// waits for the group being committed, never also for a full group of the
// runs' checkpoints queued before it.
type groupCommit struct {
	db     *sql.DB
	queue  chan *groupWrite
	urgent chan *groupWrite
	stop   chan struct{}
	done   chan struct{}
	once   sync.Once
}

// groupWrite is one caller's write and where its outcome goes.
type groupWrite struct {
	fn  func(ctx context.Context, tx *sql.Tx) error
	err chan error // buffered: the committer never waits for the caller
}

// maxGroup bounds the writes of one transaction, so one commit never
// holds many callers behind a long one.
const maxGroup = 64

// maxUrgentGroup bounds a group led by foreground writes: background
// writes join it after them up to this many writes in all, so the runs'
// checkpoints keep moving through a burst of API writes while the group a
// user waits on stays short.
const maxUrgentGroup = 32

// errStoreClosed is the answer to a write queued after Close.
var errStoreClosed = errors.New("the store is closed")

func newGroupCommit(db *sql.DB) *groupCommit {
	g := &groupCommit{db: db, queue: make(chan *groupWrite, maxGroup), urgent: make(chan *groupWrite, maxGroup),
		stop: make(chan struct{}), done: make(chan struct{})}
	go g.run()
	return g
}

// close stops the committer once the group it runs is done. A second
// close does nothing.
func (g *groupCommit) close() {
	g.once.Do(func() { close(g.stop) })
	<-g.done
}

// do runs fn in the next group's transaction and returns its outcome once
// that committed (or fn's own error, having changed nothing). A caller
// whose ctx ends before its write was queued gets ctx's error and nothing
// is written; once queued, the write's outcome is waited for, so that the
// caller never returns while its write may still land. fn gets a context
// of the group's, not ctx.
func (g *groupCommit) do(ctx context.Context, fn func(ctx context.Context, tx *sql.Tx) error) error {
	w := &groupWrite{fn: fn, err: make(chan error, 1)}
	queue := g.queue
	if priority.IsForeground(ctx) {
		queue = g.urgent
	}
	select {
	case queue <- w:
	case <-ctx.Done():
		return ctx.Err()
	case <-g.done:
		return errStoreClosed
	}
	select {
	case err := <-w.err:
		return err
	case <-g.done:
		select {
		case err := <-w.err:
			return err
		default:
			return errStoreClosed // queued as the committer stopped: not run
		}
	}
}

func (g *groupCommit) run() {
	defer close(g.done)
	for {
		var first *groupWrite
		urgent := false
		select {
		case first = <-g.urgent:
			urgent = true
		case first = <-g.queue:
		case <-g.stop:
			return
		}
		group := take(g.urgent, []*groupWrite{first}, maxGroup)
		limit := maxGroup
		if urgent || len(group) > 1 {
			limit = max(len(group), maxUrgentGroup)
		}
		g.commit(take(g.queue, group, limit))
	}
}

// take appends to group the writes waiting in queue, up to limit in all,
// without waiting for more.
func take(queue chan *groupWrite, group []*groupWrite, limit int) []*groupWrite {
	for len(group) < limit {
		select {
		case w := <-queue:
			group = append(group, w)
		default:
			return group
		}
	}
	return group
}

// commit runs a group's writes in one transaction and tells each its
// outcome.
func (g *groupCommit) commit(group []*groupWrite) {
	// No deadline: a statement interrupted inside a transaction rolls the
	// whole transaction back in SQLite, the others' writes with it; what
	// bounds a group is the database's busy timeout.
	ctx := context.Background()
	errs := make([]error, len(group))
	answer := func(all error) {
		for i, w := range group {
			if errs[i] == nil {
				errs[i] = all
			}
			w.err <- errs[i]
		}
	}
	tx, err := g.db.BeginTx(ctx, nil)
	if err != nil {
		answer(fmt.Errorf("begin: %w", err))
		return
	}
	if len(group) == 1 {
		if errs[0] = group[0].fn(ctx, tx); errs[0] != nil {
			_ = tx.Rollback()
			answer(nil)
			return
		}
	} else {
		for i, w := range group {
			if err := g.each(ctx, tx, w, &errs[i]); err != nil {
				_ = tx.Rollback()
				answer(err)
				return
			}
		}
	}
	if err := tx.Commit(); err != nil {
		answer(fmt.Errorf("commit: %w", err))
		return
	}
	answer(nil)
}

// each runs one write of a group under a savepoint, rolled back when the
// write fails (its error goes to *own). The error returned is the
// transaction's: the savepoint itself failed, and the group fails.
func (g *groupCommit) each(ctx context.Context, tx *sql.Tx, w *groupWrite, own *error) error {
	if _, err := tx.ExecContext(ctx, "SAVEPOINT grouped"); err != nil {
		return fmt.Errorf("savepoint: %w", err)
	}
	if *own = w.fn(ctx, tx); *own != nil {
		if _, err := tx.ExecContext(ctx, "ROLLBACK TO grouped"); err != nil {
			return fmt.Errorf("rollback to savepoint: %w", err)
		}
	}
	if _, err := tx.ExecContext(ctx, "RELEASE grouped"); err != nil {
		return fmt.Errorf("release savepoint: %w", err)
	}
	return nil
}
