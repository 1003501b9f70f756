package server

import (
	"errors"
	"fmt"
	"net/http"
	"time"

	v1 "kiln.dev/kiln/api/v1"
	"kiln.dev/kiln/internal/pki"
	"kiln.dev/kiln/internal/store"
	"kiln.dev/kiln/internal/trust"
)

// getKubeconfig issues an admin kubeconfig for a cluster
// (GET .../clusters/{cluster}/kubeconfig): a client certificate in
// system:masters signed by the cluster's CA, valid for the cluster's
// certificateTTLDays, against the cluster's endpoint and verifying it with
// the cluster's CA. During a CA rotation it is signed by the CA its phase
// issues with and verifies with both (trust.ClusterCAs). Every issue is
// an event on the cluster.
func (s *Server) getKubeconfig(w http.ResponseWriter, r *http.Request) error {
	k := clusterKey(r)
	cl, err := s.readCluster(r)
	if err != nil {
		return err
	}
	if cl.Spec.Attach != nil {
		return conflict(clusterRef(r), "cluster",
			"is attached: Kiln hands out no kubeconfig of its own for it; use the one it was attached with (secret %s)", cl.Spec.Attach.Secret)
	}
	cas, err := trust.LoadCAs(r.Context(), s.secrets, k)
	if errors.Is(err, store.ErrNotFound) {
		return conflict(clusterRef(r), "cluster",
			"has no certificate authority: the %s provider makes no real Kubernetes cluster, or its create has not started yet", cl.Spec.Provider)
	}
	if err != nil {
		return err
	}
	if cl.Status.Endpoint == "" {
		return conflict(clusterRef(r), "cluster",
			"has no endpoint yet: wait for its create operation (%s) to finish", cl.Status.CurrentOperation)
	}
	who := info(r.Context()).principal.Name
	req := pki.AdminRequest("kiln-admin:" + who)
	req.ValidFor = time.Duration(max(cl.Spec.CertificateTTLDays, 1)) * 24 * time.Hour
	req.Now = s.now()
	certPEM, keyPEM, err := cas.Issuer().Issue(req)
	if err != nil {
		return fmt.Errorf("issue admin certificate: %w", err)
	}
	cfg := pki.Kubeconfig("https://"+cl.Status.Endpoint, cas.TrustPEM(), certPEM, keyPEM, k.Name, "kiln-admin")
	ev := &store.Event{Project: k.Project, Cluster: k.Name, Event: v1.Event{Type: "Normal", Reason: "KubeconfigIssued",
		Message: fmt.Sprintf("an admin kubeconfig was issued to %s, valid %d days", who, max(cl.Spec.CertificateTTLDays, 1))}}
	if err := s.events.AppendEvent(r.Context(), ev); err != nil {
		// An unaudited credential must not go out.
		return fmt.Errorf("record kubeconfig issue: %w", err)
	}
	s.log.InfoContext(r.Context(), "kubeconfig issued", "cluster", k.String(), "principal", who)
	w.Header().Set("Content-Type", "application/yaml")
	w.Header().Set("Content-Disposition", fmt.Sprintf("attachment; filename=%q", k.Name+".kubeconfig"))
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(cfg)
	return nil
}
