package fleetmetrics_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	v1 "kiln.dev/kiln/api/v1"
	"kiln.dev/kiln/internal/backend/check/checktest"
	"kiln.dev/kiln/internal/fleetmetrics"
	"kiln.dev/kiln/internal/store"
)

// begin writes cluster name of provider in state with its operation, as
// the frontend does, and returns it.
func begin(t testing.TB, st store.Store, name, provider, state string) *store.Cluster {
	t.Helper()
	id := uuid.Must(uuid.NewV7()).String()
	cl := &store.Cluster{Project: "p", Name: name, Spec: v1.ClusterSpec{Provider: provider},
		Status: v1.ClusterStatus{ProvisioningState: state, CurrentOperation: id}}
	op := &store.Operation{ID: id, Kind: v1.KindCreate, Status: v1.OpInProgress}
	if err := st.BeginOperation(t.Context(), cl, op, store.Cond{}); err != nil {
		t.Fatal(err)
	}
	return cl
}

// TestCollector: right after clusters are written the scrape counts them
// by state and provider, counts the ones waiting for a worker, and gives
// the seconds left of the certificate a cluster's status records.
func TestCollector(t *testing.T) {
	st := checktest.Store(t) // project p
	now := time.Date(2027, 1, 1, 0, 0, 0, 0, time.UTC)
	c := fleetmetrics.New(fleetmetrics.Options{Store: st, Now: func() time.Time { return now }})

	begin(t, st, "a", "sim", v1.StateCreating)
	begin(t, st, "b", "sim", v1.StateCreating)
	begin(t, st, "c", "aws", v1.StateDeleting)
	done := begin(t, st, "d", "aws", v1.StateSucceeded)
	done.Status.Certificates = &v1.CertificatesStatus{NotAfter: now.Add(10 * 24 * time.Hour), Of: "node d-cp-0"}
	if err := st.PutClusterStatus(t.Context(), done, store.Cond{IfMatch: done.ETag}); err != nil {
		t.Fatal(err)
	}
	if _, err := st.ClaimCluster(t.Context(), "w", time.Hour); err != nil { // one of the three is being worked on
		t.Fatal(err)
	}

	want := `
# HELP kiln_clusters Clusters in the store by provisioning state and provider.
# TYPE kiln_clusters gauge
kiln_clusters{provider="aws",state="Deleting"} 1
kiln_clusters{provider="aws",state="Succeeded"} 1
kiln_clusters{provider="sim",state="Creating"} 2
# HELP kiln_operations_waiting Clusters whose operation waits for a worker: Creating, Updating or Deleting with no live lease.
# TYPE kiln_operations_waiting gauge
kiln_operations_waiting 2
# HELP kiln_cluster_certificate_expiry_seconds Seconds until the cluster's first certificate expires (its CA or a node's Kubernetes certificates), as the certificate check last recorded it; negative once expired.
# TYPE kiln_cluster_certificate_expiry_seconds gauge
kiln_cluster_certificate_expiry_seconds{cluster="d",project="p"} 864000
# HELP kiln_fleet_scrape_errors_total Store queries of the fleet's metrics that failed during a scrape (those metrics were left out of it).
# TYPE kiln_fleet_scrape_errors_total counter
kiln_fleet_scrape_errors_total 0
`
	if err := testutil.CollectAndCompare(c, strings.NewReader(want)); err != nil {
		t.Error(err)
	}
	if err := testutil.CollectAndCompare(c, strings.NewReader(want)); err != nil {
		t.Errorf("second scrape: %v", err)
	}
	// The collector registers, so its descriptions are consistent.
	if err := prometheus.NewRegistry().Register(c); err != nil {
		t.Fatal(err)
	}
}

// failing is a store whose fleet queries fail.
type failing struct{}

var errDown = errors.New("store down")

func (failing) CountClusters(context.Context) ([]store.ClusterCount, error) { return nil, errDown }
func (failing) CountWaiting(context.Context) (int, error)                   { return 0, errDown }
func (failing) CertificateExpiries(context.Context) ([]store.CertificateExpiry, error) {
	return nil, errDown
}

// TestCollectorStoreDown: a failing store leaves the fleet's metrics out
// and counts the failures; the scrape itself succeeds.
func TestCollectorStoreDown(t *testing.T) {
	reg := prometheus.NewRegistry()
	reg.MustRegister(fleetmetrics.New(fleetmetrics.Options{Store: failing{}}))
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatalf("gather: %v", err)
	}
	var got bytes.Buffer
	for _, mf := range mfs {
		fmt.Fprintf(&got, "%s %v\n", mf.GetName(), mf.GetMetric()[0].GetCounter().GetValue())
	}
	if want := "kiln_fleet_scrape_errors_total 3\n"; got.String() != want {
		t.Errorf("gathered:\n%s\nwant:\n%s", got.String(), want)
	}
}
