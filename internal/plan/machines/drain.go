package machines

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	v1 "kiln.dev/kiln/api/v1"
	"kiln.dev/kiln/internal/failure"
	"kiln.dev/kiln/internal/kubeapi"
	"kiln.dev/kiln/internal/plan/step"
	"kiln.dev/kiln/internal/store"
	"kiln.dev/kiln/internal/validate"
)

// NodeDeleter deletes Node objects in Kubernetes (*kubeapi.Client).
type NodeDeleter interface {
	DeleteNode(ctx context.Context, name string) error
}

// drainAndRemove removes worker nodes that leave their pools, one at a
// time in the order given (newest first): each is cordoned and drained
// through the cluster's Kubernetes API within its pool's drainTimeout
// (kubeapi.Drain: every pod but DaemonSet and mirror pods is evicted,
// PodDisruptionBudgets respected), then its machine, its Node object and its
// record are deleted. A drain that times out fails the operation with
// DrainTimeout naming the pods left; the node stays cordoned and nothing of
// it is deleted. Machines without Kubernetes (sim) are removed undrained,
// and the step says so.
func (w Work) drainAndRemove(ctx context.Context, doomed []Member) error {
	if len(doomed) == 0 {
		return nil
	}
	records, err := w.r.Nodes(ctx)
	if err != nil {
		return err
	}
	var done []string
	if !w.r.UsesAgents() {
		for _, m := range doomed {
			if err := w.RemoveNode(ctx, m.Name, m.Machine, records[m.Name] != nil, nil); err != nil {
				return err
			}
			w.r.EventOn(ctx, "Normal", "NodeDrainSkipped", m.Name, fmt.Sprintf("node %s left pool %s and was removed without a drain: the %s provider's machines run no Kubernetes",
				m.Name, m.Pool, w.cl.Spec.Provider))
			done = append(done, m.Name)
		}
		w.r.Note(fmt.Sprintf("removed %s (newest first); not drained: the %s provider's machines run no Kubernetes",
			strings.Join(done, ", "), w.cl.Spec.Provider))
		return nil
	}
	if err := w.controlPlaneUp(ctx); err != nil {
		return err
	}
	kc, err := w.r.KubeClient(ctx)
	if err != nil {
		return err
	}
	defer kc.Close()
	for _, m := range doomed {
		if w.r.Canceling() { // a safe point: between two nodes
			return step.ErrCancelRequested
		}
		st, err := w.drain(ctx, kc, m)
		if err != nil {
			return err
		}
		what := drainSummary(st)
		w.r.EventOn(ctx, "Normal", "NodeDrained", m.Name, fmt.Sprintf("node %s of pool %s drained (%s); removing it", m.Name, m.Pool, what))
		if err := w.RemoveNode(ctx, m.Name, m.Machine, records[m.Name] != nil, kc); err != nil {
			return err
		}
		w.r.Progress(ctx, m.Name, "removed")
		done = append(done, fmt.Sprintf("%s (%s)", m.Name, what))
	}
	order := "newest first"
	if len(w.op.Nodes) > 0 {
		order = "the underused nodes the autoscaler chose first"
	}
	w.r.Note("drained and removed, " + order + ": " + strings.Join(done, ", "))
	return nil
}

