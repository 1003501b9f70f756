package plan

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"

	v1 "kiln.dev/kiln/api/v1"
	"kiln.dev/kiln/internal/failure"
	"kiln.dev/kiln/internal/plan/step"
)

// Forced delete. The API starts one (DELETE ...?force=true) only after an
// operation failed with a terminal provider error. It runs the delete plan,
// but a step's provider error (terminal, or retryable once its attempts run
// out) does not fail it: the step ends Failed with the error in its message
// and the next step runs. Machine steps delete every machine they can,
// each tried once per attempt. Hosts are not reset. At the end the cluster
// records go as in every delete, and the operation lists in leftovers what
// may be left behind: the machines the provider still reports (or, when it
// cannot list them, those the cluster's nodes knew), the load balancer and
// network whose delete failed, the hosts Kubernetes stays on.

// forcing reports whether the run is a forced delete.
func (x *run) forcing() bool { return x.op.Force && x.op.Kind == v1.KindDelete }

// forceStep returns what a forced delete runs for step name instead of the
// usual step, or nil where the usual step runs (its errors ignored all the
// same).
func (x *run) forceStep(name string) func(context.Context) error {
	if !x.forcing() {
		return nil
	}
	switch name {
	case StepDeleteWorkerMachines:
		return func(ctx context.Context) error {
			return x.fleet().ForceDeleteMachines(ctx, func(role string) bool { return role != v1.RoleControlPlane })
		}
	case StepDeleteControlPlaneMachines:
		return func(ctx context.Context) error {
			return x.fleet().ForceDeleteMachines(ctx, func(string) bool { return true })
		}
	case StepResetNodes:
		return func(context.Context) error {
			return step.Skipped("forced delete: the hosts are not reset; Kubernetes stays on them")
		}
	case StepRemoveNodes:
		return func(ctx context.Context) error { return x.fleet().ForgetNodes(ctx, func(string) bool { return true }) }
	}
	return nil
}

// ignore ends step i of a forced delete Failed with fe in its message, and
// lets the run go on.
func (x *run) ignore(ctx context.Context, i int, fe *failure.Error) error {
	s := &x.op.Steps[i]
	now := x.r.opts.Now().UTC()
	s.State, s.EndTime = v1.StepFailed, &now
	s.Message = "forced delete: error ignored: " + fe.Message
	x.log.Warn("forced delete: ignoring the step's error", "step", s.Name, "code", fe.Code, "err", fe)
	if err := x.save(ctx, true); err != nil {
		return err
	}
	x.event(ctx, "Warning", "StepFailed", fmt.Sprintf("step %s failed; the forced delete goes on: %s", s.Name, fe.Message))
	return nil
}

// leftovers is what a forced delete may leave behind, in the order machines
// (by name), load balancer, network, hosts.
func (x *run) leftovers(ctx context.Context) []v1.Leftover {
	var out []v1.Leftover
	nodes, nodesErr := x.nodes(ctx)
	failed := map[string]string{} // step -> its message
	for _, s := range x.op.Steps {
		if s.State == v1.StepFailed {
			failed[s.Name] = s.Message
		}
	}
	if x.hostsJoin() {
		for _, name := range slices.Sorted(maps.Keys(nodes)) {
			switch nodes[name].State {
			case v1.NodeProvisioning, v1.NodeReady, v1.NodeNotReady, v1.NodeFailed:
				out = append(out, v1.Leftover{Kind: v1.LeftoverHost, Name: name,
					Message: "Kubernetes was not reset on it: reset the host before it joins a cluster again"})
			}
		}
		return out
	}
	ms, err := x.p.ListMachines(ctx, x.pc)
	switch {
	case err == nil:
		for _, m := range ms {
			out = append(out, v1.Leftover{Kind: v1.LeftoverMachine, Name: m.Name, ID: m.ID, Message: "the provider still reports it"})
		}
	case nodesErr == nil && len(nodes) > 0:
		why := "the provider could not list machines (" + failure.From(err).Message + "); it may remain"
		for _, name := range slices.Sorted(maps.Keys(nodes)) {
			out = append(out, v1.Leftover{Kind: v1.LeftoverMachine, Name: name, ID: nodes[name].MachineID, Message: why})
		}
	default:
		out = append(out, v1.Leftover{Kind: v1.LeftoverMachine,
			Message: "the provider could not list machines (" + failure.From(err).Message + "); any of the cluster's machines may remain"})
	}
	if msg, ok := failed[StepDeleteLoadBalancer]; ok {
		out = append(out, v1.Leftover{Kind: v1.LeftoverLoadBalancer, Name: x.cl.Status.Endpoint, Message: msg})
	}
	if msg, ok := failed[StepDeleteNetwork]; ok {
		out = append(out, v1.Leftover{Kind: v1.LeftoverNetwork, Name: x.cl.Name, Message: msg})
	}
	return out
}

// describeLeftovers is the leftovers in one line for an event.
func describeLeftovers(ls []v1.Leftover) string {
	if len(ls) == 0 {
		return "the provider reports nothing left behind"
	}
	var parts []string
	for _, l := range ls {
		p := l.Kind
		if l.Name != "" {
			p += " " + l.Name
		}
		if l.ID != "" {
			p += " (" + l.ID + ")"
		}
		parts = append(parts, p)
	}
	return "may be left behind: " + strings.Join(parts, ", ")
}
