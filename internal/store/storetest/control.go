package storetest

import (
	"slices"
	"time"

	v1 "kiln.dev/kiln/api/v1"
	"kiln.dev/kiln/internal/store"
)

// testRequestCancel: a cancel request is recorded once, unfenced, on an
// operation that has not ended; the lease holder's writes keep it; an ended
// operation refuses it with ErrEnded and is returned as it is.
func testRequestCancel(e *env) {
	t, ctx, s := e.t, e.ctx, e.s
	e.project("p")
	_, op := e.begin("p", "c", v1.KindCreate, v1.StateCreating)

	first := v1.CancelRequest{By: "user:alice", Time: e.clock.Now()}
	// The request's event commits with it, once: a second request adds none.
	event := func(op *store.Operation) *store.Event {
		return &store.Event{Project: op.Project, Cluster: op.Cluster, Event: v1.Event{Type: "Normal", Reason: "CancelRequested", Operation: op.ID}}
	}
	_, _, err := s.RequestCancel(ctx, "no-such-operation", first, event)
	wantErr(t, "RequestCancel of a missing operation", err, store.ErrNotFound)
	if _, _, err := s.RequestCancel(ctx, op.ID, v1.CancelRequest{Time: e.clock.Now()}, event); err == nil {
		t.Fatal("RequestCancel without who asked: no error")
	}
	if got := e.getOp(op.ID); got.CancelRequested != nil {
		t.Fatalf("a refused request was recorded: %+v", got.CancelRequested)
	}
	if req, err := s.CancelRequest(ctx, op.ID); err != nil || req != nil {
		t.Fatalf("CancelRequest before any: %+v, %v; want nil", req, err)
	}
	_, err = s.CancelRequest(ctx, "no-such-operation")
	wantErr(t, "CancelRequest of a missing operation", err, store.ErrNotFound)

	got, recorded, err := s.RequestCancel(ctx, op.ID, first, event)
	wantErr(t, "RequestCancel", err, nil)
	if !recorded || got.CancelRequested == nil || *got.CancelRequested != first || got.Status != v1.OpInProgress {
		t.Fatalf("RequestCancel = %+v recorded %t; want the request recorded on the InProgress operation", got.CancelRequested, recorded)
	}
	e.clock.Advance(time.Second)
	got, recorded, err = s.RequestCancel(ctx, op.ID, v1.CancelRequest{By: "user:bob", Time: e.clock.Now()}, event)
	wantErr(t, "RequestCancel again", err, nil)
	if recorded || got.CancelRequested == nil || *got.CancelRequested != first {
		t.Fatalf("second RequestCancel = %+v recorded %t; want the first request kept", got.CancelRequested, recorded)
	}
	if evs, _, err := s.ListEvents(ctx, store.Key{Project: "p", Name: "c"}, store.Page{}); err != nil {
		t.Fatal(err)
	} else {
		n := 0
		for _, ev := range evs {
			if ev.Reason == "CancelRequested" {
				n++
			}
		}
		if n != 1 {
			t.Errorf("%d CancelRequested events, want the one of the recorded request", n)
		}
	}
	if req, err := s.CancelRequest(ctx, op.ID); err != nil || req == nil || *req != first {
		t.Fatalf("CancelRequest = %+v, %v; want %+v", req, err, first)
	}

	// The lease holder's progress and end keep the request, whatever its
	// copy of the operation says.
	cl := e.claim("w", time.Minute)
	f := cl.Lease.Fence()
	mine := *op // read before the request: no CancelRequested
	mine.Steps = []v1.Step{{Name: "validate-dynamic", State: v1.StepRunning, Attempts: 1}}
	wantErr(t, "SaveOperation", s.SaveOperation(ctx, &mine, f, true), nil)
	if got := e.getOp(op.ID); got.CancelRequested == nil || *got.CancelRequested != first {
		t.Fatalf("after SaveOperation the request is %+v, want %+v", got.CancelRequested, first)
	}
	// The writer learns of the request with its write, with or without
	// progress.
	if mine.CancelRequested == nil || *mine.CancelRequested != first {
		t.Fatalf("SaveOperation (progress) gave the writer the request %+v, want %+v", mine.CancelRequested, first)
	}
	again := *op
	again.Steps = mine.Steps
	wantErr(t, "SaveOperation without progress", s.SaveOperation(ctx, &again, f, false), nil)
	if again.CancelRequested == nil || *again.CancelRequested != first {
		t.Fatalf("SaveOperation gave the writer the request %+v, want %+v", again.CancelRequested, first)
	}
	mine.Status = v1.OpCanceled
	mine.Steps[0].State = v1.StepCanceled
	mine.Error = &v1.Error{Code: v1.CodeCanceled, Message: "canceled by user:alice"}
	cl.Status.ProvisioningState = v1.StateCanceled
	cl.Status.FailedProvisioningState = v1.StateCreating
	wantErr(t, "FinishOperation", s.FinishOperation(ctx, cl, &mine, f, false), nil)
	ended := e.getOp(op.ID)
	if ended.Status != v1.OpCanceled || ended.CancelRequested == nil || *ended.CancelRequested != first {
		t.Fatalf("ended operation %s with request %+v, want Canceled keeping %+v", ended.Status, ended.CancelRequested, first)
	}
	// A Canceled cluster has nothing for workers.
	e.noWork("w")

	got, recorded, err = s.RequestCancel(ctx, op.ID, v1.CancelRequest{By: "user:bob", Time: e.clock.Now()}, nil)
	wantErr(t, "RequestCancel of an ended operation", err, store.ErrEnded)
	if recorded || got == nil || got.Status != v1.OpCanceled || *got.CancelRequested != first {
		t.Fatalf("RequestCancel of an ended operation = %+v recorded %t; want it as it is", got, recorded)
	}

	// Succeeded without a request: ended all the same.
	cl2, op2 := e.begin("p", "c2", v1.KindCreate, v1.StateCreating)
	c2 := e.claim("w", time.Minute)
	op2.Status = v1.OpSucceeded
	cl2.Status.ProvisioningState = v1.StateSucceeded
	wantErr(t, "FinishOperation c2", s.FinishOperation(ctx, cl2, op2, c2.Lease.Fence(), false), nil)
	got, _, err = s.RequestCancel(ctx, op2.ID, first, nil)
	wantErr(t, "RequestCancel of a Succeeded operation", err, store.ErrEnded)
	if got.CancelRequested != nil {
		t.Fatalf("a Succeeded operation got a cancel request: %+v", got.CancelRequested)
	}
}

