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

// ranOp begins an operation of kind (resizing pools) on project/name begun
// at start and, unless status is InProgress, ends it after took with
// status (and code, when it failed), through the store's own calls.
func (e *env) ranOp(project, name, kind, status string, start time.Time, took time.Duration, code string, pools ...v1.PoolResize) *store.Operation {
	e.t.Helper()
	cl, op := e.newClusterOp(project, name, kind, v1.StateCreating)
	op.Pools = pools
	if kind != v1.KindCreate {
		cl.Status.ProvisioningState = v1.StateUpdating
	}
	op.StartTime = start
	wantErr(e.t, "BeginOperation "+project+"/"+name, e.s.BeginOperation(e.ctx, cl, op, store.Cond{}), nil)
	if status == v1.OpInProgress {
		return op
	}
	claimed := e.claim("w", time.Hour)
	end := start.Add(took)
	op.Status, op.EndTime = status, &end
	op.Steps[0].State = v1.StepSucceeded
	claimed.Status.ProvisioningState = v1.StateSucceeded
	if status == v1.OpFailed {
		op.Steps[0].State = v1.StepFailed
		op.Error = &v1.Error{Code: code, Message: code + " at " + name}
		claimed.Status.ProvisioningState = v1.StateFailed
	}
	wantErr(e.t, "FinishOperation "+op.ID, e.s.FinishOperation(e.ctx, claimed, op, claimed.Lease.Fence(), false), nil)
	return op
}

