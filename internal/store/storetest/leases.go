package storetest

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	v1 "kiln.dev/kiln/api/v1"
	"kiln.dev/kiln/internal/store"
)

// testClaimOnlyActive: only Creating, Updating and Deleting clusters are
// claimed; a claim sets owner, token, expiry and dequeues.
func testClaimOnlyActive(e *env) {
	t := e.t
	e.noWork("w")
	e.project("p")
	for _, state := range []string{v1.StateSucceeded, v1.StateFailed, v1.StateCanceled} {
		e.begin("p", "done-"+state, v1.KindCreate, state)
	}
	e.noWork("w")

	_, op := e.begin("p", "busy", v1.KindCreate, v1.StateCreating)
	before := e.get(store.Key{Project: "p", Name: "busy"})
	cl := e.claim("w1", time.Minute)
	if cl.Name != "busy" {
		t.Fatalf("claimed %s, want p/busy", cl.Key())
	}
	want := store.Lease{Owner: "w1", Token: before.Lease.Token + 1, Expiry: e.clock.Now().Add(time.Minute)}
	if cl.Lease.Owner != want.Owner || cl.Lease.Token != want.Token || !cl.Lease.Expiry.Equal(want.Expiry) {
		t.Fatalf("claimed lease %+v, want %+v (is the store using storetest.Now(t) as its clock?)", cl.Lease, want)
	}
	if cl.Dequeues != 1 {
		t.Fatalf("claimed dequeues %d, want 1", cl.Dequeues)
	}
	if cl.Status.CurrentOperation != op.ID || cl.Spec.KubernetesVersion == "" {
		t.Fatalf("claimed cluster lacks its record: %+v", cl)
	}
	diff(t, "stored claimed cluster", cl, e.get(cl.Key()))
	e.noWork("w2")
}

// testClaimOnlyExpired: a held lease is not claimable until it expires;
// each claim increments token and dequeues.
func testClaimOnlyExpired(e *env) {
	t := e.t
	e.project("p")
	e.begin("p", "c", v1.KindCreate, v1.StateCreating)
	first := e.claim("w1", time.Minute)
	e.noWork("w2")
	e.clock.Advance(time.Minute - time.Nanosecond)
	e.noWork("w2")
	e.clock.Advance(2 * time.Nanosecond)
	second := e.claim("w2", time.Minute)
	if second.Lease.Owner != "w2" || second.Lease.Token != first.Lease.Token+1 || second.Dequeues != 2 {
		t.Fatalf("second claim: lease %+v dequeues %d; want owner w2, token %d, dequeues 2",
			second.Lease, second.Dequeues, first.Lease.Token+1)
	}
	e.clock.Advance(time.Hour)
	third := e.claim("w1", time.Minute)
	if third.Lease.Token != first.Lease.Token+2 || third.Dequeues != 3 {
		t.Fatalf("third claim: token %d dequeues %d; want %d, 3", third.Lease.Token, third.Dequeues, first.Lease.Token+2)
	}
}

// testClaimOldestFirst: the cluster whose lease expired first is claimed
// first.
func testClaimOldestFirst(e *env) {
	t := e.t
	e.project("p")
	for _, n := range []string{"a", "b", "c"} {
		e.begin("p", n, v1.KindCreate, v1.StateCreating)
	}
	ttl := map[string]time.Duration{}
	for _, d := range []time.Duration{3 * time.Minute, time.Minute, 2 * time.Minute} {
		cl := e.claim("w", d)
		ttl[cl.Name] = d
	}
	e.clock.Advance(time.Hour)
	var got []time.Duration
	for range 3 {
		got = append(got, ttl[e.claim("w", time.Hour).Name])
	}
	diff(t, "claim order by expiry", []time.Duration{time.Minute, 2 * time.Minute, 3 * time.Minute}, got)
}

