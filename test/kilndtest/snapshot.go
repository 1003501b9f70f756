package kilndtest

import (
	"context"
	"database/sql"
	"encoding/hex"
	"fmt"
	"slices"
	"strings"
	"testing"
	"unicode/utf8"

	_ "github.com/jackc/pgx/v5/stdlib" // the "pgx" database/sql driver
	_ "modernc.org/sqlite"             // the "sqlite" database/sql driver, as the store uses
)

// Tables is what a kilnd store holds, read by Snapshot: every row of every
// table by table name, rows in a fixed order. Two snapshots compare with
// cmp.Diff, which prints the rows that differ with their column names.
type Tables map[string][]Row

// Row is one row: column name to value. Integers are int64, text is a
// string, a blob is a string too (in hex after "0x" unless it is UTF-8).
type Row map[string]any

// What Snapshot leaves out: what a request that changes nothing else still
// writes.
var (
	// The audit log records every mutating request, refusals included;
	// each backend renews its replica's record on a heartbeat.
	snapshotSkipTables = []string{"audit", "replicas"}
	// A token's last-used time is written by whatever request the token
	// authenticates, refused or not (auth.Authenticator, at most once a
	// minute per token): a snapshot with it would differ from the one before
	// depending on the clock.
	snapshotSkipColumns = map[string][]string{"tokens": {"last_used_at"}}
)

const (
	sqliteTables = `SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY name`
	// Sequences are not tables and are left out: PostgreSQL advances them
	// outside transactions, so an insert that rolled back moves them too.
	postgresTables = `SELECT table_name FROM information_schema.tables
		WHERE table_schema = current_schema() AND table_type = 'BASE TABLE' ORDER BY table_name`
)

// Snapshot reads every table of the store named as kilnd's --store flag
// names it: a postgres:// (or postgresql://) URL, otherwise the path of a
// SQLite file (DATA_DIR/kiln.db by default), which it opens read-only. All
// tables are read in one read-only transaction, so a snapshot is
// consistent while kilnd runs. It leaves out the audit and replicas tables, the rows of
// sqlite_sequence that count audit entries, and tokens' last-used times.
// Sealed values are compared as stored: rewriting a secret, even with the
// same plaintext, changes its nonce and shows.
func Snapshot(t testing.TB, store string) Tables {
	t.Helper()
	driver, dsn, list := "sqlite", "file:"+store+"?mode=ro&_pragma=busy_timeout(10000)", sqliteTables
	isolation := sql.LevelDefault // SQLite: a read transaction sees one snapshot (WAL)
	if strings.HasPrefix(store, "postgres://") || strings.HasPrefix(store, "postgresql://") {
		driver, dsn, list, isolation = "pgx", store, postgresTables, sql.LevelRepeatableRead
	}
	db, err := sql.Open(driver, dsn)
	if err != nil {
		t.Fatalf("snapshot: open %s store: %v", driver, err)
	}
	defer db.Close()
	ctx := t.Context()
	tx, err := db.BeginTx(ctx, &sql.TxOptions{Isolation: isolation, ReadOnly: true})
	if err != nil {
		t.Fatalf("snapshot: begin: %v", err)
	}
	defer tx.Rollback()

	var names []string
	rows, err := tx.QueryContext(ctx, list)
	if err != nil {
		t.Fatalf("snapshot: list tables: %v", err)
	}
	for rows.Next() {
		var n string
		if err := rows.Scan(&n); err != nil {
			t.Fatalf("snapshot: list tables: %v", err)
		}
		names = append(names, n)
	}
	if err := rows.Close(); err != nil {
		t.Fatalf("snapshot: list tables: %v", err)
	}
	out := Tables{}
	for _, name := range names {
		if slices.Contains(snapshotSkipTables, name) {
			continue
		}
		rows, err := readTable(ctx, tx, name)
		if err != nil {
			t.Fatalf("snapshot: read table %s: %v", name, err)
		}
		if name == "sqlite_sequence" {
			// The next id of each AUTOINCREMENT table; the audit log's
			// moves with every entry.
			rows = slices.DeleteFunc(rows, func(r Row) bool {
				counted, _ := r["name"].(string)
				return slices.Contains(snapshotSkipTables, counted)
			})
		}
		out[name] = rows
	}
	return out
}

// readTable reads every row of a table, its skipped columns left out,
// sorted by the rendering of its values in column order.
func readTable(ctx context.Context, tx *sql.Tx, table string) ([]Row, error) {
	rows, err := tx.QueryContext(ctx, `SELECT * FROM "`+strings.ReplaceAll(table, `"`, `""`)+`"`)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	cols, err := rows.Columns()
	if err != nil {
		return nil, err
	}
	type keyed struct {
		key string
		row Row
	}
	var all []keyed
	for rows.Next() {
		vals := make([]any, len(cols))
		ptrs := make([]any, len(cols))
		for i := range vals {
			ptrs[i] = &vals[i]
		}
		if err := rows.Scan(ptrs...); err != nil {
			return nil, err
		}
		row := Row{}
		var key strings.Builder
		for i, c := range cols {
			if slices.Contains(snapshotSkipColumns[table], c) {
				continue
			}
			v := snapshotValue(vals[i])
			row[c] = v
			fmt.Fprintf(&key, "%T:%v\x00", v, v)
		}
		all = append(all, keyed{key.String(), row})
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	slices.SortFunc(all, func(a, b keyed) int { return strings.Compare(a.key, b.key) })
	out := make([]Row, len(all))
	for i, k := range all {
		out[i] = k.row
	}
	return out, nil
}

// snapshotValue makes a scanned value comparable and readable in a diff.
func snapshotValue(v any) any {
	switch v := v.(type) {
	case []byte:
		if utf8.Valid(v) {
			return string(v)
		}
		return "0x" + hex.EncodeToString(v)
	case int:
		return int64(v)
	case int32:
		return int64(v)
	}
	return v
}
