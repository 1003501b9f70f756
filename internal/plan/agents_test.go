package plan_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	v1 "kiln.dev/kiln/api/v1"
	"kiln.dev/kiln/internal/distro"
	"kiln.dev/kiln/internal/plan"
	"kiln.dev/kiln/internal/provider"
	"kiln.dev/kiln/internal/provider/edge"
	"kiln.dev/kiln/internal/provider/sim"
	"kiln.dev/kiln/internal/store"
	"kiln.dev/kiln/internal/trust"
	"kiln.dev/kiln/test/waitfor"
)

// agentMachines is the sim with machines that are not Ready: their nodes
// come from agents, as with a real provider.
type agentMachines struct{ *sim.Sim }

func (a agentMachines) EnsureMachine(ctx context.Context, c provider.Cluster, m provider.MachineSpec) (provider.Machine, error) {
	got, err := a.Sim.EnsureMachine(ctx, c, m)
	got.Ready = false
	return got, err
}

// fakeAgents plays the node agents of cluster name until ctx ends: each
// machine registers (DISCOVERED) and, once the control plane configured it,
// installs and reports READY.
func fakeAgents(ctx context.Context, e *env, name string) {
	playAgents(ctx, e, name, func(n *store.Node) {
		n.State = v1.NodeReady
		_ = e.st.PutNode(ctx, n, store.Cond{IfMatch: n.ETag})
	})
}

// playAgents registers the node of every machine of cluster name
// (DISCOVERED), as agents do, and calls configured with each node the
// control plane configured, until ctx ends.
func playAgents(ctx context.Context, e *env, name string, configured func(*store.Node)) {
	k := store.Key{Project: project, Name: name}
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		ms, _ := e.sim.ListMachines(ctx, provider.Cluster{Project: project, Name: name})
		for _, m := range ms {
			n, err := e.st.GetNode(ctx, k, m.Name)
			switch {
			case errors.Is(err, store.ErrNotFound):
				_ = e.st.PutNode(ctx, &store.Node{Project: project, Node: v1.Node{
					Name: m.Name, Cluster: name, State: v1.NodeDiscovered, Address: m.Address}}, store.Cond{IfNoneMatch: "*"})
			case err == nil && n.State == v1.NodeConfigured:
				configured(n)
			}
		}
	}
}

func TestWaitsForAgents(t *testing.T) {
	e := newEnv(t)
	e.reg["agents"] = agentMachines{e.sim}
	sp := spec(2, nil)
	sp.Provider = "agents"
	op := e.begin("c", v1.KindCreate, sp)
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	go fakeAgents(ctx, e, "c")
	e.runOnce(e.runner())

	if got := e.op(op.ID); got.Status != v1.OpSucceeded {
		t.Fatalf("operation %s %+v, want Succeeded", got.Status, got.Error)
	}
	want := map[string]string{
		"c-cp-0":      "control-plane//READY",
		"c-default-0": "worker/default/READY",
		"c-default-1": "worker/default/READY",
	}
	got := e.nodes("c")
	for n, w := range want {
		if got[n] != w {
			t.Errorf("node %s = %q, want %q", n, got[n], w)
		}
	}
	// Each record, made by its agent's registration, has its machine's ID.
	ids := machineIDs(e)
	for n := range want {
		rec, err := e.st.GetNode(t.Context(), store.Key{Project: project, Name: "c"}, n)
		if err != nil {
			t.Fatal(err)
		}
		if rec.MachineID == "" || rec.MachineID != ids[n] {
			t.Errorf("node %s's machineID %q, want its machine's %q", n, rec.MachineID, ids[n])
		}
	}
}

func TestWaitForNodesTimesOut(t *testing.T) {
	e := newEnv(t)
	e.reg["agents"] = agentMachines{e.sim}
	sp := spec(1, nil)
	sp.Provider = "agents"
	op := e.begin("c", v1.KindCreate, sp)
	e.runOnce(e.runner(func(o *plan.Options) { o.NodeTimeout = 50 * time.Millisecond; o.MaxAttempts = 2 }))

	got := e.op(op.ID)
	if got.Status != v1.OpFailed || got.Error.Code != v1.CodeTimeout {
		t.Fatalf("operation %s %+v, want Failed with Timeout", got.Status, got.Error)
	}
	if !strings.Contains(got.Error.Message, "c-cp-0 (not registered)") {
		t.Errorf("message %q does not name the missing node", got.Error.Message)
	}
	if le := e.cluster("c").Status.LastError; le.Step != plan.StepWaitNodesRegistered || !le.Retryable {
		t.Errorf("lastError = %+v, want retryable at %s", le, plan.StepWaitNodesRegistered)
	}
}

// An instruction no agent answers times out naming the node and what it
// was told to do.
func TestInstructionWaitTimesOut(t *testing.T) {
	e := newEnv(t)
	e.reg["edge"] = edge.Edge{Versions: distro.Versions()}
	sp := edgeSpec()
	sp.Network = v1.Network{PodCIDR: "10.244.0.0/16", ServiceCIDR: "10.96.0.0/12"}
	e.beginSteps("c", v1.KindCreate, sp, plan.StepsFor(v1.KindCreate, true))
	e.runOnce(e.runner())
	e.host("host-a", v1.NodeConfigured, v1.RoleControlPlane)
	op := e.beginSteps("c", v1.KindProvision, sp, []string{plan.StepInstallControlPlane})
	e.runOnce(e.runner(func(o *plan.Options) { o.NodeTimeout = 50 * time.Millisecond; o.MaxAttempts = 1 }))

	got := e.op(op.ID)
	if got.Status != v1.OpFailed || got.Error.Code != v1.CodeTimeout {
		t.Fatalf("operation %s %+v, want Failed with Timeout", got.Status, got.Error)
	}
	for _, want := range []string{"host-a", v1.InstructionInstall} {
		if !strings.Contains(got.Error.Message, want) {
			t.Errorf("message %q does not name %q", got.Error.Message, want)
		}
	}
}

