// Package postgres opens Kiln's store on PostgreSQL, served by the shared
// SQL code in sqlstore.
//
// It uses pgx through its database/sql driver (pgx/v5/stdlib) rather than
// pgxpool directly: sqlstore is one database/sql code path for SQLite and
// PostgreSQL, and database/sql's pool does what a control plane needs here.
// The driver is still pgx (its wire protocol, its types and its typed
// *pgconn.PgError, from which constraint violations are classified).
package postgres

import (
	"context"
	"database/sql"
	"embed"
	"errors"
	"fmt"
	"io/fs"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	_ "github.com/jackc/pgx/v5/stdlib" // the "pgx" database/sql driver
	"github.com/pressly/goose/v3"
	"github.com/pressly/goose/v3/lock"

	"kiln.dev/kiln/internal/store"
	"kiln.dev/kiln/internal/store/sqlstore"
)

//go:embed migrations/*.sql
var migrations embed.FS

// Open connects to the database at url (postgres://...) and applies the
// migrations; concurrent Opens of one database serialise their migrations
// on an advisory lock.
func Open(ctx context.Context, url string, opts ...sqlstore.Option) (store.Store, error) {
	cfg, err := pgconn.ParseConfig(url)
	if err != nil {
		// The parse error can quote the URL, password included.
		return nil, errors.New("open postgres store: invalid connection URL")
	}
	db, err := sql.Open("pgx", url)
	if err != nil {
		return nil, fmt.Errorf("open postgres store %s: %w", cfg.Database, err)
	}
	db.SetMaxOpenConns(20)
	db.SetMaxIdleConns(10)
	db.SetConnMaxIdleTime(5 * time.Minute)
	if err := db.PingContext(ctx); err != nil {
		db.Close()
		return nil, fmt.Errorf("open postgres store %s on %s: %w", cfg.Database, cfg.Host, err)
	}
	locker, err := lock.NewPostgresSessionLocker()
	if err != nil {
		db.Close()
		return nil, fmt.Errorf("open postgres store: %w", err)
	}
	m, err := fs.Sub(migrations, "migrations")
	if err != nil {
		db.Close()
		return nil, err
	}
	d := Dialect(m)
	d.SessionLocker = locker
	// Other kilnd processes on this database hear of this one's writes
	// (and it of theirs) through LISTEN/NOTIFY: relay.go.
	opts = append(opts[:len(opts):len(opts)], sqlstore.WithRelay(newRelay(url, db)))
	s, err := sqlstore.New(ctx, d, db, db, opts...)
	if err != nil {
		return nil, fmt.Errorf("open postgres store %s: %w", cfg.Database, err)
	}
	return s, nil
}

// Dialect is PostgreSQL's sqlstore dialect with the given migrations.
func Dialect(migrations fs.FS) sqlstore.Dialect {
	return sqlstore.Dialect{
		Name:           "postgres",
		Goose:          goose.DialectPostgres,
		Migrations:     migrations,
		NumberedParams: true,
		ForUpdate:      " FOR UPDATE",
		SkipLocked:     " FOR UPDATE SKIP LOCKED",
		WriteInWith:    true,
		Constraint:     constraint,
		JSONText: func(column string, keys ...string) string {
			return "(" + column + "::jsonb #>> '{" + strings.Join(keys, ",") + "}')"
		},
	}
}

func constraint(err error) sqlstore.Constraint {
	var e *pgconn.PgError
	if !errors.As(err, &e) {
		return sqlstore.NoConstraint
	}
	switch e.Code {
	case "23505": // unique_violation
		return sqlstore.Unique
	case "23503": // foreign_key_violation
		return sqlstore.ForeignKey
	}
	return sqlstore.NoConstraint
}
