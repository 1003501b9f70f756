package gateway

import (
	"context"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/coder/websocket"

	v1 "kiln.dev/kiln/api/v1"
	"kiln.dev/kiln/internal/pki"
	"kiln.dev/kiln/internal/store"
)

// Node certificates. A session must present the certificate the controller
// issued its node last: the serial of that certificate is recorded in a
// cluster secret per node, written without the lease by compare-and-swap.
//
//   - Registration records the serial of the certificate it issues,
//     replacing whatever was there, and closes the node's session in this
//     process if it presents another certificate: a node that registers
//     again (deleted and back, reset, a lost identity) leaves its old
//     certificate refused at once.
//   - Renewal (AgentRenew over a live session) signs a certificate for the
//     node the session's certificate names and records it as the node's
//     next one. Both are accepted until a session presents the next one:
//     that promotes it, and the one before is refused from then on. An
//     agent that never got its renewed certificate keeps the old one and
//     asks again; there is no time-based overlap.
//   - ForgetNode marks the record revoked: no certificate of the node is
//     accepted until it registers again.
//   - A node registered before serials were recorded has no record: the
//     first certificate it presents is trusted and recorded.
//
// Every live session checks the record again at every poll, so a change
// made in another process ends a session that it refuses within
// Options.PollInterval; in this process, registration and ForgetNode end it
// at once.

// NodeCertSecretPrefix starts the name of the cluster secret that records a
// node's certificate: node-cert.<node>.
const NodeCertSecretPrefix = "node-cert."

// NodeCertSecret is the name of the cluster secret recording node's
// certificate.
func NodeCertSecret(node string) string { return NodeCertSecretPrefix + node }

// nodeCert is the record of a node's certificate (JSON).
type nodeCert struct {
	// Serial is the certificate the node's sessions present: the hex of
	// its serial number.
	Serial string `json:"serial,omitempty"`
	// Next is a renewed certificate issued but not presented yet.
	Next string `json:"next,omitempty"`
	// RevokedAt is set when the node was forgotten (deleted or reset): no
	// certificate is accepted.
	RevokedAt *time.Time `json:"revokedAt,omitempty"`
	// Renew is set by RequestRenewal (the cluster's CA is being replaced):
	// the node's session asks its agent to renew now, and it is cleared
	// once the node presents a certificate of the issuing CA.
	Renew bool `json:"renew,omitempty"`
}

func encodeNodeCert(c nodeCert) []byte {
	b, _ := json.Marshal(c) // a struct of strings and a time: never fails
	return b
}

// readNodeCert reads node's certificate record and its raw value (for a
// compare-and-swap); store.ErrNotFound when there is none.
func readNodeCert(ctx context.Context, st SecretReader, k store.Key, node string) (nodeCert, []byte, error) {
	raw, err := st.GetClusterSecret(ctx, k, NodeCertSecret(node))
	if err != nil {
		return nodeCert{}, nil, err
	}
	var c nodeCert
	if err := json.Unmarshal(raw, &c); err != nil {
		return nodeCert{}, nil, fmt.Errorf("decode the certificate record of node %s: %w", node, err)
	}
	return c, raw, nil
}

// serialOf is the hex of a certificate's serial number, as recorded.
func serialOf(c *x509.Certificate) string { return c.SerialNumber.Text(16) }

// maxCASAttempts bounds the retries of a compare-and-swap that lost a race.
const maxCASAttempts = 20

// recordCertificate records serial as node's certificate: a registration.
func (g *Gateway) recordCertificate(ctx context.Context, k store.Key, node, serial string) error {
	err := g.st.UpdateClusterSecrets(ctx, k, store.SecretWrite{Name: NodeCertSecret(node), Value: encodeNodeCert(nodeCert{Serial: serial})})
	if err != nil {
		return fmt.Errorf("record the certificate of node %s: %w", node, err)
	}
	return nil
}

// admitCertificate decides whether a session of node may present cert. It
// returns "" when it may (promoting a renewed certificate to the node's
// current one), else the message the agent is refused with.
func (g *Gateway) admitCertificate(ctx context.Context, k store.Key, node string, cert *x509.Certificate) (string, error) {
	serial := serialOf(cert)
	for range maxCASAttempts {
		rec, raw, err := readNodeCert(ctx, g.st, k, node)
		if errors.Is(err, store.ErrNotFound) {
			err := g.st.UpdateClusterSecrets(ctx, k, store.SecretWrite{
				Name: NodeCertSecret(node), Value: encodeNodeCert(nodeCert{Serial: serial}), IfMissing: true})
			if errors.Is(err, store.ErrExists) {
				continue
			} else if err != nil {
				return "", fmt.Errorf("record the certificate of node %s: %w", node, err)
			}
			g.log.Info("recorded the certificate of a node registered before certificates were recorded",
				"cluster", k.String(), "node", node, "serial", serial)
			return "", nil
		} else if err != nil {
			return "", err
		}
		switch {
		case rec.RevokedAt != nil:
			return fmt.Sprintf("the certificates of node %s were revoked at %s (the node was deleted or reset): register it again with kiln-agent join --force",
				node, rec.RevokedAt.UTC().Format(time.RFC3339)), nil
		case serial == rec.Serial:
			return "", nil
		case serial != rec.Next || rec.Next == "":
			return fmt.Sprintf("the node certificate (serial %s) is no longer the certificate of node %s: the node registered again or renewed it since; to register this host again, kiln-agent join --force",
				serial, node), nil
		}
		renew := false
		if rec.Renew {
			// Still asked for until the certificate is the issuing CA's.
			cas, err := LoadCAs(ctx, g.st, k)
			if err != nil {
				return "", err
			}
			renew = cas.Issuer().VerifyCertificate(cert, pki.UsageClient, g.opts.Now()) != nil
		}
		err = g.st.UpdateClusterSecrets(ctx, k, store.SecretWrite{
			Name: NodeCertSecret(node), Value: encodeNodeCert(nodeCert{Serial: serial, Renew: renew}), IfValue: raw})
		if errors.Is(err, store.ErrPreconditionFailed) {
			continue
		} else if err != nil {
			return "", fmt.Errorf("promote the renewed certificate of node %s: %w", node, err)
		}
		g.log.Info("node uses its renewed certificate", "cluster", k.String(), "node", node, "serial", serial, "previous", rec.Serial)
		g.event(ctx, k, eventNormal, ReasonCertificateRenewed, node,
			"node %s uses its renewed certificate (serial %s, valid until %s); the previous one (serial %s) is refused",
			node, serial, cert.NotAfter.UTC().Format(time.RFC3339), rec.Serial)
		return "", nil
	}
	return "", fmt.Errorf("the certificate record of node %s kept changing", node)
}

