package storetest

import (
	"errors"
	"time"

	v1 "kiln.dev/kiln/api/v1"
	"kiln.dev/kiln/internal/store"
)

// testPruneOperations: Prune deletes the operations that ended before the
// cutoff and the instructions answered before it, but never a live
// cluster's newest operation nor one still running, nor the instructions
// of a cluster an operation runs on, nor one not answered yet; a deleted
// cluster's operations go too.
func testPruneOperations(e *env) {
	t, ctx, s := e.t, e.ctx, e.s
	e.project("p")
	// run begins an operation of kind on cluster name, claims it and
	// returns it with the claimed cluster.
	run := func(name, kind, state string) (*store.Cluster, *store.Operation) {
		t.Helper()
		cl, op := e.newClusterOp("p", name, kind, state)
		wantErr(t, "BeginOperation "+name, s.BeginOperation(ctx, cl, op, store.Cond{}), nil)
		return e.claim("w", time.Hour), op
	}
	finish := func(cl *store.Cluster, op *store.Operation, deleted bool) {
		t.Helper()
		end := e.clock.Now()
		op.Status, op.EndTime = v1.OpSucceeded, &end
		op.Steps[0].State = v1.StepSucceeded
		cl.Status.ProvisioningState = v1.StateSucceeded
		wantErr(t, "FinishOperation", s.FinishOperation(ctx, cl, op, cl.Lease.Fence(), deleted), nil)
	}
	instruct := func(cl *store.Cluster, id string, answer bool) {
		t.Helper()
		f := cl.Lease.Fence()
		in := &store.Instruction{Project: "p", Cluster: cl.Name, Node: "n1",
			Instruction: v1.Instruction{ID: id, Kind: v1.InstructionInstall, Params: []byte(`{}`)}}
		wantErr(t, "PutInstruction "+id, s.PutInstruction(ctx, in, store.Cond{Fence: &f}), nil)
		if answer {
			wantErr(t, "SetInstructionResult "+id, s.SetInstructionResult(ctx, id, v1.InstructionResult{Instruction: id, State: v1.StepSucceeded}), nil)
		}
	}

	// a: created, then updated; both ended long ago. The update is its
	// last operation, kept; so is an instruction never answered.
	cl, aCreate := run("a", v1.KindCreate, v1.StateCreating)
	instruct(cl, "a-create-1", true)
	finish(cl, aCreate, false)
	cl, aUpdate := run("a", v1.KindUpdate, v1.StateUpdating)
	instruct(cl, "a-update-1", true)
	instruct(cl, "a-update-2", false)
	finish(cl, aUpdate, false)
	// d: created and deleted long ago; the history of a cluster that is
	// gone goes like its events.
	cl, dCreate := run("d", v1.KindCreate, v1.StateCreating)
	finish(cl, dCreate, false)
	cl, dDelete := run("d", v1.KindDelete, v1.StateDeleting)
	finish(cl, dDelete, true)
	// b: its create still runs, since long ago, with an instruction
	// answered long ago.
	cl, bCreate := run("b", v1.KindCreate, v1.StateCreating)
	instruct(cl, "b-create-1", true)

	e.clock.Advance(48 * time.Hour)
	got, err := s.Prune(ctx, store.Cutoffs{Operations: e.clock.Now().Add(-24 * time.Hour), Instructions: e.clock.Now().Add(-24 * time.Hour)})
	wantErr(t, "Prune", err, nil)
	if want := (store.Pruned{Operations: 3, Instructions: 2}); got != want {
		t.Errorf("Prune = %+v, want %+v", got, want)
	}
	for _, op := range []*store.Operation{aCreate, dCreate, dDelete} {
		if _, err := s.GetOperation(ctx, op.ID); !errors.Is(err, store.ErrNotFound) {
			t.Errorf("operation %s (%s of %s) after the prune: %v, want ErrNotFound", op.ID, op.Kind, op.Cluster, err)
		}
	}
	for _, op := range []*store.Operation{aUpdate, bCreate} {
		if _, err := s.GetOperation(ctx, op.ID); err != nil {
			t.Errorf("operation %s (%s of %s, kept) after the prune: %v", op.ID, op.Kind, op.Cluster, err)
		}
	}
	for id, kept := range map[string]bool{"a-create-1": false, "a-update-1": false, "a-update-2": true, "b-create-1": true} {
		_, err := s.GetInstruction(ctx, id)
		if kept && err != nil || !kept && !errors.Is(err, store.ErrNotFound) {
			t.Errorf("instruction %s after the prune: %v; want kept %v", id, err, kept)
		}
	}
	if got, err := s.Prune(ctx, store.Cutoffs{Operations: e.clock.Now(), Instructions: e.clock.Now()}); err != nil || got != (store.Pruned{}) {
		t.Errorf("a second Prune = %+v, %v; want nothing deleted", got, err)
	}
}
