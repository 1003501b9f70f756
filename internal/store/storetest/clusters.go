package storetest

import (
	"errors"
	"fmt"
	"slices"
	"testing"

	v1 "kiln.dev/kiln/api/v1"
	"kiln.dev/kiln/internal/store"
)

// testBeginOperation: a new cluster is written as given, with a free lease
// and no dequeues, and its operation is readable.
func testBeginOperation(e *env) {
	t, ctx, s := e.t, e.ctx, e.s
	e.project("p")
	cl, op := e.newClusterOp("p", "c", v1.KindCreate, v1.StateCreating)
	cl.Lease = store.Lease{Owner: "ignored", Token: 42, Expiry: e.clock.Now().Add(99999)}
	cl.Dequeues = 7
	wantErr(t, "BeginOperation", s.BeginOperation(ctx, cl, op, store.Cond{IfNoneMatch: "*"}), nil)
	if cl.ETag == "" {
		t.Fatal("BeginOperation set no etag")
	}

	got := e.get(cl.Key())
	want := *cl
	want.Lease = store.Lease{}
	want.Dequeues = 0
	diff(t, "cluster", &want, got)

	gotOp := e.getOp(op.ID)
	diff(t, "operation", op, gotOp)

	if _, err := s.GetOperation(ctx, newOpID(t)); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("GetOperation unknown: %v, want ErrNotFound", err)
	}
	if _, err := s.GetCluster(ctx, store.Key{Project: "p", Name: "nope"}); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("GetCluster unknown: %v, want ErrNotFound", err)
	}

	// A second operation on the finished cluster replaces spec and status
	// and frees the lease again, but keeps the lease token.
	claimed := e.claim("w", 60e9)
	op.Status = v1.OpSucceeded
	cl.Status.ProvisioningState = v1.StateSucceeded
	wantErr(t, "FinishOperation", s.FinishOperation(ctx, cl, op, claimed.Lease.Fence(), false), nil)

	cl2, op2 := e.newClusterOp("p", "c", v1.KindUpdate, v1.StateUpdating)
	cl2.Spec.WorkerPools[0].Size = 5
	old := cl.ETag
	wantErr(t, "BeginOperation update", s.BeginOperation(ctx, cl2, op2, store.Cond{IfMatch: old}), nil)
	if cl2.ETag == old {
		t.Fatal("update kept the etag")
	}
	got = e.get(cl2.Key())
	if got.Spec.WorkerPools[0].Size != 5 || got.Status.ProvisioningState != v1.StateUpdating {
		t.Fatalf("updated cluster: pool size %d state %s", got.Spec.WorkerPools[0].Size, got.Status.ProvisioningState)
	}
	if got.Lease.Owner != "" || !got.Lease.Expiry.IsZero() || got.Dequeues != 0 {
		t.Fatalf("updated cluster lease %+v dequeues %d: want free, 0", got.Lease, got.Dequeues)
	}
	if got.Lease.Token != claimed.Lease.Token {
		t.Fatalf("updated cluster lease token %d, want %d kept", got.Lease.Token, claimed.Lease.Token)
	}
	if next := e.claim("w", 60e9); next.Lease.Token != claimed.Lease.Token+1 {
		t.Fatalf("claim after update: token %d, want %d", next.Lease.Token, claimed.Lease.Token+1)
	}
}

// testBeginOperationConditions: IfMatch and IfNoneMatch on clusters; a
// refused BeginOperation writes nothing.
func testBeginOperationConditions(e *env) {
	t, ctx, s := e.t, e.ctx, e.s
	e.project("p")

	cl, op := e.newClusterOp("p", "c", v1.KindCreate, v1.StateSucceeded)
	wantErr(t, "IfMatch * on missing", s.BeginOperation(ctx, cl, op, store.Cond{IfMatch: "*"}), store.ErrPreconditionFailed)
	wantErr(t, "IfMatch etag on missing", s.BeginOperation(ctx, cl, op, store.Cond{IfMatch: "abc"}), store.ErrPreconditionFailed)
	wantErr(t, "create", s.BeginOperation(ctx, cl, op, store.Cond{IfNoneMatch: "*"}), nil)
	etag := cl.ETag

	tests := []struct {
		name string
		cond store.Cond
		want error
	}{
		{"IfNoneMatch * on existing", store.Cond{IfNoneMatch: "*"}, store.ErrExists},
		{"stale IfMatch", store.Cond{IfMatch: etag + "0"}, store.ErrPreconditionFailed},
	}
	for _, tc := range tests {
		cl2, op2 := e.newClusterOp("p", "c", v1.KindUpdate, v1.StateUpdating)
		wantErr(t, tc.name, s.BeginOperation(ctx, cl2, op2, tc.cond), tc.want)
		if _, err := s.GetOperation(ctx, op2.ID); !errors.Is(err, store.ErrNotFound) {
			t.Fatalf("%s: refused BeginOperation left operation behind (err %v)", tc.name, err)
		}
		if got := e.get(cl.Key()); got.ETag != etag || got.Status.ProvisioningState != v1.StateSucceeded {
			t.Fatalf("%s: refused BeginOperation changed the cluster", tc.name)
		}
	}

	cl3, op3 := e.newClusterOp("p", "c", v1.KindUpdate, v1.StateUpdating)
	wantErr(t, "IfMatch *", s.BeginOperation(ctx, cl3, op3, store.Cond{IfMatch: "*"}), nil)

	// An operation id can be used once.
	cl4, op4 := e.newClusterOp("p", "d", v1.KindCreate, v1.StateCreating)
	op4.ID = op3.ID
	wantErr(t, "reused operation id", s.BeginOperation(ctx, cl4, op4, store.Cond{}), store.ErrExists)
	if _, err := s.GetCluster(ctx, cl4.Key()); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("refused BeginOperation created cluster %s (err %v)", cl4.Key(), err)
	}
}

