package trust_test

import (
	"crypto/x509"
	"path/filepath"
	"testing"
	"time"

	v1 "kiln.dev/kiln/api/v1"
	"kiln.dev/kiln/internal/pki"
	"kiln.dev/kiln/internal/store"
	"kiln.dev/kiln/internal/store/sqlite"
	"kiln.dev/kiln/internal/trust"
)

// testStore is the store the tests use: all of store.Store and the
// cluster secret updates.
type testStore interface {
	store.Store
	store.ClusterSecretUpdater
}

// newCluster opens a SQLite store in a temporary directory, writes
// cluster name in it (Creating), takes its lease and ensures its secrets,
// as the first step of a create plan does.
func newCluster(t *testing.T, name string) (testStore, store.Key) {
	t.Helper()
	ctx := t.Context()
	opened, err := sqlite.Open(ctx, filepath.Join(t.TempDir(), "kiln.db"))
	if err != nil {
		t.Fatalf("open store: %v", err)
	}
	t.Cleanup(func() { opened.Close() })
	st, ok := opened.(testStore)
	if !ok {
		t.Fatalf("the SQLite store %T does not update cluster secrets", opened)
	}
	const project = "p"
	if err := st.PutProject(ctx, &v1.Project{Name: project, ID: "/v1/projects/" + project}, store.Cond{}); err != nil {
		t.Fatalf("put project: %v", err)
	}
	k := store.Key{Project: project, Name: name}
	cl := &store.Cluster{Project: project, Name: name, Status: v1.ClusterStatus{ProvisioningState: v1.StateCreating}}
	op := &store.Operation{ID: "op-" + name, Project: project, Cluster: name, Kind: v1.KindCreate, Status: v1.OpInProgress, StartTime: time.Now()}
	if err := st.BeginOperation(ctx, cl, op, store.Cond{IfNoneMatch: "*"}); err != nil {
		t.Fatalf("create cluster %s: %v", name, err)
	}
	got, err := st.ClaimCluster(ctx, "test", time.Hour)
	if err != nil || got.Name != name {
		t.Fatalf("claim cluster %s: %v", name, err)
	}
	if _, err := trust.EnsureSecrets(ctx, st, k, got.Lease.Fence(), 0); err != nil {
		t.Fatalf("ensure secrets of %s: %v", name, err)
	}
	return st, k
}

func parseCert(t *testing.T, certPEM string) *x509.Certificate {
	t.Helper()
	c, err := pki.ParseCertificate([]byte(certPEM))
	if err != nil {
		t.Fatal(err)
	}
	return c
}
