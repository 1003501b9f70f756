package plan_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cenkalti/backoff/v5"
	"github.com/google/go-cmp/cmp"
	"github.com/google/uuid"

	v1 "kiln.dev/kiln/api/v1"
	"kiln.dev/kiln/internal/failure"
	"kiln.dev/kiln/internal/plan"
	"kiln.dev/kiln/internal/provider"
	"kiln.dev/kiln/internal/provider/sim"
	"kiln.dev/kiln/internal/store"
	"kiln.dev/kiln/test/waitfor"
)

// counting is the sim that counts the calls that make things, so a test
// can tell what ran again. notReady makes its machines wait for agents
// (as agentMachines); failDelete names machines it refuses to delete, with
// a terminal provider error.
type counting struct {
	*sim.Sim
	notReady   bool
	failDelete map[string]bool

	mu    sync.Mutex
	calls map[string]int // "EnsureNetwork", "EnsureLoadBalancer", "EnsureMachine c-cp-0", ...
}

func newCounting(s *sim.Sim) *counting { return &counting{Sim: s, calls: map[string]int{}} }

func (c *counting) count(call string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.calls[call]++
}

func (c *counting) snapshot() map[string]int {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := map[string]int{}
	for k, v := range c.calls {
		out[k] = v
	}
	return out
}

func (c *counting) EnsureNetwork(ctx context.Context, cl provider.Cluster) (provider.Network, error) {
	c.count("EnsureNetwork")
	return c.Sim.EnsureNetwork(ctx, cl)
}

func (c *counting) EnsureLoadBalancer(ctx context.Context, cl provider.Cluster) (provider.LoadBalancer, error) {
	c.count("EnsureLoadBalancer")
	return c.Sim.EnsureLoadBalancer(ctx, cl)
}

func (c *counting) EnsureMachine(ctx context.Context, cl provider.Cluster, m provider.MachineSpec) (provider.Machine, error) {
	c.count("EnsureMachine " + m.Name)
	got, err := c.Sim.EnsureMachine(ctx, cl, m)
	got.Ready = got.Ready && !c.notReady
	return got, err
}

func (c *counting) DeleteMachine(ctx context.Context, cl provider.Cluster, name string) error {
	c.count("DeleteMachine " + name)
	if c.failDelete[name] {
		return failure.Terminal(v1.CodeProviderError, "the provider refuses to delete machine %s", name)
	}
	return c.Sim.DeleteMachine(ctx, cl, name)
}

// requestCancel asks to cancel operation id, as the API does.
func (e *env) requestCancel(id string) {
	e.t.Helper()
	if _, _, err := e.st.RequestCancel(e.t.Context(), id, v1.CancelRequest{By: "user:tester", Time: time.Now().UTC()}, nil); err != nil {
		e.t.Fatalf("request cancel: %v", err)
	}
}

// beginRetry starts the retry of the ended operation failed, as the API
// does, and returns it.
func (e *env) beginRetry(failed *store.Operation, state string) *store.Operation {
	e.t.Helper()
	cl := e.cluster(failed.Cluster)
	id, err := uuid.NewV7()
	if err != nil {
		e.t.Fatal(err)
	}
	op := failed.Retry(id.String(), time.Now().UTC())
	cl.Status.ProvisioningState, cl.Status.FailedProvisioningState, cl.Status.CurrentOperation = state, "", op.ID
	if err := e.st.BeginOperation(e.t.Context(), cl, op, store.Cond{IfMatch: cl.ETag}); err != nil {
		e.t.Fatalf("begin retry: %v", err)
	}
	return op
}

// runAsync claims the cluster and runs it until its operation ends.
func (e *env) runAsync(r *plan.Runner) <-chan error {
	errc := make(chan error, 1)
	cl := e.claim("w")
	go func() { errc <- r.Run(e.t.Context(), cl) }()
	return errc
}

func (e *env) eventReasons(name string) []string {
	e.t.Helper()
	evs, _, err := e.st.ListEvents(e.t.Context(), store.Key{Project: project, Name: name}, store.Page{Limit: 1000})
	if err != nil {
		e.t.Fatal(err)
	}
	var out []string
	for _, ev := range evs {
		out = append(out, ev.Reason)
	}
	return out
}

