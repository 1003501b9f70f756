package sqlite_test

import (
	"database/sql"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"kiln.dev/kiln/internal/store"
	"kiln.dev/kiln/internal/store/sqlite"
	"kiln.dev/kiln/internal/store/sqlstore"
	"kiln.dev/kiln/internal/store/storetest"
)

// TestClaimPlan pins the claim query's plan: the sub-select is served by
// the partial index clusters_claim, the update by the primary key.
func TestClaimPlan(t *testing.T) {
	for _, tt := range []struct {
		name             string
		finished, active int
		analyze          bool
	}{
		{"10000 finished, 1000 active, analyzed", 10000, 1000, true},
		// A wave: every cluster active, no statistics (as in a store kilnd
		// made), and other indexes on the state that could draw the plan.
		{"10000 active, not analyzed", 0, 10000, false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			s, db := openWithRaw(t)
			storetest.SeedClusters(t, db, tt.finished, tt.active)
			if tt.analyze {
				if _, err := db.Exec(`ANALYZE`); err != nil {
					t.Fatal(err)
				}
			}
			q := s.(interface{ ClaimQuery() string }).ClaimQuery()
			now := time.Now().UnixNano()
			got := queryPlan(t, db, q, "w", now+1, now, now)
			t.Logf("claim plan:\n%s", got)
			for _, want := range []string{"USING INDEX clusters_claim (lease_expiry<?)", "(project=? AND name=?)"} {
				if !strings.Contains(got, want) {
					t.Errorf("claim plan lacks %q:\n%s", want, got)
				}
			}
			if strings.Contains(got, "SCAN clusters") {
				t.Errorf("claim plan scans the clusters table:\n%s", got)
			}
		})
	}
}

// BenchmarkClaim: a claim and release cycle with 100 active clusters
// among 10,000 finished ones (storetest.Claim). No ANALYZE, as in a store
// kilnd made: with sqlite_stat4 filled, SQLite prepares the claim again at
// every call, its bound time being a range on an indexed column.
func BenchmarkClaim(b *testing.B) {
	path := filepath.Join(b.TempDir(), "kiln.db")
	s, err := sqlite.Open(b.Context(), path)
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	raw, err := sql.Open("sqlite", path+"?_pragma=busy_timeout(10000)")
	if err != nil {
		b.Fatal(err)
	}
	defer raw.Close()
	storetest.SeedClusters(b, raw, 10000, 100)
	storetest.Claim(b, s)
}

// TestHistoryPlans pins the plans of the lists of a cluster's operations
// and events: each is a search of its index by project, cluster, uid and
// id, in id order, never a scan.
func TestHistoryPlans(t *testing.T) {
	s, db := openWithRaw(t)
	storetest.SeedHistory(t, db, 10000, 20000)
	if _, err := db.Exec(`ANALYZE`); err != nil {
		t.Fatal(err)
	}
	queries := s.(interface{ HistoryQueries() []string }).HistoryQueries()
	for i, index := range []string{"operations_cluster", "events_cluster"} {
		got := queryPlan(t, db, queries[i], "hist", "c-7", "u-7", "", 101)
		t.Logf("%s plan:\n%s", index, got)
		if want := "USING INDEX " + index + " (project=? AND cluster=? AND cluster_uid=? AND id>?)"; !strings.Contains(got, want) {
			t.Errorf("%s plan lacks %q:\n%s", index, want, got)
		}
		if strings.Contains(got, "SCAN") || strings.Contains(got, "TEMP B-TREE") {
			t.Errorf("%s plan scans or sorts:\n%s", index, got)
		}
	}
}

// openWithRaw opens a store on a new database file, with opts, and a plain
// connection pool to the same file; both close when t ends.
func openWithRaw(t *testing.T, opts ...sqlstore.Option) (store.Store, *sql.DB) {
	path := filepath.Join(t.TempDir(), "kiln.db")
	s, err := sqlite.Open(t.Context(), path, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	db, err := sql.Open("sqlite", path+"?_pragma=busy_timeout(10000)")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return s, db
}

// queryPlan is EXPLAIN QUERY PLAN of query with args, a line per step.
func queryPlan(t *testing.T, db *sql.DB, query string, args ...any) string {
	t.Helper()
	rows, err := db.Query(`EXPLAIN QUERY PLAN `+query, args...)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var plan []string
	for rows.Next() {
		var id, parent, notused int
		var detail string
		if err := rows.Scan(&id, &parent, &notused, &detail); err != nil {
			t.Fatal(err)
		}
		plan = append(plan, detail)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return strings.Join(plan, "\n")
}
