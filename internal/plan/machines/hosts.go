package machines

import (
	"context"
	"fmt"
	"maps"
	"net"
	"slices"
	"strings"

	"golang.org/x/sync/errgroup"

	v1 "kiln.dev/kiln/api/v1"
	"kiln.dev/kiln/internal/failure"
	"kiln.dev/kiln/internal/plan/step"
	"kiln.dev/kiln/internal/provider"
	"kiln.dev/kiln/internal/validate"
)

// hostTargets are the configured hosts of a role as the install steps
// take them: those installed already (Ready or NotReady: an earlier
// provision's) first, the one the recorded endpoint (status.endpoint)
// names leading them, then the others, each by name. The first
// control-plane host founds etcd, so on a cluster provisioned already it is
// one of its installed hosts, never a host added since (which joins).
func (w Work) hostTargets(ctx context.Context, role string) ([]provider.MachineSpec, error) {
	nodes, err := w.r.Nodes(ctx)
	if err != nil {
		return nil, err
	}
	var installed, added []provider.MachineSpec
	for _, name := range slices.Sorted(maps.Keys(nodes)) {
		n := nodes[name]
		if !validate.Configured(n.Node) || n.Role != role {
			continue
		}
		m := provider.MachineSpec{Name: name, Role: role}
		if n.State == v1.NodeReady || n.State == v1.NodeNotReady {
			installed = append(installed, m)
		} else {
			added = append(added, m)
		}
	}
	// The host the cluster's recorded endpoint names stays first, even
	// when a host added since (and installed) sorts before it.
	if ep := w.cl.Status.Endpoint; ep != "" {
		if i := slices.IndexFunc(installed, func(m provider.MachineSpec) bool {
			return net.JoinHostPort(nodes[m.Name].Address, "6443") == ep
		}); i > 0 {
			installed = append(append([]provider.MachineSpec{installed[i]}, installed[:i]...), installed[i+1:]...)
		}
	}
	return append(installed, added...), nil
}

// ControlPlaneTargets are the control-plane nodes to install: the
// machines the spec wants, or the hosts configured as control plane.
func (w Work) ControlPlaneTargets(ctx context.Context) ([]provider.MachineSpec, error) {
	if w.r.HostsJoin() {
		return w.hostTargets(ctx, v1.RoleControlPlane)
	}
	return ControlPlaneMachines(w.cl), nil
}

// WorkerTargets are the worker nodes to install, likewise.
func (w Work) WorkerTargets(ctx context.Context) ([]provider.MachineSpec, error) {
	if w.r.HostsJoin() {
		return w.hostTargets(ctx, v1.RoleWorker)
	}
	return w.workerMachines(ctx)
}

// HostEndpoint is a host cluster's API endpoint: its first control-plane
// host, port 6443 ("" before one is configured).
func (w Work) HostEndpoint(ctx context.Context) (string, error) {
	cps, err := w.hostTargets(ctx, v1.RoleControlPlane)
	if err != nil || len(cps) == 0 {
		return "", err
	}
	n, err := w.r.NodeRecords().GetNode(ctx, w.cl.Key(), cps[0].Name)
	if err != nil {
		return "", fmt.Errorf("control-plane host %s: %w", cps[0].Name, err)
	}
	return net.JoinHostPort(n.Address, "6443"), nil
}

// CheckNodeConfiguration refuses to provision hosts that do not make the
// configuration the spec asks for, and, on a cluster provisioned already,
// hosts added that cannot join it (validate.HostsAdded). The API checked it when provisioning
// was asked for; hosts may have changed since.
func (s Steps) CheckNodeConfiguration(ctx context.Context) error {
	nodes, err := s.r.Nodes(ctx)
	if err != nil {
		return err
	}
	var all []v1.Node
	for _, name := range slices.Sorted(maps.Keys(nodes)) {
		all = append(all, nodes[name].Node)
	}
	added, e := validate.HostsAdded(all)
	if e != nil {
		return &failure.Error{Code: e.Code, Target: e.Target, Message: e.Message}
	}
	h := validate.HostsOf(all)
	if e := validate.HostCounts(&s.cl.Spec, h); e != nil {
		return &failure.Error{Code: e.Code, Target: e.Target, Message: e.Message}
	}
	if e := validate.PoolOnHosts(&s.cl.Spec, all); e != nil {
		return &failure.Error{Code: e.Code, Target: e.Target, Message: e.Message}
	}
	s.r.Log().Info("hosts match the configuration", "configuration", validate.Configuration(&s.cl.Spec),
		"controlPlane", h.ControlPlanes, "workers", h.Workers, "joining", strings.Join(added, ", "))
	return nil
}

