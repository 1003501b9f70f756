package sqlite_test

import (
	"database/sql"
	"path/filepath"
	"testing"

	"kiln.dev/kiln/internal/store"
	"kiln.dev/kiln/internal/store/sqlite"
	"kiln.dev/kiln/internal/store/sqlstore"
	"kiln.dev/kiln/internal/store/storetest"
)

func open(t *testing.T) store.Store {
	t.Helper()
	s, err := sqlite.Open(t.Context(), filepath.Join(t.TempDir(), "sub", "kiln.db"), sqlstore.WithClock(storetest.Now(t)),
		sqlstore.WithSealer(storetest.Keyring(t)))
	if err != nil {
		t.Fatalf("open: %v", err)
	}
	t.Cleanup(func() {
		if err := s.Close(); err != nil {
			t.Errorf("close: %v", err)
		}
	})
	return s
}

func TestConformance(t *testing.T) {
	storetest.Run(t, open)
}

func TestSecretsAtRest(t *testing.T) {
	storetest.SecretsAtRest(t, storetest.SQLiteTables, func(t *testing.T, sealer sqlstore.Sealer) (store.Store, *sql.DB) {
		path := filepath.Join(t.TempDir(), "kiln.db")
		s, err := sqlite.Open(t.Context(), path, sqlstore.WithClock(storetest.Now(t)), sqlstore.WithSealer(sealer))
		if err != nil {
			t.Fatalf("open: %v", err)
		}
		t.Cleanup(func() { s.Close() })
		db, err := sql.Open("sqlite", path+"?_pragma=busy_timeout(10000)")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { db.Close() })
		return s, db
	})
}

// TestReopen: migrations apply once; data survives a reopen.
func TestReopen(t *testing.T) {
	path := filepath.Join(t.TempDir(), "kiln.db")
	storetest.Reopen(t, func() (store.Store, error) { return sqlite.Open(t.Context(), path) })
}
