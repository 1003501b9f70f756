package plan

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	v1 "kiln.dev/kiln/api/v1"
	"kiln.dev/kiln/internal/distro/kubeapi"
	"kiln.dev/kiln/internal/health"
)

// replaceUnhealthyNodes removes the worker nodes the health check says to
// replace (judged again here: a node may have recovered since the check
// started the operation): machine, Node object and record, without a
// drain, since the node does not answer; its pods are rescheduled once its
// Node object is gone. The next steps make the machines again.
func (x *run) replaceUnhealthyNodes(ctx context.Context) error {
	records, err := x.nodes(ctx)
	if err != nil {
		return err
	}
	var kc *kubeapi.Client
	var kube map[string]time.Time
	if x.usesAgents() {
		kc, err = x.kubeClient(ctx)
		var kn []kubeapi.Node
		if err == nil {
			defer kc.Close()
			kn, err = kc.ListNodes(ctx)
		}
		if err != nil {
			// The nodes that missed their heartbeats are still known.
			x.log.Warn("could not read the Kubernetes nodes; judging by heartbeats only", "err", err)
			kc = nil
		}
		kube = health.KubeNotReady(kn)
	}
	var all []v1.Node
	for _, name := range slices.Sorted(maps.Keys(records)) {
		all = append(all, records[name].Node)
	}
	verdict := health.Assess(&x.cl.Spec, health.Nodes(all, kube), x.r.opts.Now())
	if len(verdict.Replace) == 0 {
		why := "no worker node is unhealthy beyond its pool's unhealthyTimeout any more"
		if msg := verdict.BlockedMessage(); msg != "" {
			why = msg
		}
		return skipped("%s", why)
	}
	machines, err := x.p.ListMachines(ctx, x.pc)
	if err != nil {
		return fmt.Errorf("list machines: %w", err)
	}
	has := map[string]bool{}
	for _, m := range machines {
		has[m.Name] = true
	}
	for _, name := range verdict.Replace {
		if x.canceling() {
			return errCancelRequested
		}
		n := records[name]
		x.eventOn(ctx, "Warning", "NodeReplacing", name, fmt.Sprintf("node %s of pool %s is unhealthy (%s): replacing it without a drain",
			name, n.Pool, unhealthyWhy(n.Node, kube[name])))
		var del nodeDeleter
		if kc != nil {
			del = kc
		}
		if err := x.removeNode(ctx, name, has[name], true, del); err != nil {
			return err
		}
		x.showProgress(ctx, name, "removed")
	}
	x.note = "removed unhealthy: " + strings.Join(verdict.Replace, ", ")
	return nil
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