// testRenewLease: renewal extends a held lease; a stale fence cannot.
func testRenewLease(e *env) {
	t, ctx, s := e.t, e.ctx, e.s
	e.project("p")
	e.begin("p", "c", v1.KindCreate, v1.StateCreating)
	cl := e.claim("w1", time.Minute)
	k, f := cl.Key(), cl.Lease.Fence()

	e.clock.Advance(50 * time.Second)
	wantErr(t, "RenewLease", s.RenewLease(ctx, k, f, time.Minute), nil)
	if got := e.get(k).Lease.Expiry; !got.Equal(e.clock.Now().Add(time.Minute)) {
		t.Fatalf("renewed expiry %v, want %v", got, e.clock.Now().Add(time.Minute))
	}
	e.clock.Advance(50 * time.Second) // past the first expiry, within the renewed one
	e.noWork("w2")

	wantErr(t, "RenewLease wrong owner", s.RenewLease(ctx, k, store.Fence{Owner: "w2", Token: f.Token}, time.Minute), store.ErrLeaseLost)
	wantErr(t, "RenewLease wrong token", s.RenewLease(ctx, k, store.Fence{Owner: "w1", Token: f.Token - 1}, time.Minute), store.ErrLeaseLost)
	wantErr(t, "RenewLease missing cluster", s.RenewLease(ctx, store.Key{Project: "p", Name: "x"}, f, time.Minute), store.ErrLeaseLost)

	e.clock.Advance(time.Hour)
	stolen := e.claim("w2", time.Minute)
	wantErr(t, "RenewLease after another claim", s.RenewLease(ctx, k, f, time.Minute), store.ErrLeaseLost)
	wantErr(t, "RenewLease by new holder", s.RenewLease(ctx, k, stolen.Lease.Fence(), time.Minute), nil)
}

// testReleaseLease: a released lease is claimable at once, keeps its token,
// and the old fence is stale.
func testReleaseLease(e *env) {
	t, ctx, s := e.t, e.ctx, e.s
	e.project("p")
	e.begin("p", "c", v1.KindCreate, v1.StateCreating)
	cl := e.claim("w1", time.Hour)
	k, f := cl.Key(), cl.Lease.Fence()

	wantErr(t, "ReleaseLease wrong token", s.ReleaseLease(ctx, k, store.Fence{Owner: "w1", Token: f.Token + 1}), store.ErrLeaseLost)
	wantErr(t, "ReleaseLease", s.ReleaseLease(ctx, k, f), nil)
	got := e.get(k)
	if got.Lease.Owner != "" || !got.Lease.Expiry.IsZero() || got.Lease.Token != f.Token {
		t.Fatalf("released lease %+v, want owner empty, expiry zero, token %d", got.Lease, f.Token)
	}
	wantErr(t, "ReleaseLease twice", s.ReleaseLease(ctx, k, f), store.ErrLeaseLost)
	wantErr(t, "RenewLease after release", s.RenewLease(ctx, k, f, time.Hour), store.ErrLeaseLost)
	wantErr(t, "ReleaseLease with an empty fence", s.ReleaseLease(ctx, k, store.Fence{Token: f.Token}), store.ErrLeaseLost)

	again := e.claim("w2", time.Hour) // no clock change needed
	if again.Lease.Token != f.Token+1 {
		t.Fatalf("claim after release: token %d, want %d", again.Lease.Token, f.Token+1)
	}
}

