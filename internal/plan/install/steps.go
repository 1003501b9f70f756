package install

import (
	"context"
	"time"

	v1 "kiln.dev/kiln/api/v1"
	"kiln.dev/kiln/internal/plan/step"
)

// InstallControlPlane (install-control-plane) installs the control-plane
// nodes one at a time: each etcd member joins the ones before it.
func (s Steps) InstallControlPlane(ctx context.Context) error {
	cps, err := s.r.ControlPlaneTargets(ctx)
	if err != nil {
		return err
	}
	if err := s.w.InstallNodes(ctx, cps, true); err != nil {
		return err
	}
	s.startClusterDNS(ctx)
	return nil
}

// startClusterDNS applies the cluster DNS as soon as a new cluster's
// control plane serves, so that CoreDNS starts while the workers are made
// and installed (on a control-plane node, whose taint its pods tolerate),
// instead of once every node is Ready: about 3 s of a docker create.
// wait-nodes-ready applies it again and waits for it, and reports what
// fails; here a failure is only logged.
func (s Steps) startClusterDNS(ctx context.Context) {
	if !s.r.UsesAgents() || !s.w.hasKilnDNS() || (s.op.Kind != v1.KindCreate && s.op.Kind != v1.KindProvision) {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	kc, err := s.r.KubeClient(ctx)
	if err == nil {
		defer kc.Close()
		err = s.w.applyClusterDNS(ctx, kc)
	}
	if err != nil {
		s.r.Log().Info("cluster DNS not applied with the control plane; wait-nodes-ready applies it", "err", err)
	}
}

// InstallWorkers (install-workers) installs the worker nodes, all at once.
func (s Steps) InstallWorkers(ctx context.Context) error {
	ms, err := s.r.WorkerTargets(ctx)
	if err != nil {
		return err
	}
	if len(ms) == 0 && s.r.HostsJoin() {
		return step.Skipped("no host is configured as a worker")
	}
	return s.w.InstallNodes(ctx, ms, false)
}

// WaitNodesReady (wait-nodes-ready) waits until every node is Ready: in
// Kubernetes, or, without agents, as its record says.
func (s Steps) WaitNodesReady(ctx context.Context) error {
	cps, err := s.r.ControlPlaneTargets(ctx)
	if err != nil {
		return err
	}
	ws, err := s.r.WorkerTargets(ctx)
	if err != nil {
		return err
	}
	all := append(cps, ws...)
	if !s.r.UsesAgents() {
		return s.r.Converge(ctx, all, v1.NodeReady, "ready", true)
	}
	return s.w.KubernetesReady(ctx, all)
}
