// Package sim is Kiln's in-memory test double for infrastructure providers. It
// keeps networks, machines and load balancers in memory (or, with
// WithStateFile, in a file several processes share), safe for concurrent
// use, and passes providertest like any real provider. It is not a user's
// default provider: it makes nothing real.
//
// Machines it creates are Ready at once (their nodes need no agent) and get an
// address in 10.0.0.0/16; a cluster's load balancer address is
// "<cluster>.<project>.sim.kiln.invalid:6443".
//
// # Fault injection
//
// Faults are read from the cluster's spec.labels, so a test in another
// process can drive them through the API. The sim implements the plan
// runner's step hook (BeforeStep), called before every attempt of every step:
//
//	sim.kiln.dev/step-latency: "2s"     every step waits this long (honouring cancellation)
//	sim.kiln.dev/fail-step: "<step>"    that step fails with a retryable ProviderError ...
//	sim.kiln.dev/fail-times: "N"        ... on its first N attempts (default 1)
//	sim.kiln.dev/fail-terminal: "<step>" that step fails with a terminal ProviderError
//	sim.kiln.dev/hang-step: "<step>"    that step blocks until its context is cancelled
//
// Attempts of fail-step are counted in memory per cluster and step; the count
// is forgotten when the cluster's network is deleted (the last step of a
// delete), so a cluster created again under the same name fails again.
package sim

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"kiln.dev/kiln/internal/provider"
)

// Option configures a Sim.
type Option func(*Sim)

// WithLatency makes every provider call take d (honouring cancellation).
func WithLatency(d time.Duration) Option { return func(s *Sim) { s.latency = d } }

// Sim is the in-memory provider. Use New.
type Sim struct {
	latency time.Duration
	journal *journal // nil unless WithJournal
	file    string   // the shared inventory; "" keeps it in memory (WithStateFile)

	mu       sync.Mutex
	inv      *Inventory     // in memory, or loaded from file while held
	failures map[string]int // fail-step attempts by project/name/step
}

// Inventory is everything the sim has made: what WithStateFile keeps in its
// file, and what ReadInventory returns.
type Inventory struct {
	NextID   int                      `json:"nextID"`
	Clusters map[string]*ClusterInfra `json:"clusters"` // by project/name
}

// ClusterInfra is one cluster's infrastructure in the sim.
type ClusterInfra struct {
	Network      *provider.Network           `json:"network,omitempty"`
	LoadBalancer *provider.LoadBalancer      `json:"loadBalancer,omitempty"`
	Machines     map[string]provider.Machine `json:"machines"` // by name
	NextAddr     int                         `json:"nextAddr"`
}

var (
	_ provider.Provider      = (*Sim)(nil)
	_ provider.LoadBalancers = (*Sim)(nil)
	_ provider.Describer     = (*Sim)(nil)
	_ provider.Installing    = (*Sim)(nil)
	_ provider.Stopper       = (*Sim)(nil)
)

// New returns an empty Sim.
func New(opts ...Option) *Sim {
	s := &Sim{inv: newInventory(), failures: map[string]int{}}
	for _, o := range opts {
		o(s)
	}
	return s
}

// Agentless says the sim's machines run no agent: their nodes are Ready at
// once, and their clusters need no CA, credential or passphrase.
func (s *Sim) Agentless() bool { return true }

func key(c provider.Cluster) string { return c.Project + "/" + c.Name }

