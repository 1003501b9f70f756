// Package sqlstore is the one SQL implementation of store.Store, shared by
// SQLite (internal/store/sqlite) and PostgreSQL (internal/store/postgres).
// The differences between the two live in a Dialect: placeholders, row
// locks, how constraint violations are reported, and the migrations.
//
// Schema conventions: times are int64 unix nanoseconds (0 means unset) so
// that lease comparisons are identical in both databases; documents (spec,
// status, steps, node facts, ...) are JSON text; every field a query filters
// or orders on is a real column.
package sqlstore

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"strconv"
	"strings"
	"time"

	"github.com/pressly/goose/v3"
	"github.com/pressly/goose/v3/lock"

	"kiln.dev/kiln/internal/store"
)

// Constraint is the kind of constraint a failed statement violated.
type Constraint int

const (
	// NoConstraint: the error is not a constraint violation.
	NoConstraint Constraint = iota
	// Unique: a primary key or unique constraint.
	Unique
	// ForeignKey: a foreign key (a missing parent, or a parent that still
	// has children).
	ForeignKey
)

// Dialect is what differs between the databases.
type Dialect struct {
	// Name is for error messages ("sqlite", "postgres").
	Name string
	// Goose is the goose dialect of the migrations.
	Goose goose.Dialect
	// Migrations holds the goose SQL files at its root.
	Migrations fs.FS
	// SessionLocker, when set, serialises migrations between processes.
	SessionLocker lock.SessionLocker
	// NumberedParams: placeholders are $1, $2, ... instead of ?.
	NumberedParams bool
	// ForUpdate is appended to a SELECT that reads a row the transaction
	// will write (" FOR UPDATE"). Empty where a write transaction already
	// holds the whole database (SQLite with _txlock=immediate).
	ForUpdate string
	// WriteInWith: a WITH clause may hold an UPDATE (PostgreSQL), so a
	// write to two tables can be one statement instead of a transaction.
	WriteInWith bool
	// SkipLocked is appended to the claim sub-select (" FOR UPDATE SKIP
	// LOCKED"), so concurrent claimers pass over each other's rows.
	SkipLocked string
	// Constraint classifies an error from the driver, using its typed error.
	Constraint func(error) Constraint
	// JSONText is the SQL expression of the text at keys in the JSON of
	// column (NULL where there is none): what the fleet's metrics read of
	// a cluster's status without reading the rest of it.
	JSONText func(column string, keys ...string) string
	// GroupCommit: the database has one writer (SQLite), and the
	// checkpoints of concurrent runs share transactions (groupcommit.go).
	GroupCommit bool
}

// Option configures a Store.
type Option func(*Store)

// WithClock sets the clock leases, event times and created times are read
// from. The default is time.Now.
func WithClock(now func() time.Time) Option {
	return func(s *Store) { s.now = now }
}

// WithRelay sets the relay that carries this store's changes to other
// processes and theirs back (changes.go). Without one, Watch sees the
// writes of this process only.
func WithRelay(r Relay) Option {
	return func(s *Store) { s.relay = r }
}

// Store implements store.Store over database/sql.
type Store struct {
	d     Dialect
	write *sql.DB
	read  *sql.DB
	now   func() time.Time
	// sealer seals secret columns (sealer.go); nil stores them in clear.
	sealer Sealer
	// changes and relay tell watchers about committed writes (changes.go).
	changes store.Hub
	relay   Relay
	// stmts are the lease path's prepared statements (lease.go).
	stmts leaseStmts
	// reset holds, per cluster, the lease token under which this process
	// reset the dequeue count (saveOperation): later progress under the
	// same lease writes the operation alone.
	reset resetTokens
	// group batches checkpoints into shared transactions; nil unless
	// Dialect.GroupCommit.
	group *groupCommit
}

var (
	_ store.Store   = (*Store)(nil)
	_ store.Watcher = (*Store)(nil)
)

// New applies the dialect's migrations to write and returns a Store. Reads
// outside a transaction (Get, List) go to read; everything else to write.
// The two may be the same pool. The Store owns both and closes them.
func New(ctx context.Context, d Dialect, write, read *sql.DB, opts ...Option) (*Store, error) {
	s := &Store{d: d, write: write, read: read, now: time.Now}
	for _, o := range opts {
		o(s)
	}
	if err := s.migrate(ctx); err != nil {
		s.Close()
		return nil, err
	}
	if err := s.prepareLeaseStmts(ctx); err != nil {
		s.Close()
		return nil, err
	}
	if s.relay != nil {
		s.relay.Start(s.changes.Publish)
	}
	if d.GroupCommit {
		s.group = newGroupCommit(write)
	}
	return s, nil
}

func (s *Store) migrate(ctx context.Context) error {
	var opts []goose.ProviderOption
	if s.d.SessionLocker != nil {
		opts = append(opts, goose.WithSessionLocker(s.d.SessionLocker))
	}
	p, err := goose.NewProvider(s.d.Goose, s.write, s.d.Migrations, opts...)
	if err != nil {
		return fmt.Errorf("%s migrations: %w", s.d.Name, err)
	}
	if _, err := p.Up(ctx); err != nil {
		return fmt.Errorf("%s migrations: %w", s.d.Name, err)
	}
	return nil
}

