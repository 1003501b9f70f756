package sqlite_test

import (
	"database/sql"
	"os"
	"path/filepath"
	"testing"

	"github.com/pressly/goose/v3"

	"kiln.dev/kiln/internal/store"
	"kiln.dev/kiln/internal/store/sqlite"
	"kiln.dev/kiln/internal/store/sqlstore"
	"kiln.dev/kiln/internal/store/storetest"
)

func TestNodeLivenessMigration(t *testing.T) {
	path := filepath.Join(t.TempDir(), "kiln.db")
	storetest.NodeLivenessMigration(t, func(t *testing.T) store.Store {
		s, err := sqlite.Open(t.Context(), path, sqlstore.WithClock(storetest.Now(t)))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		return s
	}, func(t *testing.T, version int64) {
		db, err := sql.Open("sqlite", path)
		if err != nil {
			t.Fatal(err)
		}
		defer db.Close()
		p, err := goose.NewProvider(goose.DialectSQLite3, db, os.DirFS("migrations"))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := p.DownTo(t.Context(), version); err != nil {
			t.Fatal(err)
		}
	})
}