// drain drains one node within its pool's drainTimeout, showing how far it
// is in the step's message.
func (w Work) drain(ctx context.Context, kc *kubeapi.Client, m Member) (kubeapi.DrainStatus, error) {
	pool, i := w.poolOf(m.Pool)
	timeout, field := validate.DrainTimeout(v1.WorkerPool{}), "the default drain timeout: the pool is gone from the spec"
	if m.Pool == "" {
		field = "the default drain timeout: the node is in no pool (a control-plane node, or a host of an edge cluster)"
	}
	if pool != nil {
		timeout, field = validate.DrainTimeout(*pool), fmt.Sprintf("spec.workerPools[%d].drainTimeout", i)
	}
	w.r.Log().Info("draining node", "node", m.Name, "pool", m.Pool, "timeout", timeout)
	w.r.EventOn(ctx, "Normal", "NodeDraining", m.Name, fmt.Sprintf("draining node %s%s (timeout %s)", m.Name, ofPool(m.Pool), timeout))
	w.r.Progress(ctx, m.Name, "cordoned, draining")
	// A drain may stop at any moment for a cancel: the node stays
	// cordoned, with what was evicted gone, and a later change drains it
	// again or, if the spec keeps it, uncordons it.
	dctx, stop := w.r.Cancelable(ctx)
	defer stop()
	st, err := kc.Drain(dctx, m.Name, kubeapi.DrainOptions{
		Timeout:    timeout,
		CordonedBy: w.op.ID,
		Poll:       w.r.Timing().InstructionPoll,
		Progress:   func(st kubeapi.DrainStatus) { w.r.Progress(ctx, m.Name, drainProgress(st)) },
	})
	var de *kubeapi.DrainError
	switch {
	case errors.As(err, &de):
		fe := drainFailure(nodeID(w.cl, m.Name), m, timeout, field, de)
		w.r.EventOn(ctx, "Warning", "NodeDrainTimeout", m.Name, fe.Message)
		return st, fe
	case err != nil && ctx.Err() == nil && context.Cause(dctx) == step.ErrCancelRequested:
		w.r.Log().Info("drain stopped: cancel requested", "node", m.Name)
		return st, step.ErrCancelRequested
	case err != nil && ctx.Err() != nil:
		return st, ctx.Err()
	case err != nil:
		return st, failure.Retryable(v1.CodeInternal, err, "drain node %s: the cluster's Kubernetes API failed: %v", m.Name, err)
	}
	w.r.Log().Info("node drained", "node", m.Name, "evicted", st.Evicted, "skipped", len(st.Skipped), "missing", st.NodeMissing)
	return st, nil
}

// drainSummary says how a drain ended: "3 pods evicted", or what it left.
func drainSummary(st kubeapi.DrainStatus) string {
	if st.NodeMissing {
		return "it was not in Kubernetes"
	}
	s := pods(st.Evicted) + " evicted"
	if len(st.Abandoned) > 0 {
		names := make([]string, len(st.Abandoned))
		for i, p := range st.Abandoned {
			names[i] = p.String()
		}
		s += fmt.Sprintf("; the node is unreachable, so %s past the grace period went with it: %s",
			pods(len(names)), strings.Join(names, ", "))
	}
	return s
}

// drainProgress is what the step's message says of a node being drained.
func drainProgress(st kubeapi.DrainStatus) string {
	if len(st.Left) == 0 {
		return "drained"
	}
	s := fmt.Sprintf("draining: %s left", pods(len(st.Left)))
	if r := st.Refused(); len(r) > 0 {
		names := make([]string, len(r))
		for i, p := range r {
			names[i] = p.PodRef.String()
		}
		s += fmt.Sprintf(", eviction refused by a PodDisruptionBudget for %s", strings.Join(names, ", "))
	}
	return s
}

// drainFailure is the operation's error for a drain that timed out: what
// is left on the node and why, the timeout and where it is set, and what to
// do. Each pod left is also a detail.
func drainFailure(target string, m Member, timeout time.Duration, field string, de *kubeapi.DrainError) *failure.Error {
	left := de.Status.Left
	parts := make([]string, len(left))
	details := make([]v1.Error, len(left))
	for i, p := range left {
		parts[i] = p.Describe()
		details[i] = v1.Error{Code: v1.CodeDrainTimeout, Target: "pods/" + p.PodRef.String(), Message: p.Describe()}
	}
	what := "let these pods go (relax the PodDisruptionBudget or scale the workload) or raise the drain timeout, then retry"
	if len(de.Status.Refused()) == 0 {
		what = "find out why these pods do not terminate or raise the drain timeout, then retry"
	}
	return &failure.Error{
		Code:   v1.CodeDrainTimeout,
		Target: target,
		Message: fmt.Sprintf("node %s%s was not drained within %s (%s): %s left: %s. The node stays cordoned and was not removed; %s",
			m.Name, ofPool(m.Pool), timeout, field, pods(len(left)), strings.Join(parts, "; "), what),
		Details: details,
		Err:     de,
	}
}

