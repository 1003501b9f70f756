package server

import (
	"encoding/json"
	"fmt"
	"net/http"
	"time"

	v1 "kiln.dev/kiln/api/v1"
	"kiln.dev/kiln/internal/pki"
	"kiln.dev/kiln/internal/validate"
)

// A person's credentials are limited per principal: a kubectl that asks at
// every call is served from kiln credential's cache, so a steady one a
// second with room for a burst is more than a person needs.
const (
	credentialRate  = 1.0
	credentialBurst = 30
)

// roleGroups are the cluster groups of the project roles.
var roleGroups = map[string]string{
	v1.RoleViewer: pki.GroupViewers, v1.RoleOperator: pki.GroupOperators,
	v1.RoleAdmin: pki.GroupAdmins, v1.RoleOwner: pki.GroupAdmins,
}

// issueCredential issues the caller's own credential for a cluster
// (POST .../clusters/{cluster}/credential): a client certificate signed by
// the cluster's CA whose user is the caller and whose groups are
// kiln:people and the group of the caller's role in the project now, valid
// for spec.access.credentialTTL. It answers an ExecCredential, which kubectl
// reads through kiln credential. Being a member is checked at each issue, so
// a person removed gets none after and keeps one for at most its life.
func (s *Server) issueCredential(w http.ResponseWriter, r *http.Request) error {
	ri := info(r.Context())
	p := ri.principal
	if wait := s.credentials.take(p.Name); wait > 0 {
		return throttled(w, wait, "%s asked for too many cluster credentials (kiln credential keeps one until it expires)", p.Name)
	}
	k := clusterKey(r)
	cl, cas, err := s.runningClusterTrust(r)
	if err != nil {
		return err
	}
	group, ok := roleGroups[ri.role]
	if !ok {
		return fmt.Errorf("credential for %s: role %q has no cluster group", p.Name, ri.role)
	}
	ttl := validate.CredentialTTL(&cl.Spec)
	req := pki.PersonRequest(personName(p.Name, p.User), group)
	req.ValidFor, req.Now = ttl, s.now()
	certPEM, keyPEM, err := cas.Issuer().Issue(req)
	if err != nil {
		return fmt.Errorf("issue credential: %w", err)
	}
	s.m.credentials.WithLabelValues(ri.role).Inc()
	s.log.InfoContext(r.Context(), "credential issued", "cluster", k.String(), "principal", p.Name,
		"role", ri.role, "ttl", ttl.String())
	out := v1.ExecCredential{APIVersion: v1.ExecCredentialAPIVersion, Kind: v1.ExecCredentialKind,
		Status: &v1.ExecCredentialStatus{ExpirationTimestamp: req.Now.Add(ttl).UTC().Truncate(time.Second),
			ClientCertificateData: string(certPEM), ClientKeyData: string(keyPEM)}}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	return json.NewEncoder(w).Encode(out)
}

// personName is the Kubernetes user name of a principal: a user's own
// name, or the principal's name for a service account
// (serviceaccount:PROJECT/NAME), so the cluster's audit log and kubectl auth
// whoami name who it is.
func personName(principal, user string) string {
	if user != "" {
		return user
	}
	return principal
}
