package plan_test

import (
	"context"
	"maps"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	v1 "kiln.dev/kiln/api/v1"
	"kiln.dev/kiln/internal/plan"
	"kiln.dev/kiln/internal/provider"
	"kiln.dev/kiln/internal/store"
)

// stoppingMachines is agentMachines that reports stopped machines
// (plan.StopReporter), as the local provider reports agents that exited.
type stoppingMachines struct {
	agentMachines
	mu      sync.Mutex
	stopped map[string]provider.StoppedMachine
	// again: a machine started again stops again at once, as an agent
	// that exits at once does; otherwise starting it clears its stop.
	again  bool
	starts map[string]int // EnsureMachine calls by machine
}

func newStopping(a agentMachines, again bool) *stoppingMachines {
	return &stoppingMachines{agentMachines: a, again: again,
		stopped: map[string]provider.StoppedMachine{}, starts: map[string]int{}}
}

func (s *stoppingMachines) EnsureMachine(ctx context.Context, c provider.Cluster, m provider.MachineSpec) (provider.Machine, error) {
	s.mu.Lock()
	s.starts[m.Name]++
	if !s.again {
		delete(s.stopped, m.Name)
	}
	s.mu.Unlock()
	return s.agentMachines.EnsureMachine(ctx, c, m)
}

func (s *stoppingMachines) StoppedMachines(context.Context, provider.Cluster) ([]provider.StoppedMachine, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Collect(maps.Values(s.stopped)), nil
}

func (s *stoppingMachines) stop(m provider.StoppedMachine) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.stopped[m.Name] = m
}

func (s *stoppingMachines) isStopped(name string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	_, ok := s.stopped[name]
	return ok
}

func (s *stoppingMachines) startsOf(name string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.starts[name]
}

var _ plan.StopReporter = (*stoppingMachines)(nil)

// exited is how the local provider reports an agent that exited with
// status 3 after writing why.
var exited = provider.StoppedMachine{
	Name:    "c-cp-0",
	Reason:  "its process (pid 4242) exited with status 3",
	At:      time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC),
	LogTail: []string{"kiln-agent: starting", "join: read credentials: open credentials.json: no such file or directory"},
}

// TestMachineThatStopsFailsTheWait: a machine whose agent exits at once
// (issue 19: the step waited for it until it was canceled) fails
// wait-nodes-registered with MachineStopped, well within the step's
// timeout, its message and an event saying the exit status and the last
// lines of the agent's log; each attempt starts the machine again first.
func TestMachineThatStopsFailsTheWait(t *testing.T) {
	e := newEnv(t)
	p := newStopping(agentMachines{e.sim}, true)
	p.stop(exited)
	e.reg["agents"] = p
	sp := spec(1, nil)
	sp.Provider = "agents"
	op := e.begin("c", v1.KindCreate, sp)
	const timeout = 10 * time.Minute
	began := time.Now()
	e.runOnce(e.runner(func(o *plan.Options) { o.NodeTimeout = timeout; o.MaxAttempts = 2 }))
	if took := time.Since(began); took > timeout/10 {
		t.Errorf("the operation took %s; the step's timeout is %s", took, timeout)
	}

	got := e.op(op.ID)
	if got.Status != v1.OpFailed || got.Error == nil || got.Error.Code != v1.CodeMachineStopped {
		t.Fatalf("operation %s %+v, want Failed with %s", got.Status, got.Error, v1.CodeMachineStopped)
	}
	le := e.cluster("c").Status.LastError
	if le.Step != plan.StepWaitNodesRegistered || !le.Retryable {
		t.Errorf("lastError = %+v, want retryable at %s", le, plan.StepWaitNodesRegistered)
	}
	for _, s := range got.Steps {
		if s.Name != plan.StepWaitNodesRegistered {
			continue
		}
		if s.State != v1.StepFailed || s.Attempts != 2 {
			t.Errorf("step %s: %s after %d attempts, want Failed after 2", s.Name, s.State, s.Attempts)
		}
	}
	for _, want := range []string{"c-cp-0", "exited with status 3", "2026-01-02T03:04:05Z", "no such file or directory"} {
		if !strings.Contains(got.Error.Message, want) {
			t.Errorf("the operation's error %q does not say %q", got.Error.Message, want)
		}
	}
	// Created once, then started again by each attempt of the wait.
	if n := p.startsOf("c-cp-0"); n != 3 {
		t.Errorf("c-cp-0 started %d times, want 3", n)
	}
	reasons := map[string]int{}
	for _, ev := range e.events("c") {
		if ev.Node != "c-cp-0" || ev.Type != "Warning" {
			continue
		}
		reasons[ev.Reason]++
		if !strings.Contains(ev.Message, "exited with status 3") || !strings.Contains(ev.Message, "no such file or directory") {
			t.Errorf("event %s says %q, without the exit status and the log's last lines", ev.Reason, ev.Message)
		}
	}
	if reasons["MachineStopped"] != 2 || reasons["MachineRestarted"] != 2 {
		t.Errorf("events about c-cp-0: %v, want MachineRestarted and MachineStopped at each of 2 attempts", reasons)
	}
}

