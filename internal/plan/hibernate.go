package plan

import (
	"context"
	"fmt"
	"strings"
	"time"

	v1 "kiln.dev/kiln/api/v1"
	"kiln.dev/kiln/internal/distro/kubeapi"
	"kiln.dev/kiln/internal/failure"
	"kiln.dev/kiln/internal/plan/step"
	"kiln.dev/kiln/internal/provider"
)

// removeWorkers takes every worker away for a hibernation: each is
// drained within its pool's drainTimeout as before a delete (budgets
// respected; a drain that cannot finish is an event, and the hibernation
// goes on), then its machine, its Node object and its record are deleted.
// The pools keep their sizes: a resume makes the workers again.
func (x *run) removeWorkers(ctx context.Context) error {
	if err := x.drainBeforeDelete(ctx); err != nil {
		return err
	}
	members, err := x.workerMembers(ctx)
	if err != nil {
		return err
	}
	records, err := x.nodes(ctx)
	if err != nil {
		return err
	}
	var kc *kubeapi.Client
	if x.usesAgents() && len(members) > 0 {
		if kc, err = x.kubeClient(ctx); err != nil {
			x.log.Warn("could not reach the cluster's Kubernetes API; its worker Node objects stay", "err", err)
			kc = nil
		} else {
			defer kc.Close()
		}
	}
	var done []string
	for _, m := range members {
		if x.canceling() {
			return step.ErrCancelRequested
		}
		var del nodeDeleter
		if kc != nil {
			del = kc
		}
		if err := x.removeNode(ctx, m.Name, m.Machine, records[m.Name] != nil, del); err != nil {
			return err
		}
		x.showProgress(ctx, m.Name, "removed")
		done = append(done, m.Name)
	}
	if len(done) == 0 {
		return step.Skipped("the cluster has no worker")
	}
	x.note = "drained and removed: " + strings.Join(done, ", ")
	return nil
}

// stopper is the provider as a provider.Stopper, or a terminal error
// saying it cannot stop machines.
func (x *run) stopper() (provider.Stopper, error) {
	s := x.stops
	if s == nil {
		return nil, &failure.Error{Code: v1.CodeInvalidParameter, Target: "spec.provider",
			Message: fmt.Sprintf("the %s provider cannot stop machines and keep their disks, so its clusters cannot hibernate", x.cl.Spec.Provider)}
	}
	return s, nil
}

// stopControlPlaneMachines stops the control-plane machines, keeping their
// disks (etcd's data among them).
func (x *run) stopControlPlaneMachines(ctx context.Context) error {
	s, err := x.stopper()
	if err != nil {
		return err
	}
	cps := controlPlaneMachines(x.cl)
	for _, m := range cps {
		x.log.Info("stopping machine", "machine", m.Name)
		if err := s.StopMachine(ctx, x.pc, m.Name); err != nil {
			return fmt.Errorf("stop machine %q: %w", m.Name, err)
		}
		x.showProgress(ctx, m.Name, "stopped")
	}
	x.note = "stopped, disks kept: " + strings.Join(names(cps), ", ")
	return nil
}

// startControlPlaneMachines starts the stopped control-plane machines
// again and waits until Kubernetes reports each Ready: their agents start
// the components they ran, on the data they had.
func (x *run) startControlPlaneMachines(ctx context.Context) error {
	cps := controlPlaneMachines(x.cl)
	t0 := x.r.opts.Now()
	if _, err := x.ensureMachines(ctx, cps); err != nil {
		return err
	}
	if !x.usesAgents() {
		return nil
	}
	if err := x.kubernetesReady(ctx, cps); err != nil {
		return err
	}
	x.note = fmt.Sprintf("started and Ready in %s: %s", x.r.opts.Now().Sub(t0).Round(time.Second), strings.Join(names(cps), ", "))
	return nil
}