// testFleetSummary: the fleet page's sums, by project, over the windows
// that end at the time asked for.
func testFleetSummary(e *env) {
	t, ctx, s := e.t, e.ctx, e.s
	now := e.clock.Now()
	none, err := s.FleetSummary(ctx, store.FleetQuery{All: true, Now: now})
	wantErr(t, "FleetSummary of nothing", err, nil)
	diff(t, "summary of nothing", &v1.Fleet{Time: now.UTC(), Clusters: []v1.FleetClusterCount{}, Operations: []v1.FleetOperationCount{},
		Durations: []v1.FleetDuration{}, Failures: []v1.FleetFailure{}, Autoscaled: []v1.FleetPool{}}, none)

	e.project("p")
	e.project("q")
	h := time.Hour
	e.ranOp("p", "old", v1.KindCreate, v1.OpSucceeded, now.Add(-20*24*h), time.Minute, "") // before both weeks
	e.ranOp("p", "e", v1.KindCreate, v1.OpSucceeded, now.Add(-10*24*h), time.Minute, "")   // the week before
	e.ranOp("p", "b", v1.KindCreate, v1.OpSucceeded, now.Add(-3*24*h), 30*time.Second, "")
	e.ranOp("q", "d", v1.KindCreate, v1.OpFailed, now.Add(-2*24*h), 5*time.Second, v1.CodeQuotaExceeded)
	e.ranOp("q", "d", v1.KindUpdate, v1.OpFailed, now.Add(-3*h), 5*time.Second, v1.CodeProviderError)
	e.ranOp("p", "a", v1.KindCreate, v1.OpSucceeded, now.Add(-2*h), 10*time.Second, "")
	up := e.ranOp("p", "a", v1.KindAutoscale, v1.OpSucceeded, now.Add(-5*h), 20*time.Second, "", v1.PoolResize{Pool: "default", From: 2, To: 3})
	down := e.ranOp("p", "a", v1.KindAutoscale, v1.OpSucceeded, now.Add(-4*h), 40*time.Second, "", v1.PoolResize{Pool: "default", From: 3, To: 2})
	for i := range 20 { // the week before: 20 repairs of 1 s to 20 s, the shortest last
		e.ranOp("p", "r", v1.KindRepair, v1.OpSucceeded, now.Add(-9*24*h+time.Duration(i)*time.Minute), time.Duration(20-i)*time.Second, "")
	}
	c := e.ranOp("p", "c", v1.KindCreate, v1.OpFailed, now.Add(-h), 5*time.Second, v1.CodeQuotaExceeded)
	g, gop := e.newClusterOp("q", "g", v1.KindCreate, v1.StateCreating)
	g.Spec.Provider, g.Spec.KubernetesVersion, g.Spec.Profile = "edge", "v1.35.1", v1.ProfileRef{Name: "base", Version: 2}
	gop.StartTime = now.Add(-30 * time.Minute)
	wantErr(t, "BeginOperation q/g", s.BeginOperation(ctx, g, gop, store.Cond{}), nil)
	diag := &store.Diagnostics{Project: "p", Cluster: "c", Diagnostics: v1.Diagnostics{ID: "diag-c", Cluster: "/v1/projects/p/clusters/c",
		Operation: c.ID, Reason: "the operation failed", Files: []string{"cluster.json"}}}
	wantErr(t, "PutDiagnostics", s.PutDiagnostics(ctx, diag, []byte{0x1f, 0x8b}), nil)

	all, err := s.FleetSummary(ctx, store.FleetQuery{All: true, Now: now})
	wantErr(t, "FleetSummary", err, nil)
	diff(t, "clusters", []v1.FleetClusterCount{
		{State: v1.StateCreating, Provider: "edge", KubernetesVersion: "v1.35.1", Profile: "base", Count: 1},
		{State: v1.StateFailed, Provider: "sim", KubernetesVersion: "v1.36.3", Count: 2},
		{State: v1.StateSucceeded, Provider: "sim", KubernetesVersion: "v1.36.3", Count: 5},
	}, all.Clusters)
	diff(t, "operations", []v1.FleetOperationCount{
		{Window: v1.WindowDay, Kind: v1.KindAutoscale, Status: v1.OpSucceeded, Count: 2},
		{Window: v1.WindowWeek, Kind: v1.KindAutoscale, Status: v1.OpSucceeded, Count: 2},
		{Window: v1.WindowDay, Kind: v1.KindCreate, Status: v1.OpFailed, Count: 1},
		{Window: v1.WindowWeek, Kind: v1.KindCreate, Status: v1.OpFailed, Count: 2},
		{Window: v1.WindowDay, Kind: v1.KindCreate, Status: v1.OpInProgress, Count: 1},
		{Window: v1.WindowWeek, Kind: v1.KindCreate, Status: v1.OpInProgress, Count: 1},
		{Window: v1.WindowDay, Kind: v1.KindCreate, Status: v1.OpSucceeded, Count: 1},
		{Window: v1.WindowWeek, Kind: v1.KindCreate, Status: v1.OpSucceeded, Count: 2},
		{Window: v1.WindowPriorWeek, Kind: v1.KindCreate, Status: v1.OpSucceeded, Count: 1},
		{Window: v1.WindowPriorWeek, Kind: v1.KindRepair, Status: v1.OpSucceeded, Count: 20},
		{Window: v1.WindowDay, Kind: v1.KindUpdate, Status: v1.OpFailed, Count: 1},
		{Window: v1.WindowWeek, Kind: v1.KindUpdate, Status: v1.OpFailed, Count: 1},
	}, all.Operations)
	diff(t, "durations", []v1.FleetDuration{
		{Window: v1.WindowPriorWeek, Kind: v1.KindCreate, Count: 1, P50: 60, P95: 60},
		{Window: v1.WindowPriorWeek, Kind: v1.KindRepair, Count: 20, P50: 10, P95: 19}, // ranks 10 and 19 of 20
		{Window: v1.WindowWeek, Kind: v1.KindAutoscale, Count: 2, P50: 20, P95: 40},
		{Window: v1.WindowWeek, Kind: v1.KindCreate, Count: 2, P50: 10, P95: 30},
	}, all.Durations)
	diff(t, "autoscaled pools", []v1.FleetPool{{Project: "p", Cluster: "a", Pool: "default", Changes: []v1.FleetPoolChange{
		{Operation: up.ID, Time: now.Add(-5 * h).UTC(), From: 2, To: 3, Status: v1.OpSucceeded},
		{Operation: down.ID, Time: now.Add(-4 * h).UTC(), From: 3, To: 2, Status: v1.OpSucceeded},
	}}}, all.Autoscaled)
	if got := e.getOp(up.ID).Pools; len(got) != 1 || got[0] != (v1.PoolResize{Pool: "default", From: 2, To: 3}) {
		t.Errorf("the autoscale operation's pools as stored: %+v", got)
	}
	if len(all.Failures) != 2 || all.Failures[0].Code != v1.CodeQuotaExceeded || all.Failures[0].Count != 2 ||
		all.Failures[1].Code != v1.CodeProviderError || all.Failures[1].Count != 1 {
		t.Fatalf("failures %+v, want QuotaExceeded 2 then ProviderError 1", all.Failures)
	}
	diff(t, "the newest QuotaExceeded", v1.FleetFailedOperation{ID: c.ID, Project: "p", Cluster: "c", Kind: v1.KindCreate,
		StartTime: now.Add(-h).UTC(), Message: "QuotaExceeded at c", Diagnostics: "diag-c"}, all.Failures[0].Operations[0])
	if ops := all.Failures[0].Operations; len(ops) != 2 || ops[1].Cluster != "d" || ops[1].Diagnostics != "" {
		t.Errorf("QuotaExceeded's operations %+v, want c's then d's (without diagnostics)", ops)
	}

	// One project's: q's alone; no project's: nothing.
	q, err := s.FleetSummary(ctx, store.FleetQuery{Projects: []string{"q"}, Now: now})
	wantErr(t, "FleetSummary of q", err, nil)
	diff(t, "q's clusters", []v1.FleetClusterCount{
		{State: v1.StateCreating, Provider: "edge", KubernetesVersion: "v1.35.1", Profile: "base", Count: 1},
		{State: v1.StateFailed, Provider: "sim", KubernetesVersion: "v1.36.3", Count: 1},
	}, q.Clusters)
	if len(q.Failures) != 2 || q.Failures[0].Count != 1 || len(q.Durations) != 0 || len(q.Autoscaled) != 0 {
		t.Errorf("q's failures %+v and durations %+v, want one QuotaExceeded, one ProviderError and no durations", q.Failures, q.Durations)
	}
	nothing, err := s.FleetSummary(ctx, store.FleetQuery{Now: now})
	wantErr(t, "FleetSummary of no project", err, nil)
	if len(nothing.Clusters)+len(nothing.Operations)+len(nothing.Failures) != 0 {
		t.Errorf("no project's summary counts %+v", nothing)
	}
}