// TestMachineThatStopsLaterFailsTheWait: a machine whose agent registered
// and then stopped while its node was to install fails the install step
// with MachineStopped, not after the step's timeout.
func TestMachineThatStopsLaterFailsTheWait(t *testing.T) {
	e := newEnv(t)
	p := newStopping(agentMachines{e.sim}, false)
	e.reg["agents"] = p
	sp := spec(0, nil)
	sp.Provider = "agents"
	op := e.begin("c", v1.KindCreate, sp)
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	// c-cp-0 registers, and stops once it is configured (told to install;
	// the sim's machines install nothing, so the plan waits for READY).
	go playAgents(ctx, e, "c", func(n *store.Node) {
		if n.Name == "c-cp-0" {
			p.stop(exited)
		}
	})
	e.runOnce(e.runner(func(o *plan.Options) { o.NodeTimeout = 10 * time.Minute; o.MaxAttempts = 1 }))

	got := e.op(op.ID)
	if got.Status != v1.OpFailed || got.Error == nil || got.Error.Code != v1.CodeMachineStopped {
		t.Fatalf("operation %s %+v, want Failed with %s", got.Status, got.Error, v1.CodeMachineStopped)
	}
	if le := e.cluster("c").Status.LastError; le.Step != plan.StepInstallControlPlane {
		t.Errorf("lastError = %+v, want at %s", le, plan.StepInstallControlPlane)
	}
	if !slices.Contains(e.eventReasons("c"), "MachineStopped") {
		t.Errorf("events %v, want MachineStopped", e.eventReasons("c"))
	}
}

// stopOnEnsure stops a machine when the plan ensures another.
type stopOnEnsure struct {
	*stoppingMachines
	when  string
	stops provider.StoppedMachine
}

func (s stopOnEnsure) EnsureMachine(ctx context.Context, c provider.Cluster, m provider.MachineSpec) (provider.Machine, error) {
	got, err := s.stoppingMachines.EnsureMachine(ctx, c, m)
	if m.Name == s.when {
		s.stop(s.stops)
	}
	return got, err
}

