package gateway

import (
	"context"
	"crypto/x509"
	"errors"
	"time"

	"github.com/coder/websocket"

	v1 "kiln.dev/kiln/api/v1"
	"kiln.dev/kiln/internal/pki"
	"kiln.dev/kiln/internal/store"
	"kiln.dev/kiln/internal/trust"
)

// Node certificates as the sessions see them. The record of each node's
// certificate and its rules (registration replaces it, a renewal adds the
// next one, a session presenting the next one promotes it, ForgetNode
// revokes it) are trust's (internal/trust/nodecert.go); the gateway asks
// trust whether a session may present its certificate, signs renewals
// through it, and ends sessions the record no longer admits.
//
// Every live session checks the record again at every poll, so a change
// made in another process ends a session that it refuses within
// Options.PollInterval; in this process, registration and ForgetNode end it
// at once.

// admitCertificate decides whether a session of node may present cert. It
// returns "" when it may (promoting a renewed certificate to the node's
// current one), else the message the agent is refused with.
func (g *Gateway) admitCertificate(ctx context.Context, k store.Key, node string, cert *x509.Certificate) (string, error) {
	a, err := trust.AdmitNodeCert(ctx, g.st, k, node, cert, g.opts.Now())
	switch {
	case err != nil:
		return "", err
	case a.Recorded:
		g.log.Info("recorded the certificate of a node registered before certificates were recorded",
			"cluster", k.String(), "node", node, "serial", trust.SerialOf(cert))
	case a.Promoted:
		serial := trust.SerialOf(cert)
		g.log.Info("node uses its renewed certificate", "cluster", k.String(), "node", node, "serial", serial, "previous", a.Previous)
		g.event(ctx, k, eventNormal, ReasonCertificateRenewed, node,
			"node %s uses its renewed certificate (serial %s, valid until %s); the previous one (serial %s) is refused",
			node, serial, cert.NotAfter.UTC().Format(time.RFC3339), a.Previous)
	}
	return a.Refusal, nil
}

// nodeCertValidity is the lifetime of the certificates issued to nodes of
// cl; zero means pki.DefaultValidity.
func (g *Gateway) nodeCertValidity(cl *store.Cluster) time.Duration {
	if g.opts.NodeCertValidity > 0 {
		return g.opts.NodeCertValidity
	}
	return time.Duration(cl.Spec.CertificateTTLDays) * 24 * time.Hour
}

// nodeCertRequest is what a certificate for a node of cl is signed for.
func (g *Gateway) nodeCertRequest(cl *store.Cluster, csr string) trust.NodeCertRequest {
	// ValidFor zero: pki.DefaultValidity, the default of certificateTTLDays.
	return trust.NodeCertRequest{CSR: csr, ValidFor: g.nodeCertValidity(cl), Now: g.opts.Now()}
}

// renew answers an AgentRenew: a certificate for a new key of the
// session's node, recorded as its next certificate. A refusal is an answer
// with an error, not the end of the session (the agent asks again later);
// only a failed send ends the session.
func (s *session) renew(body *v1.RenewBody) error {
	cert, refusal := s.renewCertificate(body)
	if refusal != "" {
		s.log.Warn("certificate renewal refused", "reason", refusal)
		return s.send(&v1.ControllerMessage{Type: v1.ControllerCertificate, Certificate: &v1.CertificateBody{Error: refusal}})
	}
	return s.send(&v1.ControllerMessage{Type: v1.ControllerCertificate, Certificate: cert})
}

func (s *session) renewCertificate(body *v1.RenewBody) (*v1.CertificateBody, string) {
	ctx, g := s.ctx, s.g
	const tryAgain = "the controller could not renew the certificate; try again"
	if body == nil || body.CSR == "" {
		return nil, "the renewal has no csr"
	}
	cl, err := g.st.GetCluster(ctx, s.k)
	if err != nil {
		s.log.Error("renew: read the cluster", "err", err)
		return nil, tryAgain
	}
	cert, certPEM, ca, err := trust.RenewNodeCert(ctx, g.st, s.k, s.node, s.serial, g.nodeCertRequest(cl, body.CSR))
	switch {
	case errors.Is(err, trust.ErrNotCurrentCert), errors.Is(err, trust.ErrNodeCertChanged):
		return nil, err.Error()
	case errors.Is(err, pki.ErrInvalidCSR):
		return nil, "csr: " + err.Error()
	case err != nil:
		s.log.Error("renew", "err", err)
		return nil, tryAgain
	}
	s.log.Info("renewed the node certificate", "serial", trust.SerialOf(cert), "notAfter", cert.NotAfter.UTC().Format(time.RFC3339))
	return &v1.CertificateBody{Certificate: string(certPEM), CA: string(ca.CertPEM())}, ""
}

// checkCertificate ends the session when its certificate is no longer its
// node's (the node registered again, or was forgotten), as recorded by
// this or another process. It reports whether the session goes on.
func (s *session) checkCertificate() bool {
	rec, err := trust.ReadNodeCert(s.ctx, s.g.st, s.k, s.node)
	switch {
	case errors.Is(err, store.ErrNotFound):
		// Admission recorded it: the cluster is gone, its secrets with it.
		s.closeWith(websocket.StatusPolicyViolation, "the node's certificate record is gone: the cluster was deleted")
		return false
	case err != nil:
		s.log.Warn("check the node's certificate", "err", err)
		return true // checked again at the next poll
	case rec.RevokedAt != nil:
		s.closeWith(websocket.StatusPolicyViolation, "the node was deleted or reset: join again")
		return false
	case rec.Serial != s.serial:
		s.closeWith(websocket.StatusPolicyViolation, "the node's certificate was replaced")
		return false
	case rec.Renew && !s.renewAsked:
		s.renewAsked = true
		s.log.Info("asking the agent to renew its certificate now: the cluster's CA is being replaced")
		if err := s.send(&v1.ControllerMessage{Type: v1.ControllerRenew}); err != nil {
			s.log.Warn("ask the agent to renew its certificate", "err", err)
		}
	}
	return true
}
