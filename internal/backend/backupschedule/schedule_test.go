package backupschedule_test

import (
	"path/filepath"
	"strings"
	"testing"
	"time"

	v1 "kiln.dev/kiln/api/v1"
	"kiln.dev/kiln/internal/backend/backupschedule"
	"kiln.dev/kiln/internal/backend/check"
	"kiln.dev/kiln/internal/plan"
	"kiln.dev/kiln/internal/store"
	"kiln.dev/kiln/internal/store/sqlite"
)

type env struct {
	t   *testing.T
	st  store.Store
	now time.Time
	l   *backupschedule.Loop
	k   store.Key
}

// newEnv is an idle (Succeeded) local cluster made at 12:00 with schedule,
// in a real SQLite store, and a Loop over it.
func newEnv(t *testing.T, schedule string) *env {
	st, err := sqlite.Open(t.Context(), filepath.Join(t.TempDir(), "kiln.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	e := &env{t: t, st: st, now: time.Date(2026, 11, 26, 12, 0, 0, 0, time.UTC), k: store.Key{Project: "p", Name: "c"}}
	if err := st.PutProject(t.Context(), &v1.Project{Name: "p", ID: "/v1/projects/p"}, store.Cond{}); err != nil {
		t.Fatal(err)
	}
	cl := &store.Cluster{Project: "p", Name: "c", Spec: v1.ClusterSpec{Provider: "local", Backup: &v1.BackupSchedule{Schedule: schedule, Keep: 2}}}
	cl.Status.ProvisioningState, cl.Status.CreatedAt, cl.Status.CurrentOperation = v1.StateCreating, e.now, "op-create"
	op := &store.Operation{ID: "op-create", Project: "p", Cluster: "c", Kind: v1.KindCreate, Status: v1.OpInProgress, StartTime: e.now}
	if err := st.BeginOperation(t.Context(), cl, op, store.Cond{}); err != nil {
		t.Fatal(err)
	}
	e.finish()
	e.l = backupschedule.New(backupschedule.Options{
		Store:   st,
		Watched: func(cl *store.Cluster) bool { return cl.Spec.Provider == "local" },
		Base:    check.Base{Steps: plan.PendingSteps, Now: func() time.Time { return e.now }},
	})
	return e
}

// finish ends the cluster's operation Succeeded, as its worker would.
func (e *env) finish() {
	e.t.Helper()
	claimed, err := e.st.ClaimCluster(e.t.Context(), "test", time.Hour)
	if err != nil || claimed == nil {
		e.t.Fatalf("claim: %v", err)
	}
	fence := claimed.Lease.Fence()
	op, err := e.st.GetOperation(e.t.Context(), claimed.Status.CurrentOperation)
	if err != nil {
		e.t.Fatal(err)
	}
	op.Status = v1.OpSucceeded
	claimed.Status.ProvisioningState = v1.StateSucceeded
	if err := e.st.FinishOperation(e.t.Context(), claimed, op, fence, false); err != nil {
		e.t.Fatal(err)
	}
}

// check runs one pass at the env's time and returns the backup operation
// it began, or nil.
func (e *env) check() *store.Operation {
	e.t.Helper()
	if err := e.l.CheckAll(e.t.Context()); err != nil {
		e.t.Fatal(err)
	}
	cl, err := e.st.GetCluster(e.t.Context(), e.k)
	if err != nil {
		e.t.Fatal(err)
	}
	if cl.Status.ProvisioningState != v1.StateUpdating {
		return nil
	}
	op, err := e.st.GetOperation(e.t.Context(), cl.Status.CurrentOperation)
	if err != nil {
		e.t.Fatal(err)
	}
	return op
}

// backedUp records op's backup as its plan would, Succeeded at the env's
// time, and ends op.
func (e *env) backedUp(op *store.Operation) {
	e.t.Helper()
	b := &store.Backup{Project: "p", ClusterUID: op.ClusterUID, Backup: v1.Backup{Name: op.Backup, Cluster: "c", State: v1.BackupSucceeded,
		Operation: op.ID, Scheduled: op.Reason != "", CreatedAt: e.now}}
	if err := e.st.PutBackup(e.t.Context(), b, store.Cond{IfNoneMatch: "*"}); err != nil {
		e.t.Fatal(err)
	}
	e.finish()
}

// TestScheduleDue: every six hours from the cluster's creation at 12:00,
// the first backup is due at 18:00, not before; the next at 00:00, counted
// from the last scheduled backup; a busy cluster is looked at again.
func TestScheduleDue(t *testing.T) {
	e := newEnv(t, "0 */6 * * *")
	e.now = e.now.Add(5*time.Hour + 59*time.Minute)
	if op := e.check(); op != nil {
		t.Fatalf("at 17:59 a backup began: %+v", op)
	}
	e.now = e.now.Add(time.Minute + 30*time.Second)
	op := e.check()
	if op == nil || op.Kind != v1.KindBackup || op.Backup != "c-20261126-180030" || !strings.Contains(op.Reason, `"0 */6 * * *"`) ||
		len(op.Steps) != 3 || op.Steps[0].Name != plan.StepTakeSnapshot {
		t.Fatalf("at 18:00:30: %+v, want a backup c-20261126-180030 with the schedule as its reason", op)
	}
	// Busy with it: the next pass begins nothing.
	e.now = e.now.Add(time.Minute)
	if again := e.check(); again == nil || again.ID != op.ID {
		t.Fatalf("a second pass while the backup runs: %+v", again)
	}
	e.backedUp(op)
	e.now = time.Date(2026, 11, 26, 23, 59, 0, 0, time.UTC)
	if op := e.check(); op != nil {
		t.Fatalf("at 23:59 a backup began: %+v", op)
	}
	e.now = e.now.Add(2 * time.Minute)
	if op := e.check(); op == nil || op.Backup != "c-20261127-000100" {
		t.Fatalf("at 00:01 the next backup is due: %+v", op)
	}
}

// TestScheduleUserBackupsDoNotCount: a backup a user asked for does not
// move the schedule; a cluster without one begins nothing.
func TestScheduleUserBackupsDoNotCount(t *testing.T) {
	e := newEnv(t, "0 0 * * *")
	e.now = e.now.Add(11 * time.Hour)
	cl, err := e.st.GetCluster(t.Context(), e.k)
	if err != nil {
		t.Fatal(err)
	}
	b := &store.Backup{Project: "p", ClusterUID: cl.UID, Backup: v1.Backup{Name: "mine", Cluster: "c", State: v1.BackupSucceeded, CreatedAt: e.now}}
	if err := e.st.PutBackup(t.Context(), b, store.Cond{IfNoneMatch: "*"}); err != nil {
		t.Fatal(err)
	}
	e.now = e.now.Add(time.Hour + time.Minute)
	if op := e.check(); op == nil {
		t.Fatal("at 00:01 the first scheduled backup did not begin: the user's backup moved the schedule")
	}

	none := newEnv(t, "")
	none.now = none.now.Add(48 * time.Hour)
	if op := none.check(); op != nil {
		t.Fatalf("a cluster with no schedule began %+v", op)
	}
}