func fastCancel(o *plan.Options) { o.CancelPoll = 5 * time.Millisecond }

// checkCanceled checks that op ended Canceled at step, with the steps
// before it done and those after it Pending, and its cluster Canceled in
// state, not claimable.
func (e *env) checkCanceled(id, step, state string, running bool) {
	e.t.Helper()
	got := e.op(id)
	if got.Status != v1.OpCanceled || got.Error == nil || got.Error.Code != v1.CodeCanceled || got.EndTime == nil {
		e.t.Fatalf("operation %s %+v, want Canceled with a Canceled error and an end", got.Status, got.Error)
	}
	if !strings.Contains(got.Error.Message, "user:tester") || !strings.Contains(got.Error.Message, step) {
		e.t.Errorf("error message %q does not say who canceled at which step", got.Error.Message)
	}
	at := slices.IndexFunc(got.Steps, func(s v1.Step) bool { return s.Name == step })
	if at < 0 {
		e.t.Fatalf("no step %s in %+v", step, got.Steps)
	}
	for i, s := range got.Steps {
		switch {
		case i < at && s.State != v1.StepSucceeded && s.State != v1.StepSkipped:
			e.t.Errorf("step %s before the cancel is %s", s.Name, s.State)
		case i == at:
			if s.State != v1.StepCanceled {
				e.t.Errorf("step %s is %s, want Canceled", s.Name, s.State)
			}
			want := "before it started"
			if running {
				want = "while running"
			}
			if !strings.Contains(s.Message, "canceled by user:tester "+want) {
				e.t.Errorf("step %s message %q, want it to say canceled by user:tester %s", s.Name, s.Message, want)
			}
		case i > at && (s.State != v1.StepPending || s.Attempts != 0):
			e.t.Errorf("step %s after the cancel is %s (attempts %d), want Pending", s.Name, s.State, s.Attempts)
		}
	}
	st := e.cluster(got.Cluster).Status
	if st.ProvisioningState != v1.StateCanceled || st.FailedProvisioningState != state ||
		st.LastError == nil || st.LastError.Code != v1.CodeCanceled || st.LastError.Step != step || !st.LastError.Retryable {
		e.t.Errorf("cluster status %s (was %q), lastError %+v; want Canceled, was %s, at %s", st.ProvisioningState,
			st.FailedProvisioningState, st.LastError, state, step)
	}
	if _, err := e.st.ClaimCluster(e.t.Context(), "other", time.Minute); !errors.Is(err, store.ErrNoWork) {
		e.t.Errorf("claim after the cancel: %v, want ErrNoWork (the lease is released, nothing to do)", err)
	}
	reasons := e.eventReasons(got.Cluster)
	if n := len(reasons); n < 2 || reasons[n-2] != "StepCanceled" || reasons[n-1] != "OperationCanceled" {
		e.t.Errorf("events end with %v, want StepCanceled, OperationCanceled", reasons[max(0, n-3):])
	}
}

// A cancel asked for before a worker claimed the operation: it ends at
// once, before its first step, having made nothing.
func TestCancelBeforeAStepStarts(t *testing.T) {
	e := newEnv(t)
	op := e.begin("c", v1.KindCreate, spec(1, nil))
	e.requestCancel(op.ID)
	e.runOnce(e.runner())
	e.checkCanceled(op.ID, plan.StepValidateDynamic, v1.StateCreating, false)
	if ms := e.machines("c"); len(ms) != 0 {
		t.Errorf("machines %v made by a canceled operation", ms)
	}
}

