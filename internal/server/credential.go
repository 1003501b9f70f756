package server

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"time"

	v1 "kiln.dev/kiln/api/v1"
	"kiln.dev/kiln/internal/kubeapi"
	"kiln.dev/kiln/internal/pki"
	"kiln.dev/kiln/internal/plan/clusterapi"
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
// a person removed gets none after and keeps one for at most its life. An
// attached cluster, whose CA Kiln does not hold, signs it itself
// (clusterSigned).
func (s *Server) issueCredential(w http.ResponseWriter, r *http.Request) error {
	ri := info(r.Context())
	p := ri.principal
	if wait := s.credentials.take(p.Name); wait > 0 {
		return throttled(w, wait, "%s asked for too many cluster credentials (kiln credential keeps one until it expires)", p.Name)
	}
	k := clusterKey(r)
	a, err := s.runningClusterAccess(r)
	if err != nil {
		return err
	}
	group, ok := roleGroups[ri.role]
	if !ok {
		return fmt.Errorf("credential for %s: role %q has no cluster group", p.Name, ri.role)
	}
	ttl := validate.CredentialTTL(&a.cl.Spec)
	req := pki.PersonRequest(personName(p.Name, p.User), group)
	req.ValidFor, req.Now = ttl, s.now()
	var certPEM, keyPEM []byte
	if a.attached != nil {
		certPEM, keyPEM, err = s.clusterSigned(r, a, req, ri.role)
	} else if certPEM, keyPEM, err = a.cas.Issuer().Issue(req); err != nil {
		err = fmt.Errorf("issue credential: %w", err)
	}
	if err != nil {
		return err
	}
	expires := req.Now.Add(ttl)
	if cert, err := pki.ParseCertificate(certPEM); err == nil {
		expires = cert.NotAfter
	}
	s.m.credentials.WithLabelValues(ri.role).Inc()
	s.log.InfoContext(r.Context(), "credential issued", "cluster", k.String(), "principal", p.Name,
		"role", ri.role, "expires", expires.UTC().Format(time.RFC3339))
	out := v1.ExecCredential{APIVersion: v1.ExecCredentialAPIVersion, Kind: v1.ExecCredentialKind,
		Status: &v1.ExecCredentialStatus{ExpirationTimestamp: expires.UTC().Truncate(time.Second),
			ClientCertificateData: string(certPEM), ClientKeyData: string(keyPEM)}}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	return json.NewEncoder(w).Encode(out)
}

// clusterSignTimeout bounds how long a credential waits for an attached
// cluster to sign it: kube-controller-manager signs an approved request
// at once.
const clusterSignTimeout = 15 * time.Second

// clusterSigned has an attached cluster sign a person's credential through
// the Kubernetes CSR API (signer kubernetes.io/kube-apiserver-client), with
// the kubeconfig it was attached with, which must be allowed to create and
// approve the request; the key is made here and never leaves kilnd but in
// the answer. The cluster signs for at least 10 minutes, the API's
// shortest, even when spec.access.credentialTTL is shorter.
func (s *Server) clusterSigned(r *http.Request, a *access, req pki.CertRequest, role string) (certPEM, keyPEM []byte, err error) {
	key, keyPEM, err := pki.NewKey()
	if err != nil {
		return nil, nil, err
	}
	csr, err := pki.SubjectCSR(key, req)
	if err != nil {
		return nil, nil, err
	}
	kc, err := clusterapi.FromConfig(a.attached)
	if err != nil {
		return nil, nil, err
	}
	defer kc.Close()
	ctx, cancel := context.WithTimeoutCause(r.Context(), clusterSignTimeout,
		fmt.Errorf("waited %s for the cluster to sign", clusterSignTimeout))
	defer cancel()
	certPEM, err = kc.SignClientCertificate(ctx, kubeapi.ClientCertificateRequest{
		GenerateName: "kiln-credential-", CSR: csr, ValidFor: req.ValidFor,
		Reason: "KilnCredential", Labels: map[string]string{"kiln.dev/managed": "true"},
		Message: fmt.Sprintf("Kiln issued %s's credential: %s in project %s", req.CommonName, role, a.cl.Project),
	})
	switch {
	case errors.Is(err, kubeapi.ErrForbidden):
		return nil, nil, conflict(clusterRef(r), "cluster",
			"is attached, and the kubeconfig it was attached with (secret %s) may not have the cluster sign people's credentials: "+
				"it needs create on certificatesigningrequests, update on certificatesigningrequests/approval and approve on signers %s",
			a.cl.Spec.Attach.Secret, kubeapi.SignerAPIServerClient).because(err)
	case errors.Is(err, kubeapi.ErrNotSigned):
		return nil, nil, conflict(clusterRef(r), "cluster", "is attached, and it did not sign the credential: %v", err)
	case err != nil:
		return nil, nil, unavailable(fmt.Sprintf("attached cluster %s's Kubernetes API (%s)", a.cl.Name, a.server)).because(err)
	}
	return certPEM, keyPEM, nil
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
