package storetest

import (
	"time"

	v1 "kiln.dev/kiln/api/v1"
	"kiln.dev/kiln/internal/store"
)

// testJobs: a cluster's jobs are created once (IfNoneMatch), replaced
// conditionally, listed by name, refused for a missing cluster, and gone
// with their cluster.
func testJobs(e *env) {
	t, ctx, s := e.t, e.ctx, e.s
	e.project("p")
	e.begin("p", "c", v1.KindCreate, v1.StateCreating)
	k := store.Key{Project: "p", Name: "c"}
	job := func(name string) *store.Job {
		return &store.Job{Project: "p", Job: v1.Job{Name: name, Cluster: "c",
			Spec:   v1.JobSpec{Image: "kiln.dev/demo:1", Args: []string{"whoami"}, CPU: "100m"},
			Status: v1.JobStatus{Phase: v1.JobPending}}}
	}
	j := job("b")
	wantErr(t, "PutJob", s.PutJob(ctx, j, store.Cond{IfNoneMatch: "*"}), nil)
	if j.ETag == "" || j.CreatedAt.IsZero() {
		t.Fatalf("put job: etag %q created %v", j.ETag, j.CreatedAt)
	}
	wantErr(t, "PutJob again", s.PutJob(ctx, job("b"), store.Cond{IfNoneMatch: "*"}), store.ErrExists)
	wantErr(t, "PutJob a", s.PutJob(ctx, job("a"), store.Cond{}), nil)
	got, err := s.GetJob(ctx, k, "b")
	wantErr(t, "GetJob", err, nil)
	diff(t, "job", j, got)

	now := e.clock.Now().UTC().Truncate(time.Microsecond)
	got.Status = v1.JobStatus{Phase: v1.JobRunning, SubmittedAt: &now}
	got.Log = "hello from job-b on n1\n"
	old := got.ETag
	wantErr(t, "PutJob IfMatch", s.PutJob(ctx, got, store.Cond{IfMatch: old}), nil)
	wantErr(t, "PutJob stale", s.PutJob(ctx, got, store.Cond{IfMatch: old}), store.ErrPreconditionFailed)

	list, next, err := s.ListJobs(ctx, k, store.Page{Limit: 10})
	wantErr(t, "ListJobs", err, nil)
	if len(list) != 2 || list[0].Name != "a" || list[1].Name != "b" || list[1].Status.Phase != v1.JobRunning ||
		list[1].Log != got.Log || next != "" {
		t.Fatalf("jobs %+v next %q; want a, then b Running", list, next)
	}
	missing := job("x")
	missing.Cluster = "nope"
	wantErr(t, "PutJob of a missing cluster", s.PutJob(ctx, missing, store.Cond{}), store.ErrNotFound)

	e.finishDelete(e.claim("w", time.Hour))
	e.begin("p", "c", v1.KindCreate, v1.StateCreating)
	if list, _, err := s.ListJobs(ctx, k, store.Page{}); err != nil || len(list) != 0 {
		t.Fatalf("jobs of a cluster created again under the name of a deleted one: %d, %v", len(list), err)
	}
}