// testFencedWrites: every fenced write is refused with a stale fence and
// changes nothing, and accepted with the current one.
func testFencedWrites(e *env) {
	t, ctx, s := e.t, e.ctx, e.s
	e.project("p")
	e.begin("p", "c", v1.KindCreate, v1.StateCreating)
	old := e.claim("w1", time.Minute)
	e.clock.Advance(2 * time.Minute)
	cur := e.claim("w2", time.Minute)
	k := cur.Key()
	stale, fresh := old.Lease.Fence(), cur.Lease.Fence()
	op := e.getOp(cur.Status.CurrentOperation)

	// PutClusterStatus.
	cl := e.get(k)
	cl.Status.Endpoint = "https://stale:6443"
	wantErr(t, "PutClusterStatus stale", s.PutClusterStatus(ctx, cl, store.Cond{Fence: &stale}), store.ErrLeaseLost)
	if err := s.PutClusterStatus(ctx, cl, store.Cond{}); err == nil {
		t.Fatal("PutClusterStatus without a fence: no error")
	}
	if got := e.get(k); got.Status.Endpoint != "" || got.ETag != cur.ETag {
		t.Fatal("refused PutClusterStatus changed the cluster")
	}
	cl.Status.Endpoint = "https://fresh:6443"
	wantErr(t, "PutClusterStatus stale IfMatch", s.PutClusterStatus(ctx, cl, store.Cond{Fence: &fresh, IfMatch: "x"}), store.ErrPreconditionFailed)
	wantErr(t, "PutClusterStatus", s.PutClusterStatus(ctx, cl, store.Cond{Fence: &fresh, IfMatch: cur.ETag}), nil)
	if cl.ETag == cur.ETag {
		t.Fatal("PutClusterStatus kept the etag")
	}
	if got := e.get(k); got.Status.Endpoint != "https://fresh:6443" || got.ETag != cl.ETag {
		t.Fatalf("after PutClusterStatus: endpoint %q etag %q, want fresh and %q", got.Status.Endpoint, got.ETag, cl.ETag)
	}

	// SaveOperation.
	op.Steps[0].State = v1.StepRunning
	wantErr(t, "SaveOperation stale", s.SaveOperation(ctx, op, stale, true), store.ErrLeaseLost)
	if got := e.getOp(op.ID); got.Steps[0].State != v1.StepPending {
		t.Fatal("refused SaveOperation changed the operation")
	}
	wantErr(t, "SaveOperation", s.SaveOperation(ctx, op, fresh, true), nil)
	diff(t, "saved operation", op, e.getOp(op.ID))

	// PutNode and DeleteNode.
	// A node's events are written with it, or not at all.
	n := &store.Node{Project: "p", Node: v1.Node{Name: "n1", Cluster: "c", State: v1.NodeDiscovered}}
	nodeEvent := func(reason string) *store.Event {
		return &store.Event{Project: "p", Cluster: "c", Event: v1.Event{Type: "Normal", Reason: reason, Node: "n1"}}
	}
	wantErr(t, "PutNode stale", s.PutNode(ctx, n, store.Cond{Fence: &stale}, nodeEvent("NodeStale")), store.ErrLeaseLost)
	if _, err := s.GetNode(ctx, k, "n1"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("refused PutNode wrote the node (err %v)", err)
	}
	wantErr(t, "PutNode", s.PutNode(ctx, n, store.Cond{Fence: &fresh}, nodeEvent("NodeRecorded")), nil)
	n.State = v1.NodeReady
	wantErr(t, "PutNode again", s.PutNode(ctx, n, store.Cond{Fence: &fresh}, nodeEvent("NodeChanged")), nil)
	evs, _, err := s.ListEvents(ctx, k, store.Page{})
	if err != nil {
		t.Fatal(err)
	}
	var reasons []string
	for _, ev := range evs {
		if ev.Node == "n1" {
			reasons = append(reasons, ev.Reason)
		}
	}
	if want := []string{"NodeRecorded", "NodeChanged"}; !slices.Equal(reasons, want) {
		t.Errorf("events of node n1: %v, want %v (none of the refused write)", reasons, want)
	}
	wantErr(t, "DeleteNode stale", s.DeleteNode(ctx, k, "n1", store.Cond{Fence: &stale}), store.ErrLeaseLost)
	wantErr(t, "DeleteNode", s.DeleteNode(ctx, k, "n1", store.Cond{Fence: &fresh}), nil)
	nf := store.Fence{Owner: "w2", Token: fresh.Token}
	wantErr(t, "PutNode on another cluster's fence", s.PutNode(ctx, &store.Node{Project: "p",
		Node: v1.Node{Name: "n2", Cluster: "nope"}}, store.Cond{Fence: &nf}), store.ErrLeaseLost)

	// FinishOperation.
	op.Status = v1.OpSucceeded
	cl.Status.ProvisioningState = v1.StateSucceeded
	wantErr(t, "FinishOperation stale", s.FinishOperation(ctx, cl, op, stale, false), store.ErrLeaseLost)
	if got := e.getOp(op.ID); got.Status != v1.OpInProgress || got.EndTime != nil {
		t.Fatalf("refused FinishOperation changed the operation: %+v", got)
	}
	if got := e.get(k); got.Status.ProvisioningState != v1.StateCreating || got.Lease.Owner != "w2" {
		t.Fatalf("refused FinishOperation changed the cluster: %+v", got)
	}

	// A released lease fences nothing.
	wantErr(t, "ReleaseLease", s.ReleaseLease(ctx, k, fresh), nil)
	op.Status = v1.OpInProgress
	wantErr(t, "SaveOperation after release", s.SaveOperation(ctx, op, fresh, false), store.ErrLeaseLost)
	wantErr(t, "PutClusterStatus after release", s.PutClusterStatus(ctx, cl, store.Cond{Fence: &fresh}), store.ErrLeaseLost)
}

