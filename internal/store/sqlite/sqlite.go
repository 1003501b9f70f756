// Package sqlite opens Kiln's default store: a SQLite file (modernc.org/sqlite,
// pure Go) in WAL mode, served by the shared SQL code in sqlstore.
package sqlite

import (
	"context"
	"database/sql"
	"embed"
	"errors"
	"fmt"
	"io/fs"
	"net/url"
	"os"
	"path/filepath"
	"runtime"
	"strings"

	"github.com/pressly/goose/v3"
	"modernc.org/sqlite"
	sqlite3 "modernc.org/sqlite/lib"

	"kiln.dev/kiln/internal/store"
	"kiln.dev/kiln/internal/store/sqlstore"
)

//go:embed migrations/*.sql
var migrations embed.FS

// Open opens (creating it and its directory if needed) the SQLite store at
// path and applies the migrations.
//
// It keeps two pools on the file. Writes go through a pool of one
// connection: SQLite has one writer at a time anyway, and queueing writers
// in Go rather than in SQLite's busy handler avoids SQLITE_BUSY and its
// sleeps. Every transaction on it begins IMMEDIATE (_txlock), so a
// transaction that reads and then writes never has to upgrade its lock.
// Reads outside transactions go through a pool of read-only connections,
// which WAL lets run alongside the writer. busy_timeout covers other
// processes sharing the file.
func Open(ctx context.Context, path string, opts ...sqlstore.Option) (store.Store, error) {
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return nil, fmt.Errorf("open sqlite store: %w", err)
	}
	write, err := openPool(path, false)
	if err != nil {
		return nil, err
	}
	write.SetMaxOpenConns(1)
	write.SetMaxIdleConns(1)
	write.SetConnMaxIdleTime(0)
	// The writer creates the file and switches it to WAL before any reader
	// opens it.
	if err := write.PingContext(ctx); err != nil {
		write.Close()
		return nil, fmt.Errorf("open sqlite store %s: %w", path, err)
	}
	read, err := openPool(path, true)
	if err != nil {
		write.Close()
		return nil, err
	}
	n := max(4, runtime.GOMAXPROCS(0))
	read.SetMaxOpenConns(n)
	read.SetMaxIdleConns(n)
	m, err := fs.Sub(migrations, "migrations")
	if err != nil {
		write.Close()
		read.Close()
		return nil, err
	}
	s, err := sqlstore.New(ctx, Dialect(m), write, read, opts...)
	if err != nil {
		return nil, fmt.Errorf("open sqlite store %s: %w", path, err)
	}
	return s, nil
}

func openPool(path string, readOnly bool) (*sql.DB, error) {
	q := url.Values{}
	q.Add("_pragma", "busy_timeout(10000)")
	q.Add("_pragma", "journal_mode(WAL)")
	q.Add("_pragma", "synchronous(NORMAL)")
	q.Add("_pragma", "foreign_keys(1)")
	q.Set("_txlock", "immediate")
	if readOnly {
		q.Add("_pragma", "query_only(1)")
	} else {
		// The writer's savepoints (one a write in a group commit) keep
		// their undo pages in memory: on disk, past 64 KiB, each page was
		// a write(2) that a fleet's checkpoints paid 4% of kilnd's CPU for.
		q.Add("_pragma", "temp_store(MEMORY)")
	}
	db, err := sql.Open(driverName, path+"?"+q.Encode())
	if err != nil {
		return nil, fmt.Errorf("open sqlite store %s: %w", path, err)
	}
	return db, nil
}

// Dialect is SQLite's sqlstore dialect with the given migrations.
func Dialect(migrations fs.FS) sqlstore.Dialect {
	return sqlstore.Dialect{
		Name:       "sqlite",
		Goose:      goose.DialectSQLite3,
		Migrations: migrations,
		// Write transactions begin IMMEDIATE and there is one writer: a
		// transaction holds the database, so rows need no locks.
		ForUpdate:  "",
		SkipLocked: "",
		Constraint: constraint,
		JSONText: func(column string, keys ...string) string {
			return "json_extract(" + column + ", '$." + strings.Join(keys, ".") + "')"
		},
		// One writer: the checkpoints of concurrent runs share commits.
		GroupCommit: true,
	}
}

func constraint(err error) sqlstore.Constraint {
	var e *sqlite.Error
	if !errors.As(err, &e) {
		return sqlstore.NoConstraint
	}
	switch e.Code() {
	case sqlite3.SQLITE_CONSTRAINT_UNIQUE, sqlite3.SQLITE_CONSTRAINT_PRIMARYKEY:
		return sqlstore.Unique
	case sqlite3.SQLITE_CONSTRAINT_FOREIGNKEY:
		return sqlstore.ForeignKey
	}
	return sqlstore.NoConstraint
}
