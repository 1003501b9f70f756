package storetest

import (
	"slices"
	"time"

	v1 "kiln.dev/kiln/api/v1"
	"kiln.dev/kiln/internal/store"
)

// testClusterHistory: a cluster's operations and events are its own, not
// its name's. A cluster created again under the name of a deleted one has
// another uid and starts with none of them, nor the old one's nodes; the
// deleted one's operations stay readable by id and, until the name is used
// again, its history is the name's.
func testClusterHistory(e *env) {
	t, ctx, s := e.t, e.ctx, e.s
	e.project("p")
	k := store.Key{Project: "p", Name: "c"}
	opIDs := func(pg store.Page) ([]string, string) {
		t.Helper()
		ops, next, err := s.ListOperations(ctx, k, pg)
		wantErr(t, "ListOperations", err, nil)
		var ids []string
		for _, op := range ops {
			ids = append(ids, op.ID)
		}
		return ids, next
	}
	reasons := func() []string {
		t.Helper()
		evs, _, err := s.ListEvents(ctx, k, store.Page{})
		wantErr(t, "ListEvents", err, nil)
		var out []string
		for _, ev := range evs {
			out = append(out, ev.Reason)
		}
		return out
	}
	event := func(reason, uid string) *store.Event {
		t.Helper()
		ev := &store.Event{Project: "p", Cluster: "c", ClusterUID: uid, Event: v1.Event{Type: "Normal", Reason: reason}}
		wantErr(t, "AppendEvent "+reason, s.AppendEvent(ctx, ev), nil)
		return ev
	}

	// The first c: a create, canceled, with a node and its log.
	first, create := e.begin("p", "c", v1.KindCreate, v1.StateCreating)
	if first.UID == "" || create.ClusterUID != first.UID {
		t.Fatalf("created cluster uid %q, its operation's %q", first.UID, create.ClusterUID)
	}
	diff(t, "the cluster as read", first, e.get(k))
	if ev := event("NodeRegistered", ""); ev.ClusterUID != first.UID {
		t.Fatalf("an event of the first c is filed under %q, want %q", ev.ClusterUID, first.UID)
	}
	wantErr(t, "PutNode", s.PutNode(ctx, &store.Node{Project: "p", Node: v1.Node{Name: "n0", Cluster: "c"}}, store.Cond{}), nil)
	wantErr(t, "AppendNodeLogs", s.AppendNodeLogs(ctx, k, "n0", []v1.LogLine{{Stream: "agent", Line: "first"}}), nil)
	cl := e.claim("w", time.Hour)
	if cl.UID != first.UID {
		t.Fatalf("claimed cluster uid %q, want %q", cl.UID, first.UID)
	}
	create = e.getOp(create.ID)
	create.Status = v1.OpCanceled
	cl.Status.ProvisioningState = v1.StateCanceled
	wantErr(t, "FinishOperation canceled", s.FinishOperation(ctx, cl, create, cl.Lease.Fence(), false,
		&store.Event{Project: "p", Cluster: "c", Event: v1.Event{Type: "Warning", Reason: "OperationCanceled"}}), nil)

	// Its delete: the record is replaced (the uid kept), then removed.
	_, del := e.begin("p", "c", v1.KindDelete, v1.StateDeleting)
	if del.ClusterUID != first.UID || e.get(k).UID != first.UID {
		t.Fatalf("a replaced cluster's uid %q, its delete's %q; want %q kept", e.get(k).UID, del.ClusterUID, first.UID)
	}
	cl = e.claim("w", time.Hour)
	del = e.getOp(del.ID)
	del.Status = v1.OpSucceeded
	wantErr(t, "FinishOperation delete", s.FinishOperation(ctx, nil, del, cl.Lease.Fence(), true,
		&store.Event{Project: "p", Cluster: "c", Event: v1.Event{Type: "Normal", Reason: "OperationSucceeded"}}), nil)

	// Gone, its history is still the name's, paged as usual.
	if ids, _ := opIDs(store.Page{}); !slices.Equal(ids, []string{create.ID, del.ID}) {
		t.Fatalf("operations of the deleted c: %v, want %v", ids, []string{create.ID, del.ID})
	}
	diff(t, "events of the deleted c", []string{"NodeRegistered", "OperationCanceled", "OperationSucceeded"}, reasons())
	if ev := event("AgentSessionRefused", ""); ev.ClusterUID != first.UID {
		t.Fatalf("an event after the delete is filed under %q, want the deleted c's %q", ev.ClusterUID, first.UID)
	}
	page1, next := opIDs(store.Page{Limit: 1})
	if !slices.Equal(page1, []string{create.ID}) || next == "" {
		t.Fatalf("first page of the deleted c's operations: %v, next %q", page1, next)
	}

	// The second c: a new uid, and nothing of the first's.
	second, create2 := e.begin("p", "c", v1.KindCreate, v1.StateCreating)
	if second.UID == "" || second.UID == first.UID || create2.ClusterUID != second.UID {
		t.Fatalf("the second c's uid %q (its create's %q), the first's %q", second.UID, create2.ClusterUID, first.UID)
	}
	if ids, _ := opIDs(store.Page{}); !slices.Equal(ids, []string{create2.ID}) {
		t.Errorf("operations of the second c: %v, want only %s", ids, create2.ID)
	}
	if got := reasons(); len(got) != 0 {
		t.Errorf("events of the second c: %v, want none", got)
	}
	nodes, _, err := s.ListNodes(ctx, k, store.Page{})
	if err != nil || len(nodes) != 0 {
		t.Errorf("nodes of the second c: %d, %v; want none", len(nodes), err)
	}
	wantErr(t, "PutNode n0 again", s.PutNode(ctx, &store.Node{Project: "p", Node: v1.Node{Name: "n0", Cluster: "c"}}, store.Cond{}), nil)
	if lines, _, err := s.ListNodeLogs(ctx, k, "n0", store.LogFilter{}, store.Page{}); err != nil || len(lines) != 0 {
		t.Errorf("log of the second c's n0: %v, %v; want none of the first's", lines, err)
	}
	// A list begun on the first c goes on with it.
	if ids, _ := opIDs(store.Page{Limit: 1, Token: next}); !slices.Equal(ids, []string{del.ID}) {
		t.Errorf("second page of the deleted c's operations, read after the name was used again: %v, want %s", ids, del.ID)
	}
	// The first's operations are still there by id, and say whose they are.
	for _, id := range []string{create.ID, del.ID} {
		if op := e.getOp(id); op.ClusterUID != first.UID {
			t.Errorf("operation %s: cluster uid %q, want the first c's %q", id, op.ClusterUID, first.UID)
		}
	}
	// An event written for the first c now (its writer knows its uid) is
	// not the second's; one written by name is.
	event("NodeHeartbeatLost", first.UID)
	if ev := event("NodeRegistered", ""); ev.ClusterUID != second.UID {
		t.Errorf("an event by name is filed under %q, want the second c's %q", ev.ClusterUID, second.UID)
	}
	diff(t, "events of the second c", []string{"NodeRegistered"}, reasons())

	// Claimed, listed and replaced, the second keeps its uid.
	if cl := e.claim("w", time.Hour); cl.UID != second.UID {
		t.Errorf("claimed: uid %q, want %q", cl.UID, second.UID)
	}
	cls, _, err := s.ListClusters(ctx, "p", store.Page{})
	if err != nil || len(cls) != 1 || cls[0].UID != second.UID {
		t.Errorf("ListClusters: %v; want c with uid %q", err, second.UID)
	}
}
