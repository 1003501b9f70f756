package plan

import (
	"context"
	"fmt"
	"net"
	"time"

	v1 "kiln.dev/kiln/api/v1"
	"kiln.dev/kiln/internal/failure"
	"kiln.dev/kiln/internal/plan/backup"
	"kiln.dev/kiln/internal/plan/clusterapi"
	"kiln.dev/kiln/internal/provider"
	"kiln.dev/kiln/internal/store"
)

// fail ends the operation Failed at step i (-1: before any step) with one
// FinishOperation: the step, the operation and the cluster's status commit
// together, and the lease is released.
func (x *run) fail(ctx context.Context, i int, fe *failure.Error) error {
	now := x.r.opts.Now().UTC()
	step := ""
	if i >= 0 {
		s := &x.op.Steps[i]
		step = s.Name
		s.State, s.EndTime, s.Message = v1.StepFailed, &now, fe.Message
	}
	target := fe.Target
	if target == "" {
		target = fmt.Sprintf("/v1/projects/%s/clusters/%s", x.cl.Project, x.cl.Name)
	}
	x.op.Status, x.op.EndTime = v1.OpFailed, &now
	x.op.Error = &v1.Error{Code: fe.Code, Message: fe.Message, Target: target, Details: fe.Details, Retryable: fe.Retryable}

	st := &x.cl.Status
	if leavesCluster(x.op) {
		backup.New(backupRun{view{x}}).Fail(ctx, fe.Message)
		st.ProvisioningState, st.UpdatedAt = v1.StateSucceeded, now
	} else {
		switch st.ProvisioningState {
		case v1.StateCreating, v1.StateUpdating, v1.StateDeleting:
			st.FailedProvisioningState = st.ProvisioningState
		}
		st.ProvisioningState = v1.StateFailed
		st.LastError = &v1.StatusError{Code: fe.Code, Message: fe.Message, Step: step, Retryable: fe.Retryable}
		st.UpdatedAt = now
	}

	msg := fmt.Sprintf("%s operation failed: %s", x.op.Kind, fe.Message)
	if step != "" {
		msg = fmt.Sprintf("%s operation failed at step %s: %s", x.op.Kind, step, fe.Message)
	}
	x.log.Error("operation failed", "step", step, "code", fe.Code, "retryable", fe.Retryable, "err", fe)
	// The end events are written with the end itself: in the timeline exactly once.
	events := []*store.Event{x.newEvent("Warning", "OperationFailed", msg)}
	if step != "" {
		events = append([]*store.Event{x.newEvent("Warning", "StepFailed", fmt.Sprintf("step %s failed: %s", step, fe.Message))}, events...)
	}
	if err := x.finishOperation(ctx, false, events...); err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		return fmt.Errorf("finish failed operation: %w", err)
	}
	x.diagnose(ctx, msg)
	return nil
}

// KubeReader reads a cluster's API (kubeapi.Client's Get).
type KubeReader interface {
	Get(ctx context.Context, path string) ([]byte, error)
}

// diagnoseTimeout bounds the gathering of a failed operation's bundle.
const diagnoseTimeout = 45 * time.Second

// diagnose has the failed operation's diagnostics bundle gathered, within
// diagnoseTimeout, and says where it is in an event. A bundle that could
// not be made is logged: the operation failed all the same.
func (x *run) diagnose(ctx context.Context, reason string) {
	if x.r.opts.Diagnose == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), diagnoseTimeout)
	defer cancel()
	var kube KubeReader
	if x.usesAgents() {
		if endpoint := x.readEndpoint(ctx); endpoint != "" {
			if kc, err := clusterapi.KubeClient(ctx, x.secrets, x.cl.Key(), endpoint, "kiln:diagnostics"); err == nil {
				defer kc.Close()
				kube = kc
			}
		}
	}
	id, err := x.r.opts.Diagnose(ctx, x.cl, x.op.ID, reason, kube)
	if err != nil {
		x.log.Warn("could not gather the failed operation's diagnostics", "err", err)
		return
	}
	x.event(ctx, "Normal", "DiagnosticsGathered", fmt.Sprintf("diagnostics %s gathered for the failed %s operation: kiln diagnostics download %s", id, x.op.Kind, id))
}

