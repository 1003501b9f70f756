package sqlite_test

import (
	"database/sql"
	"path/filepath"
	"testing"

	"kiln.dev/kiln/internal/store/sqlite"
	"kiln.dev/kiln/internal/store/storetest"
)

// BenchmarkLeaseThroughput: claims and step checkpoints against raw
// single-row UPDATEs, with the store writer's settings (WAL, synchronous
// NORMAL, one connection, IMMEDIATE transactions).
func BenchmarkLeaseThroughput(b *testing.B) {
	path := filepath.Join(b.TempDir(), "kiln.db")
	s, err := sqlite.Open(b.Context(), path)
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	raw, err := sql.Open("sqlite", path+"?_pragma=busy_timeout(10000)&_pragma=journal_mode(WAL)&_pragma=synchronous(NORMAL)&_txlock=immediate")
	if err != nil {
		b.Fatal(err)
	}
	defer raw.Close()
	raw.SetMaxOpenConns(1)
	storetest.LeaseThroughput(b, s, raw)
}