// Cancel at several steps of a create, an update and a delete, each stopped
// while the step waits (in the provider's step hook); a later change
// continues from there and succeeds.
func TestCancelAtSeveralSteps(t *testing.T) {
	tests := []struct {
		name    string
		kind    string
		step    string
		workers int
		// after is the change that follows the cancel (the API starts
		// a create again after a canceled create).
		after      string
		afterNodes int // nodes once it succeeded; -1: the cluster is gone
	}{
		{"create at ensure-network", v1.KindCreate, plan.StepEnsureNetwork, 2, v1.KindCreate, 3},
		{"create at ensure-control-plane-machines", v1.KindCreate, plan.StepEnsureControlPlaneMachines, 2, v1.KindCreate, 3},
		{"create at install-workers", v1.KindCreate, plan.StepInstallWorkers, 2, v1.KindCreate, 3},
		{"create at wait-nodes-ready", v1.KindCreate, plan.StepWaitNodesReady, 1, v1.KindCreate, 2},
		{"update at ensure-worker-machines", v1.KindUpdate, plan.StepEnsureWorkerMachines, 3, v1.KindUpdate, 4},
		{"update at remove-surplus-machines", v1.KindUpdate, plan.StepRemoveSurplusMachines, 1, v1.KindUpdate, 2},
		{"delete at delete-control-plane-machines", v1.KindDelete, plan.StepDeleteControlPlaneMachines, 2, v1.KindDelete, -1},
		{"delete at delete-network", v1.KindDelete, plan.StepDeleteNetwork, 2, v1.KindUpdate, 3},
	}
	state := map[string]string{v1.KindCreate: v1.StateCreating, v1.KindUpdate: v1.StateUpdating, v1.KindDelete: v1.StateDeleting}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := newEnv(t)
			if tt.kind != v1.KindCreate {
				e.begin("c", v1.KindCreate, spec(2, nil))
				e.runOnce(e.runner())
			}
			op := e.begin("c", tt.kind, spec(tt.workers, map[string]string{sim.LabelHangStep: tt.step}))
			errc := e.runAsync(e.runner(fastCancel))
			waitfor.Cond(t, tt.step+" to run", 10*time.Second, func() (bool, error) { return stepStates(e.op(op.ID))[tt.step] == v1.StepRunning, nil })
			e.requestCancel(op.ID)
			select {
			case err := <-errc:
				if err != nil {
					t.Fatalf("run: %v", err)
				}
			case <-time.After(10 * time.Second):
				t.Fatalf("the run did not stop at the cancel")
			}
			e.checkCanceled(op.ID, tt.step, state[tt.kind], true)

			next := e.begin("c", tt.after, spec(tt.workers, nil))
			e.runOnce(e.runner())
			if got := e.op(next.ID); got.Status != v1.OpSucceeded {
				t.Fatalf("the %s after the cancel: %s %+v", tt.after, got.Status, got.Error)
			}
			if tt.afterNodes < 0 {
				if _, err := e.st.GetCluster(t.Context(), store.Key{Project: project, Name: "c"}); !errors.Is(err, store.ErrNotFound) {
					t.Errorf("cluster after the delete: %v, want it gone", err)
				}
				return
			}
			cl := e.cluster("c")
			if ready := e.counts("c")[2]; cl.Status.ProvisioningState != v1.StateSucceeded || cl.Status.LastError != nil || ready != tt.afterNodes {
				t.Errorf("cluster after the %s: %s, lastError %+v, %d nodes ready; want Succeeded with %d",
					tt.after, cl.Status.ProvisioningState, cl.Status.LastError, ready, tt.afterNodes)
			}
			if ms := e.machines("c"); len(ms) != tt.afterNodes {
				t.Errorf("machines %v, want %d", ms, tt.afterNodes)
			}
		})
	}
}

