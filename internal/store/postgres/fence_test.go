package postgres_test

import (
	"database/sql"
	"errors"
	"testing"
	"time"

	v1 "kiln.dev/kiln/api/v1"
	"kiln.dev/kiln/internal/store"
	"kiln.dev/kiln/test/waitfor"
)

// TestCheckpointWaitsForClaim pins the lock in SaveOperation's one
// statement: a checkpoint that starts while a claim of its cluster is
// uncommitted waits for it, then sees the new lease and is refused. Without
// the lock it would read the old lease in its snapshot and write after the
// claim committed. The claim here is a transaction of this test's that also
// holds the operation's row, so that an unlocked checkpoint cannot simply
// finish first.
func TestCheckpointWaitsForClaim(t *testing.T) {
	ctx := t.Context()
	s, db := openWithRaw(t)

	if err := s.PutProject(ctx, &v1.Project{Name: "p", ID: "/v1/projects/p"}, store.Cond{}); err != nil {
		t.Fatal(err)
	}
	cl := &store.Cluster{Project: "p", Name: "c", Status: v1.ClusterStatus{ProvisioningState: v1.StateCreating}}
	op := &store.Operation{ID: "01900000-0000-7000-8000-000000000001", Kind: v1.KindCreate, Status: v1.OpInProgress,
		Steps: []v1.Step{{Name: "validate-dynamic", State: v1.StepPending}}}
	if err := s.BeginOperation(ctx, cl, op, store.Cond{IfNoneMatch: "*"}); err != nil {
		t.Fatal(err)
	}

	for _, progress := range []bool{false, true} {
		held, err := s.ClaimCluster(ctx, "old", time.Hour)
		if err != nil {
			t.Fatal(err)
		}
		claim, err := db.BeginTx(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		for _, q := range []string{
			`UPDATE clusters SET lease_owner = 'new', lease_token = lease_token + 1 WHERE project = 'p' AND name = 'c'`,
			`SELECT 1 FROM operations WHERE id = '` + op.ID + `' FOR UPDATE`,
		} {
			if _, err := claim.ExecContext(ctx, q); err != nil {
				t.Fatal(err)
			}
		}

		saved := make(chan error, 1)
		stale := *op
		stale.Steps = []v1.Step{{Name: "validate-dynamic", State: v1.StepRunning}}
		go func() { saved <- s.SaveOperation(ctx, &stale, held.Lease.Fence(), progress) }()
		waitForLockWait(t, db)
		if err := claim.Commit(); err != nil {
			t.Fatal(err)
		}
		if err := <-saved; !errors.Is(err, store.ErrLeaseLost) {
			t.Fatalf("checkpoint (progress %v) racing a claim: %v, want ErrLeaseLost", progress, err)
		}
		got, err := s.GetOperation(ctx, op.ID)
		if err != nil {
			t.Fatal(err)
		}
		if got.Steps[0].State != v1.StepPending {
			t.Fatalf("checkpoint (progress %v) refused but written: %+v", progress, got.Steps)
		}
		// Hand the lease back for the next round.
		if _, err := db.ExecContext(ctx, `UPDATE clusters SET lease_owner = '', lease_expiry = 0 WHERE project = 'p' AND name = 'c'`); err != nil {
			t.Fatal(err)
		}
	}
}

// waitForLockWait waits until a session of the database waits for a lock.
func waitForLockWait(t *testing.T, db *sql.DB) {
	t.Helper()
	waitfor.Cond(t, "a session to wait for a lock", 10*time.Second, func() (bool, error) {
		var n int
		err := db.QueryRowContext(t.Context(), `SELECT count(*) FROM pg_stat_activity
			WHERE datname = current_database() AND wait_event_type = 'Lock'`).Scan(&n)
		return n > 0, err
	})
}
