package sqlite

import (
	"database/sql"
	"path/filepath"
	"testing"
)

// TestStatementCache: a cached statement gives the same answers as the
// uncached driver when run again and again, while its own rows are still
// open (the nested run goes uncached), inside a transaction, and in a
// script of several statements.
func TestStatementCache(t *testing.T) {
	db, err := sql.Open(driverName, filepath.Join(t.TempDir(), "c.db")+"?_txlock=immediate")
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	db.SetMaxOpenConns(1) // one connection: every query meets the same cache
	ctx := t.Context()
	if _, err := db.ExecContext(ctx, `CREATE TABLE t (id INTEGER PRIMARY KEY, n INTEGER); INSERT INTO t VALUES (1, 10), (2, 20)`); err != nil {
		t.Fatal(err)
	}
	const q = `SELECT id, n FROM t WHERE n >= ? ORDER BY id`
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback()
	for i := range 3 {
		if _, err := tx.ExecContext(ctx, `UPDATE t SET n = n + 1 WHERE id = ?`, 1); err != nil {
			t.Fatal(err)
		}
		rows, err := tx.QueryContext(ctx, q, 0)
		if err != nil {
			t.Fatal(err)
		}
		var got []int
		for rows.Next() {
			var id, n int
			if err := rows.Scan(&id, &n); err != nil {
				t.Fatal(err)
			}
			// The same query while these rows are open.
			var inner int
			if err := tx.QueryRowContext(ctx, `SELECT count(*) FROM (`+q+`)`, n).Scan(&inner); err != nil {
				t.Fatal(err)
			}
			var again int
			if err := tx.QueryRowContext(ctx, q, n).Scan(&id, &again); err != nil {
				t.Fatal(err)
			}
			got = append(got, n, again)
		}
		if err := rows.Close(); err != nil {
			t.Fatal(err)
		}
		want := []int{11 + i, 11 + i, 20, 20}
		if len(got) != len(want) || got[0] != want[0] || got[1] != want[1] || got[2] != want[2] || got[3] != want[3] {
			t.Fatalf("round %d: got %v, want %v", i, got, want)
		}
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	var n int
	if err := db.QueryRowContext(ctx, `SELECT n FROM t WHERE id = ?`, 1).Scan(&n); err != nil || n != 13 {
		t.Fatalf("after commit: n = %d, %v; want 13", n, err)
	}
}