// ofPool says " of pool NAME" of a node in a pool, nothing of a host of an
// edge cluster (in no pool).
func ofPool(pool string) string {
	if pool == "" {
		return ""
	}
	return " of pool " + pool
}

// pods says "1 pod", "2 pods".
func pods(n int) string {
	if n == 1 {
		return "1 pod"
	}
	return fmt.Sprintf("%d pods", n)
}

// nodeID is the API path of one of the cluster's nodes.
func nodeID(cl *store.Cluster, name string) string {
	return fmt.Sprintf("/v1/projects/%s/clusters/%s/nodes/%s", cl.Project, cl.Name, name)
}

// deleteDrains is how many workers a delete drains at once: each drain asks
// the cluster's API for its node's pods every InstructionPoll.
const deleteDrains = 10

// DrainBeforeDelete drains every worker of a cluster being deleted,
// deleteDrains at once, each within its pool's drainTimeout, so that its
// workloads stop as they would on a scale-down (PodDisruptionBudgets
// respected). Every worker is cordoned before any is drained: a pod evicted from one would otherwise
// be placed on the next, only to be evicted again, and the delete would
// take as many pods' ends as there are workers. The cluster is going away
// whatever happens, so a drain that times out or fails, or an API that does
// not answer, is an event and the delete goes on; a forced delete drains
// nothing. Only a cancel stops it.
func (w Work) DrainBeforeDelete(ctx context.Context) error {
	if !w.r.UsesAgents() || w.r.Forcing() {
		return nil
	}
	Members, err := w.WorkerMembers(ctx)
	if err != nil || len(Members) == 0 {
		return err
	}
	kc, err := w.r.KubeClient(ctx)
	if err == nil {
		defer kc.Close()
		pctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		err = kc.Ready(pctx)
		cancel()
	}
	if err != nil {
		w.r.Event(ctx, "Warning", "NodeDrainSkipped", fmt.Sprintf("workers not drained before the delete: the cluster's API does not answer: %v", err))
		return nil
	}
	Members = slices.DeleteFunc(Members, func(m Member) bool { return !m.Machine })
	for _, m := range Members {
		// A cordon that fails here fails again in the node's drain,
		// which says so.
		if err := kc.Cordon(ctx, m.Name, w.op.ID); err != nil && !errors.Is(err, kubeapi.ErrNotFound) {
			w.r.Log().Info("could not cordon node before the drains", "node", m.Name, "err", err)
		}
	}
	errs := make([]error, len(Members))
	var wg sync.WaitGroup
	slots := make(chan struct{}, deleteDrains)
	for i, m := range Members {
		wg.Go(func() {
			slots <- struct{}{}
			defer func() { <-slots }()
			_, err := w.drain(ctx, kc, m)
			errs[i] = err
			switch {
			case errors.Is(err, step.ErrCancelRequested) || ctx.Err() != nil:
			case err != nil:
				w.r.EventOn(ctx, "Warning", "NodeDrainSkipped", m.Name, fmt.Sprintf("node %s deleted undrained: %v", m.Name, err))
			default:
				w.r.EventOn(ctx, "Normal", "NodeDrained", m.Name, fmt.Sprintf("node %s drained before the delete", m.Name))
			}
		})
	}
	wg.Wait()
	if ctx.Err() != nil {
		return ctx.Err()
	}
	if slices.ContainsFunc(errs, func(err error) bool { return errors.Is(err, step.ErrCancelRequested) }) {
		return step.ErrCancelRequested
	}
	return nil
}

// drainFor drains node within timeout, showing its progress as drain
// does, and says how it ended.
func (w Work) drainFor(ctx context.Context, kc *kubeapi.Client, node string, timeout time.Duration) (string, error) {
	st, err := kc.Drain(ctx, node, kubeapi.DrainOptions{Timeout: timeout, CordonedBy: w.op.ID, Poll: w.r.Timing().InstructionPoll,
		Progress: func(st kubeapi.DrainStatus) { w.r.Progress(ctx, node, drainProgress(st)) }})
	return drainSummary(st), err
}
