package fleetmetrics_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	v1 "kiln.dev/kiln/api/v1"
	"kiln.dev/kiln/internal/backend/check/checktest"
	"kiln.dev/kiln/internal/fleetmetrics"
	"kiln.dev/kiln/internal/store"
)

// BenchmarkCollect is one scrape of the fleet's metrics over 10,000
// clusters on SQLite, each with a recorded certificate expiry (the
// expiries are one series a cluster, the most a scrape reads).
func BenchmarkCollect(b *testing.B) {
	st := checktest.Store(b)
	states := []string{v1.StateSucceeded, v1.StateSucceeded, v1.StateSucceeded, v1.StateFailed, v1.StateCreating}
	for i := range 10_000 {
		cl := begin(b, st, fmt.Sprintf("c%05d", i), []string{"sim", "aws", "docker"}[i%3], states[i%len(states)])
		if cl.Status.ProvisioningState == v1.StateCreating {
			continue
		}
		cl.Status.Certificates = &v1.CertificatesStatus{NotAfter: time.Now().Add(time.Duration(i) * time.Hour), Of: "the cluster CA"}
		if err := st.PutClusterStatus(b.Context(), cl, store.Cond{IfMatch: cl.ETag}); err != nil {
			b.Fatal(err)
		}
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(fleetmetrics.New(fleetmetrics.Options{Store: st}))
	for b.Loop() {
		mfs, err := reg.Gather()
		if err != nil || len(mfs) != 4 {
			b.Fatalf("gather: %d families, %v", len(mfs), err)
		}
	}
}