// testOperationRetryAndForce: what a retry or a forced delete carries
// round-trips, and leftovers are written with the operation's progress and
// end.
func testOperationRetryAndForce(e *env) {
	t, ctx, s := e.t, e.ctx, e.s
	e.project("p")
	cl, op := e.newClusterOp("p", "c", v1.KindDelete, v1.StateDeleting)
	op.RetryOf = newOpID(t)
	op.Force = true
	wantErr(t, "BeginOperation", s.BeginOperation(ctx, cl, op, store.Cond{}), nil)
	diff(t, "begun operation", op, e.getOp(op.ID))

	claimed := e.claim("w", time.Minute)
	f := claimed.Lease.Fence()
	op.Leftovers = []v1.Leftover{{Kind: v1.LeftoverMachine, Name: "c-cp-0", ID: "vm-1"}}
	wantErr(t, "SaveOperation", s.SaveOperation(ctx, op, f, false), nil)
	diff(t, "saved operation", op, e.getOp(op.ID))

	op.Status = v1.OpSucceeded
	op.Leftovers = append(op.Leftovers, v1.Leftover{Kind: v1.LeftoverNetwork, Message: "refused"})
	wantErr(t, "FinishOperation", s.FinishOperation(ctx, nil, op, f, true), nil)
	got := e.getOp(op.ID)
	diff(t, "finished operation", op, got)
	if !got.Force || got.RetryOf != op.RetryOf || len(got.Leftovers) != 2 {
		t.Fatalf("finished operation force %t retryOf %q leftovers %+v", got.Force, got.RetryOf, got.Leftovers)
	}
}

// testOperationReason: why an operation was begun, the nodes it removes
// and the backup it takes round-trip, and a running operation's writes keep them.
func testOperationReason(e *env) {
	t, ctx, s := e.t, e.ctx, e.s
	e.project("p")
	cl, op := e.newClusterOp("p", "c", v1.KindAutoscale, v1.StateUpdating)
	op.Reason = "node c-default-2 underused (cpu 3%, memory 1%) for 10m"
	op.Nodes = []string{"c-default-2", "c-default-1"}
	op.Backup = "c-20261126-101500"
	wantErr(t, "BeginOperation", s.BeginOperation(ctx, cl, op, store.Cond{}), nil)
	diff(t, "begun operation", op, e.getOp(op.ID))

	claimed := e.claim("w", time.Minute)
	f := claimed.Lease.Fence()
	saved := *op
	saved.Reason, saved.Nodes, saved.Backup = "", nil, "" // not written by a save
	saved.Status = v1.OpSucceeded
	wantErr(t, "FinishOperation", s.FinishOperation(ctx, nil, &saved, f, true), nil)
	got := e.getOp(op.ID)
	if got.Reason != op.Reason || !slices.Equal(got.Nodes, op.Nodes) || got.Backup != op.Backup || got.Status != v1.OpSucceeded {
		t.Fatalf("finished operation reason %q nodes %v backup %q status %s, want %q %v %q Succeeded",
			got.Reason, got.Nodes, got.Backup, got.Status, op.Reason, op.Nodes, op.Backup)
	}
}