// ResetNodes has every host that Kubernetes was installed on tear it down
// (the distribution's reset instruction), all at once; in the removal of
// some hosts (the operation's Nodes), those hosts only.
func (s Steps) ResetNodes(ctx context.Context) error {
	nodes, err := s.r.Nodes(ctx)
	if err != nil {
		return err
	}
	var installed []string
	for _, name := range slices.Sorted(maps.Keys(nodes)) {
		if len(s.op.Nodes) > 0 && !slices.Contains(s.op.Nodes, name) {
			continue
		}
		switch nodes[name].State {
		case v1.NodeProvisioning, v1.NodeReady, v1.NodeNotReady, v1.NodeFailed:
			installed = append(installed, name)
		}
	}
	if len(installed) == 0 {
		return step.Skipped("no host has Kubernetes installed")
	}
	s.r.Log().Info("resetting hosts", "hosts", strings.Join(installed, ", "))
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(machineParallelism)
	for _, name := range installed {
		g.Go(func() error {
			_, err := s.r.Order(gctx, nodes[name], v1.InstructionReset, "tearing Kubernetes down", nil)
			return err
		})
	}
	return g.Wait()
}

// RemoveNodes removes every host from the cluster: its record goes and its
// node certificate is refused, so the host must join again (the installer's
// command with --force, or a fresh data directory). In the removal of some
// hosts (the operation's Nodes) it removes those only, their Node objects
// in Kubernetes first (the cluster stays).
func (s Steps) RemoveNodes(ctx context.Context) error {
	if len(s.op.Nodes) == 0 {
		return s.w.removeMachines(ctx, func(string, string) bool { return true })
	}
	nodes, err := s.r.Nodes(ctx)
	if err != nil {
		return err
	}
	// A host that never went past CONFIGURED has no Node object; one
	// whose record is gone (a step run again) may still have it.
	neverInstalled := func(name string) bool {
		n := nodes[name]
		return n != nil && (n.State == v1.NodeDiscovered || n.State == v1.NodeApproved || n.State == v1.NodeConfigured || n.State == v1.NodePrecheckFailed)
	}
	var kc NodeDeleter
	if s.r.UsesAgents() && slices.ContainsFunc(s.op.Nodes, func(name string) bool { return !neverInstalled(name) }) {
		c, err := s.r.KubeClient(ctx)
		if err != nil {
			return err
		}
		defer c.Close()
		kc = c
	}
	for _, name := range s.op.Nodes {
		deleter := kc
		if neverInstalled(name) {
			deleter = nil
		}
		if err := s.w.RemoveNode(ctx, name, false, nodes[name] != nil, deleter); err != nil {
			return err
		}
		s.r.Progress(ctx, name, "removed")
	}
	s.r.Note("removed " + strings.Join(s.op.Nodes, ", ") + " from the cluster; each host can join a cluster again")
	return nil
}

// DrainNodes (drain-nodes) cordons and drains, one at a time, the hosts
// the operation removes (its Nodes) that have Kubernetes installed,
// through the cluster's API within the default drain timeout
// (validate.DefaultDrainTimeout): every pod but DaemonSet and mirror pods
// evicted, PodDisruptionBudgets respected. A drain that times out fails
// the operation with DrainTimeout naming the pods left; the host stays
// cordoned and nothing of it is removed.
func (s Steps) DrainNodes(ctx context.Context) error {
	nodes, err := s.r.Nodes(ctx)
	if err != nil {
		return err
	}
	var doomed []Member
	for _, name := range s.op.Nodes {
		if n := nodes[name]; n != nil && (validate.Installed(n.Node) || n.State == v1.NodeFailed) {
			doomed = append(doomed, Member{Name: name})
		}
	}
	if len(doomed) == 0 || !s.r.UsesAgents() {
		return step.Skipped("no host to remove has Kubernetes installed")
	}
	kc, err := s.r.KubeClient(ctx)
	if err != nil {
		return err
	}
	defer kc.Close()
	var done []string
	for _, m := range doomed {
		if s.r.Canceling() {
			return step.ErrCancelRequested
		}
		st, err := s.w.drain(ctx, kc, m)
		if err != nil {
			return err
		}
		what := drainSummary(st)
		s.r.EventOn(ctx, "Normal", "NodeDrained", m.Name, fmt.Sprintf("node %s drained (%s); removing it from the cluster", m.Name, what))
		done = append(done, fmt.Sprintf("%s (%s)", m.Name, what))
	}
	s.r.Note("drained " + strings.Join(done, ", "))
	return nil
}
