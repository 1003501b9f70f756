package install

import (
	"context"
	"fmt"
	"time"

	v1 "kiln.dev/kiln/api/v1"
	"kiln.dev/kiln/internal/plan/step"
	"kiln.dev/kiln/internal/provider"
	"kiln.dev/kiln/internal/store"
)

// RollNodes installs every node again, one at a time, control plane first,
// doing being what its progress says: its components restart on new files
// (etcd keeps its data and membership) and the next starts only once
// Kubernetes reports it Ready since its kubelet restarted, so that behind
// the load balancer the API stays up while the other control-plane nodes
// serve. A node installed
// since since is not installed again: a retry resumes at the node that
// failed. It returns the nodes it installed, once every node of the
// cluster is Ready.
func (w Work) RollNodes(ctx context.Context, since time.Time, doing string) ([]string, error) {
	groups, err := w.NodeGroups(ctx)
	if err != nil {
		return nil, err
	}
	install, err := w.Installer(ctx)
	if err != nil {
		return nil, err
	}
	var installed []string
	for _, group := range groups {
		for i, m := range group {
			if w.r.Canceling() {
				return installed, step.ErrCancelRequested
			}
			n, err := w.r.NodeRecords().GetNode(ctx, w.cl.Key(), m.Name)
			if err != nil {
				return installed, fmt.Errorf("node %s: %w", m.Name, err)
			}
			if renewedSince(n.CertificatesExpireAt, since, w.certificateTTL()) {
				continue
			}
			w.r.Progress(ctx, m.Name, doing)
			if err := w.SetNodeState(ctx, m.Name, v1.NodeProvisioning, doing); err != nil {
				return installed, err
			}
			// A margin for the node's clock, which its kubelet's
			// heartbeats are of.
			restarted := w.r.Now().Add(-2 * time.Second)
			if err := install(ctx, i, m); err != nil {
				return installed, err
			}
			// The Ready the kubelet said before its restart is stale:
			// wait for one said since.
			if err := w.FreshlyReady(ctx, []*store.Node{n}, restarted); err != nil {
				return installed, err
			}
			if err := w.KubernetesReady(ctx, []provider.MachineSpec{m}); err != nil {
				return installed, err
			}
			w.r.Progress(ctx, m.Name, "done")
			installed = append(installed, m.Name)
		}
	}
	if len(installed) == 0 {
		return installed, nil
	}
	// A node installed early may have turned NotReady while the later
	// ones restarted (its kubelet's first status after a restart can
	// come late): the roll ends with every node Ready again.
	var all []provider.MachineSpec
	for _, group := range groups {
		all = append(all, group...)
	}
	return installed, w.KubernetesReady(ctx, all)
}

// NodeGroups are the cluster's control-plane nodes and its workers, in
// install order.
func (w Work) NodeGroups(ctx context.Context) ([][]provider.MachineSpec, error) {
	cps, err := w.r.ControlPlaneTargets(ctx)
	if err != nil {
		return nil, err
	}
	workers, err := w.r.WorkerTargets(ctx)
	if err != nil {
		return nil, err
	}
	return [][]provider.MachineSpec{cps, workers}, nil
}

// renewedSince reports whether certificates that expire at notAfter, with a
// lifetime of ttl, were issued after start.
func renewedSince(notAfter *time.Time, start time.Time, ttl time.Duration) bool {
	return notAfter != nil && notAfter.Add(-ttl).After(start)
}

// certificateTTL is the lifetime of the node certificates the cluster's
// installs issue: spec.certificateTTLDays, or the runner's
// ComponentCertificateTTL when set (a test setting).
func (w Work) certificateTTL() time.Duration {
	if d := w.r.Timing().CertificateTTL; d > 0 {
		return d
	}
	return time.Duration(max(w.cl.Spec.CertificateTTLDays, 1)) * 24 * time.Hour
}