// Cancel while a step waits for nodes (its poll, not a provider call): the
// step stops there. A retry then runs the operation again from that step:
// nothing before it is made again.
func TestCancelWhileWaitingForNodesThenRetry(t *testing.T) {
	e := newEnv(t)
	c := newCounting(e.sim)
	c.notReady = true
	e.reg["agents"] = c
	sp := spec(2, nil)
	sp.Provider = "agents"
	op := e.begin("c", v1.KindCreate, sp)
	// Nodes would be waited for a minute: the cancel must end the wait.
	errc := e.runAsync(e.runner(fastCancel, func(o *plan.Options) { o.NodeTimeout = time.Minute }))
	waitfor.Cond(t, "wait-nodes-registered to wait", 10*time.Second, func() (bool, error) {
		return stepStates(e.op(op.ID))[plan.StepWaitNodesRegistered] == v1.StepRunning, nil
	})
	e.requestCancel(op.ID)
	select {
	case err := <-errc:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the wait for nodes did not stop at the cancel")
	}
	e.checkCanceled(op.ID, plan.StepWaitNodesRegistered, v1.StateCreating, true)
	if n := attempts(e.op(op.ID))[plan.StepWaitNodesRegistered]; n != 1 {
		t.Errorf("wait-nodes-registered attempts = %d, want 1", n)
	}
	before := c.snapshot()
	if diff := cmp.Diff(map[string]int{"EnsureNetwork": 1, "EnsureLoadBalancer": 1, "EnsureMachine c-cp-0": 1}, before); diff != "" {
		t.Fatalf("provider calls before the retry (-want +got):\n%s", diff)
	}

	retry := e.beginRetry(e.op(op.ID), v1.StateCreating)
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	go fakeAgents(ctx, e, "c")
	e.runOnce(e.runner())
	got := e.op(retry.ID)
	if got.Status != v1.OpSucceeded || got.RetryOf != op.ID {
		t.Fatalf("retry: %s %+v, retryOf %q", got.Status, got.Error, got.RetryOf)
	}
	for _, s := range got.Steps[:slices.IndexFunc(got.Steps, func(s v1.Step) bool { return s.Name == plan.StepWaitNodesRegistered })] {
		if !strings.HasPrefix(s.Message, "done by operation "+op.ID) || s.DoneBy != op.ID || s.Attempts != 1 {
			t.Errorf("kept step %s: attempts %d, done by %q, message %q; want 1 attempt, kept from %s", s.Name, s.Attempts, s.DoneBy, s.Message, op.ID)
		}
	}
	want := map[string]int{"EnsureNetwork": 1, "EnsureLoadBalancer": 1, "EnsureMachine c-cp-0": 1,
		"EnsureMachine c-default-0": 1, "EnsureMachine c-default-1": 1}
	if diff := cmp.Diff(want, c.snapshot()); diff != "" {
		t.Errorf("provider calls after the retry (-want +got): the steps before the canceled one ran again\n%s", diff)
	}
}

// Cancel while a step backs off before its next attempt.
func TestCancelWhileBackingOff(t *testing.T) {
	e := newEnv(t)
	op := e.begin("c", v1.KindCreate, spec(1, map[string]string{sim.LabelFailStep: plan.StepEnsureNetwork, sim.LabelFailTimes: "100"}))
	hour := func(o *plan.Options) {
		o.NewBackOff = func() backoff.BackOff { return backoff.NewConstantBackOff(time.Hour) }
	}
	errc := e.runAsync(e.runner(fastCancel, hour))
	waitfor.Cond(t, "ensure-network to back off", 10*time.Second, func() (bool, error) {
		return strings.Contains(e.op(op.ID).Steps[2].Message, "retrying in 1h"), nil
	})
	e.requestCancel(op.ID)
	select {
	case err := <-errc:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the run did not stop backing off")
	}
	e.checkCanceled(op.ID, plan.StepEnsureNetwork, v1.StateCreating, true)
	if s := e.op(op.ID).Steps[2]; !strings.Contains(s.Message, "attempt 1 failed") || s.Attempts != 1 {
		t.Errorf("canceled step %+v, want its last failure kept in the message", s)
	}
}