// testSaveOperationProgress: claims count dequeues; progress resets them.
func testSaveOperationProgress(e *env) {
	t, ctx, s := e.t, e.ctx, e.s
	e.project("p")
	_, op := e.begin("p", "c", v1.KindCreate, v1.StateCreating)
	cl := e.claim("w", time.Minute)
	wantErr(t, "ReleaseLease", s.ReleaseLease(ctx, cl.Key(), cl.Lease.Fence()), nil)
	cl = e.claim("w", time.Minute)
	if cl.Dequeues != 2 {
		t.Fatalf("dequeues %d after two claims, want 2", cl.Dequeues)
	}
	f := cl.Lease.Fence()

	now := e.clock.Now()
	op.Steps[0] = v1.Step{Name: "validate-dynamic", State: v1.StepRunning, Attempts: 1, StartTime: &now, Message: "checking"}
	wantErr(t, "SaveOperation", s.SaveOperation(ctx, op, f, false), nil)
	if got := e.get(cl.Key()); got.Dequeues != 2 {
		t.Fatalf("dequeues %d after SaveOperation without progress, want 2", got.Dequeues)
	}
	diff(t, "saved operation", op, e.getOp(op.ID))

	op.Steps[0].State = v1.StepSucceeded
	op.Steps[0].EndTime = &now
	op.Steps = append(op.Steps, v1.Step{Name: "ensure-network", State: v1.StepPending})
	wantErr(t, "SaveOperation progress", s.SaveOperation(ctx, op, f, true), nil)
	if got := e.get(cl.Key()); got.Dequeues != 0 {
		t.Fatalf("dequeues %d after progress, want 0", got.Dequeues)
	}
	diff(t, "saved operation", op, e.getOp(op.ID))

	// The lease expires and is claimed again, without a release: the new
	// lease's first progress resets the count again, however the old
	// one's was.
	e.clock.Advance(2 * time.Minute)
	again := e.claim("w", time.Minute)
	if again.Dequeues != 1 || again.Lease.Token == cl.Lease.Token {
		t.Fatalf("claim after expiry: dequeues %d token %d (was %d), want 1 and a new token", again.Dequeues, again.Lease.Token, cl.Lease.Token)
	}
	stepEvent := func(reason string) *store.Event {
		return &store.Event{Project: "p", Cluster: "c", Event: v1.Event{Type: "Normal", Reason: reason, Operation: op.ID}}
	}
	wantErr(t, "SaveOperation progress with the expired lease", s.SaveOperation(ctx, op, f, true, stepEvent("Stale")), store.ErrLeaseLost)
	if got := e.get(cl.Key()); got.Dequeues != 1 {
		t.Fatalf("dequeues %d after a refused progress, want 1", got.Dequeues)
	}
	f = again.Lease.Fence()
	// A checkpoint's events commit with it: the first progress of the new
	// lease (a reset of the count) and a later one (none) each append
	// theirs; the refused one above appended nothing.
	for i := range 2 {
		wantErr(t, "SaveOperation progress under the new lease", s.SaveOperation(ctx, op, f, true, stepEvent(fmt.Sprintf("Saved%d", i))), nil)
		if got := e.get(cl.Key()); got.Dequeues != 0 {
			t.Fatalf("dequeues %d after progress under the new lease, want 0", got.Dequeues)
		}
	}
	wantErr(t, "SaveOperation without progress, with events", s.SaveOperation(ctx, op, f, false, stepEvent("Saved2"), stepEvent("Saved3")), nil)
	evs, _, err := s.ListEvents(ctx, cl.Key(), store.Page{})
	if err != nil {
		t.Fatal(err)
	}
	var reasons []string
	for _, ev := range evs {
		if strings.HasPrefix(ev.Reason, "Saved") || ev.Reason == "Stale" {
			reasons = append(reasons, ev.Reason)
			if ev.ClusterUID != op.ClusterUID || ev.Operation != op.ID {
				t.Errorf("event %s: cluster uid %q operation %q, want %q and %q", ev.Reason, ev.ClusterUID, ev.Operation, op.ClusterUID, op.ID)
			}
		}
	}
	if want := []string{"Saved0", "Saved1", "Saved2", "Saved3"}; !slices.Equal(reasons, want) {
		t.Errorf("events of the checkpoints: %v, want %v", reasons, want)
	}

	if status, err := s.OperationStatus(ctx, op.ID); err != nil || status != v1.OpInProgress {
		t.Errorf("OperationStatus = %q, %v; want %s", status, err, v1.OpInProgress)
	}
	if _, err := s.OperationStatus(ctx, "no-such-operation"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("OperationStatus of an unknown operation: %v, want ErrNotFound", err)
	}

	op.Status = v1.OpSucceeded
	if err := s.SaveOperation(ctx, op, f, true); err == nil {
		t.Fatal("SaveOperation with a terminal status: no error (only FinishOperation ends an operation)")
	}
	if got := e.getOp(op.ID); got.Status != v1.OpInProgress {
		t.Fatalf("operation status %s after refused SaveOperation", got.Status)
	}
}

