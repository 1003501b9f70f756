package server

import (
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"
	"unicode"

	"k8s.io/client-go/rest"

	v1 "kiln.dev/kiln/api/v1"
	"kiln.dev/kiln/internal/pki"
	"kiln.dev/kiln/internal/plan/clusterapi"
	"kiln.dev/kiln/internal/store"
	"kiln.dev/kiln/internal/trust"
)

// getKubeconfig answers the caller's kubeconfig for a cluster
// (GET .../clusters/{cluster}/kubeconfig): the cluster's endpoint, verified
// with the cluster's CA (both CAs during a rotation, trust.ClusterCAs), and
// a user that holds no credential but runs kiln credential for one at each
// use, so each use is the person's own, short-lived and refused once they
// are no longer a member. It holds no secret. The query's command is the
// plugin's path (kiln kubeconfig gives its own); kiln, found on the PATH,
// when none is given. An attached cluster's is its attach kubeconfig's
// server and CA, with the same user.
func (s *Server) getKubeconfig(w http.ResponseWriter, r *http.Request) error {
	k := clusterKey(r)
	a, err := s.clusterAccess(r)
	if err != nil {
		return err
	}
	command := r.URL.Query().Get("command")
	switch {
	case command == "":
		command = "kiln"
	case len(command) > 4096 || strings.ContainsFunc(command, unicode.IsControl):
		return badRequest("command", "the exec plugin's command must be a path of at most 4096 characters, without control characters")
	}
	p := info(r.Context()).principal
	exec := pki.Exec{Command: command, Args: []string{"credential", k.Name, "--project", k.Project},
		InstallHint: "kubectl gets this cluster's credential from the kiln CLI, signed in to Kiln (kiln login): put kiln on the PATH"}
	cfg := pki.ExecKubeconfig(a.server, a.caPEM, k.Name, personName(p.Name, p.User), exec)
	w.Header().Set("Content-Type", "application/yaml")
	w.Header().Set("Content-Disposition", fmt.Sprintf("attachment; filename=%q", k.Name+".kubeconfig"))
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(cfg)
	return nil
}

// access is how people reach a cluster's API: its server and the CAs that
// verify it, and who signs their credentials: Kiln, with the cluster's CA
// (cas), or, for an attached cluster, the cluster itself, through the
// kubeconfig it was attached with (attached).
type access struct {
	cl       *store.Cluster
	server   string // https://host:port
	caPEM    []byte // nil: the system's roots
	cas      *trust.ClusterCAs
	attached *rest.Config
}

// clusterAccess reads the cluster of the request and how people reach it,
// refusing a cluster Kiln hands out no credentials for: without a CA (sim,
// or its create not started), without an endpoint yet, or attached and not
// connected yet.
func (s *Server) clusterAccess(r *http.Request) (*access, error) {
	cl, err := s.readCluster(r)
	if err != nil {
		return nil, err
	}
	if cl.Spec.Attach != nil {
		cfg, err := clusterapi.AttachedConfig(r.Context(), s.secrets, cl.Key())
		if err != nil {
			return nil, err
		}
		if cfg == nil {
			return nil, conflict(clusterRef(r), "cluster",
				"is attached and not connected yet: wait for its attach operation (%s) to finish", cl.Status.CurrentOperation)
		}
		return &access{cl: cl, server: cfg.Host, caPEM: cfg.CAData, attached: cfg}, nil
	}
	cas, err := trust.LoadCAs(r.Context(), s.secrets, cl.Key())
	if errors.Is(err, store.ErrNotFound) {
		return nil, conflict(clusterRef(r), "cluster",
			"has no certificate authority: the %s provider makes no real Kubernetes cluster, or its create has not started yet", cl.Spec.Provider)
	}
	if err != nil {
		return nil, err
	}
	if cl.Status.Endpoint == "" {
		return nil, conflict(clusterRef(r), "cluster",
			"has no endpoint yet: wait for its create operation (%s) to finish", cl.Status.CurrentOperation)
	}
	return &access{cl: cl, server: "https://" + cl.Status.Endpoint, caPEM: cas.TrustPEM(), cas: cas}, nil
}

