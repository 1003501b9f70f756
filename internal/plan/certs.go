package plan

import (
	"context"
	"fmt"
	"time"

	v1 "kiln.dev/kiln/api/v1"
	"kiln.dev/kiln/internal/plan/step"
	"kiln.dev/kiln/internal/provider"
	"kiln.dev/kiln/internal/store"
)

// StepRenewCertificates installs every node again with new certificates.
const StepRenewCertificates = "renew-certificates"

// rotateCertificatesSteps renew the Kubernetes certificates of every node
// (kiln cluster rotate-certs, or the certificate check before they
// expire).
var rotateCertificatesSteps = []string{StepRenewCertificates}

// rollNodes installs every node again, one at a time, control plane first,
// doing being what its progress says: its components restart on new files
// (etcd keeps its data and membership) and the next starts only once
// Kubernetes reports it Ready since its kubelet restarted, so that behind
// the load balancer the API stays up while the other control-plane nodes
// serve. A node installed
// since since is not installed again: a retry resumes at the node that
// failed. It returns the nodes it installed.
func (x *run) rollNodes(ctx context.Context, since time.Time, doing string) ([]string, error) {
	groups, err := x.nodeGroups(ctx)
	if err != nil {
		return nil, err
	}
	install, err := x.installer(ctx)
	if err != nil {
		return nil, err
	}
	var installed []string
	for _, group := range groups {
		for i, m := range group {
			if x.canceling() {
				return installed, step.ErrCancelRequested
			}
			n, err := x.nodeRecords.GetNode(ctx, x.cl.Key(), m.Name)
			if err != nil {
				return installed, fmt.Errorf("node %s: %w", m.Name, err)
			}
			if renewedSince(n.CertificatesExpireAt, since, x.certificateTTL()) {
				continue
			}
			x.showProgress(ctx, m.Name, doing)
			if err := x.setNodeState(ctx, m.Name, v1.NodeProvisioning, doing); err != nil {
				return installed, err
			}
			// A margin for the node's clock, which its kubelet's
			// heartbeats are of.
			restarted := x.r.opts.Now().Add(-2 * time.Second)
			if err := install(ctx, i, m); err != nil {
				return installed, err
			}
			// The Ready the kubelet said before its restart is stale:
			// wait for one said since.
			if err := x.freshlyReady(ctx, []*store.Node{n}, restarted); err != nil {
				return installed, err
			}
			if err := x.kubernetesReady(ctx, []provider.MachineSpec{m}); err != nil {
				return installed, err
			}
			x.showProgress(ctx, m.Name, "done")
			installed = append(installed, m.Name)
		}
	}
	return installed, nil
}

// nodeGroups are the cluster's control-plane nodes and its workers, in
// install order.
func (x *run) nodeGroups(ctx context.Context) ([][]provider.MachineSpec, error) {
	cps, err := x.fleet().ControlPlaneTargets(ctx)
	if err != nil {
		return nil, err
	}
	workers, err := x.fleet().WorkerTargets(ctx)
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
func (x *run) certificateTTL() time.Duration {
	if d := x.r.opts.ComponentCertificateTTL; d > 0 {
		return d
	}
	return time.Duration(max(x.cl.Spec.CertificateTTLDays, 1)) * 24 * time.Hour
}
