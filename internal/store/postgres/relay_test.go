package postgres_test

import (
	"database/sql"
	"testing"
	"time"

	"github.com/google/uuid"

	v1 "kiln.dev/kiln/api/v1"
	"kiln.dev/kiln/internal/store"
	"kiln.dev/kiln/internal/store/postgres"
	"kiln.dev/kiln/internal/store/postgres/pgtest"
	"kiln.dev/kiln/test/waitfor"
)

// watched is a store.Watcher's deliveries as a channel.
func watched(t *testing.T, s store.Store) <-chan store.Change {
	t.Helper()
	ch := make(chan store.Change, 100)
	stop := s.(store.Watcher).Watch(func(c store.Change) {
		select {
		case ch <- c:
		default:
			t.Errorf("watcher channel full: %+v dropped", c)
		}
	})
	t.Cleanup(stop)
	return ch
}

// await reads ch until it delivers want, failing after a minute (a lost
// notification never arrives; waiting longer does not help).
func await(t *testing.T, ch <-chan store.Change, want store.Change) {
	t.Helper()
	deadline := time.After(time.Minute)
	for {
		select {
		case c := <-ch:
			if c == want {
				return
			}
		case <-deadline:
			t.Fatalf("no %+v within a minute", want)
		}
	}
}

// TestChangesReachOtherProcesses: two stores opened on one database, as two
// kilnd replicas do: what one writes, the other's watchers hear (LISTEN/
// NOTIFY). When the listening connection is cut (the database restarted
// or an administrator terminated it), the store connects again, tells its
// watchers to resync, and hears the next writes.
func TestChangesReachOtherProcesses(t *testing.T) {
	u := pgtest.FreshDB(t)
	open := func() store.Store {
		s, err := postgres.Open(t.Context(), u)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		return s
	}
	a, b := open(), open()
	changes := watched(t, b)
	db, err := sql.Open("pgx", u)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	// Each store's listener connects on its own after Open and tells its
	// watchers to resync once it LISTENs; that first resync may come before
	// Watch above, so wait for both listeners' LISTEN in the database itself.
	waitfor.Cond(t, "a's and b's listening connections to LISTEN", time.Minute, func() (bool, error) {
		var n int
		err := db.QueryRowContext(t.Context(), `SELECT count(*) FROM pg_stat_activity
			WHERE datname = current_database() AND application_name = 'kiln-changes' AND query LIKE 'LISTEN%'`).Scan(&n)
		return n == 2, err
	})

	if err := a.PutProject(t.Context(), &v1.Project{Name: "p", ID: "/v1/projects/p"}, store.Cond{}); err != nil {
		t.Fatal(err)
	}
	begin := func(name string) *store.Operation {
		t.Helper()
		id := uuid.Must(uuid.NewV7()).String()
		cl := &store.Cluster{Project: "p", Name: name, Status: v1.ClusterStatus{ProvisioningState: v1.StateCreating, CurrentOperation: id}}
		op := &store.Operation{ID: id, Kind: v1.KindCreate, Status: v1.OpInProgress, StartTime: time.Now()}
		if err := a.BeginOperation(t.Context(), cl, op, store.Cond{IfNoneMatch: "*"}); err != nil {
			t.Fatal(err)
		}
		return op
	}
	op := begin("c1")
	await(t, changes, store.Change{Kind: store.ChangeOperation, Project: "p", Cluster: "c1", Operation: op.ID, Remote: true})
	await(t, changes, store.Change{Kind: store.ChangeWork, Project: "p", Cluster: "c1", Remote: true})

	var cut int
	err = db.QueryRowContext(t.Context(), `SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity
		WHERE datname = current_database() AND application_name = 'kiln-changes'`).Scan(&cut)
	if err != nil || cut != 2 {
		t.Fatalf("terminated %d listening connections (%v), want a's and b's", cut, err)
	}
	await(t, changes, store.Change{Kind: store.ChangeResync, Remote: true})
	op = begin("c2")
	await(t, changes, store.Change{Kind: store.ChangeOperation, Project: "p", Cluster: "c2", Operation: op.ID, Remote: true})
}