// A failed create retried: the new operation starts at the failed step and
// the provider sees none of the earlier calls again.
func TestRetryResumesFromTheFailedStep(t *testing.T) {
	e := newEnv(t)
	c := newCounting(e.sim)
	e.reg["counting"] = c
	sp := spec(2, map[string]string{sim.LabelFailStep: plan.StepEnsureWorkerMachines, sim.LabelFailTimes: "3"})
	sp.Provider = "counting"
	op := e.begin("c", v1.KindCreate, sp)
	threeTries := func(o *plan.Options) { o.MaxAttempts = 3 }
	e.runOnce(e.runner(threeTries))
	failed := e.op(op.ID)
	if failed.Status != v1.OpFailed || stepStates(failed)[plan.StepEnsureWorkerMachines] != v1.StepFailed {
		t.Fatalf("first run: %s, steps %v; want Failed at ensure-worker-machines", failed.Status, stepStates(failed))
	}

	retry := e.beginRetry(failed, v1.StateCreating)
	if diff := cmp.Diff(map[string]int{plan.StepEnsureWorkerMachines: 0, plan.StepInstallWorkers: 0, plan.StepWaitNodesReady: 0, plan.StepInstallAccess: 0, plan.StepInstallNetworkPolicy: 0, plan.StepApplyProfile: 0,
		plan.StepValidateDynamic: 1, plan.StepEnsureClusterPKI: 1, plan.StepEnsureNetwork: 1, plan.StepEnsureLoadBalancer: 1,
		plan.StepEnsureControlPlaneMachines: 1, plan.StepWaitNodesRegistered: 1, plan.StepApproveNodes: 1, plan.StepInstallControlPlane: 1,
	}, attempts(retry)); diff != "" {
		t.Errorf("retry's attempts as begun (-want +got):\n%s", diff)
	}
	e.runOnce(e.runner(threeTries))
	got := e.op(retry.ID)
	if got.Status != v1.OpSucceeded || got.RetryOf != op.ID {
		t.Fatalf("retry: %s %+v retryOf %q", got.Status, got.Error, got.RetryOf)
	}
	if n := attempts(got)[plan.StepEnsureWorkerMachines]; n != 1 {
		t.Errorf("ensure-worker-machines attempts in the retry = %d, want 1", n)
	}
	want := map[string]int{"EnsureNetwork": 1, "EnsureLoadBalancer": 1, "EnsureMachine c-cp-0": 1,
		"EnsureMachine c-default-0": 1, "EnsureMachine c-default-1": 1}
	if diff := cmp.Diff(want, c.snapshot()); diff != "" {
		t.Errorf("provider calls (-want +got): earlier steps ran again\n%s", diff)
	}
	evs, _, err := e.st.ListEvents(t.Context(), store.Key{Project: project, Name: "c"}, store.Page{Limit: 1000})
	if err != nil {
		t.Fatal(err)
	}
	started := ""
	for _, ev := range evs {
		if ev.Reason == "OperationStarted" && ev.Operation == retry.ID {
			started = ev.Message
		}
	}
	if wantMsg := fmt.Sprintf("create operation started: a retry of operation %s, from step %s", op.ID, plan.StepEnsureWorkerMachines); started != wantMsg {
		t.Errorf("retry's start event %q, want %q", started, wantMsg)
	}
	if cl, ready := e.cluster("c"), e.counts("c")[2]; cl.Status.ProvisioningState != v1.StateSucceeded || ready != 3 {
		t.Errorf("cluster after the retry: %s with %d nodes ready", cl.Status.ProvisioningState, ready)
	}
}

