package storetest

import (
	"errors"
	"testing"
	"time"

	"github.com/google/uuid"

	v1 "kiln.dev/kiln/api/v1"
	"kiln.dev/kiln/internal/store"
)

// NodeLivenessMigration checks that migration 10 (nodes' state and
// heartbeat columns) fills those columns from the nodes already stored: a
// node written, the database rolled back to version 9 (downTo) and opened
// again, must be found by ListStaleNodes with its heartbeat to the
// millisecond. open opens the store on the same database each time, applying
// every migration.
func NodeLivenessMigration(t *testing.T, open func(t *testing.T) store.Store, downTo func(t *testing.T, version int64)) {
	ctx := t.Context()
	s := open(t)
	e := &env{t: t, ctx: ctx, s: s, clock: clockOf(t)}
	e.project("p")
	e.begin("p", "c", v1.KindCreate, v1.StateCreating)
	beat := time.Date(2026, 11, 21, 10, 11, 12, 345000000, time.UTC) // whole milliseconds: SQLite keeps no more
	for _, n := range []*store.Node{
		{Project: "p", Node: v1.Node{Name: "beating", Cluster: "c", State: v1.NodeReady, LastHeartbeat: &beat}},
		{Project: "p", Node: v1.Node{Name: "silent", Cluster: "c", State: v1.NodeReady}},
	} {
		wantErr(t, "PutNode", s.PutNode(ctx, n, store.Cond{}), nil)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	downTo(t, 9)
	s = open(t)
	for _, tc := range []struct {
		before time.Time
		want   int
	}{{beat, 0}, {beat.Add(time.Millisecond), 1}} {
		nodes, err := s.ListStaleNodes(ctx, tc.before, []string{v1.NodeReady})
		if err != nil {
			t.Fatalf("ListStaleNodes: %v", err)
		}
		if len(nodes) != tc.want {
			t.Fatalf("ListStaleNodes before %s after the migration: %d nodes, want %d", tc.before, len(nodes), tc.want)
		}
		if tc.want == 1 && (nodes[0].Name != "beating" || !nodes[0].LastHeartbeat.Equal(beat)) {
			t.Fatalf("stale node %s (heartbeat %v), want beating", nodes[0].Name, nodes[0].LastHeartbeat)
		}
	}
}

// ClusterUIDMigration checks that migration 12 (clusters' uids, under which
// their operations and events are filed) fills the rows already stored
// sensibly: a name's history is split at each delete that removed its
// cluster, the cluster that has the name now gets the uid of its part, each
// deleted one a uid of its own (its tombstone the last one's), and no uid is
// another's. The history is written, the database rolled back to version
// 11 (downTo), which drops every uid, and opened again.
func ClusterUIDMigration(t *testing.T, open func(t *testing.T) store.Store, downTo func(t *testing.T, version int64)) {
	ctx := t.Context()
	s := open(t)
	e := &env{t: t, ctx: ctx, s: s, clock: clockOf(t)}
	e.project("p")
	// run begins an operation on cluster name and ends it with status,
	// with an event, each a second after the last thing done.
	run := func(name, kind, status string) *store.Operation {
		t.Helper()
		state := v1.StateCreating
		if kind == v1.KindDelete {
			state = v1.StateDeleting
		}
		e.clock.Advance(time.Second)
		e.begin("p", name, kind, state)
		e.clock.Advance(time.Second)
		cl := e.claim("w", time.Hour)
		fence := cl.Lease.Fence()
		op := e.getOp(cl.Status.CurrentOperation)
		op.Status = status
		cl.Status.ProvisioningState = status
		deleted := kind == v1.KindDelete && status == v1.OpSucceeded
		if deleted {
			cl = nil
		}
		ev := &store.Event{Project: "p", Cluster: name, Event: v1.Event{Type: "Normal", Reason: kind + status, Operation: op.ID}}
		wantErr(t, "FinishOperation", s.FinishOperation(ctx, cl, op, fence, deleted, ev), nil)
		return op
	}
	event := func(name, reason string) {
		t.Helper()
		e.clock.Advance(time.Second)
		ev := &store.Event{Project: "p", Cluster: name, Event: v1.Event{Type: "Normal", Reason: reason}}
		wantErr(t, "AppendEvent", s.AppendEvent(ctx, ev), nil)
	}
	// c: a create canceled, a delete, a create again.
	create1 := run("c", v1.KindCreate, v1.OpCanceled)
	event("c", "first")
	del1 := run("c", v1.KindDelete, v1.OpSucceeded)
	event("c", "afterDelete")
	create2 := run("c", v1.KindCreate, v1.OpSucceeded)
	event("c", "second")
	// gone: created and deleted. live: being created.
	goneCreate := run("gone", v1.KindCreate, v1.OpSucceeded)
	goneDel := run("gone", v1.KindDelete, v1.OpSucceeded)
	e.clock.Advance(time.Second)
	_, liveCreate := e.begin("p", "live", v1.KindCreate, v1.StateCreating)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}

	downTo(t, 11)
	s = open(t)
	e.s = s
	ops := func(name string, want ...*store.Operation) {
		t.Helper()
		got, _, err := s.ListOperations(ctx, store.Key{Project: "p", Name: name}, store.Page{})
		wantErr(t, "ListOperations "+name, err, nil)
		var gotIDs, wantIDs []string
		for _, op := range got {
			gotIDs = append(gotIDs, op.ID)
		}
		for _, op := range want {
			wantIDs = append(wantIDs, op.ID)
		}
		diff(t, "operations of "+name, wantIDs, gotIDs)
	}
	events := func(name string, want ...string) {
		t.Helper()
		got, _, err := s.ListEvents(ctx, store.Key{Project: "p", Name: name}, store.Page{})
		wantErr(t, "ListEvents "+name, err, nil)
		var reasons []string
		for _, ev := range got {
			reasons = append(reasons, ev.Reason)
		}
		diff(t, "events of "+name, want, reasons)
	}
	ops("c", create2)
	events("c", "createSucceeded", "second")
	ops("gone", goneCreate, goneDel)
	events("gone", "createSucceeded", "deleteSucceeded")
	ops("live", liveCreate)
	events("live")

	uid := func(what, id string) string {
		t.Helper()
		u, err := uuid.Parse(id)
		if err != nil || u.Version() != 7 {
			t.Fatalf("uid %q of %s is not a UUIDv7 (%v)", id, what, err)
		}
		return id
	}
	first := uid("the first c", e.getOp(create1.ID).ClusterUID)
	if got := e.getOp(del1.ID).ClusterUID; got != first {
		t.Errorf("the first c's delete has uid %q, its create %q", got, first)
	}
	second := uid("the second c", e.get(store.Key{Project: "p", Name: "c"}).UID)
	if got := e.getOp(create2.ID).ClusterUID; got != second {
		t.Errorf("the second c's create has uid %q, the cluster %q", got, second)
	}
	gone := uid("gone", e.getOp(goneDel.ID).ClusterUID)
	live := uid("live", e.get(store.Key{Project: "p", Name: "live"}).UID)
	if got := e.getOp(liveCreate.ID).ClusterUID; got != live {
		t.Errorf("live's create has uid %q, the cluster %q", got, live)
	}
	if uids := map[string]bool{first: true, second: true, gone: true, live: true}; len(uids) != 4 {
		t.Errorf("uids of the first c, the second, gone and live are not four: %s %s %s %s", first, second, gone, live)
	}

	// Written from now on, they go on as any other.
	e.clock.Advance(time.Second)
	again, create := e.begin("p", "gone", v1.KindCreate, v1.StateCreating)
	if again.UID == gone || create.ClusterUID != again.UID {
		t.Errorf("gone created again: uid %q (its create's %q), the deleted one's %q", again.UID, create.ClusterUID, gone)
	}
	ops("gone", create)
	events("gone")
}

