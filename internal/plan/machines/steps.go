package machines

import (
	"context"

	v1 "kiln.dev/kiln/api/v1"
	"kiln.dev/kiln/internal/plan/step"
)

// EnsureControlPlaneMachines (ensure-control-plane-machines) makes the
// control-plane machines the spec wants.
func (s Steps) EnsureControlPlaneMachines(ctx context.Context) error {
	_, err := s.w.EnsureMachines(ctx, ControlPlaneMachines(s.cl))
	return err
}

// EnsureWorkerMachines (ensure-worker-machines) makes the worker machines
// the spec wants.
func (s Steps) EnsureWorkerMachines(ctx context.Context) error {
	ms, err := s.w.workerMachines(ctx)
	if err != nil {
		return err
	}
	_, err = s.w.EnsureMachines(ctx, ms)
	return err
}

// WaitNodesRegistered (wait-nodes-registered) waits until the
// control-plane machines' agents registered.
func (s Steps) WaitNodesRegistered(ctx context.Context) error {
	return s.w.Converge(ctx, ControlPlaneMachines(s.cl), v1.NodeDiscovered, "registered", false)
}

// ApproveNodes (approve-nodes) waits until the control-plane nodes are
// approved (at once when spec.nodeApproval is auto).
func (s Steps) ApproveNodes(ctx context.Context) error {
	return s.w.Converge(ctx, ControlPlaneMachines(s.cl), v1.NodeApproved, "approved", false)
}

// RemoveSurplusMachines (remove-surplus-machines) removes what the spec no
// longer wants: the newest nodes of a pool that shrank and every node of a
// pool that is gone, each drained first (drainAndRemove); then anything
// else the spec does not name.
func (s Steps) RemoveSurplusMachines(ctx context.Context) error {
	keep, surplus, err := s.w.workerPlan(ctx)
	if err != nil {
		return err
	}
	if err := s.w.drainAndRemove(ctx, surplus); err != nil {
		return err
	}
	wanted := map[string]bool{}
	for _, n := range append(step.Names(ControlPlaneMachines(s.cl)), step.Names(keep)...) {
		wanted[n] = true
	}
	return s.w.removeMachines(ctx, func(name, _ string) bool { return !wanted[name] })
}

// DeleteWorkerMachines (delete-worker-machines) drains the workers, then
// deletes every machine but the control plane's.
func (s Steps) DeleteWorkerMachines(ctx context.Context) error {
	if err := s.w.DrainBeforeDelete(ctx); err != nil {
		return err
	}
	return s.w.removeMachines(ctx, func(_, role string) bool { return role != v1.RoleControlPlane })
}

// DeleteControlPlaneMachines (delete-control-plane-machines) deletes every
// machine left.
func (s Steps) DeleteControlPlaneMachines(ctx context.Context) error {
	return s.w.removeMachines(ctx, func(string, string) bool { return true })
}
