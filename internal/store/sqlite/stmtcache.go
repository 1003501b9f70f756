package sqlite

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"strings"

	"modernc.org/sqlite"
)

// driverName is the database/sql driver the store opens: SQLite's, with a
// cache of prepared statements per connection.
const driverName = "kiln-sqlite"

func init() { sql.Register(driverName, cachingDriver{&sqlite.Driver{}}) }

// maxCachedStmts bounds the statements one connection keeps prepared; the
// store's queries are a fixed set well under it.
const maxCachedStmts = 256

// cachingDriver keeps each connection's statements prepared. database/sql
// hands a query string to the connection each time, and SQLite's driver
// compiles it each time: parsing and planning were a fifth of kilnd's CPU
// during a fleet wave (BENCHMARKS.md). A statement is compiled once per
// connection and then only bound, run and reset.
type cachingDriver struct{ d *sqlite.Driver }

func (d cachingDriver) Open(name string) (driver.Conn, error) {
	c, err := d.d.Open(name)
	if err != nil {
		return nil, err
	}
	return &cachingConn{conn: c.(sqliteConn), stmts: map[string]*cachedStmt{}}, nil
}

// sqliteConn is what the SQLite driver's connection implements and the
// cache passes on.
type sqliteConn interface {
	driver.Conn
	driver.ConnPrepareContext
	driver.ConnBeginTx
	driver.ExecerContext
	driver.QueryerContext
	driver.Pinger
	driver.SessionResetter
	driver.Validator
}

// cachingConn is one connection and its prepared statements. database/sql
// uses a connection from one goroutine at a time, so it needs no lock.
type cachingConn struct {
	conn  sqliteConn
	stmts map[string]*cachedStmt
}

// cachedStmt is a prepared statement; busy while rows read from it are
// open (a second query with the same text then runs uncached).
type cachedStmt struct {
	stmt interface {
		driver.Stmt
		driver.StmtExecContext
		driver.StmtQueryContext
	}
	busy bool
}

// stmt is query's prepared statement, preparing it on first use; nil when
// query is not cached: a script of several statements, a statement whose
// rows are still open, or a full cache.
func (c *cachingConn) stmt(ctx context.Context, query string) (*cachedStmt, error) {
	if s, ok := c.stmts[query]; ok {
		if s.busy {
			return nil, nil
		}
		return s, nil
	}
	if len(c.stmts) >= maxCachedStmts || strings.Contains(query, ";") {
		return nil, nil
	}
	ds, err := c.conn.PrepareContext(ctx, query)
	if err != nil {
		return nil, err
	}
	st, ok := ds.(interface {
		driver.Stmt
		driver.StmtExecContext
		driver.StmtQueryContext
	})
	if !ok {
		ds.Close()
		return nil, nil
	}
	s := &cachedStmt{stmt: st}
	c.stmts[query] = s
	return s, nil
}

func (c *cachingConn) ExecContext(ctx context.Context, query string, args []driver.NamedValue) (driver.Result, error) {
	s, err := c.stmt(ctx, query)
	if err != nil {
		return nil, err
	}
	if s == nil {
		return c.conn.ExecContext(ctx, query, args)
	}
	return s.stmt.ExecContext(ctx, args)
}

func (c *cachingConn) QueryContext(ctx context.Context, query string, args []driver.NamedValue) (driver.Rows, error) {
	s, err := c.stmt(ctx, query)
	if err != nil {
		return nil, err
	}
	if s == nil {
		return c.conn.QueryContext(ctx, query, args)
	}
	r, err := s.stmt.QueryContext(ctx, args)
	if err != nil {
		return nil, err
	}
	s.busy = true
	return &cachedRows{Rows: r, s: s}, nil
}

// cachedRows frees its statement for the next query when closed (the
// driver resets the statement then).
type cachedRows struct {
	driver.Rows
	s *cachedStmt
}

func (r *cachedRows) Close() error {
	err := r.Rows.Close()
	r.s.busy = false
	return err
}

func (c *cachingConn) Prepare(query string) (driver.Stmt, error) { return c.conn.Prepare(query) }
func (c *cachingConn) PrepareContext(ctx context.Context, query string) (driver.Stmt, error) {
	return c.conn.PrepareContext(ctx, query)
}
func (c *cachingConn) Begin() (driver.Tx, error) {
	return c.conn.BeginTx(context.Background(), driver.TxOptions{})
}
func (c *cachingConn) BeginTx(ctx context.Context, opts driver.TxOptions) (driver.Tx, error) {
	return c.conn.BeginTx(ctx, opts)
}
func (c *cachingConn) Ping(ctx context.Context) error         { return c.conn.Ping(ctx) }
func (c *cachingConn) ResetSession(ctx context.Context) error { return c.conn.ResetSession(ctx) }
func (c *cachingConn) IsValid() bool                          { return c.conn.IsValid() }

func (c *cachingConn) Close() error {
	for q, s := range c.stmts {
		s.stmt.Close()
		delete(c.stmts, q)
	}
	return c.conn.Close()
}
