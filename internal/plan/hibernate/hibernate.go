// Package hibernate is the step family of hibernating and resuming a
// cluster: its workers drained and removed (remove-workers), its
// control-plane machines stopped with their disks kept
// (stop-control-plane-machines), and started again
// (start-control-plane-machines). Making, draining and removing machines
// is the runner's; the step lists stay the runner's.
package hibernate

import (
	"context"
	"fmt"
	"strings"
	"time"

	v1 "kiln.dev/kiln/api/v1"
	"kiln.dev/kiln/internal/failure"
	"kiln.dev/kiln/internal/kubeapi"
	"kiln.dev/kiln/internal/plan/step"
	"kiln.dev/kiln/internal/provider"
	"kiln.dev/kiln/internal/store"
)

// Run is what the hibernate steps need of their run.
type Run interface {
	step.Context
	// UsesAgents: the cluster's nodes run Kiln's agents (and Kubernetes).
	UsesAgents() bool
	// Stopper is the provider as a provider.Stopper; nil when it cannot
	// stop machines.
	Stopper() provider.Stopper
	// ProviderCluster is the cluster as the provider knows it.
	ProviderCluster() provider.Cluster
	// ControlPlaneMachines are the control-plane machines the spec wants.
	ControlPlaneMachines() []provider.MachineSpec
	// EnsureMachines makes (or starts) machines that are not there.
	EnsureMachines(ctx context.Context, ms []provider.MachineSpec) error
	// KubernetesReady waits until Kubernetes reports machines' nodes Ready.
	KubernetesReady(ctx context.Context, ms []provider.MachineSpec) error
	// DrainBeforeDelete drains every worker as before a delete.
	DrainBeforeDelete(ctx context.Context) error
	// Workers are the cluster's workers, by their machines and records.
	Workers(ctx context.Context) ([]Worker, error)
	// Nodes are the cluster's node records, by name.
	Nodes(ctx context.Context) (map[string]*store.Node, error)
	// KubeClient is the cluster's API as an admin.
	KubeClient(ctx context.Context) (*kubeapi.Client, error)
	// RemoveNode deletes a node's machine (when machine), its Node object
	// (when kc is not nil) and its record (when record).
	RemoveNode(ctx context.Context, name string, machine, record bool, kc *kubeapi.Client) error
}

// Worker is a worker node of the cluster.
type Worker struct {
	Name    string
	Machine bool // the provider has its machine
}

// Steps are the hibernate family's steps of one run.
type Steps struct {
	r  Run
	cl *store.Cluster
}

// New returns the hibernate steps of the run r.
func New(r Run) Steps { return Steps{r: r, cl: r.Cluster()} }

// RemoveWorkers takes every worker away for a hibernation: each is
// drained within its pool's drainTimeout as before a delete (budgets
// respected; a drain that cannot finish is an event, and the hibernation
// goes on), then its machine, its Node object and its record are deleted.
// The pools keep their sizes: a resume makes the workers again.
func (s Steps) RemoveWorkers(ctx context.Context) error {
	if err := s.r.DrainBeforeDelete(ctx); err != nil {
		return err
	}
	members, err := s.r.Workers(ctx)
	if err != nil {
		return err
	}
	records, err := s.r.Nodes(ctx)
	if err != nil {
		return err
	}
	var kc *kubeapi.Client
	if s.r.UsesAgents() && len(members) > 0 {
		if kc, err = s.r.KubeClient(ctx); err != nil {
			s.r.Log().Warn("could not reach the cluster's Kubernetes API; its worker Node objects stay", "err", err)
			kc = nil
		} else {
			defer kc.Close()
		}
	}
	var done []string
	for _, m := range members {
		if s.r.Canceling() {
			return step.ErrCancelRequested
		}
		if err := s.r.RemoveNode(ctx, m.Name, m.Machine, records[m.Name] != nil, kc); err != nil {
			return err
		}
		s.r.Progress(ctx, m.Name, "removed")
		done = append(done, m.Name)
	}
	if len(done) == 0 {
		return step.Skipped("the cluster has no worker")
	}
	s.r.Note("drained and removed: " + strings.Join(done, ", "))
	return nil
}

// stopper is the provider as a provider.Stopper, or a terminal error
// saying it cannot stop machines.
func (s Steps) stopper() (provider.Stopper, error) {
	st := s.r.Stopper()
	if st == nil {
		return nil, &failure.Error{Code: v1.CodeInvalidParameter, Target: "spec.provider",
			Message: fmt.Sprintf("the %s provider cannot stop machines and keep their disks, so its clusters cannot hibernate", s.cl.Spec.Provider)}
	}
	return st, nil
}

// StopControlPlaneMachines stops the control-plane machines, keeping their
// disks (etcd's data among them).
func (s Steps) StopControlPlaneMachines(ctx context.Context) error {
	stop, err := s.stopper()
	if err != nil {
		return err
	}
	cps := s.r.ControlPlaneMachines()
	for _, m := range cps {
		s.r.Log().Info("stopping machine", "machine", m.Name)
		if err := stop.StopMachine(ctx, s.r.ProviderCluster(), m.Name); err != nil {
			return fmt.Errorf("stop machine %q: %w", m.Name, err)
		}
		s.r.Progress(ctx, m.Name, "stopped")
	}
	s.r.Note("stopped, disks kept: " + strings.Join(step.Names(cps), ", "))
	return nil
}

// StartControlPlaneMachines starts the stopped control-plane machines
// again and waits until Kubernetes reports each Ready: their agents start
// the components they ran, on the data they had.
func (s Steps) StartControlPlaneMachines(ctx context.Context) error {
	cps := s.r.ControlPlaneMachines()
	t0 := s.r.Now()
	if err := s.r.EnsureMachines(ctx, cps); err != nil {
		return err
	}
	if !s.r.UsesAgents() {
		return nil
	}
	if err := s.r.KubernetesReady(ctx, cps); err != nil {
		return err
	}
	s.r.Note(fmt.Sprintf("started and Ready in %s: %s", s.r.Now().Sub(t0).Round(time.Second), strings.Join(step.Names(cps), ", ")))
	return nil
}
