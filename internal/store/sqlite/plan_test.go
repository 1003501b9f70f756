package sqlite_test

import (
	"database/sql"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"kiln.dev/kiln/internal/store/sqlite"
)

// seed adds finished and active clusters to the store file at path, in
// bulk, through a connection of its own.
func seed(t testing.TB, path string, finished, active int) {
	t.Helper()
	db, err := sql.Open("sqlite", path+"?_pragma=busy_timeout(10000)")
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	stmts := []string{
		`INSERT INTO projects (name, etag, created_at, data) VALUES ('seed', 'e', 1, '{}')`,
		fmt.Sprintf(`WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < %d)
			INSERT INTO clusters (project, name, etag, spec, status, provisioning_state)
			SELECT 'seed', 'done-' || i, 'e', '{}', '{}', 'Succeeded' FROM n`, finished),
		fmt.Sprintf(`WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < %d)
			INSERT INTO clusters (project, name, etag, spec, status, provisioning_state, lease_expiry)
			SELECT 'seed', 'busy-' || i, 'e', '{}', '{}', 'Creating', i FROM n`, active),
	}
	for _, q := range stmts {
		if _, err := db.Exec(q); err != nil {
			t.Fatalf("seed: %v", err)
		}
	}
}

// TestClaimPlan pins the claim query's plan: the sub-select is served by
// the partial index clusters_claim, the update by the primary key.
func TestClaimPlan(t *testing.T) {
	path := filepath.Join(t.TempDir(), "kiln.db")
	s, err := sqlite.Open(t.Context(), path)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	seed(t, path, 10000, 1000)

	db, err := sql.Open("sqlite", path)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if _, err := db.Exec(`ANALYZE`); err != nil {
		t.Fatal(err)
	}
	q := s.(interface{ ClaimQuery() string }).ClaimQuery()
	now := time.Now().UnixNano()
	rows, err := db.Query(`EXPLAIN QUERY PLAN `+q, "w", now+1, now, now)
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
	got := strings.Join(plan, "\n")
	t.Logf("claim plan:\n%s", got)
	for _, want := range []string{"USING INDEX clusters_claim (lease_expiry<?)", "(project=? AND name=?)"} {
		if !strings.Contains(got, want) {
			t.Errorf("claim plan lacks %q:\n%s", want, got)
		}
	}
	if strings.Contains(got, "SCAN clusters") {
		t.Errorf("claim plan scans the clusters table:\n%s", got)
	}
}

// BenchmarkClaim measures a claim and release cycle with 100 active
// clusters among 10,000 finished ones.
func BenchmarkClaim(b *testing.B) {
	path := filepath.Join(b.TempDir(), "kiln.db")
	s, err := sqlite.Open(b.Context(), path)
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	seed(b, path, 10000, 100)
	ctx := b.Context()
	for b.Loop() {
		cl, err := s.ClaimCluster(ctx, "bench", time.Minute)
		if err != nil {
			b.Fatal(err)
		}
		if err := s.ReleaseLease(ctx, cl.Key(), cl.Lease.Fence()); err != nil {
			b.Fatal(err)
		}
	}
}