func TestManualApprovalWaitsForAPerson(t *testing.T) {
	e := newEnv(t)
	e.reg["agents"] = agentMachines{e.sim}
	sp := spec(0, nil)
	sp.Provider = "agents"
	sp.NodeApproval = "manual"
	op := e.begin("c", v1.KindCreate, sp)
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	go fakeAgents(ctx, e, "c")
	errc := make(chan error, 1)
	go func() { errc <- e.runner().Run(t.Context(), e.claim("w")) }()

	waitfor.Cond(t, "approve-nodes to wait", 10*time.Second, func() (bool, error) {
		return stepStates(e.op(op.ID))[plan.StepApproveNodes] == v1.StepRunning, nil
	})
	k := store.Key{Project: project, Name: "c"}
	n, err := e.st.GetNode(t.Context(), k, "c-cp-0")
	if err != nil {
		t.Fatal(err)
	}
	if n.State != v1.NodeDiscovered {
		t.Fatalf("node %s before approval, want DISCOVERED", n.State)
	}
	n.State = v1.NodeApproved // what `kiln node approve` does
	if err := e.st.PutNode(t.Context(), n, store.Cond{IfMatch: n.ETag}); err != nil {
		t.Fatal(err)
	}
	if err := <-errc; err != nil {
		t.Fatal(err)
	}
	if got := e.op(op.ID); got.Status != v1.OpSucceeded {
		t.Fatalf("operation %s %+v, want Succeeded", got.Status, got.Error)
	}
}

// forgetter is an Agents that records the nodes the plan forgets, and
// whether each still had its record then.
type forgetter struct {
	st     store.Store
	mu     sync.Mutex
	forgot map[string]bool
}

func (f *forgetter) Notify(store.Key, string) {}

func (f *forgetter) ForgetNode(ctx context.Context, k store.Key, node string, _ trust.Why) error {
	_, err := f.st.GetNode(ctx, k, node)
	f.mu.Lock()
	defer f.mu.Unlock()
	f.forgot[node] = err == nil
	return nil
}

// TestRemovedNodesAreForgotten: the node of a machine that is removed is
// forgotten by the agents (its certificates refused, its session ended)
// before its record is deleted; agentless machines (the sim's) have nothing
// to forget.
func TestRemovedNodesAreForgotten(t *testing.T) {
	e := newEnv(t)
	e.reg["agents"] = withAgents{e.sim}
	f := &forgetter{st: e.st, forgot: map[string]bool{}}
	withForgetter := func(o *plan.Options) { o.Agents = f }
	e.begin("c", v1.KindCreate, spec(3, nil))
	e.runOnce(e.runner(withForgetter))
	op := e.begin("c", v1.KindUpdate, spec(2, nil))
	e.runOnce(e.runner(withForgetter))
	if got := e.op(op.ID); got.Status != v1.OpSucceeded {
		t.Fatalf("scale down: %s %+v", got.Status, got.Error)
	}
	if len(f.forgot) != 0 {
		t.Fatalf("agentless nodes forgotten: %v", f.forgot)
	}

	// The same machines as an agent provider's: every node is forgotten,
	// each while it still had its record.
	sp := spec(2, nil)
	sp.Provider = "agents"
	op = e.begin("c", v1.KindDelete, sp)
	e.runOnce(e.runner(withForgetter))
	if got := e.op(op.ID); got.Status != v1.OpSucceeded {
		t.Fatalf("delete: %s %+v", got.Status, got.Error)
	}
	want := map[string]bool{"c-cp-0": true, "c-default-0": true, "c-default-1": true}
	if diff := cmp.Diff(want, f.forgot); diff != "" {
		t.Errorf("forgotten by the delete, with their records then (-want +got):\n%s", diff)
	}
}

// A host whose agent stops sending heartbeats while it carries out an
// instruction (the host stopped) fails the step at once, retryable, naming
// the host and what it was doing, instead of waiting for NodeTimeout.
func TestInstructionWaitFailsWhenTheAgentIsLost(t *testing.T) {
	e := newEnv(t)
	e.reg["edge"] = edge.Edge{Versions: distro.Versions()}
	sp := edgeSpec()
	sp.Network = v1.Network{PodCIDR: "10.244.0.0/16", ServiceCIDR: "10.96.0.0/12"}
	e.beginSteps("c", v1.KindCreate, sp, plan.StepsFor(v1.KindCreate, true))
	e.runOnce(e.runner())
	e.host("host-a", v1.NodeConfigured, v1.RoleControlPlane)
	op := e.beginSteps("c", v1.KindProvision, sp, []string{plan.StepInstallControlPlane})
	start := time.Now()
	e.runOnce(e.runner(func(o *plan.Options) {
		o.NodeTimeout, o.AgentLost, o.MaxAttempts = time.Minute, 100*time.Millisecond, 1
	}))

	got := e.op(op.ID)
	if got.Status != v1.OpFailed || got.Error.Code != v1.CodeUnavailable {
		t.Fatalf("operation %s %+v, want Failed with Unavailable", got.Status, got.Error)
	}
	if took := time.Since(start); took > 20*time.Second {
		t.Errorf("the lost agent was noticed after %s", took)
	}
	for _, want := range []string{"node host-a stopped answering during its install", "no heartbeat for", "retry"} {
		if !strings.Contains(got.Error.Message, want) {
			t.Errorf("message %q does not say %q", got.Error.Message, want)
		}
	}
	if le := e.cluster("c").Status.LastError; !le.Retryable {
		t.Errorf("lastError = %+v, want retryable", le)
	}
}