// A delete that failed with a terminal provider error is forced: every step
// runs, provider errors are ignored, the records go, and the operation
// lists what may be left behind.
func TestForcedDelete(t *testing.T) {
	e := newEnv(t)
	c := newCounting(e.sim)
	e.reg["counting"] = c
	sp := spec(2, nil)
	sp.Provider = "counting"
	e.begin("c", v1.KindCreate, sp)
	e.runOnce(e.runner())

	sp.Labels = map[string]string{sim.LabelFailTerminal: plan.StepDeleteNetwork}
	del := e.begin("c", v1.KindDelete, sp)
	c.failDelete = map[string]bool{"c-default-1": true}
	e.runOnce(e.runner())
	if got := e.op(del.ID); got.Status != v1.OpFailed || got.Error.Code != v1.CodeProviderError {
		t.Fatalf("delete: %s %+v, want Failed with a ProviderError", got.Status, got.Error)
	}
	if le := e.cluster("c").Status.LastError; le == nil || le.Retryable || le.Step != plan.StepDeleteWorkerMachines {
		t.Fatalf("lastError %+v, want a terminal error at %s", le, plan.StepDeleteWorkerMachines)
	}

	forced := e.beginForcedDelete("c", sp)
	e.runOnce(e.runner())
	got := e.op(forced.ID)
	if got.Status != v1.OpSucceeded {
		t.Fatalf("forced delete: %s %+v", got.Status, got.Error)
	}
	wantSteps := map[string]string{
		plan.StepDeleteWorkerMachines: v1.StepFailed,
		// It deletes what is left of every role: c-default-1 again.
		plan.StepDeleteControlPlaneMachines: v1.StepFailed,
		plan.StepDeleteLoadBalancer:         v1.StepSucceeded,
		plan.StepDeleteNetwork:              v1.StepFailed,
	}
	if diff := cmp.Diff(wantSteps, stepStates(got)); diff != "" {
		t.Errorf("forced delete's steps (-want +got):\n%s", diff)
	}
	for _, s := range got.Steps {
		if s.State == v1.StepFailed && !strings.HasPrefix(s.Message, "forced delete: error ignored: ") {
			t.Errorf("step %s message %q, want it to say the error was ignored", s.Name, s.Message)
		}
	}
	if _, err := e.st.GetCluster(t.Context(), store.Key{Project: project, Name: "c"}); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("cluster after the forced delete: %v, want it gone", err)
	}
	if n := e.nodes("c"); len(n) != 0 {
		t.Errorf("node records after the forced delete: %v", n)
	}
	ms, err := e.sim.ListMachines(t.Context(), provider.Cluster{Project: project, Name: "c"})
	if err != nil || len(ms) != 1 {
		t.Fatalf("machines the provider still has: %v %v, want c-default-1", ms, err)
	}
	wantLeft := []v1.Leftover{
		{Kind: v1.LeftoverMachine, Name: "c-default-1", ID: ms[0].ID, Message: "the provider still reports it"},
		{Kind: v1.LeftoverNetwork, Name: "c", Message: got.Steps[3].Message},
	}
	if diff := cmp.Diff(wantLeft, got.Leftovers); diff != "" {
		t.Errorf("leftovers (-want +got):\n%s", diff)
	}
	evs, _, err := e.st.ListEvents(t.Context(), store.Key{Project: project, Name: "c"}, store.Page{Limit: 1000})
	if err != nil {
		t.Fatal(err)
	}
	last := evs[len(evs)-1]
	if last.Reason != "OperationSucceeded" || !strings.Contains(last.Message, "may be left behind: machine c-default-1 ("+ms[0].ID+"), network c") {
		t.Errorf("last event %s %q, want the forced delete's end listing what may be left", last.Reason, last.Message)
	}
}

// beginForcedDelete starts a forced delete, as DELETE ?force=true does.
func (e *env) beginForcedDelete(name string, sp v1.ClusterSpec) *store.Operation {
	e.t.Helper()
	cl := e.cluster(name)
	id, err := uuid.NewV7()
	if err != nil {
		e.t.Fatal(err)
	}
	op := &store.Operation{ID: id.String(), Project: project, Cluster: name, Kind: v1.KindDelete, Status: v1.OpInProgress,
		StartTime: time.Now().UTC(), Force: true}
	for _, s := range plan.Steps(v1.KindDelete) {
		op.Steps = append(op.Steps, v1.Step{Name: s, State: v1.StepPending})
	}
	cl.Spec = sp
	cl.Status.ProvisioningState, cl.Status.CurrentOperation = v1.StateDeleting, op.ID
	if err := e.st.BeginOperation(e.t.Context(), cl, op, store.Cond{IfMatch: cl.ETag}); err != nil {
		e.t.Fatalf("begin forced delete: %v", err)
	}
	return op
}