// testBeginOperationConflict: no second operation while one runs; the
// error names it.
func testBeginOperationConflict(e *env) {
	for _, state := range []string{v1.StateCreating, v1.StateUpdating, v1.StateDeleting} {
		e.t.Run(state, func(t *testing.T) {
			e := &env{t: t, ctx: e.ctx, s: e.s, clock: e.clock}
			e.project("p")
			name := "c-" + state
			running, runningOp := e.begin("p", name, v1.KindCreate, state)

			for _, cond := range []store.Cond{{}, {IfMatch: running.ETag}, {IfMatch: "*"}} {
				cl, op := e.newClusterOp("p", name, v1.KindUpdate, v1.StateUpdating)
				err := e.s.BeginOperation(e.ctx, cl, op, cond)
				var ce *store.ConflictError
				if !errors.As(err, &ce) || !errors.Is(err, store.ErrConflict) {
					t.Fatalf("BeginOperation on a %s cluster (cond %+v): %v, want *ConflictError", state, cond, err)
				}
				if ce.Operation != runningOp.ID || ce.State != state {
					t.Fatalf("ConflictError = %+v, want operation %s state %s", ce, runningOp.ID, state)
				}
				if _, err := e.s.GetOperation(e.ctx, op.ID); !errors.Is(err, store.ErrNotFound) {
					t.Fatalf("conflicting operation was recorded (err %v)", err)
				}
			}
			if got := e.get(running.Key()); got.ETag != running.ETag {
				t.Fatal("conflicting BeginOperation changed the cluster")
			}
		})
	}
}

// testClusterPaging: clusters list by name within their project.
func testClusterPaging(e *env) {
	t := e.t
	e.project("p")
	e.project("q")
	var want []string
	for i := range 7 {
		name := fmt.Sprintf("c%d", (i*5)%7)
		e.begin("p", name, v1.KindCreate, v1.StateCreating)
		want = append(want, name)
	}
	e.begin("q", "other", v1.KindCreate, v1.StateCreating)
	slices.Sort(want)
	got := pageAll(t, 2, func(pg store.Page) ([]string, string, error) {
		cls, next, err := e.s.ListClusters(e.ctx, "p", pg)
		var names []string
		for _, cl := range cls {
			names = append(names, cl.Name)
		}
		return names, next, err
	})
	diff(t, "cluster names", want, got)

	cls, _, err := e.s.ListClusters(e.ctx, "p", store.Page{Limit: 1})
	wantErr(t, "ListClusters", err, nil)
	diff(t, "listed cluster", e.get(cls[0].Key()), cls[0])
}

