package storetest

import (
	"time"

	v1 "kiln.dev/kiln/api/v1"
	"kiln.dev/kiln/internal/store"
)

// testFleetCounts: the clusters are counted by state and provider, and
// the waiting ones are the claimable ones (not those whose lease is held).
func testFleetCounts(e *env) {
	t, ctx, s := e.t, e.ctx, e.s
	counts, err := s.CountClusters(ctx)
	wantErr(t, "CountClusters of none", err, nil)
	diff(t, "counts of no clusters", []store.ClusterCount(nil), counts)

	e.project("p")
	e.project("q")
	e.begin("p", "a", v1.KindCreate, v1.StateCreating)
	e.begin("p", "b", v1.KindCreate, v1.StateCreating)
	e.begin("q", "c", v1.KindCreate, v1.StateSucceeded)
	e.begin("q", "d", v1.KindDelete, v1.StateDeleting)
	edge, op := e.newClusterOp("q", "e", v1.KindCreate, v1.StateFailed)
	edge.Spec.Provider = "edge"
	wantErr(t, "BeginOperation q/e", s.BeginOperation(ctx, edge, op, store.Cond{}), nil)

	counts, err = s.CountClusters(ctx)
	wantErr(t, "CountClusters", err, nil)
	diff(t, "cluster counts", []store.ClusterCount{
		{State: v1.StateFailed, Provider: "edge", Count: 1},
		{State: v1.StateCreating, Provider: "sim", Count: 2},
		{State: v1.StateDeleting, Provider: "sim", Count: 1},
		{State: v1.StateSucceeded, Provider: "sim", Count: 1},
	}, counts)

	waiting := func(want int) {
		t.Helper()
		n, err := s.CountWaiting(ctx)
		wantErr(t, "CountWaiting", err, nil)
		if n != want {
			t.Errorf("waiting: %d, want %d", n, want)
		}
	}
	waiting(3)
	e.claim("w", time.Minute)
	waiting(2)
	e.clock.Advance(2 * time.Minute) // the lease expired: its cluster waits again
	waiting(3)
}

// testCertificateExpiries: the certificate expiry a cluster's status
// records is listed, clusters without one are not.
func testCertificateExpiries(e *env) {
	t, ctx, s := e.t, e.ctx, e.s
	e.project("p")
	e.begin("p", "none", v1.KindCreate, v1.StateSucceeded)
	cl, _ := e.begin("p", "soon", v1.KindCreate, v1.StateSucceeded)
	at := time.Date(2027, 3, 1, 12, 30, 0, 500, time.UTC)
	cl.Status.Certificates = &v1.CertificatesStatus{NotAfter: at, Of: "the cluster CA"}
	wantErr(t, "PutClusterStatus", s.PutClusterStatus(ctx, cl, store.Cond{IfMatch: cl.ETag}), nil)

	got, err := s.CertificateExpiries(ctx)
	wantErr(t, "CertificateExpiries", err, nil)
	diff(t, "certificate expiries", []store.CertificateExpiry{{Key: store.Key{Project: "p", Name: "soon"}, NotAfter: at}}, got)
}

// testClaimTakenFrom: a claim of a lease that expired with its holder
// says whose it was; a claim of a free or released lease says nobody's.
func testClaimTakenFrom(e *env) {
	t, ctx, s := e.t, e.ctx, e.s
	e.project("p")
	e.begin("p", "c", v1.KindCreate, v1.StateCreating)
	first := e.claim("w1", time.Minute)
	if first.Lease.TakenFrom != "" {
		t.Errorf("first claim taken from %q, want nobody", first.Lease.TakenFrom)
	}
	e.clock.Advance(2 * time.Minute)
	second := e.claim("w2", time.Minute)
	if second.Lease.TakenFrom != "w1" {
		t.Errorf("claim of an expired lease taken from %q, want w1", second.Lease.TakenFrom)
	}
	wantErr(t, "ReleaseLease", s.ReleaseLease(ctx, second.Key(), second.Lease.Fence()), nil)
	third := e.claim("w3", time.Minute)
	if third.Lease.TakenFrom != "" {
		t.Errorf("claim of a released lease taken from %q, want nobody", third.Lease.TakenFrom)
	}
}
