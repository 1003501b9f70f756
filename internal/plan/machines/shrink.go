package machines

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"

	v1 "kiln.dev/kiln/api/v1"
	"kiln.dev/kiln/internal/distro/local"
	"kiln.dev/kiln/internal/failure"
	"kiln.dev/kiln/internal/kubeapi"
	"kiln.dev/kiln/internal/plan/step"
	"kiln.dev/kiln/internal/provider"
	"kiln.dev/kiln/internal/store"
	"kiln.dev/kiln/internal/validate"
)

// How far one leaving control-plane node got, kept in the step's
// checkpoint under its name (provider.CheckpointOf): a worker that takes
// the step over after a crash goes on from there, and neither removes the
// member again nor skips the machine's delete.
const (
	leftEtcd = "etcd-member-removed"
	drained  = "drained"
	removed  = "removed"
)

// ShrinkControlPlane (shrink-control-plane) removes the control-plane
// nodes beyond spec.controlPlane.size, one at a time, the highest number
// first, never the first node (cp-0): each one's etcd member is removed
// while the members that stay keep quorum (the etcd-leave instruction on
// the node: its API server stops, the member is removed through the nodes
// that stay, etcd refusing a removal that would lose quorum, then its etcd
// stops; a node whose machine is gone has its member removed through the
// first node instead), then the node is cordoned and drained as a
// scale-down drains, and its machine, its Node object and its record are
// deleted (RemoveNode, the scale-down's path: a provider's load balancer
// forgets the machine with it). The nodes that stay must be Ready in
// Kubernetes first. Each node's progress is in the step's checkpoint.
// Without Kubernetes (sim) the nodes are removed as they are.
func (s Steps) ShrinkControlPlane(ctx context.Context) error {
	size := s.cl.Spec.ControlPlane.Size
	leaving, err := s.w.ControlPlaneSurplus(ctx)
	if err != nil {
		return err
	}
	cp := provider.CheckpointOf(ctx)
	done := RemovedBefore(cp, s.cl.Name, leaving)
	if len(leaving) == 0 && len(done) == 0 {
		return step.Skipped("the control plane has no node beyond spec.controlPlane.size (%d)", size)
	}
	if len(leaving) > 0 && !validate.CanShrinkControlPlane(&s.cl.Spec) {
		// The API refuses such a spec; one written before it did is refused here.
		return failure.Terminal(v1.CodeInvalidParameter, "the control plane of a cluster of the %s distribution on the %s provider does not shrink "+
			"by spec.controlPlane.size: set it back to %d and remove its control-plane hosts one at a time with `kiln node remove`",
			s.cl.Spec.Distribution, s.cl.Spec.Provider, size+len(leaving))
	}
	if !s.r.UsesAgents() {
		return s.w.shrinkWithoutKubernetes(ctx, cp, leaving, done)
	}
	keep := ControlPlaneMachines(s.cl)
	if len(leaving) > 0 {
		if err := s.w.controlPlaneUp(ctx); err != nil {
			return err
		}
		if err := s.r.KubernetesReady(ctx, keep); err != nil {
			return err
		}
	}
	through, err := s.w.etcdClientURLs(ctx, keep)
	if err != nil {
		return err
	}
	kc, err := s.r.KubeClient(ctx)
	if err != nil {
		return err
	}
	defer kc.Close()
	for _, m := range leaving {
		if s.r.Canceling() { // a safe point: between two nodes
			return step.ErrCancelRequested
		}
		if err := s.w.leaveControlPlane(ctx, cp, kc, m, keep[0].Name, through); err != nil {
			return err
		}
		done = append(done, m.Name)
	}
	s.r.Event(ctx, "Normal", "ControlPlaneShrank", fmt.Sprintf("the control plane shrank to %s: %s left it, one at a time, each etcd member removed before its machine",
		nodesWord(size), strings.Join(done, ", ")))
	s.r.Note(fmt.Sprintf("removed one at a time, highest number first, each etcd member before its node was drained and its machine deleted: %s",
		strings.Join(done, ", ")))
	return nil
}

// ControlPlaneSurplus are the control-plane nodes beyond
// spec.controlPlane.size (by the number in their names: machines the
// provider has and node records), in the order they leave: the highest
// number first. The first node is never one of them.
func (w Work) ControlPlaneSurplus(ctx context.Context) ([]Member, error) {
	ms, err := w.r.Provider().ListMachines(ctx, w.r.ProviderCluster())
	if err != nil {
		return nil, fmt.Errorf("list machines: %w", err)
	}
	nodes, err := w.r.Nodes(ctx)
	if err != nil {
		return nil, err
	}
	return controlPlaneSurplus(w.cl.Name, w.cl.Spec.ControlPlane.Size, ms, nodes), nil
}

