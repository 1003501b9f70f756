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
	reopen, downTo := migrating(t)
	storetest.NodeLivenessMigration(t, reopen, downTo)
}

func TestClusterUIDMigration(t *testing.T) {
	reopen, downTo := migrating(t)
	storetest.ClusterUIDMigration(t, reopen, downTo)
}

func TestProjectSecretsMigration(t *testing.T) {
	reopen, downTo := migrating(t)
	storetest.ProjectSecretsMigration(t, reopen, downTo)
}

// migrating returns, for a migration test, a function that opens the store
// on one database file (applying every migration) and one that rolls that
// database back to a version.
func migrating(t *testing.T) (reopen func(t *testing.T) store.Store, downTo func(t *testing.T, version int64)) {
	path := filepath.Join(t.TempDir(), "kiln.db")
	return func(t *testing.T) store.Store {
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
		}
}
