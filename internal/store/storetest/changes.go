package storetest

import (
	"sync"
	"time"

	v1 "kiln.dev/kiln/api/v1"
	"kiln.dev/kiln/internal/store"
)

// changeLog records what a store.Watcher delivers, but ChangeResync (a
// store with a relay sends it whenever its listener connects).
type changeLog struct {
	mu  sync.Mutex
	got []store.Change
}

func (l *changeLog) add(c store.Change) {
	if c.Kind == store.ChangeResync {
		return
	}
	l.mu.Lock()
	l.got = append(l.got, c)
	l.mu.Unlock()
}

// take returns what was delivered since the last take.
func (l *changeLog) take() []store.Change {
	l.mu.Lock()
	defer l.mu.Unlock()
	got := l.got
	l.got = nil
	return got
}

// testChanges: every write a waiter may wait for tells the store's
// watchers, once, after it is committed; a refused write tells nothing; a
// stopped watcher hears nothing more.
func testChanges(e *env) {
	t, ctx, s := e.t, e.ctx, e.s
	w, ok := s.(store.Watcher)
	if !ok {
		t.Fatalf("%T does not implement store.Watcher", s)
	}
	var log changeLog
	stop := w.Watch(log.add)
	defer stop()
	expect := func(what string, want ...store.Change) {
		t.Helper()
		diff(t, "changes after "+what, want, log.take())
	}
	e.project("p")
	expect("PutProject")

	cl, op := e.begin("p", "c", v1.KindCreate, v1.StateCreating)
	opChanged := store.Change{Kind: store.ChangeOperation, Project: "p", Cluster: "c", Operation: op.ID}
	work := store.Change{Kind: store.ChangeWork, Project: "p", Cluster: "c"}
	expect("BeginOperation", opChanged, work)
	if err := s.BeginOperation(ctx, cl, &store.Operation{ID: newOpID(t), Kind: v1.KindUpdate, Status: v1.OpInProgress}, store.Cond{}); err == nil {
		t.Fatal("a second BeginOperation on a busy cluster was accepted")
	}
	expect("a refused BeginOperation")

	claimed := e.claim("w", time.Hour)
	f := claimed.Lease.Fence()
	expect("ClaimCluster")

	op.Steps = []v1.Step{{Name: "one", State: v1.StepRunning}}
	wantErr(t, "SaveOperation", s.SaveOperation(ctx, op, f, true), nil)
	expect("SaveOperation", opChanged)
	stale := store.Fence{Owner: f.Owner, Token: f.Token - 1}
	wantErr(t, "SaveOperation stale", s.SaveOperation(ctx, op, stale, true), store.ErrLeaseLost)
	expect("a refused SaveOperation")

	in := &store.Instruction{Project: "p", Cluster: "c", Node: "n1",
		Instruction: v1.Instruction{ID: "i1", Kind: v1.InstructionInstall}}
	wantErr(t, "PutInstruction", s.PutInstruction(ctx, in, store.Cond{Fence: &f}), nil)
	expect("PutInstruction", store.Change{Kind: store.ChangeInstruction, Project: "p", Cluster: "c", Node: "n1"})

	wantErr(t, "PutClusterSecret", s.PutClusterSecret(ctx, claimed.Key(), "s1", []byte("x"), store.Cond{Fence: &f}), nil)
	expect("PutClusterSecret", store.Change{Kind: store.ChangeSecret, Project: "p", Cluster: "c", Secret: "s1"})

	_, _, err := s.RequestCancel(ctx, op.ID, v1.CancelRequest{By: "user:alice", Time: e.clock.Now()}, nil)
	wantErr(t, "RequestCancel", err, nil)
	expect("RequestCancel", opChanged)
	_, _, err = s.RequestCancel(ctx, op.ID, v1.CancelRequest{By: "user:bob", Time: e.clock.Now()}, nil)
	wantErr(t, "RequestCancel again", err, nil)
	expect("a RequestCancel that recorded nothing")

	wantErr(t, "ReleaseLease", s.ReleaseLease(ctx, claimed.Key(), f), nil)
	expect("ReleaseLease", work)

	stop()
	claimed = e.claim("w", time.Hour)
	op.Steps = []v1.Step{{Name: "one", State: v1.StepSucceeded}}
	wantErr(t, "SaveOperation after stop", s.SaveOperation(ctx, op, claimed.Lease.Fence(), true), nil)
	expect("SaveOperation once the watcher stopped")
}