// testClustersWhere: ListClustersWhere pages through every project's
// clusters in a state and of the providers asked, in project and name
// order; nil providers is any, an empty list none; a cluster that changes
// provider or state is found as it is now.
func testClustersWhere(e *env) {
	t, ctx, s := e.t, e.ctx, e.s
	e.project("p")
	e.project("q")
	put := func(project, name, provider, state string) {
		cl, op := e.newClusterOp(project, name, v1.KindCreate, state)
		cl.Spec.Provider = provider
		wantErr(t, "BeginOperation "+name, s.BeginOperation(ctx, cl, op, store.Cond{}), nil)
	}
	put("q", "a", "docker", v1.StateSucceeded)
	put("p", "b", "docker", v1.StateSucceeded)
	put("p", "a", "sim", v1.StateSucceeded)
	put("p", "c", "aws", v1.StateSucceeded)
	put("q", "b", "docker", v1.StateCreating)
	list := func(f store.ClusterFilter) []string {
		return pageAll(t, 1, func(pg store.Page) ([]string, string, error) {
			cls, next, err := s.ListClustersWhere(ctx, f, pg)
			var names []string
			for _, cl := range cls {
				names = append(names, cl.Project+"/"+cl.Name)
			}
			return names, next, err
		})
	}
	diff(t, "Succeeded docker and aws clusters", []string{"p/b", "p/c", "q/a"},
		list(store.ClusterFilter{State: v1.StateSucceeded, Providers: []string{"docker", "aws"}}))
	diff(t, "Succeeded clusters of any provider", []string{"p/a", "p/b", "p/c", "q/a"},
		list(store.ClusterFilter{State: v1.StateSucceeded}))
	diff(t, "Creating docker clusters", []string{"q/b"},
		list(store.ClusterFilter{State: v1.StateCreating, Providers: []string{"docker"}}))
	if got := list(store.ClusterFilter{State: v1.StateSucceeded, Providers: []string{}}); len(got) != 0 {
		t.Errorf("clusters of no provider: %v, want none", got)
	}
	// p/a becomes a docker cluster, being updated: it leaves the sim list.
	cl := e.get(store.Key{Project: "p", Name: "a"})
	_, op := e.newClusterOp("p", "a", v1.KindUpdate, v1.StateUpdating)
	cl.Spec.Provider, cl.Status.ProvisioningState, cl.Status.CurrentOperation = "docker", v1.StateUpdating, op.ID
	wantErr(t, "BeginOperation update", s.BeginOperation(ctx, cl, op, store.Cond{IfMatch: cl.ETag}), nil)
	diff(t, "Updating docker clusters", []string{"p/a"},
		list(store.ClusterFilter{State: v1.StateUpdating, Providers: []string{"docker"}}))
	if got := list(store.ClusterFilter{State: v1.StateSucceeded, Providers: []string{"sim"}}); len(got) != 0 {
		t.Errorf("Succeeded sim clusters after the change: %v, want none", got)
	}
}

// testOperations: a cluster's operations list by id, and outlive it.
func testOperations(e *env) {
	t, ctx, s := e.t, e.ctx, e.s
	e.project("p")
	var want []string
	for i := range 5 {
		cl, op := e.begin("p", "c", v1.KindUpdate, v1.StateUpdating)
		want = append(want, op.ID)
		claimed := e.claim("w", 60e9)
		op.Status = v1.OpSucceeded
		op.Steps[0].State = v1.StepSucceeded
		if i == 4 {
			op.Status = v1.OpFailed
			op.Error = &v1.Error{Code: v1.CodeQuotaExceeded, Message: "no room", Target: "spec",
				Details: []v1.Error{{Code: "x", Message: "y"}}}
		}
		cl.Status.ProvisioningState = v1.StateSucceeded
		wantErr(t, "FinishOperation", s.FinishOperation(ctx, cl, op, claimed.Lease.Fence(), false), nil)
		diff(t, "finished operation", op, e.getOp(op.ID))
	}
	e.begin("p", "other", v1.KindCreate, v1.StateCreating)

	got := pageAll(t, 2, func(pg store.Page) ([]string, string, error) {
		ops, next, err := s.ListOperations(ctx, store.Key{Project: "p", Name: "c"}, pg)
		var ids []string
		for _, op := range ops {
			ids = append(ids, op.ID)
		}
		return ids, next, err
	})
	diff(t, "operation ids", want, got)
	if !slices.IsSorted(got) {
		t.Errorf("operation ids not in order: %v", got)
	}
}

// testBeginOperationAudit: the audit entry given with an operation is
// written with it, and not when the operation is refused.
func testBeginOperationAudit(e *env) {
	t, ctx, s := e.t, e.ctx, e.s
	e.project("p")
	audit := func(status int) *v1.AuditEntry {
		return &v1.AuditEntry{Actor: "user:alice", Action: "PUT /v1/projects/{project}/clusters/{cluster}",
			Path: "/v1/projects/p/clusters/c", Project: "p", Result: v1.AuditSuccess, Status: status}
	}
	cl, op := e.newClusterOp("p", "c", v1.KindCreate, v1.StateCreating)
	op.Audit = audit(201)
	wantErr(t, "BeginOperation", s.BeginOperation(ctx, cl, op, store.Cond{IfNoneMatch: "*"}), nil)
	if op.Audit.ID == "" {
		t.Fatal("BeginOperation did not set the audit entry's id")
	}

	busy, refused := e.newClusterOp("p", "c", v1.KindUpdate, v1.StateUpdating)
	refused.Audit = audit(202)
	if err := s.BeginOperation(ctx, busy, refused, store.Cond{}); !errors.Is(err, store.ErrConflict) {
		t.Fatalf("BeginOperation on a Creating cluster: %v, want a conflict", err)
	}
	if refused.Audit.ID != "" {
		t.Errorf("a refused BeginOperation set its audit entry's id %q", refused.Audit.ID)
	}

	got, _, err := s.ListAudit(ctx, store.AuditFilter{}, store.Page{})
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 || got[0].ID != op.Audit.ID || got[0].Status != 201 || got[0].Path != op.Audit.Path {
		t.Fatalf("audit entries %+v, want the begun operation's alone (id %s)", got, op.Audit.ID)
	}
}