// TestWorkerWaitStartsTheControlPlaneAgain: the control plane's machine
// stops during a scale-up (its container killed) once the scale-up made
// its new worker, past the step that ensures the control plane; the wait for
// its new worker starts it again first (a worker cannot join without the
// API server, and nothing else would start it), with an event, and the
// operation succeeds.
func TestWorkerWaitStartsTheControlPlaneAgain(t *testing.T) {
	e := newEnv(t)
	p, sp := createStopping(e)
	started := p.startsOf("c-cp-0")

	// It stops once the scale-up made its worker: past the step that
	// ensures the control plane's machines.
	e.reg["agents"] = stopOnEnsure{stoppingMachines: p, when: "c-default-1", stops: exited}
	sp.WorkerPools[0].Size = 2
	op := e.begin("c", v1.KindUpdate, sp)
	e.runOnce(e.runner(func(o *plan.Options) { o.NodeTimeout = 2 * time.Second; o.MaxAttempts = 1 }))
	if got := e.op(op.ID); got.Status != v1.OpSucceeded {
		t.Fatalf("scale-up with the control plane stopped: %s %+v", got.Status, got.Error)
	}
	// ensure-control-plane-machines ensures it (running then), and the
	// wait for the new worker starts it again.
	if n := p.startsOf("c-cp-0"); n != started+2 {
		t.Errorf("c-cp-0 ensured %d times by the scale-up, want twice", n-started)
	}
	restarted := false
	for _, ev := range e.events("c") {
		restarted = restarted || ev.Reason == "MachineRestarted" && ev.Node == "c-cp-0" && ev.Operation == op.ID
	}
	if !restarted {
		t.Errorf("no MachineRestarted event for c-cp-0 in the scale-up: %v", e.eventReasons("c"))
	}
}

// The health check's repair starts again a control-plane machine that
// stopped (its container killed between operations), with an event saying
// how it had stopped; with nothing stopped the step is skipped. (These
// machines' agents are played, so Kubernetes' Ready is not awaited here:
// test/e2e's TestUnhealthyNodeIsReplaced shows it.)
func TestRepairStartsAStoppedControlPlane(t *testing.T) {
	e := newEnv(t)
	p, sp := createStopping(e)
	started := p.startsOf("c-cp-0")

	p.stop(exited)
	op := e.begin("c", v1.KindRepair, sp)
	e.runOnce(e.runner(func(o *plan.Options) { o.NodeTimeout = 5 * time.Second; o.MaxAttempts = 1 }))
	got := e.op(op.ID)
	if got.Status != v1.OpSucceeded {
		t.Fatalf("repair of a stopped control plane: %s %+v", got.Status, got.Error)
	}
	if m := stepMessage(got, plan.StepRestartStoppedControlPlane); m != "started again: c-cp-0" {
		t.Errorf("%s says %q", plan.StepRestartStoppedControlPlane, m)
	}
	if p.isStopped("c-cp-0") || p.startsOf("c-cp-0") == started {
		t.Errorf("c-cp-0 stopped %v, started %d times by the repair: want started again", p.isStopped("c-cp-0"), p.startsOf("c-cp-0")-started)
	}
	restarted := false
	for _, ev := range e.events("c") {
		restarted = restarted || ev.Reason == "MachineRestarted" && ev.Node == "c-cp-0" && ev.Operation == op.ID &&
			strings.Contains(ev.Message, exited.Reason)
	}
	if !restarted {
		t.Errorf("no MachineRestarted event for c-cp-0 saying how it stopped: %v", e.eventReasons("c"))
	}

	op = e.begin("c", v1.KindRepair, sp)
	e.runOnce(e.runner())
	if s := stepStates(e.op(op.ID))[plan.StepRestartStoppedControlPlane]; s != v1.StepSkipped {
		t.Errorf("a repair with nothing stopped: %s %s, want Skipped", plan.StepRestartStoppedControlPlane, s)
	}
}

// createStopping creates cluster c (1+1) on a stoppingMachines provider
// whose machines never stop again once started, with agents played until
// the test ends: a node installs (READY) only while its machine and the
// API server's run.
func createStopping(e *env) (*stoppingMachines, v1.ClusterSpec) {
	p := newStopping(agentMachines{e.sim}, false)
	e.reg["agents"] = p
	sp := spec(1, nil)
	sp.Provider = "agents"
	e.begin("c", v1.KindCreate, sp)
	ctx := e.t.Context()
	go playAgents(ctx, e, "c", func(n *store.Node) {
		if p.isStopped(n.Name) || p.isStopped("c-cp-0") {
			return
		}
		n.State = v1.NodeReady
		_ = e.st.PutNode(ctx, n, store.Cond{IfMatch: n.ETag})
	})
	e.runOnce(e.runner())
	return p, sp
}
