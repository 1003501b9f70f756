// Package checktest is what the tests of the backend's checks share: a
// real SQLite store with project p, an idle cluster in it (Succeeded,
// with an endpoint, no lease), and its conditions read back.
package checktest

import (
	"path/filepath"
	"testing"
	"time"

	v1 "kiln.dev/kiln/api/v1"
	"kiln.dev/kiln/internal/store"
	"kiln.dev/kiln/internal/store/sqlite"
)

// Store is a new SQLite store with project p, closed when the test ends.
func Store(t testing.TB) store.Store {
	t.Helper()
	st, err := sqlite.Open(t.Context(), filepath.Join(t.TempDir(), "kiln.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	if err := st.PutProject(t.Context(), &v1.Project{Name: "p", ID: "/v1/projects/p"}, store.Cond{}); err != nil {
		t.Fatal(err)
	}
	return st
}

// Idle writes cluster name of project p with spec, as a finished create
// leaves it: Succeeded, endpoint 10.0.0.1:6443, its lease released.
func Idle(t *testing.T, st store.Store, name string, spec v1.ClusterSpec) {
	t.Helper()
	ctx := t.Context()
	cl := &store.Cluster{Project: "p", Name: name, Spec: spec}
	cl.Status.ProvisioningState = v1.StateCreating
	op := &store.Operation{ID: "op-" + name, Project: "p", Cluster: name, Kind: v1.KindCreate, Status: v1.OpInProgress, StartTime: time.Now()}
	if err := st.BeginOperation(ctx, cl, op, store.Cond{}); err != nil {
		t.Fatal(err)
	}
	claimed, err := st.ClaimCluster(ctx, "test", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	fence := claimed.Lease.Fence()
	claimed.Status.ProvisioningState, claimed.Status.Endpoint = v1.StateSucceeded, "10.0.0.1:6443"
	if err := st.PutClusterStatus(ctx, claimed, store.Cond{Fence: &fence}); err != nil {
		t.Fatal(err)
	}
	if err := st.ReleaseLease(ctx, claimed.Key(), fence); err != nil {
		t.Fatal(err)
	}
}

// Get reads cluster name of project p.
func Get(t *testing.T, st store.Store, name string) *store.Cluster {
	t.Helper()
	cl, err := st.GetCluster(t.Context(), store.Key{Project: "p", Name: name})
	if err != nil {
		t.Fatal(err)
	}
	return cl
}

// Condition is cluster name's condition of type typ, zero when it has none.
func Condition(t *testing.T, st store.Store, name, typ string) v1.Condition {
	t.Helper()
	for _, c := range Get(t, st, name).Status.Conditions {
		if c.Type == typ {
			return c
		}
	}
	return v1.Condition{}
}

// Events are cluster name's events, each "TYPE REASON", oldest first.
func Events(t *testing.T, st store.Store, name string) []string {
	t.Helper()
	evs, _, err := st.ListEvents(t.Context(), store.Key{Project: "p", Name: name}, store.Page{})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, e := range evs {
		got = append(got, e.Type+" "+e.Reason)
	}
	return got
}
