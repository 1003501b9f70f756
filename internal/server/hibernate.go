package server

import (
	"context"
	"net/http"

	v1 "kiln.dev/kiln/api/v1"
	"kiln.dev/kiln/internal/provider"
	"kiln.dev/kiln/internal/store"
)

// hibernateCluster begins a hibernate operation (POST
// .../clusters/{c}/hibernate, no body): the workers are drained and
// removed, the control-plane machines stopped with their disks, and the
// cluster ends Hibernated. 409 for a cluster that is busy, hibernated
// already, not Succeeded, or whose provider cannot stop machines.
func (s *Server) hibernateCluster(w http.ResponseWriter, r *http.Request) error {
	return s.clusterAction(w, r, v1.KindHibernate, func(cl *store.Cluster) error {
		if _, ok := s.providers[cl.Spec.Provider].(provider.Stopper); !ok || s.hostsJoin(cl.Spec.Provider) {
			return conflict(clusterRef(r), "cluster",
				"cannot hibernate: the %s provider cannot stop machines and keep their disks", cl.Spec.Provider)
		}
		return nil
	}, func(_ context.Context, cl *store.Cluster) error {
		switch st := cl.Status.ProvisioningState; st {
		case v1.StateSucceeded:
			return nil
		case v1.StateHibernated:
			return conflict(clusterRef(r), "cluster", "is Hibernated already; resume it with kiln cluster resume %s", cl.Name)
		default:
			return conflict(clusterRef(r), "cluster",
				"is %s: only a cluster whose last operation succeeded can hibernate; retry or change it first", st)
		}
	})
}

// resumeCluster begins a resume operation (POST .../clusters/{c}/resume, no
// body): the control plane starts on its data, the workers are made again,
// and the cluster ends Succeeded. 409 for a cluster that is not Hibernated.
func (s *Server) resumeCluster(w http.ResponseWriter, r *http.Request) error {
	return s.clusterAction(w, r, v1.KindResume, func(*store.Cluster) error { return nil },
		func(_ context.Context, cl *store.Cluster) error {
			if st := cl.Status.ProvisioningState; st != v1.StateHibernated {
				return conflict(clusterRef(r), "cluster", "is %s, not Hibernated: there is nothing to resume", st)
			}
			return nil
		})
}

// rotateCertificates begins a rotate-certificates operation (POST
// .../clusters/{c}/rotate-certificates, no body): every node installs
// again with new certificates of the cluster CA, one at a time. 409 for a
// cluster whose nodes run no Kubernetes Kiln installs (sim's, kubeadm's),
// or whose last operation did not succeed.
func (s *Server) rotateCertificates(w http.ResponseWriter, r *http.Request) error {
	return s.clusterAction(w, r, v1.KindRotateCertificates, func(cl *store.Cluster) error {
		if a, ok := s.providers[cl.Spec.Provider].(interface{ Agentless() bool }); ok && a.Agentless() {
			return conflict(clusterRef(r), "cluster", "the %s provider's clusters run no Kubernetes: they have no certificates to rotate", cl.Spec.Provider)
		}
		if cl.Spec.Distribution == v1.DistroKubeadm {
			return conflict(clusterRef(r), "cluster",
				"the kubeadm distribution's certificates are kubeadm's: renew them on each control-plane node with kubeadm certs renew all")
		}
		if s.providers.Attached(cl.Spec.Provider) {
			return conflict(clusterRef(r), "cluster", "is attached: its certificates are those of what made it, and Kiln renews none of them")
		}
		return nil
	}, func(_ context.Context, cl *store.Cluster) error {
		if st := cl.Status.ProvisioningState; st != v1.StateSucceeded {
			return conflict(clusterRef(r), "cluster", "is %s: only a cluster whose last operation succeeded has its certificates rotated; retry or change it first", st)
		}
		return nil
	})
}

// reconcileCluster begins a reconcile operation (POST
// .../clusters/{c}/reconcile, no body): every pack of the cluster's
// profile applied again, so that what was changed or deleted by hand is
// back. 409 for a cluster without a profile applied, or whose last
// operation did not succeed.
func (s *Server) reconcileCluster(w http.ResponseWriter, r *http.Request) error {
	return s.clusterAction(w, r, v1.KindReconcile, func(*store.Cluster) error { return nil },
		func(_ context.Context, cl *store.Cluster) error {
			switch {
			case cl.Status.Profile == nil:
				return conflict(clusterRef(r), "cluster", "has no profile applied: there is nothing to reconcile (kiln cluster set-profile gives it one)")
			case cl.Status.ProvisioningState != v1.StateSucceeded:
				return conflict(clusterRef(r), "cluster", "is %s: only a cluster whose last operation succeeded is reconciled; retry or change it first",
					cl.Status.ProvisioningState)
			}
			return nil
		})
}
