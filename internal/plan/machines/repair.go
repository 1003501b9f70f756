package machines

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	v1 "kiln.dev/kiln/api/v1"
	"kiln.dev/kiln/internal/backend/health"
	"kiln.dev/kiln/internal/failure"
	"kiln.dev/kiln/internal/kubeapi"
	"kiln.dev/kiln/internal/plan/step"
	"kiln.dev/kiln/internal/provider"
	"kiln.dev/kiln/internal/validate"
)

// RestartStoppedControlPlane starts again the control-plane machines the
// provider reports stopped (a killed container, an agent process that
// exited), with an event for each saying how it had stopped, and, on
// providers with agents, waits until Kubernetes reports them Ready. A
// repair never replaces the control plane (etcd membership needs its own
// care), but a stopped machine keeps its data and comes back as it was.
// Skipped when none has stopped, and on providers that cannot say.
func (s Steps) RestartStoppedControlPlane(ctx context.Context) error {
	sr, ok := s.r.Provider().(StopReporter)
	if !ok {
		return step.Skipped("the %s provider does not report stopped machines", s.cl.Spec.Provider)
	}
	stopped, err := sr.StoppedMachines(ctx, s.r.ProviderCluster())
	if err != nil {
		return failure.Retryable(v1.CodeInternal, err, "ask the %s provider which machines stopped: %v", s.cl.Spec.Provider, err)
	}
	var down []provider.MachineSpec
	for _, m := range ControlPlaneMachines(s.cl) {
		if slices.ContainsFunc(stopped, func(s provider.StoppedMachine) bool { return s.Name == m.Name }) {
			down = append(down, m)
		}
	}
	if len(down) == 0 {
		return step.Skipped("no control-plane machine has stopped")
	}
	if err := s.w.controlPlaneUp(ctx); err != nil {
		return err
	}
	s.r.Note("started again: " + strings.Join(step.Names(down), ", "))
	if s.r.UsesAgents() {
		if err := s.r.KubernetesReady(ctx, down); err != nil {
			return err
		}
		s.r.Note("started again and Ready: " + strings.Join(step.Names(down), ", "))
	}
	return nil
}

// ReplaceUnhealthyNodes removes the worker nodes the health check says to
// replace (judged again here: a node may have recovered since the check
// started the operation): machine, Node object and record, without a
// drain, since the node does not answer; its pods are rescheduled once its
// Node object is gone. The next steps make the machines again.
func (s Steps) ReplaceUnhealthyNodes(ctx context.Context) error {
	records, err := s.r.Nodes(ctx)
	if err != nil {
		return err
	}
	var kc *kubeapi.Client
	var kube map[string]time.Time
	if s.r.UsesAgents() {
		kc, err = s.r.KubeClient(ctx)
		var kn []kubeapi.Node
		if err == nil {
			defer kc.Close()
			kn, err = kc.ListNodes(ctx)
		}
		if err != nil {
			// The nodes that missed their heartbeats are still known.
			s.r.Log().Warn("could not read the Kubernetes nodes; judging by heartbeats only", "err", err)
			kc = nil
		}
		kube = health.KubeNotReady(kn)
	}
	var all []v1.Node
	for _, name := range slices.Sorted(maps.Keys(records)) {
		all = append(all, records[name].Node)
	}
	// No node counts as silent here: the health check that began this
	// repair did count them, a moment ago.
	verdict := health.Assess(&s.cl.Spec, health.Nodes(all, kube, time.Time{}), s.r.Now())
	if len(verdict.Replace) == 0 {
		why := "no worker node is unhealthy beyond its pool's unhealthyTimeout any more"
		if msg := verdict.BlockedMessage(); msg != "" {
			why = msg
		}
		return step.Skipped("%s", why)
	}
	machines, err := s.r.Provider().ListMachines(ctx, s.r.ProviderCluster())
	if err != nil {
		return fmt.Errorf("list machines: %w", err)
	}
	has := map[string]bool{}
	for _, m := range machines {
		has[m.Name] = true
	}
	for _, name := range verdict.Replace {
		if s.r.Canceling() {
			return step.ErrCancelRequested
		}
		n := records[name]
		if in := n.Interruption; in != nil {
			s.r.EventOn(ctx, "Warning", "NodeReplacing", name, fmt.Sprintf("node %s of pool %s has a %s interruption notice (the cloud will %s it at %s): draining and replacing it",
				name, n.Pool, in.Kind, in.Action, in.At.UTC().Format(time.RFC3339)))
			if kc != nil {
				s.drainInterrupted(ctx, kc, n.Node)
			}
		} else {
			s.r.EventOn(ctx, "Warning", "NodeReplacing", name, fmt.Sprintf("node %s of pool %s is unhealthy (%s): replacing it without a drain",
				name, n.Pool, unhealthyWhy(n.Node, kube[name])))
		}
		var del NodeDeleter // nil, not a nil *kubeapi.Client, when kc is
		if kc != nil {
			del = kc
		}
		if err := s.w.RemoveNode(ctx, name, has[name], true, del); err != nil {
			return err
		}
		s.r.Progress(ctx, name, "removed")
	}
	s.r.Note("removed unhealthy: " + strings.Join(verdict.Replace, ", "))
	return nil
}

// interruptionMargin is how long before the cloud takes an interrupted
// machine away its drain gives up, so that the machine is removed by Kiln
// and not lost under it.
const interruptionMargin = 15 * time.Second

// drainInterrupted drains a node the cloud takes away, within its pool's
// drainTimeout or until shortly before the cloud's deadline, whichever
// comes first (at least a few seconds). The machine goes anyway: pods left
// when the time is up go with it, and an event names them.
func (s Steps) drainInterrupted(ctx context.Context, kc *kubeapi.Client, n v1.Node) {
	timeout := validate.DrainTimeout(v1.WorkerPool{})
	if i := slices.IndexFunc(s.cl.Spec.WorkerPools, func(p v1.WorkerPool) bool { return p.Name == n.Pool }); i >= 0 {
		timeout = validate.DrainTimeout(s.cl.Spec.WorkerPools[i])
	}
	if left := n.Interruption.At.Sub(s.r.Now()) - interruptionMargin; left < timeout {
		timeout = max(left, 5*time.Second)
	}
	s.r.EventOn(ctx, "Normal", "NodeDraining", n.Name, fmt.Sprintf("draining node %s of pool %s before its interruption (timeout %s)", n.Name, n.Pool, timeout.Round(time.Second)))
	summary, err := s.w.drainFor(ctx, kc, n.Name, timeout)
	if err != nil {
		s.r.EventOn(ctx, "Warning", "NodeDrainSkipped", n.Name, fmt.Sprintf("node %s was not drained before its interruption: %v; it goes with its machine", n.Name, err))
		return
	}
	s.r.EventOn(ctx, "Normal", "NodeDrained", n.Name, fmt.Sprintf("node %s of pool %s drained before its interruption (%s); removing it", n.Name, n.Pool, summary))
}

// unhealthyWhy says why a node is unhealthy.
func unhealthyWhy(n v1.Node, kubeSince time.Time) string {
	var why []string
	if n.State == v1.NodeNotReady && n.LastHeartbeat != nil {
		why = append(why, "no heartbeat since "+n.LastHeartbeat.UTC().Format(time.RFC3339))
	}
	if !kubeSince.IsZero() {
		why = append(why, "NotReady in Kubernetes since "+kubeSince.UTC().Format(time.RFC3339))
	}
	return strings.Join(why, ", ")
}