// testSaveOperationRefused: a refused SaveOperation, with or without
// progress, changes neither the operation nor the dequeue count, and says
// why: the lease lost (which wins) or an unknown operation.
func testSaveOperationRefused(e *env) {
	t, ctx, s := e.t, e.ctx, e.s
	e.project("p")
	_, op := e.begin("p", "c", v1.KindCreate, v1.StateCreating)
	old := e.claim("w1", time.Minute)
	e.clock.Advance(2 * time.Minute)
	cur := e.claim("w2", time.Minute)
	k, stale, fresh := cur.Key(), old.Lease.Fence(), cur.Lease.Fence()
	if cur.Dequeues != 2 {
		t.Fatalf("dequeues %d after two claims, want 2", cur.Dequeues)
	}
	unknown := *op
	unknown.ID = "00000000-0000-7000-8000-000000000000"
	for _, progress := range []bool{false, true} {
		op.Steps[0].State = v1.StepRunning
		wantErr(t, fmt.Sprintf("SaveOperation stale (progress %v)", progress), s.SaveOperation(ctx, op, stale, progress), store.ErrLeaseLost)
		wantErr(t, fmt.Sprintf("SaveOperation unknown (progress %v)", progress), s.SaveOperation(ctx, &unknown, fresh, progress), store.ErrNotFound)
		wantErr(t, fmt.Sprintf("SaveOperation unknown and stale (progress %v)", progress), s.SaveOperation(ctx, &unknown, stale, progress), store.ErrLeaseLost)
		other := store.Operation{ID: op.ID, Project: "p", Cluster: "nope", Kind: op.Kind, Status: op.Status}
		wantErr(t, fmt.Sprintf("SaveOperation on a missing cluster (progress %v)", progress), s.SaveOperation(ctx, &other, fresh, progress), store.ErrLeaseLost)
		if got := e.getOp(op.ID); got.Steps[0].State != v1.StepPending {
			t.Fatalf("refused SaveOperation (progress %v) changed the operation", progress)
		}
		if got := e.get(k); got.Dequeues != 2 {
			t.Fatalf("dequeues %d after refused SaveOperation (progress %v), want 2", got.Dequeues, progress)
		}
	}
	wantErr(t, "SaveOperation progress", s.SaveOperation(ctx, op, fresh, true), nil)
	if got := e.get(k); got.Dequeues != 0 {
		t.Fatalf("dequeues %d after progress, want 0", got.Dequeues)
	}
	diff(t, "saved operation", op, e.getOp(op.ID))
	op.Steps[0].State = v1.StepSucceeded
	wantErr(t, "SaveOperation progress again", s.SaveOperation(ctx, op, fresh, true), nil)
	diff(t, "saved operation", op, e.getOp(op.ID))
	wantErr(t, "SaveOperation stale once settled", s.SaveOperation(ctx, op, stale, true), store.ErrLeaseLost)
}