// controlPlaneSurplus is ControlPlaneSurplus of what the provider and the
// store have.
func controlPlaneSurplus(cluster string, size int, ms []provider.Machine, nodes map[string]*store.Node) []Member {
	prefix := cluster + "-cp-"
	surplus := func(name string) bool {
		i := index(name)
		return strings.HasPrefix(name, prefix) && i > 0 && i >= size
	}
	byName := map[string]*Member{}
	for _, m := range ms {
		if m.Role == v1.RoleControlPlane && surplus(m.Name) {
			byName[m.Name] = &Member{Name: m.Name, Index: index(m.Name), Machine: true, Revision: m.Revision, NotReady: true}
		}
	}
	for name, n := range nodes {
		if n.Role != v1.RoleControlPlane || !surplus(name) {
			continue
		}
		mb := byName[name]
		if mb == nil {
			mb = &Member{Name: name, Index: index(name)}
			byName[name] = mb
		}
		mb.Created, mb.NotReady = n.CreatedAt, n.State != v1.NodeReady
	}
	out := make([]Member, 0, len(byName))
	for _, m := range byName {
		out = append(out, *m)
	}
	slices.SortFunc(out, func(a, b Member) int { return cmp.Compare(b.Index, a.Index) })
	return out
}

// RemovedBefore are the nodes of cluster the step's checkpoint says were
// removed (by an earlier attempt, or a worker that died since), highest
// number first, but for those still leaving. A checkpoint lists no keys:
// the names looked up are every control-plane node's but the first's, up to
// the largest control plane.
func RemovedBefore(cp provider.Checkpoint, cluster string, leaving []Member) []string {
	var out []string
	for i := slices.Max(validate.ControlPlaneSizes) - 1; i > 0; i-- {
		name := fmt.Sprintf("%s-cp-%d", cluster, i)
		if cp.Get(name) == removed && !slices.ContainsFunc(leaving, func(m Member) bool { return m.Name == name }) {
			out = append(out, name)
		}
	}
	return out
}

// leaveControlPlane takes one node out of the control plane: its etcd
// member removed, the node drained, then its machine, Node object and
// record deleted (leave, with the checkpoint).
func (w Work) leaveControlPlane(ctx context.Context, cp provider.Checkpoint, kc *kubeapi.Client, m Member, first string, through []string) error {
	nodes, err := w.r.Nodes(ctx)
	if err != nil {
		return err
	}
	rec := nodes[m.Name]
	return leave(ctx, cp, m.Name, leaveParts{
		removeMember: func(ctx context.Context) error {
			w.r.Log().Info("removing the etcd member of a leaving control-plane node", "node", m.Name, "through", through)
			w.r.EventOn(ctx, "Normal", "NodeLeavingControlPlane", m.Name,
				fmt.Sprintf("control-plane node %s leaves the control plane: its etcd member is removed, then it is drained and its machine deleted", m.Name))
			w.r.Progress(ctx, m.Name, "removing its etcd member")
			if err := w.removeMember(ctx, m, rec, first, through); err != nil {
				return err
			}
			w.r.EventOn(ctx, "Normal", "EtcdMemberRemoved", m.Name, fmt.Sprintf("etcd member %s removed; the members that stay keep quorum", m.Name))
			return nil
		},
		drain: func(ctx context.Context) error {
			st, err := w.drain(ctx, kc, m)
			var fe *failure.Error
			if errors.As(err, &fe) && fe.Code == v1.CodeDrainTimeout {
				fe.Message += fmt.Sprintf(" Its etcd member was removed already: a retry drains it again and deletes its machine; the control plane keeps %s",
					nodesWord(w.cl.Spec.ControlPlane.Size))
			}
			if err != nil {
				return err
			}
			w.r.EventOn(ctx, "Normal", "NodeDrained", m.Name, fmt.Sprintf("control-plane node %s drained (%s); removing it", m.Name, drainSummary(st)))
			return nil
		},
		remove: func(ctx context.Context) error {
			if err := w.RemoveNode(ctx, m.Name, m.Machine, rec != nil, kc); err != nil {
				return err
			}
			w.r.Progress(ctx, m.Name, "removed")
			return nil
		},
	})
}

// leaveParts are the parts of one node's leave, in order.
type leaveParts struct {
	removeMember, drain, remove func(context.Context) error
}