// wait sleeps d or until ctx is done.
func wait(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return ctx.Err()
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// cluster returns the cluster's infrastructure, creating the record when
// create is set. Callers are inside s.update.
func (s *Sim) cluster(c provider.Cluster, create bool) *ClusterInfra {
	in := s.inv.Clusters[key(c)]
	if in == nil && create {
		in = &ClusterInfra{Machines: map[string]provider.Machine{}}
		s.inv.Clusters[key(c)] = in
	}
	return in
}

func (s *Sim) id(kind string) string {
	s.inv.NextID++
	return fmt.Sprintf("sim-%s-%d", kind, s.inv.NextID)
}

// EnsureNetwork returns the cluster's network, creating it the first time.
func (s *Sim) EnsureNetwork(ctx context.Context, c provider.Cluster) (n provider.Network, err error) {
	if err := wait(ctx, s.latency); err != nil {
		return provider.Network{}, err
	}
	err = s.update(func() bool {
		in := s.cluster(c, true)
		if in.Network != nil {
			n = *in.Network
			return false
		}
		in.Network = &provider.Network{ID: s.id("net"), CIDR: NodeNetwork.String()}
		n = *in.Network
		return true
	})
	return n, err
}

// DeleteNetwork deletes the cluster's network and forgets its fault counts.
func (s *Sim) DeleteNetwork(ctx context.Context, c provider.Cluster) error {
	if err := wait(ctx, s.latency); err != nil {
		return err
	}
	return s.update(func() bool {
		in := s.cluster(c, false)
		prefix := key(c) + "/"
		for k := range s.failures {
			if strings.HasPrefix(k, prefix) {
				delete(s.failures, k)
			}
		}
		if in == nil {
			return false
		}
		in.Network = nil
		if in.LoadBalancer == nil && len(in.Machines) == 0 {
			delete(s.inv.Clusters, key(c))
		}
		return true
	})
}

// EnsureMachine returns the machine named m.Name, creating it the first time.
// A machine that exists is returned as it is, started again if it was
// stopped (StopMachine).
func (s *Sim) EnsureMachine(ctx context.Context, c provider.Cluster, m provider.MachineSpec) (mc provider.Machine, err error) {
	if err := wait(ctx, s.latency); err != nil {
		return provider.Machine{}, err
	}
	err = s.update(func() bool {
		in := s.cluster(c, true)
		if got, ok := in.Machines[m.Name]; ok {
			mc = got
			if got.Ready {
				return false
			}
			mc.Ready = true
			in.Machines[m.Name] = mc
			return true
		}
		in.NextAddr++
		n := in.NextAddr + 1 // 10.0.0.1 is the gateway
		mc = provider.Machine{
			MachineSpec: m,
			ID:          s.id("vm"),
			Address:     fmt.Sprintf("10.0.%d.%d", n/256, n%256),
			Ready:       true,
		}
		in.Machines[m.Name] = mc
		return true
	})
	return mc, err
}

// ListMachines returns the cluster's machines ordered by name.
func (s *Sim) ListMachines(ctx context.Context, c provider.Cluster) (ms []provider.Machine, err error) {
	if err := wait(ctx, s.latency); err != nil {
		return nil, err
	}
	err = s.update(func() bool {
		in := s.cluster(c, false)
		if in == nil {
			return false
		}
		ms = make([]provider.Machine, 0, len(in.Machines))
		for _, m := range in.Machines {
			ms = append(ms, m)
		}
		return false
	})
	slices.SortFunc(ms, func(a, b provider.Machine) int { return strings.Compare(a.Name, b.Name) })
	return ms, err
}

// StopMachine stops the named machine, keeping it (provider.Stopper): it is
// not Ready until EnsureMachine starts it. A stopped or missing machine is
// not an error.
func (s *Sim) StopMachine(ctx context.Context, c provider.Cluster, name string) error {
	if err := wait(ctx, s.latency); err != nil {
		return err
	}
	return s.update(func() bool {
		in := s.cluster(c, false)
		if in == nil {
			return false
		}
		m, ok := in.Machines[name]
		if !ok || !m.Ready {
			return false
		}
		m.Ready = false
		in.Machines[name] = m
		return true
	})
}

// DeleteMachine deletes the named machine; a missing machine is not an error.
func (s *Sim) DeleteMachine(ctx context.Context, c provider.Cluster, name string) error {
	if err := wait(ctx, s.latency); err != nil {
		return err
	}
	return s.update(func() bool {
		in := s.cluster(c, false)
		if in == nil {
			return false
		}
		if _, ok := in.Machines[name]; !ok {
			return false
		}
		delete(in.Machines, name)
		return true
	})
}

// EnsureLoadBalancer returns the cluster's load balancer, creating it the
// first time.
func (s *Sim) EnsureLoadBalancer(ctx context.Context, c provider.Cluster) (lb provider.LoadBalancer, err error) {
	if err := wait(ctx, s.latency); err != nil {
		return provider.LoadBalancer{}, err
	}
	err = s.update(func() bool {
		in := s.cluster(c, true)
		if in.LoadBalancer != nil {
			lb = *in.LoadBalancer
			return false
		}
		in.LoadBalancer = &provider.LoadBalancer{
			ID:      s.id("lb"),
			Address: fmt.Sprintf("%s.%s.sim.kiln.invalid:6443", c.Name, c.Project),
		}
		lb = *in.LoadBalancer
		return true
	})
	return lb, err
}

// DeleteLoadBalancer deletes the cluster's load balancer, if any.
func (s *Sim) DeleteLoadBalancer(ctx context.Context, c provider.Cluster) error {
	if err := wait(ctx, s.latency); err != nil {
		return err
	}
	return s.update(func() bool {
		in := s.cluster(c, false)
		if in == nil || in.LoadBalancer == nil {
			return false
		}
		in.LoadBalancer = nil
		return true
	})
}
