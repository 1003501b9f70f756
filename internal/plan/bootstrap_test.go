package plan_test

import (
	"context"
	"sync"
	"testing"
	"time"

	v1 "kiln.dev/kiln/api/v1"
	"kiln.dev/kiln/internal/plan"
	"kiln.dev/kiln/internal/provider"
	"kiln.dev/kiln/internal/store"
)

// bootMachines records the bootstrap data each machine was made with.
type bootMachines struct {
	agentMachines
	agentless bool // as the sim it wraps, or its machines run agents
	mu        sync.Mutex
	got       map[string]*provider.Bootstrap
}

func (b *bootMachines) Agentless() bool { return b.agentless }

func (b *bootMachines) EnsureMachine(ctx context.Context, c provider.Cluster, m provider.MachineSpec) (provider.Machine, error) {
	b.mu.Lock()
	b.got[m.Name] = m.Bootstrap
	b.mu.Unlock()
	return b.agentMachines.EnsureMachine(ctx, c, m)
}

// fixedBootstrap gives every cluster the same credential.
type fixedBootstrap struct{}

func (fixedBootstrap) Credentials(_ context.Context, k store.Key) (v1.AgentCredentials, string, error) {
	return v1.AgentCredentials{Cluster: k.Project + "/" + k.Name, ID: "cred-1", Secret: "s3cret"}, "the passphrase", nil
}

// The plan hands every machine it makes the cluster's bootstrap data (as
// Cluster API hands bootstrap data with a Machine); machines of a provider
// that runs no agent (sim) get none. (No agent answers here: the create
// stops at the control plane's install, after its machine was made.)
func TestMachinesGetBootstrapData(t *testing.T) {
	e := newEnv(t)
	rec := &bootMachines{agentMachines: agentMachines{e.sim}, got: map[string]*provider.Bootstrap{}}
	e.reg["agents"] = rec
	sims := &bootMachines{agentMachines: agentMachines{e.sim}, agentless: true, got: map[string]*provider.Bootstrap{}}
	e.reg["sim"] = sims
	sp := spec(2, nil)
	sp.Provider = "agents"
	sp.Network = v1.Network{PodCIDR: "10.244.0.0/16", ServiceCIDR: "10.96.0.0/12"}
	e.begin("c", v1.KindCreate, sp)
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	go fakeAgents(ctx, e, "c")
	quick := func(o *plan.Options) {
		o.Bootstrap, o.MaxAttempts, o.NodeTimeout = fixedBootstrap{}, 1, 200*time.Millisecond
	}
	e.runOnce(e.runner(quick))
	b := rec.got["c-cp-0"]
	if b == nil || b.Credentials.Cluster != project+"/c" || b.Credentials.Secret != "s3cret" || b.Passphrase != "the passphrase" {
		t.Errorf("machine c-cp-0 was made with bootstrap data %#v, want the cluster's", b)
	}

	e.begin("s", v1.KindCreate, spec(1, nil))
	e.runOnce(e.runner(quick))
	if b, ok := sims.got["s-cp-0"]; !ok || b != nil {
		t.Errorf("the sim machine s-cp-0 was made (%v) with bootstrap data %#v, want none", ok, b)
	}
}
