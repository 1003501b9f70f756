package storetest

import (
	"slices"
	"time"
)

// testReplicas: a replica is listed while its record has not expired,
// renewed by PutReplica, gone at once with DeleteReplica; the list is
// sorted, and an expired record is forgotten.
func testReplicas(e *env) {
	t, ctx, s := e.t, e.ctx, e.s
	list := func(want ...string) {
		t.Helper()
		got, err := s.ListReplicas(ctx)
		wantErr(t, "ListReplicas", err, nil)
		if !slices.Equal(got, want) {
			t.Fatalf("ListReplicas = %v, want %v", got, want)
		}
	}
	list()
	wantErr(t, "PutReplica", s.PutReplica(ctx, "b", 15*time.Second), nil)
	wantErr(t, "PutReplica", s.PutReplica(ctx, "a", 15*time.Second), nil)
	list("a", "b")
	e.clock.Advance(10 * time.Second)
	wantErr(t, "PutReplica", s.PutReplica(ctx, "a", 15*time.Second), nil) // a renews, b does not
	e.clock.Advance(10 * time.Second)
	list("a")
	wantErr(t, "PutReplica", s.PutReplica(ctx, "b", 15*time.Second), nil) // b is back
	list("a", "b")
	wantErr(t, "DeleteReplica", s.DeleteReplica(ctx, "b"), nil)
	wantErr(t, "DeleteReplica", s.DeleteReplica(ctx, "b"), nil)
	list("a")
	if s.PutReplica(ctx, "", time.Second) == nil {
		t.Error("PutReplica of an empty name succeeded")
	}
}
