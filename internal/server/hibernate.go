package server

import (
	"context"
	"errors"
	"net/http"
	"time"

	v1 "kiln.dev/kiln/api/v1"
	"kiln.dev/kiln/internal/provider"
	"kiln.dev/kiln/internal/store"
	"kiln.dev/kiln/internal/trust"
)

// hibernateCluster begins a hibernate operation (POST
// .../clusters/{c}/hibernate, no body): the workers are drained and
// removed, the control-plane machines stopped with their disks, and the
// cluster ends Hibernated. 409 for a cluster that is busy, hibernated
// already, not Succeeded, or whose provider cannot stop machines.
func (s *Server) hibernateCluster(w http.ResponseWriter, r *http.Request) error {
	return s.clusterAction(w, r, v1.KindHibernate, func(cl *store.Cluster) error {
		if !s.canHibernate(cl.Spec.Provider) {
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

// canHibernate reports whether clusters of the provider can hibernate: it
// stops machines and keeps their disks, and its machines are not hosts
// users brought.
func (s *Server) canHibernate(name string) bool {
	_, ok := s.providers[name].(provider.Stopper)
	return ok && !s.hostsJoin(name)
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
// again with new certificates of the cluster CA, one at a time. With
// {"ca": "begin"} it begins a rotate-ca operation instead (a new cluster CA
// trusted beside the old one), and with {"ca": "finish"} a
// finish-ca-rotation (the new CA alone). 409 for a cluster whose nodes run
// no Kubernetes Kiln installs (sim's, kubeadm's, attached), whose last
// operation did not succeed, or whose CA rotation is not where the request
// needs it.
func (s *Server) rotateCertificates(w http.ResponseWriter, r *http.Request) error {
	body, err := readOptionalBody(r)
	if err != nil {
		return err
	}
	var in v1.RotateCertificatesRequest
	if body != nil {
		if err := decodeStrict(body, &in); err != nil {
			return err
		}
	}
	kind := v1.KindRotateCertificates
	switch in.CA {
	case "":
	case v1.CARotationBegin:
		kind = v1.KindRotateCA
	case v1.CARotationFinish:
		kind = v1.KindFinishCARotation
	default:
		return badRequest("ca", "ca is %q: it is %q (a new cluster CA, trusted beside the old one) or %q (the new CA alone), or absent to renew the certificates with the cluster CA",
			in.CA, v1.CARotationBegin, v1.CARotationFinish)
	}
	cl, op, err := s.beginAction(r, kind, func(cl *store.Cluster) error {
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
	}, func(ctx context.Context, cl *store.Cluster) error {
		if st := cl.Status.ProvisioningState; st != v1.StateSucceeded {
			return conflict(clusterRef(r), "cluster", "is %s: only a cluster whose last operation succeeded has its certificates rotated; retry or change it first", st)
		}
		return s.checkCARotation(ctx, r, cl, in.CA)
	}, nil)
	if err != nil {
		return err
	}
	s.accepted(w, r, cl, op, http.StatusAccepted)
	return nil
}

// checkCARotation refuses a request whose ca ("begin", "finish") does not
// fit where the cluster's CA rotation is.
func (s *Server) checkCARotation(ctx context.Context, r *http.Request, cl *store.Cluster, ca string) error {
	if ca == "" {
		return nil
	}
	cas, err := trust.LoadCAs(ctx, s.secrets, cl.Key())
	if errors.Is(err, store.ErrNotFound) {
		return conflict(clusterRef(r), "cluster", "has no certificate authority yet: its create has not started")
	} else if err != nil {
		return err
	}
	switch {
	case ca == v1.CARotationBegin && cas.Rotating():
		return conflict(clusterRef(r), "ca", "a CA rotation is under way (phase %s since %s): finish it with kiln cluster rotate-certs %s --ca --finish",
			cas.Phase, cas.Since.UTC().Format(time.RFC3339), cl.Name)
	case ca == v1.CARotationFinish && !cas.Rotating():
		return conflict(clusterRef(r), "ca", "no CA rotation is under way: begin one with kiln cluster rotate-certs %s --ca", cl.Name)
	case ca == v1.CARotationFinish && cas.Phase == trust.CATrusting:
		return conflict(clusterRef(r), "ca", "the CA rotation has not reached its overlap (not every node trusts the new CA yet): retry its rotate-ca operation first")
	}
	return nil
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
