package plan_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	v1 "kiln.dev/kiln/api/v1"
	"kiln.dev/kiln/internal/plan"
	"kiln.dev/kiln/internal/provider/sim"
	"kiln.dev/kiln/internal/store"
	"kiln.dev/kiln/test/waitfor"
)

func TestCreateSucceeds(t *testing.T) {
	e := newEnv(t)
	op := e.begin("c", v1.KindCreate, spec(2, nil))
	start := time.Now()
	e.runOnce(e.runner())
	t.Logf("create to Succeeded on sim with no latency: %s", time.Since(start))

	got := e.op(op.ID)
	if got.Status != v1.OpSucceeded || got.Error != nil || got.EndTime == nil {
		t.Errorf("operation = %s, error %v, end %v; want Succeeded with an end time", got.Status, got.Error, got.EndTime)
	}
	names := plan.Steps(v1.KindCreate)
	want := all(names, v1.StepSucceeded)
	want[plan.StepEnsureClusterPKI] = v1.StepSkipped     // the sim's machines run no agent
	want[plan.StepApplyProfile] = v1.StepSkipped         // nor has the cluster a profile
	want[plan.StepInstallNetworkPolicy] = v1.StepSkipped // nor runs kube-router
	want[plan.StepInstallAccess] = v1.StepSkipped        // nor any Kubernetes to bind roles in
	if diff := cmp.Diff(want, stepStates(got)); diff != "" {
		t.Errorf("step states (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(all(names, 1), attempts(got)); diff != "" {
		t.Errorf("step attempts (-want +got):\n%s", diff)
	}
	cl := e.cluster("c")
	wantStatus := v1.ClusterStatus{
		ProvisioningState: v1.StateSucceeded,
		Endpoint:          "c.p.sim.kiln.invalid:6443",
		CurrentOperation:  op.ID,
	}
	ignoreTimes := cmp.FilterPath(func(p cmp.Path) bool {
		n := p.Last().String()
		return n == ".CreatedAt" || n == ".UpdatedAt"
	}, cmp.Ignore())
	if diff := cmp.Diff(wantStatus, cl.Status, ignoreTimes); diff != "" {
		t.Errorf("cluster status (-want +got):\n%s", diff)
	}
	wantNodes := map[string]string{
		"c-cp-0":      "control-plane//READY",
		"c-default-0": "worker/default/READY",
		"c-default-1": "worker/default/READY",
	}
	if diff := cmp.Diff(wantNodes, e.nodes("c")); diff != "" {
		t.Errorf("nodes (-want +got):\n%s", diff)
	}
	if _, err := e.st.ClaimCluster(t.Context(), "other", time.Minute); !errors.Is(err, store.ErrNoWork) {
		t.Errorf("claim after success: %v, want ErrNoWork", err)
	}
}

func TestRetryableFaultIsRetried(t *testing.T) {
	e := newEnv(t)
	op := e.begin("c", v1.KindCreate, spec(1, map[string]string{
		sim.LabelFailStep: plan.StepEnsureNetwork, sim.LabelFailTimes: "2"}))
	e.runOnce(e.runner())

	got := e.op(op.ID)
	if got.Status != v1.OpSucceeded {
		t.Fatalf("operation %s (%v), want Succeeded", got.Status, got.Error)
	}
	if n := attempts(got)[plan.StepEnsureNetwork]; n != 3 {
		t.Errorf("ensure-network attempts = %d, want 3", n)
	}
	evs, _, err := e.st.ListEvents(t.Context(), store.Key{Project: project, Name: "c"}, store.Page{})
	if err != nil {
		t.Fatal(err)
	}
	var reasons []string
	for _, ev := range evs {
		if strings.HasPrefix(ev.Reason, "Operation") || ev.Reason == "StepRetrying" {
			reasons = append(reasons, ev.Reason)
		}
	}
	want := []string{"OperationStarted", "StepRetrying", "StepRetrying", "OperationSucceeded"}
	if diff := cmp.Diff(want, reasons); diff != "" {
		t.Errorf("event reasons (-want +got):\n%s", diff)
	}
	// The step keeps its failed attempts, each with its time and error,
	// and says how it got past them.
	for _, st := range got.Steps {
		if st.Name != plan.StepEnsureNetwork {
			continue
		}
		if len(st.FailedAttempts) != 2 {
			t.Fatalf("failed attempts %+v, want 2", st.FailedAttempts)
		}
		for i, a := range st.FailedAttempts {
			if a.StartTime.IsZero() || a.EndTime.Before(a.StartTime) || !strings.Contains(a.Message, fmt.Sprintf("sim: failure %d of 2 injected", i+1)) {
				t.Errorf("failed attempt %d: %+v", i+1, a)
			}
		}
		if st.FailedAttempts[1].EndTime.After(*st.StartTime) {
			t.Errorf("the last attempt started at %s, before the second failed one ended (%s)", st.StartTime, st.FailedAttempts[1].EndTime)
		}
		if !strings.HasPrefix(st.Message, "succeeded at attempt 3, after 2 failed (the last: ") {
			t.Errorf("step message %q", st.Message)
		}
	}
}

func TestTerminalFaultFailsOperation(t *testing.T) {
	e := newEnv(t)
	op := e.begin("c", v1.KindCreate, spec(1, map[string]string{sim.LabelFailTerminal: plan.StepEnsureControlPlaneMachines}))
	e.runOnce(e.runner())

	got := e.op(op.ID)
	if got.Status != v1.OpFailed || got.Error == nil || got.Error.Code != v1.CodeProviderError {
		t.Fatalf("operation = %s %+v, want Failed with ProviderError", got.Status, got.Error)
	}
	states := stepStates(got)
	if states[plan.StepEnsureLoadBalancer] != v1.StepSucceeded || states[plan.StepEnsureControlPlaneMachines] != v1.StepFailed ||
		states[plan.StepWaitNodesRegistered] != v1.StepPending {
		t.Errorf("step states = %v; want steps before Succeeded, the faulty one Failed, the rest Pending", states)
	}
	cl := e.cluster("c")
	if cl.Status.ProvisioningState != v1.StateFailed || cl.Status.FailedProvisioningState != v1.StateCreating {
		t.Errorf("cluster state %s (failed in %q), want Failed in Creating", cl.Status.ProvisioningState, cl.Status.FailedProvisioningState)
	}
	want := &v1.StatusError{Code: v1.CodeProviderError, Message: got.Error.Message, Step: plan.StepEnsureControlPlaneMachines}
	if diff := cmp.Diff(want, cl.Status.LastError); diff != "" {
		t.Errorf("lastError (-want +got):\n%s", diff)
	}
}

func TestRetriesRunOut(t *testing.T) {
	e := newEnv(t)
	op := e.begin("c", v1.KindCreate, spec(1, map[string]string{sim.LabelFailStep: plan.StepEnsureNetwork, sim.LabelFailTimes: "100"}))
	e.runOnce(e.runner(func(o *plan.Options) { o.MaxAttempts = 3 }))

	got := e.op(op.ID)
	if got.Status != v1.OpFailed || got.Error.Code != v1.CodeProviderError {
		t.Fatalf("operation = %s %+v, want Failed with the last code, ProviderError", got.Status, got.Error)
	}
	if n := attempts(got)[plan.StepEnsureNetwork]; n != 3 {
		t.Errorf("attempts = %d, want 3", n)
	}
	if le := e.cluster("c").Status.LastError; le == nil || !le.Retryable || le.Step != plan.StepEnsureNetwork {
		t.Errorf("lastError = %+v, want retryable at ensure-network", le)
	}
}

func TestUnknownProvider(t *testing.T) {
	e := newEnv(t)
	sp := spec(1, nil)
	sp.Provider = "nimbus"
	op := e.begin("c", v1.KindCreate, sp)
	e.runOnce(e.runner())
	got := e.op(op.ID)
	if got.Status != v1.OpFailed || got.Error.Code != v1.CodeInvalidParameter || got.Error.Target != "spec.provider" {
		t.Fatalf("operation = %s %+v, want Failed InvalidParameter at spec.provider", got.Status, got.Error)
	}
}

// TestResumeAfterInterruption: a run cancelled in the middle of a step (its
// lease lost) writes nothing more; the next claimer resumes at that step and
// does not run the earlier ones again.
func TestResumeAfterInterruption(t *testing.T) {
	e := newEnv(t)
	op := e.begin("c", v1.KindCreate, spec(1, map[string]string{sim.LabelHangStep: plan.StepInstallControlPlane}))
	cl := e.claim("first")
	ctx, cancel := context.WithCancel(t.Context())
	errc := make(chan error, 1)
	go func() { errc <- e.runner().Run(ctx, cl) }()
	waitfor.Cond(t, "install-control-plane to be running", 10*time.Second, func() (bool, error) {
		return stepStates(e.op(op.ID))[plan.StepInstallControlPlane] == v1.StepRunning, nil
	})
	cancel()
	if err := <-errc; !errors.Is(err, context.Canceled) {
		t.Fatalf("interrupted run returned %v, want context.Canceled", err)
	}
	if got := e.op(op.ID); got.Status != v1.OpInProgress {
		t.Fatalf("operation %s after interruption, want InProgress", got.Status)
	}
	if err := e.st.ReleaseLease(t.Context(), cl.Key(), cl.Lease.Fence()); err != nil {
		t.Fatal(err)
	}

	cl2 := e.claim("second")
	// The fault was for the first worker only.
	delete(cl2.Spec.Labels, sim.LabelHangStep)
	if err := e.runner().Run(t.Context(), cl2); err != nil {
		t.Fatalf("resumed run: %v", err)
	}
	got := e.op(op.ID)
	if got.Status != v1.OpSucceeded {
		t.Fatalf("operation %s (%v), want Succeeded", got.Status, got.Error)
	}
	want := all(plan.Steps(v1.KindCreate), 1)
	want[plan.StepInstallControlPlane] = 2
	if diff := cmp.Diff(want, attempts(got)); diff != "" {
		t.Errorf("attempts (-want +got):\n%s", diff)
	}
}

func TestStaleFenceWritesNothing(t *testing.T) {
	e := newEnv(t)
	op := e.begin("c", v1.KindCreate, spec(1, nil))
	stale := e.claim("first")
	if err := e.st.ReleaseLease(t.Context(), stale.Key(), stale.Lease.Fence()); err != nil {
		t.Fatal(err)
	}
	e.claim("second")
	if err := e.runner().Run(t.Context(), stale); !errors.Is(err, store.ErrLeaseLost) {
		t.Fatalf("run with a stale lease = %v, want ErrLeaseLost", err)
	}
	if got := e.op(op.ID); got.Steps[0].Attempts != 0 {
		t.Errorf("a stale run recorded an attempt: %+v", got.Steps[0])
	}
}

func TestDequeueLimit(t *testing.T) {
	e := newEnv(t)
	op := e.begin("c", v1.KindCreate, spec(1, nil))
	for range 5 {
		cl := e.claim("crashy")
		if err := e.st.ReleaseLease(t.Context(), cl.Key(), cl.Lease.Fence()); err != nil {
			t.Fatal(err)
		}
	}
	cl := e.claim("sixth")
	if cl.Dequeues != 6 {
		t.Fatalf("dequeues = %d, want 6", cl.Dequeues)
	}
	if err := e.runner().Run(t.Context(), cl); err != nil {
		t.Fatal(err)
	}
	got := e.op(op.ID)
	if got.Status != v1.OpFailed || got.Error.Code != v1.CodeDequeueLimit {
		t.Fatalf("operation = %s %+v, want Failed with %s", got.Status, got.Error, v1.CodeDequeueLimit)
	}
	if got.Error.Message != "the operation made no progress after 5 attempts" {
		t.Errorf("message = %q", got.Error.Message)
	}
	if le := e.cluster("c").Status.LastError; le == nil || le.Code != v1.CodeDequeueLimit || le.Step != plan.StepValidateDynamic {
		t.Errorf("lastError = %+v", le)
	}
}

func TestScaleUpAndDown(t *testing.T) {
	e := newEnv(t)
	e.begin("c", v1.KindCreate, spec(2, nil))
	e.runOnce(e.runner())

	up := spec(4, nil)
	up.WorkerPools = append(up.WorkerPools, v1.WorkerPool{Name: "gpu", Size: 1})
	op := e.begin("c", v1.KindUpdate, up)
	e.runOnce(e.runner())
	if got := e.op(op.ID); got.Status != v1.OpSucceeded {
		t.Fatalf("scale up: %s %+v", got.Status, got.Error)
	}
	want := map[string]string{
		"c-cp-0":      "control-plane//READY",
		"c-default-0": "worker/default/READY",
		"c-default-1": "worker/default/READY",
		"c-default-2": "worker/default/READY",
		"c-default-3": "worker/default/READY",
		"c-gpu-0":     "worker/gpu/READY",
	}
	if diff := cmp.Diff(want, e.nodes("c")); diff != "" {
		t.Errorf("nodes after scale up (-want +got):\n%s", diff)
	}
	if n := e.counts("c"); n != [3]int{1, 5, 6} {
		t.Errorf("node counts after scale up = %+v", n)
	}

	op = e.begin("c", v1.KindUpdate, spec(1, nil))
	e.runOnce(e.runner())
	if got := e.op(op.ID); got.Status != v1.OpSucceeded {
		t.Fatalf("scale down: %s %+v", got.Status, got.Error)
	}
	want = map[string]string{"c-cp-0": "control-plane//READY", "c-default-0": "worker/default/READY"}
	if diff := cmp.Diff(want, e.nodes("c")); diff != "" {
		t.Errorf("nodes after scale down (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]string{"c-cp-0", "c-default-0"}, e.machines("c")); diff != "" {
		t.Errorf("machines after scale down (-want +got):\n%s", diff)
	}
	if n := e.counts("c"); n != [3]int{1, 1, 2} {
		t.Errorf("node counts after scale down = %+v", n)
	}
}

func TestDeleteRemovesClusterAndNodes(t *testing.T) {
	e := newEnv(t)
	e.begin("c", v1.KindCreate, spec(2, nil))
	e.runOnce(e.runner())
	op := e.begin("c", v1.KindDelete, spec(2, nil))
	e.runOnce(e.runner())

	if got := e.op(op.ID); got.Status != v1.OpSucceeded {
		t.Fatalf("delete: %s %+v", got.Status, got.Error)
	}
	if _, err := e.st.GetCluster(t.Context(), store.Key{Project: project, Name: "c"}); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("get deleted cluster: %v, want ErrNotFound", err)
	}
	if n := e.nodes("c"); len(n) != 0 {
		t.Errorf("nodes after delete = %v", n)
	}
	if m := e.machines("c"); len(m) != 0 {
		t.Errorf("machines after delete = %v", m)
	}
}

// validate-dynamic fails the create before anything is made, with every
// finding in the operation's error details.
func TestValidateDynamicFailsWithEveryFinding(t *testing.T) {
	e := newEnv(t)
	sp := spec(2, nil)
	sp.CloudAccount = "missing"
	sp.ControlPlane.InstanceType = "gigantic"
	sp.WorkerPools[0].Zones = []string{"sim-west-1"}
	op := e.begin("c", v1.KindCreate, sp)
	e.runOnce(e.runner())

	got := e.op(op.ID)
	if got.Status != v1.OpFailed || got.Error == nil {
		t.Fatalf("operation = %s %+v, want Failed", got.Status, got.Error)
	}
	wantDetails := []v1.Error{
		{Code: v1.CodeInvalidParameter, Target: "spec.cloudAccount", Message: `cloud account "missing" does not exist in project "p"; create it first or fix the name`},
		{Code: v1.CodeInvalidParameter, Target: "spec.controlPlane.instanceType", Message: `the sim provider has no instance type "gigantic"; one of small, medium, large`},
		{Code: v1.CodeInvalidParameter, Target: "spec.workerPools[0].zones[0]", Message: `the sim provider has no zone "sim-west-1"; one of sim-east-1, sim-east-2, sim-east-3`},
	}
	if diff := cmp.Diff(wantDetails, got.Error.Details); diff != "" {
		t.Errorf("error details (-want +got):\n%s", diff)
	}
	if got.Error.Code != v1.CodeInvalidParameter || got.Error.Target != "spec.cloudAccount" ||
		!strings.HasPrefix(got.Error.Message, "the cluster has 3 problems; the first: ") {
		t.Errorf("error = %s %s %q", got.Error.Code, got.Error.Target, got.Error.Message)
	}
	if s := got.Steps[0]; s.Name != plan.StepValidateDynamic || s.State != v1.StepFailed || s.Attempts != 1 {
		t.Errorf("first step = %+v, want validate-dynamic Failed after one attempt", s)
	}
	if ms := e.machines("c"); len(ms) != 0 {
		t.Errorf("machines %v were made for a cluster that failed validation", ms)
	}
	if le := e.cluster("c").Status.LastError; le == nil || le.Step != plan.StepValidateDynamic || le.Retryable {
		t.Errorf("lastError = %+v, want a terminal error at validate-dynamic", le)
	}
}

var errDrain = errors.New("the test drains")

// drainAfter is a Drain that says its process drains from its n+1th ask
// on, with errDrain.
func drainAfter(n int) func(*plan.Options) {
	closed := make(chan struct{})
	close(closed)
	asked := 0
	return func(o *plan.Options) {
		o.Drain = plan.Drain{Signal: func(context.Context) <-chan struct{} {
			if asked++; asked <= n {
				return nil
			}
			return closed
		}, Err: errDrain}
	}
}

// TestDrainStopsBetweenSteps: when the Drain the runner was handed says
// its process stops, a run stops before its next step with Drain.Err and
// leaves the operation in progress for the next claimer.
func TestDrainStopsBetweenSteps(t *testing.T) {
	e := newEnv(t)
	op := e.begin("c", v1.KindCreate, spec(1, nil))
	r := e.runner(drainAfter(0))
	if err := r.Run(t.Context(), e.claim("test")); !errors.Is(err, errDrain) {
		t.Fatalf("a draining run returned %v, want %v", err, errDrain)
	}
	got := e.op(op.ID)
	if got.Status != v1.OpInProgress {
		t.Fatalf("operation %s after the drain, want InProgress", got.Status)
	}
	if diff := cmp.Diff(all(plan.Steps(v1.KindCreate), 0), attempts(got)); diff != "" {
		t.Errorf("attempts after the drain (-want +got):\n%s", diff)
	}
}

// TestDrainAfterAStepKeepsItsEnd: a drain noticed when a step ends stops
// the run after that step's checkpoint: the step is not run again.
func TestDrainAfterAStepKeepsItsEnd(t *testing.T) {
	e := newEnv(t)
	op := e.begin("c", v1.KindCreate, spec(1, nil))
	r := e.runner(drainAfter(1)) // asked before the first step, then when it ends
	if err := r.Run(t.Context(), e.claim("test")); !errors.Is(err, errDrain) {
		t.Fatalf("a draining run returned %v, want %v", err, errDrain)
	}
	got := e.op(op.ID)
	names := plan.Steps(v1.KindCreate)
	wantStates, wantAttempts := all(names, v1.StepPending), all(names, 0)
	wantStates[names[0]], wantAttempts[names[0]] = v1.StepSucceeded, 1
	if diff := cmp.Diff(wantStates, stepStates(got)); diff != "" {
		t.Errorf("step states after the drain (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(wantAttempts, attempts(got)); diff != "" {
		t.Errorf("attempts after the drain (-want +got):\n%s", diff)
	}
}

// checkpoints is a store that keeps, for every SaveOperation, the state
// of each step it saved.
type checkpoints struct {
	store.Store
	saved []map[string]string
}

func (c *checkpoints) SaveOperation(ctx context.Context, op *store.Operation, f store.Fence, progress bool, events ...*store.Event) error {
	c.saved = append(c.saved, stepStates(op))
	return c.Store.SaveOperation(ctx, op, f, progress, events...)
}

// TestStepEndStartsTheNext: between two steps the run writes one
// checkpoint, which ends one step and starts the next; only the first
// step starts with a write of its own.
func TestStepEndStartsTheNext(t *testing.T) {
	e := newEnv(t)
	op := e.begin("c", v1.KindCreate, spec(2, nil))
	c := &checkpoints{Store: e.st}
	e.runOnce(e.runner(func(o *plan.Options) { o.Store = c }))
	if got := e.op(op.ID); got.Status != v1.OpSucceeded {
		t.Fatalf("operation %s %+v, want Succeeded", got.Status, got.Error)
	}
	names := plan.Steps(v1.KindCreate)
	// Which save first showed each step Running, and which first showed
	// it done.
	running, ended := map[string]int{}, map[string]int{}
	for i, states := range c.saved {
		for name, state := range states {
			if _, ok := running[name]; !ok && state == v1.StepRunning {
				running[name] = i
			}
			if _, ok := ended[name]; !ok && (state == v1.StepSucceeded || state == v1.StepSkipped) {
				ended[name] = i
			}
		}
	}
	for i, name := range names {
		if _, ok := running[name]; !ok {
			t.Errorf("step %s was never saved Running", name)
			continue
		}
		if i > 0 && running[name] != ended[names[i-1]] {
			t.Errorf("step %s started in save %d, step %s ended in save %d: want one save", name, running[name], names[i-1], ended[names[i-1]])
		}
	}
	// The operation comes with its steps (as the API begins it): the
	// first step started, then one save a step.
	if want := 1 + len(names); len(c.saved) != want {
		t.Errorf("%d checkpoints for a create of %d steps, want %d", len(c.saved), len(names), want)
	}
}
