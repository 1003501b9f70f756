package postgres_test

import (
	"context"
	"database/sql"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/pressly/goose/v3"
	"kiln.dev/kiln/internal/store"
	"kiln.dev/kiln/internal/store/postgres"
	"kiln.dev/kiln/internal/store/postgres/pgtest"
	"kiln.dev/kiln/internal/store/sqlstore"
	"kiln.dev/kiln/internal/store/storetest"
)

func open(t *testing.T) store.Store {
	t.Helper()
	s, err := postgres.Open(t.Context(), pgtest.FreshDB(t), sqlstore.WithClock(storetest.Now(t)),
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
	pgtest.ServerURL(t)
	storetest.Run(t, open)
}

func TestSecretsAtRest(t *testing.T) {
	pgtest.ServerURL(t)
	storetest.SecretsAtRest(t, storetest.PostgresTables, func(t *testing.T, sealer sqlstore.Sealer) (store.Store, *sql.DB) {
		u := pgtest.FreshDB(t)
		s, err := postgres.Open(t.Context(), u, sqlstore.WithClock(storetest.Now(t)), sqlstore.WithSealer(sealer))
		if err != nil {
			t.Fatalf("open: %v", err)
		}
		t.Cleanup(func() { s.Close() })
		db, err := sql.Open("pgx", u)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { db.Close() })
		return s, db
	})
}

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
// on one fresh database (applying every migration) and one that rolls that
// database back to a version.
func migrating(t *testing.T) (reopen func(t *testing.T) store.Store, downTo func(t *testing.T, version int64)) {
	u := pgtest.FreshDB(t)
	return func(t *testing.T) store.Store {
			s, err := postgres.Open(t.Context(), u, sqlstore.WithClock(storetest.Now(t)))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { s.Close() })
			return s
		}, func(t *testing.T, version int64) {
			db, err := sql.Open("pgx", u)
			if err != nil {
				t.Fatal(err)
			}
			defer db.Close()
			p, err := goose.NewProvider(goose.DialectPostgres, db, os.DirFS("migrations"))
			if err != nil {
				t.Fatal(err)
			}
			if _, err := p.DownTo(t.Context(), version); err != nil {
				t.Fatal(err)
			}
		}
}

// TestReopen: migrations apply once; data survives a reopen.
func TestReopen(t *testing.T) {
	u := pgtest.FreshDB(t)
	storetest.Reopen(t, func() (store.Store, error) { return postgres.Open(t.Context(), u) })
}

// TestClaimPlan pins the claim query's plan: the sub-select is an index
// scan of the partial index clusters_claim, the update finds its row by
// primary key.
func TestClaimPlan(t *testing.T) {
	s, db := openWithRaw(t)
	storetest.SeedClusters(t, db, 10000, 1000)
	if _, err := db.ExecContext(t.Context(), `ANALYZE clusters`); err != nil {
		t.Fatal(err)
	}
	q := s.(interface{ ClaimQuery() string }).ClaimQuery()
	now := time.Now().UnixNano()
	tx, err := db.BeginTx(t.Context(), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback() // EXPLAIN ANALYZE runs the update
	got := explain(t, tx, "EXPLAIN (ANALYZE, COSTS OFF, TIMING OFF, SUMMARY OFF) "+q, "w", now+1, now, now)
	t.Logf("claim plan:\n%s", got)
	for _, want := range []string{"Index Scan using clusters_claim", "Index Scan using clusters_pkey", "LockRows"} {
		if !strings.Contains(got, want) {
			t.Errorf("claim plan lacks %q:\n%s", want, got)
		}
	}
	if strings.Contains(got, "Seq Scan") {
		t.Errorf("claim plan scans the clusters table:\n%s", got)
	}
}

// TestHistoryPlans pins the plans of the lists of a cluster's operations
// and events: each an index scan of its index by project, cluster, uid and
// id, in id order, without a sort.
func TestHistoryPlans(t *testing.T) {
	s, db := openWithRaw(t)
	storetest.SeedHistory(t, db, 10000, 20000)
	if _, err := db.ExecContext(t.Context(), `ANALYZE operations, events`); err != nil {
		t.Fatal(err)
	}
	queries := s.(interface{ HistoryQueries() []string }).HistoryQueries()
	for i, tc := range []struct {
		index string
		after any
	}{{"operations_cluster", ""}, {"events_cluster", 0}} {
		got := explain(t, db, "EXPLAIN (COSTS OFF) "+queries[i], "hist", "c-7", "u-7", tc.after, 101)
		t.Logf("%s plan:\n%s", tc.index, got)
		if !strings.Contains(got, "Index Scan using "+tc.index) {
			t.Errorf("%s plan does not scan its index:\n%s", tc.index, got)
		}
		if strings.Contains(got, "Seq Scan") || strings.Contains(got, "Sort") {
			t.Errorf("%s plan scans the table or sorts:\n%s", tc.index, got)
		}
	}
}

// explain runs an EXPLAIN statement and returns its lines.
func explain(t *testing.T, q interface {
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
}, statement string, args ...any) string {
	t.Helper()
	rows, err := q.QueryContext(t.Context(), statement, args...)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var plan []string
	for rows.Next() {
		var line string
		if err := rows.Scan(&line); err != nil {
			t.Fatal(err)
		}
		plan = append(plan, line)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return strings.Join(plan, "\n")
}

// openWithRaw opens a store on a fresh database and a plain connection pool
// to the same database; both close when t ends.
func openWithRaw(t testing.TB) (store.Store, *sql.DB) {
	u := pgtest.FreshDB(t)
	s, err := postgres.Open(t.Context(), u)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	raw, err := sql.Open("pgx", u)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { raw.Close() })
	return s, raw
}

// BenchmarkLeaseThroughput: claims and step checkpoints against raw
// single-row UPDATEs on the same database.
func BenchmarkLeaseThroughput(b *testing.B) {
	if os.Getenv("KILN_TEST_POSTGRES") == "" {
		b.Skip("KILN_TEST_POSTGRES is not set")
	}
	s, raw := openWithRaw(b)
	storetest.LeaseThroughput(b, s, raw)
}

// BenchmarkClaim: a claim and release cycle with 100 active clusters
// among 10,000 finished ones (storetest.Claim), analyzed as autovacuum
// would have.
func BenchmarkClaim(b *testing.B) {
	if os.Getenv("KILN_TEST_POSTGRES") == "" {
		b.Skip("KILN_TEST_POSTGRES is not set")
	}
	s, raw := openWithRaw(b)
	storetest.SeedClusters(b, raw, 10000, 100)
	if _, err := raw.ExecContext(b.Context(), `ANALYZE clusters`); err != nil {
		b.Fatal(err)
	}
	storetest.Claim(b, s)
}