// testCheckpointsRaceTakeover: checkpoints racing a takeover either land
// before the new claim or are refused. What the new holder reads once its
// claim returns is the old holder's last accepted checkpoint, and nothing
// lands after it.
func testCheckpointsRaceTakeover(e *env) {
	t, ctx, s := e.t, e.ctx, e.s
	const rounds = 20
	e.project("p")
	_, op := e.begin("p", "c", v1.KindCreate, v1.StateCreating)
	last := ""
	for round := range rounds {
		old := e.claim(fmt.Sprintf("old-%d", round), time.Second)
		e.clock.Advance(2 * time.Second) // expired: the next claim takes it over
		var (
			wg      sync.WaitGroup
			started = make(chan struct{})
			werr    error
		)
		wg.Go(func() {
			var once sync.Once
			signal := func() { once.Do(func() { close(started) }) }
			defer signal()
			mine := *op
			mine.Steps = slices.Clone(op.Steps)
			for i := 0; ; i++ {
				mine.Steps[0].Message = fmt.Sprintf("round %d checkpoint %d", round, i)
				err := s.SaveOperation(ctx, &mine, old.Lease.Fence(), i%2 == 0)
				if errors.Is(err, store.ErrLeaseLost) {
					return
				}
				if err != nil {
					werr = err
					return
				}
				last = mine.Steps[0].Message
				signal() // the takeover races the next ones
			}
		})
		<-started
		// A claim passes over a row a checkpoint holds locked (SKIP LOCKED
		// on PostgreSQL) and finds no work: claim again, as workers poll.
		var cur *store.Cluster
		for deadline := time.Now().Add(10 * time.Second); cur == nil; {
			cl, err := s.ClaimCluster(ctx, fmt.Sprintf("new-%d", round), time.Minute)
			switch {
			case err == nil:
				cur = cl
			case !errors.Is(err, store.ErrNoWork) || time.Now().After(deadline):
				t.Fatalf("round %d: ClaimCluster: %v", round, err)
			}
		}
		seen := e.getOp(op.ID).Steps[0].Message
		wg.Wait()
		if werr != nil {
			t.Fatalf("round %d: SaveOperation: %v", round, werr)
		}
		if seen != last {
			t.Fatalf("round %d: after the takeover the operation says %q; the old holder's last accepted checkpoint was %q", round, seen, last)
		}
		if got := e.getOp(op.ID).Steps[0].Message; got != last {
			t.Fatalf("round %d: checkpoint %q landed after the takeover (last accepted %q)", round, got, last)
		}
		wantErr(t, "ReleaseLease", s.ReleaseLease(ctx, cur.Key(), cur.Lease.Fence()), nil)
	}
}

// testFinishOperation: the operation ends, the status is written and the
// lease released, together.
func testFinishOperation(e *env) {
	t, ctx, s := e.t, e.ctx, e.s
	e.project("p")
	_, op := e.begin("p", "c", v1.KindCreate, v1.StateCreating)
	cl := e.claim("w", time.Hour)
	f := cl.Lease.Fence()

	if err := s.FinishOperation(ctx, cl, op, f, false); err == nil {
		t.Fatal("FinishOperation with an InProgress operation: no error")
	}

	e.clock.Advance(time.Minute)
	op.Status = v1.OpSucceeded
	op.Steps[0].State = v1.StepSucceeded
	cl.Status.ProvisioningState = v1.StateSucceeded
	cl.Status.Endpoint = "https://10.0.0.1:6443"
	end := &store.Event{Project: "p", Cluster: "c", Event: v1.Event{Type: "Normal", Reason: "OperationSucceeded", Operation: op.ID}}
	wantErr(t, "FinishOperation stale with an event", s.FinishOperation(ctx, cl, op, store.Fence{Owner: "w", Token: f.Token - 1}, false, end), store.ErrLeaseLost)
	if evs := e.events(cl.Key()); len(evs) != 0 {
		t.Fatalf("a refused FinishOperation appended events: %+v", evs)
	}
	wantErr(t, "FinishOperation", s.FinishOperation(ctx, cl, op, f, false, end), nil)
	if evs := e.events(cl.Key()); len(evs) != 1 || evs[0].Reason != "OperationSucceeded" || evs[0].ID != end.ID {
		t.Fatalf("events after FinishOperation: %+v, want the one end event (id %d)", evs, end.ID)
	}

	got := e.getOp(op.ID)
	if got.Status != v1.OpSucceeded || got.EndTime == nil || !got.EndTime.Equal(e.clock.Now()) {
		t.Fatalf("finished operation: status %s end %v; want Succeeded at %v", got.Status, got.EndTime, e.clock.Now())
	}
	stored := e.get(cl.Key())
	if stored.Status.ProvisioningState != v1.StateSucceeded || stored.Status.Endpoint != cl.Status.Endpoint || stored.ETag != cl.ETag {
		t.Fatalf("finished cluster: %+v, want Succeeded with endpoint and etag %s", stored.Status, cl.ETag)
	}
	if stored.Lease.Owner != "" || !stored.Lease.Expiry.IsZero() || stored.Lease.Token != f.Token {
		t.Fatalf("finished cluster lease %+v, want released with token %d", stored.Lease, f.Token)
	}
	e.noWork("w")
	wantErr(t, "FinishOperation twice", s.FinishOperation(ctx, cl, op, f, false), store.ErrLeaseLost)

	// A Failed operation leaves a Failed cluster, also not claimable.
	cl2, op2 := e.begin("p", "c2", v1.KindCreate, v1.StateCreating)
	c2 := e.claim("w", time.Hour)
	op2.Status = v1.OpFailed
	op2.Error = &v1.Error{Code: v1.CodeProviderError, Message: "boom"}
	cl2.Status.ProvisioningState = v1.StateFailed
	cl2.Status.FailedProvisioningState = v1.StateCreating
	cl2.Status.LastError = &v1.StatusError{Code: v1.CodeProviderError, Message: "boom", Step: "ensure-network"}
	wantErr(t, "FinishOperation failed", s.FinishOperation(ctx, cl2, op2, c2.Lease.Fence(), false), nil)
	diff(t, "failed cluster status", cl2.Status, e.get(cl2.Key()).Status)
	diff(t, "failed operation", op2, e.getOp(op2.ID))
	e.noWork("w")
}