// leave runs the parts of node's leave that the checkpoint does not say
// are done, recording each as it ends: a member removed is not removed
// again, a node drained is not drained again, and a leave is over only once
// its machine, Node object and record are deleted (remove, which finds
// what is left, runs until it succeeded). nil parts are done already.
func leave(ctx context.Context, cp provider.Checkpoint, node string, p leaveParts) error {
	phase := cp.Get(node)
	if phase == removed {
		return nil
	}
	if phase == "" {
		if err := p.removeMember(ctx); err != nil {
			return err
		}
		if err := cp.Set(ctx, node, leftEtcd); err != nil {
			return err
		}
		phase = leftEtcd
	}
	if phase == leftEtcd {
		if err := p.drain(ctx); err != nil {
			return err
		}
		if err := cp.Set(ctx, node, drained); err != nil {
			return err
		}
	}
	if err := p.remove(ctx); err != nil {
		return err
	}
	return cp.Set(ctx, node, removed)
}

// removeMember has the etcd member of the leaving node m removed with an
// etcd-leave instruction: on m itself when it has its machine and a record
// (its agent), else on the first control-plane node, for m's member.
// Either way the removal goes through the members that stay.
func (w Work) removeMember(ctx context.Context, m Member, rec *store.Node, first string, through []string) error {
	params := func() (json.RawMessage, error) {
		return json.Marshal(v1.EtcdLeaveParams{Member: m.Name, Through: through})
	}
	if m.Machine && rec != nil {
		if err := w.r.SetNodeState(ctx, m.Name, v1.NodeDeleting, "leaving the control plane: its etcd member is removed"); err != nil {
			return err
		}
		_, err := w.r.AskPart(ctx, rec, v1.InstructionEtcdLeave, "", params)
		if err != nil && ctx.Err() == nil && rec.State != v1.NodeDeleting {
			// The node serves the API again (its agent started it again):
			// it shows the state it had until the step's retry.
			if serr := w.r.SetNodeState(ctx, m.Name, rec.State, rec.Message); serr != nil {
				w.r.Log().Info("could not show the node's state again after its leave failed", "node", m.Name, "err", serr)
			}
		}
		return err
	}
	n, err := w.r.NodeRecords().GetNode(ctx, w.cl.Key(), first)
	if err != nil {
		return fmt.Errorf("control-plane node %s, to remove the etcd member of %s (its machine is gone): %w", first, m.Name, err)
	}
	w.r.Log().Info("the leaving node's machine is gone; its etcd member is removed through the first node", "node", m.Name, "through", first)
	_, err = w.r.AskPart(ctx, n, v1.InstructionEtcdLeave, m.Name, params)
	return err
}

// etcdClientURLs are the etcd client URLs of the control-plane nodes that
// stay, the first node's first.
func (w Work) etcdClientURLs(ctx context.Context, keep []provider.MachineSpec) ([]string, error) {
	var out []string
	for _, m := range keep {
		n, err := w.r.NodeRecords().GetNode(ctx, w.cl.Key(), m.Name)
		if err != nil {
			return nil, fmt.Errorf("control-plane node %s: %w", m.Name, err)
		}
		if n.Address != "" {
			out = append(out, local.EtcdClientURL(n.Address))
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("no control-plane node that stays has an address to reach its etcd member at")
	}
	return out, nil
}

// shrinkWithoutKubernetes removes the surplus control-plane machines and
// records of a provider whose machines run no Kubernetes (sim): there is
// no etcd member to remove and nothing to drain.
func (w Work) shrinkWithoutKubernetes(ctx context.Context, cp provider.Checkpoint, leaving []Member, done []string) error {
	records, err := w.r.Nodes(ctx)
	if err != nil {
		return err
	}
	for _, m := range leaving {
		if err := w.RemoveNode(ctx, m.Name, m.Machine, records[m.Name] != nil, nil); err != nil {
			return err
		}
		if err := cp.Set(ctx, m.Name, removed); err != nil {
			return err
		}
		w.r.EventOn(ctx, "Normal", "NodeLeftControlPlane", m.Name, fmt.Sprintf("control-plane node %s removed: the %s provider's machines run no Kubernetes, so no etcd member was removed and nothing drained",
			m.Name, w.cl.Spec.Provider))
		done = append(done, m.Name)
	}
	w.r.Event(ctx, "Normal", "ControlPlaneShrank", fmt.Sprintf("the control plane shrank to %s: %s removed", nodesWord(w.cl.Spec.ControlPlane.Size), strings.Join(done, ", ")))
	w.r.Note(fmt.Sprintf("removed one at a time, highest number first: %s; no etcd member removed and nothing drained: the %s provider's machines run no Kubernetes",
		strings.Join(done, ", "), w.cl.Spec.Provider))
	return nil
}

// nodesWord says "1 node", "3 nodes".
func nodesWord(n int) string {
	if n == 1 {
		return "1 node"
	}
	return fmt.Sprintf("%d nodes", n)
}
