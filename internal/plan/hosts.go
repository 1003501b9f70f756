package plan

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

// hostsJoin reports whether the cluster is made of hosts users bring (the
// edge provider): its nodes are the hosts a person configured, not the
// machines the spec names.
func (x *run) hostsJoin() bool {
	h, ok := x.p.(provider.Hosted)
	return ok && h.HostsJoin()
}

// hostTargets are the configured hosts of a role as the install steps
// take them, by name: the first control-plane host founds etcd.
func (x *run) hostTargets(ctx context.Context, role string) ([]provider.MachineSpec, error) {
	nodes, err := x.nodes(ctx)
	if err != nil {
		return nil, err
	}
	var out []provider.MachineSpec
	for _, name := range slices.Sorted(maps.Keys(nodes)) {
		if n := nodes[name]; validate.Configured(n.Node) && n.Role == role {
			out = append(out, provider.MachineSpec{Name: name, Role: role})
		}
	}
	return out, nil
}

// controlPlaneTargets are the control-plane nodes to install: the
// machines the spec wants, or the hosts configured as control plane.
func (x *run) controlPlaneTargets(ctx context.Context) ([]provider.MachineSpec, error) {
	if x.hostsJoin() {
		return x.hostTargets(ctx, v1.RoleControlPlane)
	}
	return controlPlaneMachines(x.cl), nil
}

// workerTargets are the worker nodes to install, likewise.
func (x *run) workerTargets(ctx context.Context) ([]provider.MachineSpec, error) {
	if x.hostsJoin() {
		return x.hostTargets(ctx, v1.RoleWorker)
	}
	return x.workerMachines(ctx)
}

// hostEndpoint is a host cluster's API endpoint: its first control-plane
// host, port 6443 ("" before one is configured).
func (x *run) hostEndpoint(ctx context.Context) (string, error) {
	cps, err := x.hostTargets(ctx, v1.RoleControlPlane)
	if err != nil || len(cps) == 0 {
		return "", err
	}
	n, err := x.nodeRecords.GetNode(ctx, x.cl.Key(), cps[0].Name)
	if err != nil {
		return "", fmt.Errorf("control-plane host %s: %w", cps[0].Name, err)
	}
	return net.JoinHostPort(n.Address, "6443"), nil
}

// checkNodeConfiguration refuses to provision hosts that do not make the
// configuration the spec asks for. The API checked it when provisioning
// was asked for; hosts may have changed since.
func (x *run) checkNodeConfiguration(ctx context.Context) error {
	nodes, err := x.nodes(ctx)
	if err != nil {
		return err
	}
	var all []v1.Node
	for _, name := range slices.Sorted(maps.Keys(nodes)) {
		all = append(all, nodes[name].Node)
	}
	h := validate.HostsOf(all)
	if e := validate.HostCounts(&x.cl.Spec, h); e != nil {
		return &failure.Error{Code: e.Code, Target: e.Target, Message: e.Message}
	}
	x.log.Info("hosts match the configuration", "configuration", validate.Configuration(&x.cl.Spec),
		"controlPlane", h.ControlPlanes, "workers", h.Workers)
	return nil
}

// resetNodes has every host that Kubernetes was installed on tear it down
// (the distribution's reset instruction), all at once.
func (x *run) resetNodes(ctx context.Context) error {
	nodes, err := x.nodes(ctx)
	if err != nil {
		return err
	}
	var installed []string
	for _, name := range slices.Sorted(maps.Keys(nodes)) {
		switch nodes[name].State {
		case v1.NodeProvisioning, v1.NodeReady, v1.NodeNotReady, v1.NodeFailed:
			installed = append(installed, name)
		}
	}
	if len(installed) == 0 {
		return step.Skipped("no host has Kubernetes installed")
	}
	x.log.Info("resetting hosts", "hosts", strings.Join(installed, ", "))
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(machineParallelism)
	for _, name := range installed {
		g.Go(func() error {
			_, err := x.order(gctx, nodes[name], v1.InstructionReset, "tearing Kubernetes down", nil)
			return err
		})
	}
	return g.Wait()
}

// removeNodes removes every host from the cluster: its record goes and its
// node certificate is refused, so the host must join again (the installer's
// command with --force, or a fresh data directory).
func (x *run) removeNodes(ctx context.Context) error {
	return x.removeMachines(ctx, func(string, string) bool { return true })
}