// testFinishOperationDelete: a delete removes the cluster and its nodes,
// keeps the operation, and a cluster created again under the name never
// repeats a lease token.
func testFinishOperationDelete(e *env) {
	t, ctx, s := e.t, e.ctx, e.s
	e.project("p")
	e.begin("p", "c", v1.KindCreate, v1.StateDeleting)
	e.begin("p", "keep", v1.KindCreate, v1.StateSucceeded)
	for _, c := range []string{"c", "keep"} {
		for i := range 3 {
			n := &store.Node{Project: "p", Node: v1.Node{Name: fmt.Sprintf("n%d", i), Cluster: c}}
			wantErr(t, "PutNode", s.PutNode(ctx, n, store.Cond{}), nil)
		}
	}
	cl := e.claim("w", time.Hour)
	op := e.getOp(cl.Status.CurrentOperation)
	op.Status = v1.OpSucceeded
	wantErr(t, "FinishOperation delete", s.FinishOperation(ctx, nil, op, cl.Lease.Fence(), true), nil)

	if _, err := s.GetCluster(ctx, cl.Key()); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("deleted cluster: %v, want ErrNotFound", err)
	}
	if _, err := s.GetNode(ctx, cl.Key(), "n0"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("node of deleted cluster: %v, want ErrNotFound", err)
	}
	nodes, _, err := s.ListNodes(ctx, cl.Key(), store.Page{})
	if err != nil || len(nodes) != 0 {
		t.Fatalf("ListNodes of deleted cluster: %d nodes, %v", len(nodes), err)
	}
	kept, _, err := s.ListNodes(ctx, store.Key{Project: "p", Name: "keep"}, store.Page{})
	if err != nil || len(kept) != 3 {
		t.Fatalf("ListNodes of another cluster: %d nodes, %v; want 3", len(kept), err)
	}
	if got := e.getOp(op.ID); got.Status != v1.OpSucceeded {
		t.Fatalf("delete operation status %s, want Succeeded", got.Status)
	}
	ops, _, err := s.ListOperations(ctx, cl.Key(), store.Page{})
	if err != nil || len(ops) != 1 {
		t.Fatalf("ListOperations of deleted cluster: %d, %v; want its 1 operation", len(ops), err)
	}
	e.noWork("w")

	e.begin("p", "c", v1.KindCreate, v1.StateCreating)
	again := e.claim("w", time.Hour)
	if again.Lease.Token <= cl.Lease.Token {
		t.Fatalf("recreated cluster claimed with token %d, not above the deleted one's %d", again.Lease.Token, cl.Lease.Token)
	}
}