// readEndpoint is the cluster's API endpoint as far as it can be known
// without making anything: the one recorded, or else the first
// control-plane machine's API server; "" when there is none.
func (x *run) readEndpoint(ctx context.Context) string {
	if x.cl.Status.Endpoint != "" {
		return x.cl.Status.Endpoint
	}
	ms, err := x.p.ListMachines(ctx, x.pc)
	if err != nil {
		return ""
	}
	for _, m := range ms {
		if m.Role == v1.RoleControlPlane && m.Address != "" {
			return net.JoinHostPort(m.Address, "6443")
		}
	}
	return ""
}

// succeed ends the operation Succeeded with one FinishOperation; a delete
// removes the cluster and its nodes in the same transaction.
func (x *run) succeed(ctx context.Context) error {
	deleting := x.op.Kind == v1.KindDelete
	st := &x.cl.Status
	if !deleting {
		if st.Endpoint == "" {
			ep, err := x.endpoint(ctx)
			if err != nil {
				return fmt.Errorf("find endpoint: %w", err)
			}
			st.Endpoint = ep
		}
	}
	now := x.r.opts.Now().UTC()
	x.op.Status, x.op.EndTime, x.op.Error = v1.OpSucceeded, &now, nil
	st.ProvisioningState, st.FailedProvisioningState, st.LastError = v1.StateSucceeded, "", nil
	if x.op.Kind == v1.KindHibernate {
		st.ProvisioningState = v1.StateHibernated
	}
	st.UpdatedAt = now

	x.log.Info("finishing operation", "kind", x.op.Kind, "endpoint", st.Endpoint)
	msg := fmt.Sprintf("%s operation succeeded", x.op.Kind)
	if deleting {
		msg = "delete operation succeeded; the cluster record is removed"
	}
	if x.forcing() {
		x.op.Leftovers = x.leftovers(ctx)
		if ctx.Err() != nil {
			return ctx.Err()
		}
		msg = "forced delete succeeded; the cluster record is removed; " + describeLeftovers(x.op.Leftovers)
	}
	// The end event is written with the end itself: in the timeline exactly once.
	end := x.newEvent("Normal", "OperationSucceeded", msg)
	if err := x.finishOperation(ctx, deleting, end); err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		return fmt.Errorf("finish operation: %w", err)
	}
	x.log.Info("operation succeeded", "kind", x.op.Kind, "duration", now.Sub(x.op.StartTime).Round(time.Millisecond))
	return nil
}

// endpoint is the load balancer's address or, without load balancers, the
// first control-plane machine's address on port 6443.
func (x *run) endpoint(ctx context.Context) (string, error) {
	if x.hostsJoin() {
		return x.fleet().HostEndpoint(ctx)
	}
	if lbs, ok := x.p.(provider.LoadBalancers); ok {
		lb, err := lbs.EnsureLoadBalancer(ctx, x.pc)
		if err != nil {
			return "", fmt.Errorf("ensure load balancer: %w", err)
		}
		return lb.Address, nil
	}
	ms, err := x.p.ListMachines(ctx, x.pc)
	if err != nil {
		return "", fmt.Errorf("list machines: %w", err)
	}
	for _, m := range ms {
		if m.Role == v1.RoleControlPlane && m.Address != "" {
			return net.JoinHostPort(m.Address, "6443"), nil
		}
	}
	return "", nil
}

// nodes returns every node record of the cluster, by name.
func (x *run) nodes(ctx context.Context) (map[string]*store.Node, error) {
	out := map[string]*store.Node{}
	pg := store.Page{Limit: 1000}
	for {
		ns, next, err := x.nodeRecords.ListNodes(ctx, x.cl.Key(), pg)
		if err != nil {
			return nil, fmt.Errorf("list nodes: %w", err)
		}
		for _, n := range ns {
			out[n.Name] = n
		}
		if next == "" {
			return out, nil
		}
		pg.Token = next
	}
}