// nodeCertValidity is the lifetime of the certificates issued to nodes of
// cl; zero means pki.DefaultValidity.
func (g *Gateway) nodeCertValidity(cl *store.Cluster) time.Duration {
	if g.opts.NodeCertValidity > 0 {
		return g.opts.NodeCertValidity
	}
	return time.Duration(cl.Spec.CertificateTTLDays) * 24 * time.Hour
}

// signNodeCSR signs csr as the client certificate of node of cl.
func (g *Gateway) signNodeCSR(ca *pki.CA, cl *store.Cluster, node, csr string) ([]byte, error) {
	return ca.SignCSR([]byte(csr), pki.CertRequest{
		CommonName:   NodeCommonName(cl.Key(), node),
		Organization: []string{NodeOrganization},
		Usage:        pki.UsageClient,
		ValidFor:     g.nodeCertValidity(cl), // zero: pki.DefaultValidity, the default of certificateTTLDays
		Now:          g.opts.Now(),
	})
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
	rec, raw, err := readNodeCert(ctx, g.st, s.k, s.node)
	if err != nil {
		s.log.Error("renew: read the certificate record", "err", err)
		return nil, tryAgain
	}
	if rec.RevokedAt != nil || rec.Serial != s.serial {
		return nil, "this session's certificate is no longer the node's"
	}
	cl, err := g.st.GetCluster(ctx, s.k)
	if err != nil {
		s.log.Error("renew: read the cluster", "err", err)
		return nil, tryAgain
	}
	cas, err := LoadCAs(ctx, g.st, s.k)
	if err != nil {
		s.log.Error("renew: load the cluster CA", "err", err)
		return nil, tryAgain
	}
	ca := cas.Issuer()
	certPEM, err := g.signNodeCSR(ca, cl, s.node, body.CSR)
	if errors.Is(err, pki.ErrInvalidCSR) {
		return nil, "csr: " + err.Error()
	} else if err != nil {
		s.log.Error("renew: sign", "err", err)
		return nil, tryAgain
	}
	cert, err := pki.ParseCertificate(certPEM)
	if err != nil {
		s.log.Error("renew: parse the new certificate", "err", err)
		return nil, tryAgain
	}
	err = g.st.UpdateClusterSecrets(ctx, s.k, store.SecretWrite{
		Name: NodeCertSecret(s.node), Value: encodeNodeCert(nodeCert{Serial: rec.Serial, Next: serialOf(cert), Renew: rec.Renew}), IfValue: raw})
	if errors.Is(err, store.ErrPreconditionFailed) {
		return nil, "the node's certificate changed during the renewal; try again"
	} else if err != nil {
		s.log.Error("renew: record the next certificate", "err", err)
		return nil, tryAgain
	}
	s.log.Info("renewed the node certificate", "serial", serialOf(cert), "notAfter", cert.NotAfter.UTC().Format(time.RFC3339))
	return &v1.CertificateBody{Certificate: string(certPEM), CA: string(ca.CertPEM())}, ""
}

// checkCertificate ends the session when its certificate is no longer its
// node's (the node registered again, or was forgotten), as recorded by
// this or another process. It reports whether the session goes on.
func (s *session) checkCertificate() bool {
	rec, _, err := readNodeCert(s.ctx, s.g.st, s.k, s.node)
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

// RequestRenewal has node of cluster k renew its certificate now, with the
// issuing CA (the cluster's CA is being replaced): its session asks the
// agent (v1.ControllerRenew) at its next poll. RenewalPending reports when
// the node presents the new certificate.
func RequestRenewal(ctx context.Context, st CASecretStore, k store.Key, node string) error {
	for range maxCASAttempts {
		rec, raw, err := readNodeCert(ctx, st, k, node)
		if err != nil {
			return fmt.Errorf("ask node %s to renew its certificate: %w", node, err)
		}
		if rec.Renew {
			return nil
		}
		rec.Renew = true
		err = st.UpdateClusterSecrets(ctx, k, store.SecretWrite{Name: NodeCertSecret(node), Value: encodeNodeCert(rec), IfValue: raw})
		if !errors.Is(err, store.ErrPreconditionFailed) {
			return err
		}
	}
	return fmt.Errorf("the certificate record of node %s kept changing", node)
}

// RenewalPending reports whether node of cluster k was asked to renew its
// certificate (RequestRenewal) and has not presented the new one yet.
func RenewalPending(ctx context.Context, st SecretReader, k store.Key, node string) (bool, error) {
	rec, _, err := readNodeCert(ctx, st, k, node)
	if err != nil {
		return false, fmt.Errorf("the certificate record of node %s: %w", node, err)
	}
	return rec.Renew, nil
}