// runningClusterAccess is clusterAccess for a credential, which a
// hibernated cluster has no use for: its API is down until it resumes.
func (s *Server) runningClusterAccess(r *http.Request) (*access, error) {
	a, err := s.clusterAccess(r)
	if err == nil && a.cl.Status.ProvisioningState == v1.StateHibernated {
		return nil, conflict(clusterRef(r), "cluster", "is hibernated: resume it first (kiln cluster resume %s)", a.cl.Name)
	}
	return a, err
}

// MaxAdminKubeconfigTTL is the longest an admin (break-glass) kubeconfig
// lasts; DefaultAdminKubeconfigTTL when the request names none.
const (
	MaxAdminKubeconfigTTL     = 24 * time.Hour
	DefaultAdminKubeconfigTTL = time.Hour
)

// adminKubeconfig issues a break-glass kubeconfig
// (POST .../clusters/{cluster}/admin-kubeconfig, admins): a client
// certificate in system:masters, which RBAC does not hold back, for at most
// MaxAdminKubeconfigTTL (body {"ttl": "1h"}, optional). For when people's
// own credentials cannot be used (RBAC broken, Kiln's access bindings
// deleted). Each issue is a Warning event on the cluster and an audit entry.
func (s *Server) adminKubeconfig(w http.ResponseWriter, r *http.Request) error {
	var in v1.AdminKubeconfigRequest
	if hasBody(r) {
		body, err := readBody(r)
		if err != nil {
			return err
		}
		if err := decodeStrict(body, &in); err != nil {
			return err
		}
	}
	ttl := DefaultAdminKubeconfigTTL
	if in.TTL != "" {
		d, err := time.ParseDuration(in.TTL)
		if err != nil || d < time.Minute || d > MaxAdminKubeconfigTTL {
			return badRequest("ttl", "%q must be a duration from 1m to 24h, such as 30m", in.TTL)
		}
		ttl = d
	}
	k := clusterKey(r)
	a, err := s.runningClusterAccess(r)
	if err != nil {
		return err
	}
	if a.attached != nil {
		return conflict(clusterRef(r), "cluster",
			"is attached: Kiln holds no CA of it to sign a break-glass kubeconfig; use the kubeconfig it was attached with (secret %s)", a.cl.Spec.Attach.Secret)
	}
	who := info(r.Context()).principal.Name
	req := pki.AdminRequest("kiln-admin:" + who)
	req.ValidFor, req.Now = ttl, s.now()
	certPEM, keyPEM, err := a.cas.Issuer().Issue(req)
	if err != nil {
		return fmt.Errorf("issue admin certificate: %w", err)
	}
	cfg := pki.Kubeconfig(a.server, a.caPEM, certPEM, keyPEM, k.Name, "kiln-admin")
	ev := &store.Event{Project: k.Project, Cluster: k.Name, Event: v1.Event{Type: "Warning", Reason: "AdminKubeconfigIssued",
		Message: fmt.Sprintf("a break-glass admin kubeconfig (system:masters) was issued to %s, valid %s", who, ttl)}}
	if err := s.events.AppendEvent(r.Context(), ev); err != nil {
		// An unaudited credential must not go out.
		return fmt.Errorf("record admin kubeconfig issue: %w", err)
	}
	s.log.WarnContext(r.Context(), "admin kubeconfig issued", "cluster", k.String(), "principal", who, "ttl", ttl.String())
	w.Header().Set("Content-Type", "application/yaml")
	w.Header().Set("Content-Disposition", fmt.Sprintf("attachment; filename=%q", k.Name+"-admin.kubeconfig"))
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(cfg)
	return nil
}