// ProjectSecretsMigration checks that migration 15 (the project_secrets
// table) goes down and up again cleanly on a database that holds secrets:
// rolled back to version 14 (downTo) the secrets are gone with their table,
// and opened again (applying 15) the store keeps secrets once more, and
// deleting their project deletes them.
func ProjectSecretsMigration(t *testing.T, open func(t *testing.T) store.Store, downTo func(t *testing.T, version int64)) {
	ctx := t.Context()
	s := open(t)
	e := &env{t: t, ctx: ctx, s: s, clock: clockOf(t)}
	e.project("p")
	put := func(s store.Store, name string) {
		t.Helper()
		ps := &store.ProjectSecret{Project: "p", Secret: v1.Secret{Name: name, Data: map[string]string{"password": "hunter22"}}}
		wantErr(t, "PutProjectSecret "+name, s.PutProjectSecret(ctx, ps, store.Cond{}), nil)
	}
	put(s, "before")
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	downTo(t, 14)
	s = open(t)
	if _, err := s.GetProjectSecret(ctx, "p", "before"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("a secret written before the table was dropped and made again: %v, want ErrNotFound", err)
	}
	put(s, "after")
	got, err := s.GetProjectSecret(ctx, "p", "after")
	wantErr(t, "GetProjectSecret", err, nil)
	diff(t, "secret data", map[string]string{"password": "hunter22"}, got.Data)
	wantErr(t, "DeleteProject", s.DeleteProject(ctx, "p", store.Cond{}), nil)
	if _, err := s.GetProjectSecret(ctx, "p", "after"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("secret of a deleted project: %v, want ErrNotFound", err)
	}
}