// Ping checks both pools answer.
func (s *Store) Ping(ctx context.Context) error {
	if err := s.write.PingContext(ctx); err != nil {
		return fmt.Errorf("ping %s: %w", s.d.Name, err)
	}
	if s.read != s.write {
		if err := s.read.PingContext(ctx); err != nil {
			return fmt.Errorf("ping %s: %w", s.d.Name, err)
		}
	}
	return nil
}

// Close stops the relay and closes the pools.
func (s *Store) Close() error {
	var err error
	if s.relay != nil {
		err = s.relay.Close()
	}
	if s.group != nil {
		s.group.close()
	}
	err = errors.Join(err, s.stmts.close(), s.write.Close())
	if s.read != s.write {
		err = errors.Join(err, s.read.Close())
	}
	return err
}

// q rewrites a query written with ? placeholders for the dialect. Queries
// in this package never contain a literal '?'.
func (s *Store) q(query string) string {
	if !s.d.NumberedParams {
		return query
	}
	var b strings.Builder
	n := 0
	for _, r := range query {
		if r == '?' {
			n++
			b.WriteByte('$')
			b.WriteString(strconv.Itoa(n))
			continue
		}
		b.WriteRune(r)
	}
	return b.String()
}

// inTx runs fn in a write transaction and commits it when fn returns nil.
// With group commit (Dialect.GroupCommit) the transaction is shared with
// the writes queued beside it, fn's under a savepoint of its own. fn must
// use the ctx it is given, not its caller's.
func (s *Store) inTx(ctx context.Context, fn func(ctx context.Context, tx *sql.Tx) error) error {
	if s.group != nil {
		return s.group.do(ctx, fn)
	}
	tx, err := s.write.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("begin: %w", err)
	}
	if err := fn(ctx, tx); err != nil {
		_ = tx.Rollback()
		return err
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("commit: %w", err)
	}
	return nil
}

// writeOne runs fn, a write of one statement: in the group's next
// transaction under group commit (a commit shared instead of one of its
// own), else on the database as it is. fn must use the ctx it is given.
func (s *Store) writeOne(ctx context.Context, fn func(ctx context.Context, q execer) error) error {
	if s.group != nil {
		return s.group.do(ctx, func(ctx context.Context, tx *sql.Tx) error { return fn(ctx, tx) })
	}
	return fn(ctx, dbExecer{s.write})
}

func (s *Store) constraint(err error) Constraint {
	if err == nil || s.d.Constraint == nil {
		return NoConstraint
	}
	return s.d.Constraint(err)
}

// nowNanos is the store clock in unix nanoseconds.
func (s *Store) nowNanos() int64 { return s.now().UnixNano() }

// newETag returns a fresh random etag. Random rather than a per-row counter
// so that a record deleted and created again never repeats an old etag.
func newETag() string {
	var b [8]byte
	_, _ = rand.Read(b[:]) // never fails (crypto/rand)
	return hex.EncodeToString(b[:])
}

func toNanos(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return t.UnixNano()
}

func fromNanos(n int64) time.Time {
	if n == 0 {
		return time.Time{}
	}
	return time.Unix(0, n).UTC()
}

// checkCond applies the etag conditions of c to a record that exists (with
// etag) or not. IfMatch on a missing record fails the precondition, as in
// HTTP.
func checkCond(c store.Cond, exists bool, etag string) error {
	if c.IfNoneMatch == "*" && exists {
		return store.ErrExists
	}
	if c.IfMatch != "" {
		if !exists || (c.IfMatch != "*" && c.IfMatch != etag) {
			return store.ErrPreconditionFailed
		}
	}
	return nil
}

// checkFence verifies, inside tx, that f is the current lease of cluster k,
// and locks the cluster row until tx ends so no claim can slip in between.
// A missing cluster, or a released lease, means the lease is lost.
func (s *Store) checkFence(ctx context.Context, tx *sql.Tx, k store.Key, f store.Fence) error {
	return s.readFence(ctx, tx, k, f, s.d.ForUpdate)
}

// readFence reads cluster k's lease and compares it with f, as checkFence
// says; lock is appended to the SELECT.
func (s *Store) readFence(ctx context.Context, q rowQuerier, k store.Key, f store.Fence, lock string) error {
	if f.Owner == "" {
		return store.ErrLeaseLost
	}
	var owner string
	var token int64
	err := q.QueryRowContext(ctx, s.q(`SELECT lease_owner, lease_token FROM clusters
		WHERE project = ? AND name = ?`+lock), k.Project, k.Name).Scan(&owner, &token)
	if errors.Is(err, sql.ErrNoRows) {
		return store.ErrLeaseLost
	}
	if err != nil {
		return err
	}
	if owner != f.Owner || token != f.Token {
		return store.ErrLeaseLost
	}
	return nil
}
