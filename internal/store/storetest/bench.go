package storetest

import (
	"database/sql"
	"fmt"
	"testing"
	"time"

	"github.com/google/uuid"

	v1 "kiln.dev/kiln/api/v1"
	"kiln.dev/kiln/internal/store"
)

const (
	benchClusters = 32 // clusters the claims cycle through
	benchSteps    = 8  // checkpoints per claim
)

// LeaseThroughput is the lease benchmark of issue 9: what a worker writes
// to run plans (a claim, a checkpoint per step, the release) against the
// database's raw rate of single-row UPDATEs, measured in the same run and
// interleaved (a lease cycle, then as many raw updates), so the ratio holds
// on a noisy machine. s is a fresh store; raw is a connection pool to the
// same database, opened as the store opens its writer. It reports
// lease-writes/s, raw-updates/s and their ratio (target: at least 0.5).
func LeaseThroughput(b *testing.B, s store.Store, raw *sql.DB) {
	ctx := b.Context()
	for _, q := range []string{
		`CREATE TABLE kiln_bench_raw (id INTEGER PRIMARY KEY, n BIGINT NOT NULL)`,
		`INSERT INTO kiln_bench_raw (id, n) VALUES (1, 0)`,
	} {
		if _, err := raw.ExecContext(ctx, q); err != nil {
			b.Fatalf("raw table: %v", err)
		}
	}
	if err := s.PutProject(ctx, &v1.Project{Name: "bench", ID: "/v1/projects/bench"}, store.Cond{}); err != nil {
		b.Fatal(err)
	}
	ops := map[string]*store.Operation{}
	for i := range benchClusters {
		id := uuid.Must(uuid.NewV7()).String()
		steps := make([]v1.Step, benchSteps)
		for j := range steps {
			steps[j] = v1.Step{Name: fmt.Sprintf("step-%d", j), State: v1.StepPending}
		}
		cl := &store.Cluster{Project: "bench", Name: fmt.Sprintf("c%d", i), Spec: sampleSpec(),
			Status: v1.ClusterStatus{ProvisioningState: v1.StateCreating, CurrentOperation: id}}
		op := &store.Operation{ID: id, Kind: v1.KindCreate, Status: v1.OpInProgress, StartTime: time.Now(), Steps: steps}
		if err := s.BeginOperation(ctx, cl, op, store.Cond{IfNoneMatch: "*"}); err != nil {
			b.Fatal(err)
		}
		ops[cl.Name] = op
	}

	const writes = benchSteps + 2 // claim, checkpoints, release
	var leaseTime, rawTime time.Duration
	for b.Loop() {
		start := time.Now()
		cl, err := s.ClaimCluster(ctx, "bench", time.Minute)
		if err != nil {
			b.Fatalf("claim: %v", err)
		}
		op, f := ops[cl.Name], cl.Lease.Fence()
		for j := range op.Steps {
			op.Steps[j].State, op.Steps[j].Attempts = v1.StepSucceeded, op.Steps[j].Attempts+1
			if err := s.SaveOperation(ctx, op, f, true); err != nil {
				b.Fatalf("checkpoint: %v", err)
			}
		}
		if err := s.ReleaseLease(ctx, cl.Key(), f); err != nil {
			b.Fatalf("release: %v", err)
		}
		leaseTime += time.Since(start)

		start = time.Now()
		for range writes {
			if _, err := raw.ExecContext(ctx, `UPDATE kiln_bench_raw SET n = n + 1 WHERE id = 1`); err != nil {
				b.Fatalf("raw update: %v", err)
			}
		}
		rawTime += time.Since(start)
	}
	n := float64(b.N * writes)
	leaseRate, rawRate := n/leaseTime.Seconds(), n/rawTime.Seconds()
	b.ReportMetric(leaseRate, "lease-writes/s")
	b.ReportMetric(rawRate, "raw-updates/s")
	b.ReportMetric(leaseRate/rawRate, "ratio")
}

// SeedClusters adds, in bulk through raw, project "seed" with finished
// clusters done-1... and active ones busy-1... (Creating, leases expired
// in that order), for benchmarks and query plans of the claim.
func SeedClusters(tb testing.TB, raw *sql.DB, finished, active int) {
	tb.Helper()
	for _, q := range []string{
		`INSERT INTO projects (name, etag, created_at, data) VALUES ('seed', 'e', 1, '{}')`,
		fmt.Sprintf(`WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < %d)
			INSERT INTO clusters (project, name, etag, spec, status, provisioning_state)
			SELECT 'seed', 'done-' || i, 'e', '{}', '{}', 'Succeeded' FROM n`, finished),
		fmt.Sprintf(`WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < %d)
			INSERT INTO clusters (project, name, etag, spec, status, provisioning_state, lease_expiry)
			SELECT 'seed', 'busy-' || i, 'e', '{}', '{}', 'Creating', i FROM n`, active),
	} {
		if _, err := raw.ExecContext(tb.Context(), q); err != nil {
			tb.Fatalf("seed: %v", err)
		}
	}
}

// Claim measures a claim and release cycle, what a worker's poll costs, on
// a store seeded with SeedClusters: the claim must read the partial index
// of active clusters, not the table.
func Claim(b *testing.B, s store.Store) {
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

// SeedHistory adds, in bulk through raw, operations and events to project
// "hist": spread over 200 cluster names, each name's split between two
// uids (a cluster deleted and one created again), for the query plans of
// the lists of a cluster's history.
func SeedHistory(tb testing.TB, raw *sql.DB, operations, events int) {
	tb.Helper()
	for _, q := range []string{
		fmt.Sprintf(`WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < %d)
			INSERT INTO operations (id, project, cluster, cluster_uid, kind, status, start_time, steps)
			SELECT 'op-' || i, 'hist', 'c-' || (i %% 200), 'u-' || (i %% 400), 'create', 'Succeeded', i, '[]' FROM n`, operations),
		fmt.Sprintf(`WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < %d)
			INSERT INTO events (project, cluster, cluster_uid, time, data)
			SELECT 'hist', 'c-' || (i %% 200), 'u-' || (i %% 400), i, '{}' FROM n`, events),
	} {
		if _, err := raw.ExecContext(tb.Context(), q); err != nil {
			tb.Fatalf("seed: %v", err)
		}
	}
}