// testConcurrentClaims: many claimers racing never win the same cluster;
// with a long ttl each cluster is claimed exactly once.
func testConcurrentClaims(e *env) {
	t := e.t
	const clusters, workers = 40, 8
	e.project("p")
	for i := range clusters {
		e.begin("p", fmt.Sprintf("c%02d", i), v1.KindCreate, v1.StateCreating)
	}
	var (
		mu     sync.Mutex
		claims = map[string][]string{}
		wg     sync.WaitGroup
		errs   = make(chan error, workers)
	)
	for w := range workers {
		owner := fmt.Sprintf("w%d", w)
		wg.Go(func() {
			for {
				cl, err := e.s.ClaimCluster(e.ctx, owner, time.Hour)
				if errors.Is(err, store.ErrNoWork) {
					return
				}
				if err != nil {
					errs <- fmt.Errorf("%s: %w", owner, err)
					return
				}
				if cl.Lease.Owner != owner {
					errs <- fmt.Errorf("%s claimed %s but the lease says %s", owner, cl.Key(), cl.Lease.Owner)
					return
				}
				mu.Lock()
				claims[cl.Name] = append(claims[cl.Name], owner)
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if len(claims) != clusters {
		t.Errorf("%d clusters claimed, want %d", len(claims), clusters)
	}
	for name, owners := range claims {
		if len(owners) != 1 {
			t.Errorf("cluster %s claimed %d times: %v", name, len(owners), owners)
		}
	}
	e.noWork("late")
}

// events lists all of a cluster's events.
func (e *env) events(k store.Key) []*store.Event {
	e.t.Helper()
	evs, _, err := e.s.ListEvents(e.ctx, k, store.Page{Limit: 1000})
	if err != nil {
		e.t.Fatalf("list events: %v", err)
	}
	return evs
}

// testUnfencedStatus: without a fence, PutClusterStatus needs the current
// etag and a cluster no operation runs on (the health checker's writes).
func testUnfencedStatus(e *env) {
	t, ctx, s := e.t, e.ctx, e.s
	e.project("p")
	e.begin("p", "c", v1.KindCreate, v1.StateCreating)
	leased := e.claim("w1", time.Minute)
	k := leased.Key()

	cl := e.get(k)
	cl.Status.Endpoint = "https://unfenced:6443"
	wantErr(t, "unfenced PutClusterStatus of a Creating cluster", s.PutClusterStatus(ctx, cl, store.Cond{IfMatch: cl.ETag}), store.ErrPreconditionFailed)
	if got := e.get(k); got.Status.Endpoint != "" {
		t.Fatal("a refused unfenced PutClusterStatus changed the cluster")
	}

	// The operation ends: the worker writes Succeeded with its fence.
	fence := leased.Lease.Fence()
	cl = e.get(k)
	cl.Status.ProvisioningState, cl.Status.CurrentOperation = v1.StateSucceeded, ""
	wantErr(t, "fenced PutClusterStatus", s.PutClusterStatus(ctx, cl, store.Cond{Fence: &fence, IfMatch: cl.ETag}), nil)

	cl = e.get(k)
	cl.Status.Conditions = []v1.Condition{{Type: "NodesHealthy", Status: "False", Reason: "TooManyUnhealthy", Message: "m"}}
	wantErr(t, "unfenced PutClusterStatus with a stale etag", s.PutClusterStatus(ctx, cl, store.Cond{IfMatch: "stale"}), store.ErrPreconditionFailed)
	if err := s.PutClusterStatus(ctx, cl, store.Cond{}); err == nil {
		t.Fatal("PutClusterStatus with neither a fence nor an etag: no error")
	}
	before := cl.ETag
	wantErr(t, "unfenced PutClusterStatus", s.PutClusterStatus(ctx, cl, store.Cond{IfMatch: cl.ETag}), nil)
	got := e.get(k)
	if got.ETag == before || got.ETag != cl.ETag || len(got.Status.Conditions) != 1 || got.Status.Conditions[0].Reason != "TooManyUnhealthy" {
		t.Fatalf("after an unfenced PutClusterStatus: etag %q (was %q), conditions %+v", got.ETag, before, got.Status.Conditions)
	}
	gone := &store.Cluster{Project: "p", Name: "nope"}
	wantErr(t, "unfenced PutClusterStatus of a missing cluster", s.PutClusterStatus(ctx, gone, store.Cond{IfMatch: "x"}), store.ErrNotFound)
}