// Every step's start and end, every node's state, and a failure are events.
func TestEventsRecordStepsAndNodes(t *testing.T) {
	e := newEnv(t)
	op := e.begin("c", v1.KindCreate, spec(1, nil))
	e.runOnce(e.runner())
	evs, _, err := e.st.ListEvents(t.Context(), store.Key{Project: project, Name: "c"}, store.Page{Limit: 1000})
	if err != nil {
		t.Fatal(err)
	}
	var steps []string
	nodes := map[string]string{}
	for _, ev := range evs {
		if ev.Operation != op.ID {
			t.Errorf("event %s %q has operation %q, want %s", ev.Reason, ev.Message, ev.Operation, op.ID)
		}
		switch ev.Reason {
		case "StepStarted", "StepSucceeded", "StepSkipped":
			steps = append(steps, ev.Reason+" "+strings.Fields(ev.Message)[1])
		case "NodeStateChanged":
			nodes[ev.Node] = ev.Message
		}
	}
	var want []string
	for _, s := range plan.Steps(v1.KindCreate) {
		end := "StepSucceeded "
		if s == plan.StepEnsureClusterPKI || s == plan.StepInstallAccess || s == plan.StepInstallNetworkPolicy || s == plan.StepApplyProfile {
			end = "StepSkipped "
		}
		want = append(want, "StepStarted "+s, end+s)
	}
	if diff := cmp.Diff(want, steps); diff != "" {
		t.Errorf("step events (-want +got):\n%s", diff)
	}
	wantNodes := map[string]string{"c-cp-0": "node c-cp-0 recorded as READY", "c-default-0": "node c-default-0 recorded as READY"}
	if diff := cmp.Diff(wantNodes, nodes); diff != "" {
		t.Errorf("node events (-want +got):\n%s", diff)
	}

	// A scale-down removes a node: an event says so.
	e.begin("c", v1.KindUpdate, spec(0, nil))
	e.runOnce(e.runner())
	if r := e.eventReasons("c"); !slices.Contains(r, "NodeRemoved") {
		t.Errorf("events after a scale-down %v: no NodeRemoved", r)
	}

	// A failure: the step's end and the operation's.
	e.begin("c", v1.KindUpdate, spec(1, map[string]string{sim.LabelFailTerminal: plan.StepEnsureWorkerMachines}))
	e.runOnce(e.runner())
	r := e.eventReasons("c")
	if n := len(r); r[n-2] != "StepFailed" || r[n-1] != "OperationFailed" {
		t.Errorf("events end with %v, want StepFailed, OperationFailed", r[n-3:])
	}
}

// Node transitions the plan makes on agents' nodes (approve, configure,
// ready) are events too.
func TestNodeTransitionEvents(t *testing.T) {
	e := newEnv(t)
	e.reg["agents"] = agentMachines{e.sim}
	sp := spec(0, nil)
	sp.Provider = "agents"
	e.begin("c", v1.KindCreate, sp)
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	go fakeAgents(ctx, e, "c")
	e.runOnce(e.runner())
	evs, _, err := e.st.ListEvents(t.Context(), store.Key{Project: project, Name: "c"}, store.Page{Limit: 1000})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, ev := range evs {
		if ev.Reason == "NodeStateChanged" && ev.Node == "c-cp-0" {
			got = append(got, ev.Message)
		}
	}
	want := []string{"node c-cp-0: DISCOVERED -> APPROVED", "node c-cp-0: APPROVED -> CONFIGURED"}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("node events of c-cp-0 (-want +got):\n%s", diff)
	}
}

// cancelAtCheckpoint is a store in which a cancel is requested just before
// the checkpoint that ends step.
type cancelAtCheckpoint struct {
	store.Store
	step string
}

func (c *cancelAtCheckpoint) SaveOperation(ctx context.Context, op *store.Operation, f store.Fence, progress bool, events ...*store.Event) error {
	if stepStates(op)[c.step] == v1.StepSucceeded {
		if _, _, err := c.Store.RequestCancel(ctx, op.ID, v1.CancelRequest{By: "user:tester", Time: time.Now()}, nil); err != nil {
			return err
		}
	}
	return c.Store.SaveOperation(ctx, op, f, progress, events...)
}

// TestCancelLearntFromTheCheckpoint: a cancel requested while a step runs
// comes back with the checkpoint that ends it (which started the next
// step): the next step is canceled before its work begins, with no read of
// the request between them.
func TestCancelLearntFromTheCheckpoint(t *testing.T) {
	e := newEnv(t)
	op := e.begin("c", v1.KindCreate, spec(1, nil))
	names := plan.Steps(v1.KindCreate)
	r := e.runner(func(o *plan.Options) {
		o.Store = &cancelAtCheckpoint{Store: e.st, step: names[0]}
		o.CancelPoll = time.Hour // the watcher stays out of it
	})
	if err := r.Run(t.Context(), e.claim("test")); err != nil {
		t.Fatal(err)
	}
	e.checkCanceled(op.ID, names[1], v1.StateCreating, false)
	if s := e.op(op.ID).Steps[1]; !strings.Contains(s.Message, "before it started its work") || s.Attempts != 1 {
		t.Errorf("step %s: %q, %d attempts; want canceled before it started its work, its start recorded", s.Name, s.Message, s.Attempts)
	}
}
