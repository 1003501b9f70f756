package agent

import (
	"crypto/x509"
	"errors"
	"fmt"
	"time"

	v1 "kiln.dev/kiln/api/v1"
	"kiln.dev/kiln/internal/agent/state"
	"kiln.dev/kiln/internal/pki"
)

// Certificate renewal. Over a live session, once RenewFraction of its node
// certificate's lifetime has passed, the agent makes a new key and sends a
// CSR for it (AgentRenew); the controller answers with the new certificate
// (ControllerCertificate). The agent checks it, saves it with its key
// atomically (package state), writes them as files again
// (state.WriteTLSFiles), ends the session and connects again at once
// with it. The controller accepts the old certificate until a session
// presents the new one, and refuses it from then on. A refused or
// unanswered renewal is asked again after renewRetry.

// RenewFraction is the part of its certificate's lifetime, counted from its
// issue (pki.IssuedAt), after which the agent renews it: two thirds, so
// that a renewal is done before 80% (pki.RenewAt), with time left for
// attempts that fail.
const RenewFraction = 2.0 / 3

// Bounds of renewRetry.
const (
	minRenewRetry = 200 * time.Millisecond
	maxRenewRetry = 5 * time.Minute
)

// errRenewed ends a session whose certificate was renewed: the agent
// connects again at once with the new one.
var errRenewed = errors.New("the node certificate was renewed: reconnecting with the new one")

// renewAt is when the agent renews cert.
func renewAt(cert *x509.Certificate) time.Time {
	issued := pki.IssuedAt(cert)
	return issued.Add(time.Duration(float64(cert.NotAfter.Sub(issued)) * RenewFraction))
}

// renewRetry is how long the agent waits, after asking for a certificate,
// before asking again when no certificate came: a tenth of what is left of
// cert's lifetime, within [minRenewRetry, maxRenewRetry].
func renewRetry(cert *x509.Certificate, now time.Time) time.Duration {
	return min(max(cert.NotAfter.Sub(now)/10, minRenewRetry), maxRenewRetry)
}

// renewal is the runner's renewal state, guarded by runner.idMu.
type renewal struct {
	next    time.Time // when to ask (again)
	pending []byte    // PEM of the key of the CSR sent last, until answered
}

// identity is the node's current identity.
func (r *runner) identity() *state.State {
	r.idMu.Lock()
	defer r.idMu.Unlock()
	return r.st
}

// setIdentity makes st the current identity and schedules its renewal.
func (r *runner) setIdentity(st *state.State) error {
	cert, err := st.ParsedCertificate()
	if err != nil {
		return fmt.Errorf("node certificate: %w", err)
	}
	r.idMu.Lock()
	defer r.idMu.Unlock()
	r.st = st
	r.renew = renewal{next: renewAt(cert)}
	return nil
}

// renewWait is how long until the next renewal is due.
func (r *runner) renewWait() time.Duration {
	r.idMu.Lock()
	defer r.idMu.Unlock()
	return max(r.renew.next.Sub(r.opts.Now()), 0)
}

// renewNow makes the renewal due now (v1.ControllerRenew): the writer
// sends it at its next heartbeat.
func (r *runner) renewNow() {
	r.idMu.Lock()
	defer r.idMu.Unlock()
	r.log.Info("the controller asks for the node certificate to be renewed now: the cluster's CA is being replaced")
	r.renew.next = r.opts.Now()
}

// renewRequest returns the renewal to send when one is due, nil if not: a
// CSR for a new key, which is kept until the answer.
func (r *runner) renewRequest() (*v1.AgentMessage, error) {
	now := r.opts.Now()
	r.idMu.Lock()
	defer r.idMu.Unlock()
	if now.Before(r.renew.next) {
		return nil, nil
	}
	cert, err := r.st.ParsedCertificate()
	if err != nil {
		return nil, fmt.Errorf("node certificate: %w", err)
	}
	// Whatever happens below, not again before the retry.
	r.renew.next = now.Add(renewRetry(cert, now))
	key, keyPEM, err := pki.NewKey()
	if err != nil {
		return nil, err
	}
	csr, err := pki.NewCSR(key, r.st.Node)
	if err != nil {
		return nil, err
	}
	r.renew.pending = keyPEM
	r.log.Info("renewing the node certificate", "notAfter", cert.NotAfter.UTC().Format(time.RFC3339))
	return &v1.AgentMessage{Type: v1.AgentRenew, Time: now.UTC(), Renew: &v1.RenewBody{CSR: string(csr)}}, nil
}

// renewed takes the controller's answer to a renewal. It reports whether
// the agent saved a new certificate (the session then ends, to connect
// again with it).
func (r *runner) renewed(body *v1.CertificateBody) bool {
	if body == nil {
		return false
	}
	if body.Error != "" {
		r.log.Warn("the controller refused to renew the node certificate: asking again later", "reason", body.Error)
		return false
	}
	r.idMu.Lock()
	key := r.renew.pending
	r.renew.pending = nil
	old := r.st
	r.idMu.Unlock()
	if key == nil {
		r.log.Warn("ignoring a certificate that answers no renewal of this agent")
		return false
	}
	next, err := r.checkRenewed(old, body, key)
	if err != nil {
		r.log.Error("the renewed certificate is not usable: asking again later", "err", err)
		return false
	}
	if err := next.Save(r.opts.DataDir); err != nil {
		r.log.Error("save the renewed certificate: asking again later", "err", err)
		return false
	}
	if err := r.setIdentity(next); err != nil {
		r.log.Error("the renewed certificate", "err", err)
		return false
	}
	if err := next.WriteTLSFiles(r.opts.DataDir); err != nil {
		// The identity is saved: the next start writes them again.
		r.log.Error("write the renewed certificate's files: programs that read them (containerd) keep the previous "+
			"certificate until the agent restarts", "err", err)
	}
	cert, _ := next.ParsedCertificate()
	r.log.Info("node certificate renewed", "notAfter", cert.NotAfter.UTC().Format(time.RFC3339))
	return true
}

// checkRenewed returns old's identity with the certificate of body and
// key, after checking that the certificate is for key, names the same node
// and is signed by the cluster CA as a client certificate.
func (r *runner) checkRenewed(old *state.State, body *v1.CertificateBody, key []byte) (*state.State, error) {
	next := *old
	next.Certificate, next.Key = body.Certificate, key
	if body.CA != "" {
		next.CA = body.CA
	}
	if _, err := next.TLSCertificate(); err != nil {
		return nil, fmt.Errorf("it does not match the key of the request: %w", err)
	}
	cert, err := next.ParsedCertificate()
	if err != nil {
		return nil, err
	}
	was, err := old.ParsedCertificate()
	if err != nil {
		return nil, err
	}
	if cert.Subject.CommonName != was.Subject.CommonName {
		return nil, fmt.Errorf("it names %q, the node's certificate %q", cert.Subject.CommonName, was.Subject.CommonName)
	}
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM([]byte(next.CA)) {
		return nil, errors.New("the cluster CA is not PEM")
	}
	// Checked at its issue time: whether it is valid now is the
	// controller's to say, by its clock.
	if _, err := cert.Verify(x509.VerifyOptions{Roots: roots, CurrentTime: pki.IssuedAt(cert),
		KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}); err != nil {
		return nil, fmt.Errorf("it is not a client certificate of the cluster CA: %w", err)
	}
	return &next, nil
}
