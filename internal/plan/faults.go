package plan

import (
	"context"

	"kiln.dev/kiln/internal/fault"
	"kiln.dev/kiln/internal/provider"
)

// faultPoints wraps p so that every provider call the plan makes hits the
// fault points provider.<Method>.before and provider.<Method>.after
// (docs/faults.md). The wrapper keeps the capabilities the plan checks for:
// load balancers (only when p has them), the step hook, stopped machines,
// Agentless and HostsJoin (each answering as p does, or as if absent).
func faultPoints(p provider.Provider) provider.Provider {
	fp := faultProvider{p: p}
	if lbs, ok := p.(provider.LoadBalancers); ok {
		return faultProviderLB{faultProvider: fp, lbs: lbs}
	}
	return fp
}

type faultProvider struct{ p provider.Provider }

func (f faultProvider) EnsureNetwork(ctx context.Context, c provider.Cluster) (provider.Network, error) {
	fault.Hit("provider.EnsureNetwork.before")
	defer fault.Hit("provider.EnsureNetwork.after")
	return f.p.EnsureNetwork(ctx, c)
}

func (f faultProvider) DeleteNetwork(ctx context.Context, c provider.Cluster) error {
	fault.Hit("provider.DeleteNetwork.before")
	defer fault.Hit("provider.DeleteNetwork.after")
	return f.p.DeleteNetwork(ctx, c)
}

func (f faultProvider) EnsureMachine(ctx context.Context, c provider.Cluster, m provider.MachineSpec) (provider.Machine, error) {
	fault.Hit("provider.EnsureMachine.before")
	defer fault.Hit("provider.EnsureMachine.after")
	return f.p.EnsureMachine(ctx, c, m)
}

func (f faultProvider) ListMachines(ctx context.Context, c provider.Cluster) ([]provider.Machine, error) {
	fault.Hit("provider.ListMachines.before")
	defer fault.Hit("provider.ListMachines.after")
	return f.p.ListMachines(ctx, c)
}

func (f faultProvider) DeleteMachine(ctx context.Context, c provider.Cluster, name string) error {
	fault.Hit("provider.DeleteMachine.before")
	defer fault.Hit("provider.DeleteMachine.after")
	return f.p.DeleteMachine(ctx, c, name)
}

// BeforeStep is the step hook of p, if it has one.
func (f faultProvider) BeforeStep(ctx context.Context, c provider.Cluster, step string) error {
	if h, ok := f.p.(StepHook); ok {
		return h.BeforeStep(ctx, c, step)
	}
	return nil
}

// StoppedMachines is p's answer, none when p cannot say.
func (f faultProvider) StoppedMachines(ctx context.Context, c provider.Cluster) ([]provider.StoppedMachine, error) {
	if s, ok := f.p.(StopReporter); ok {
		return s.StoppedMachines(ctx, c)
	}
	return nil, nil
}

// Agentless is p's answer, false when p does not say.
func (f faultProvider) Agentless() bool {
	a, ok := f.p.(agentless)
	return ok && a.Agentless()
}

// HostsJoin is p's answer, false when p does not say.
func (f faultProvider) HostsJoin() bool {
	h, ok := f.p.(provider.Hosted)
	return ok && h.HostsJoin()
}

// poolsOf is p's Pools capability, its calls hitting the fault points
// provider.GrowPool.before and .after; nil when p has none.
func poolsOf(p provider.Provider) provider.Pools {
	pp, ok := p.(provider.Pools)
	if !ok {
		return nil
	}
	return faultPools{pp}
}

type faultPools struct{ p provider.Pools }

func (f faultPools) GrowPool(ctx context.Context, c provider.Cluster, m provider.MachineSpec, have []string, add int) ([]provider.Machine, error) {
	fault.Hit("provider.GrowPool.before")
	defer fault.Hit("provider.GrowPool.after")
	return f.p.GrowPool(ctx, c, m, have, add)
}

// stopperOf is p's Stopper capability, its calls hitting the fault points
// provider.StopMachine.before and .after; nil when p has none.
func stopperOf(p provider.Provider) provider.Stopper {
	s, ok := p.(provider.Stopper)
	if !ok {
		return nil
	}
	return faultStopper{s}
}

type faultStopper struct{ p provider.Stopper }

func (f faultStopper) StopMachine(ctx context.Context, c provider.Cluster, name string) error {
	fault.Hit("provider.StopMachine.before")
	defer fault.Hit("provider.StopMachine.after")
	return f.p.StopMachine(ctx, c, name)
}

type faultProviderLB struct {
	faultProvider
	lbs provider.LoadBalancers
}

func (f faultProviderLB) EnsureLoadBalancer(ctx context.Context, c provider.Cluster) (provider.LoadBalancer, error) {
	fault.Hit("provider.EnsureLoadBalancer.before")
	defer fault.Hit("provider.EnsureLoadBalancer.after")
	return f.lbs.EnsureLoadBalancer(ctx, c)
}

func (f faultProviderLB) DeleteLoadBalancer(ctx context.Context, c provider.Cluster) error {
	fault.Hit("provider.DeleteLoadBalancer.before")
	defer fault.Hit("provider.DeleteLoadBalancer.after")
	return f.lbs.DeleteLoadBalancer(ctx, c)
}

var (
	_ provider.LoadBalancers = faultProviderLB{}
	_ StepHook               = faultProvider{}
	_ StopReporter           = faultProvider{}
	_ provider.Hosted        = faultProvider{}
)
