package plan_test

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"testing"

	v1 "kiln.dev/kiln/api/v1"
	"kiln.dev/kiln/internal/failure"
	"kiln.dev/kiln/internal/plan"
	"kiln.dev/kiln/internal/provider"
	"kiln.dev/kiln/internal/store"
)

// groupedSim is the sim with pools that are groups the cloud names the
// machines of, as AWS's Auto Scaling groups are: GrowPool names them
// g-POOL-N, and EnsureMachine of a pool machine it does not have fails, as
// the aws provider's does (the group replaces what it lost).
type groupedSim struct {
	provider.Provider // the sim
	mu                sync.Mutex
	next              int
	note              string // on the machines GrowPool makes (a cloud's fallback)
}

func (g *groupedSim) Agentless() bool { return true }

func (g *groupedSim) GrowPool(ctx context.Context, c provider.Cluster, m provider.MachineSpec, have []string, add int) ([]provider.Machine, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	ms, err := g.ListMachines(ctx, c)
	if err != nil {
		return nil, err
	}
	var out []provider.Machine
	for _, x := range ms { // launched before, for a call that did not return
		if x.Pool == m.Pool && !slices.Contains(have, x.Name) && len(out) < add {
			out = append(out, x)
		}
	}
	for len(out) < add {
		spec := m
		spec.Name = fmt.Sprintf("g-%s-%d", m.Pool, g.next)
		g.next++
		made, err := g.Provider.EnsureMachine(ctx, c, spec)
		if err != nil {
			return nil, err
		}
		made.Note = g.note
		out = append(out, made)
	}
	return out, nil
}

func (g *groupedSim) EnsureMachine(ctx context.Context, c provider.Cluster, m provider.MachineSpec) (provider.Machine, error) {
	if m.Pool != "" {
		ms, err := g.ListMachines(ctx, c)
		if err != nil {
			return provider.Machine{}, err
		}
		if i := slices.IndexFunc(ms, func(x provider.Machine) bool { return x.Name == m.Name }); i >= 0 {
			return ms[i], nil
		}
		return provider.Machine{}, failure.Retryable(v1.CodeProviderError, nil, "machine %s of pool %s is gone", m.Name, m.Pool)
	}
	return g.Provider.EnsureMachine(ctx, c, m)
}

// On a provider whose pools are groups, the plan asks the pools for the
// machines it wants and knows them by the names the cloud gave: a create,
// a scale up, a scale down (newest first), a lost machine replaced, and a
// rollout to a new revision.
func TestPoolsThatAreGroups(t *testing.T) {
	e := newEnv(t)
	e.reg["sim"] = &groupedSim{Provider: e.sim}
	r := e.runner()
	want := func(op *store.Operation, nodes ...string) {
		t.Helper()
		if got := e.op(op.ID); got.Status != v1.OpSucceeded {
			t.Fatalf("operation %s: %s %+v", got.Kind, got.Status, got.Error)
		}
		have := e.nodes("c")
		if got := slices.Sorted(maps.Keys(have)); !slices.Equal(got, append([]string{"c-cp-0"}, nodes...)) {
			t.Fatalf("nodes %v; want c-cp-0 and %v", have, nodes)
		}
		for name, n := range have {
			if n != v1.RoleControlPlane+"//"+v1.NodeReady && n != v1.RoleWorker+"/default/"+v1.NodeReady {
				t.Errorf("node %s is %s; want READY in its role and pool", name, n)
			}
		}
		if got := e.machines("c"); !slices.Equal(got, append([]string{"c-cp-0"}, nodes...)) {
			t.Errorf("machines %v; want c-cp-0 and %v", got, nodes)
		}
	}
	op := e.begin("c", v1.KindCreate, spec(2, nil))
	e.runOnce(r)
	want(op, "g-default-0", "g-default-1")

	op = e.begin("c", v1.KindUpdate, spec(3, nil))
	e.runOnce(r)
	want(op, "g-default-0", "g-default-1", "g-default-2")

	op = e.begin("c", v1.KindUpdate, spec(2, nil))
	e.runOnce(r)
	want(op, "g-default-0", "g-default-1")

	// A machine lost behind the plan's back, its record left: the pool
	// gets a new one and the record goes.
	if err := e.sim.DeleteMachine(t.Context(), provider.Cluster{Project: project, Name: "c"}, "g-default-0"); err != nil {
		t.Fatal(err)
	}
	op = e.begin("c", v1.KindUpdate, spec(2, nil))
	e.runOnce(r)
	want(op, "g-default-1", "g-default-3")

	// A new revision (labels): each old machine is replaced by a new one.
	op = e.begin("c", v1.KindUpdate, v1.ClusterSpec{Provider: "sim", ControlPlane: v1.ControlPlane{Size: 1, Dedicated: true},
		WorkerPools: []v1.WorkerPool{{Name: "default", Size: 2, Labels: map[string]string{"tier": "web"}}}, NodeApproval: "auto"})
	e.runOnce(r)
	want(op, "g-default-4", "g-default-5")
}

// retryingSim is the sim whose client retries 3 calls on its own in each
// EnsureNetwork, as the AWS SDK does with throttled calls.
type retryingSim struct{ provider.Provider }

func (r retryingSim) Agentless() bool { return true }

func (r retryingSim) EnsureNetwork(ctx context.Context, c provider.Cluster) (provider.Network, error) {
	provider.Retried(ctx, 3)
	return r.Provider.EnsureNetwork(ctx, c)
}

// Calls the provider's client retried on its own are not attempts of the
// step, and its message says how many there were.
func TestStepSaysCallsRetried(t *testing.T) {
	e := newEnv(t)
	e.reg["sim"] = retryingSim{e.sim}
	op := e.begin("c", v1.KindCreate, spec(1, nil))
	e.runOnce(e.runner())
	got := e.op(op.ID)
	if got.Status != v1.OpSucceeded {
		t.Fatalf("create: %s %+v", got.Status, got.Error)
	}
	for _, s := range got.Steps {
		if s.Name == plan.StepEnsureNetwork && (s.Attempts != 1 || !strings.Contains(s.Message, "3 provider calls retried after throttling or transient errors")) {
			t.Errorf("step %s: %d attempts, message %q; want 1 attempt saying 3 calls were retried", s.Name, s.Attempts, s.Message)
		}
		if s.Name != plan.StepEnsureNetwork && strings.Contains(s.Message, "retried") {
			t.Errorf("step %s says %q; only ensure-network retried calls", s.Name, s.Message)
		}
	}
}

// A machine a pool's group made otherwise than asked (spot refused,
// on-demand instead) is said in the step's message and in an event.
func TestPoolMachineNote(t *testing.T) {
	e := newEnv(t)
	e.reg["sim"] = &groupedSim{Provider: e.sim, note: "launched on-demand: no spot capacity"}
	op := e.begin("c", v1.KindCreate, spec(1, nil))
	e.runOnce(e.runner())
	got := e.op(op.ID)
	if got.Status != v1.OpSucceeded {
		t.Fatalf("create: %s %+v", got.Status, got.Error)
	}
	if msg := stepMessage(got, plan.StepEnsureWorkerMachines); !strings.Contains(msg, "g-default-0: launched on-demand: no spot capacity") {
		t.Errorf("ensure-worker-machines says %q; want the machine's note", msg)
	}
	if !slices.ContainsFunc(e.events("c"), func(ev v1.Event) bool {
		return ev.Reason == "MachineMadeOtherwise" && strings.Contains(ev.Message, "launched on-demand")
	}) {
		t.Errorf("no MachineMadeOtherwise event: %+v", e.events("c"))
	}
}
