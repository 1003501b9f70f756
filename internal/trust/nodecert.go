package trust

import (
	"context"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"kiln.dev/kiln/internal/pki"
	"kiln.dev/kiln/internal/store"
)

// Node certificates: the client certificates agents hold, signed by their
// cluster's CA (ClusterCAs.Issuer). A session must present the certificate
// the controller issued its node last: the serial of that certificate is
// recorded in a cluster secret per node, written without the lease by
// compare-and-swap.
//
//   - Registration records the serial of the certificate it issues
//     (RecordNodeCert), replacing whatever was there: a node that
//     registers again (deleted and back, reset, a lost identity) leaves
//     its old certificate refused.
//   - Renewal (RenewNodeCert, over a live session) signs a certificate for
//     the node the session's certificate names and records it as the
//     node's next one. Both are accepted until a session presents the next
//     one: that promotes it (AdmitNodeCert), and the one before is refused
//     from then on. An agent that never got its renewed certificate keeps
//     the old one and asks again; there is no time-based overlap.
//   - RevokeNode (a node removed or reset) marks the record revoked: no
//     certificate of the node is accepted until it registers again; and
//     its certificates' serials go into the cluster's revocation list
//     (revoke.go), refused even after the node registers again.
//   - A node registered before serials were recorded has no record: the
//     first certificate it presents is trusted and recorded.
//
// The gateway's sessions check the record again at every poll.

// Subject of node certificates.
const (
	NodeCNPrefix     = "kiln:node:"
	NodeOrganization = "kiln:nodes"
)

// NodeCommonName is the common name of the certificate of node of cluster k:
// kiln:node:<project>/<cluster>/<node>.
func NodeCommonName(k store.Key, node string) string {
	return NodeCNPrefix + k.Project + "/" + k.Name + "/" + node
}

// ParseNodeCommonName is the inverse of NodeCommonName.
func ParseNodeCommonName(cn string) (store.Key, string, bool) {
	rest, ok := strings.CutPrefix(cn, NodeCNPrefix)
	if !ok {
		return store.Key{}, "", false
	}
	parts := strings.Split(rest, "/")
	if len(parts) != 3 || parts[0] == "" || parts[1] == "" || parts[2] == "" {
		return store.Key{}, "", false
	}
	return store.Key{Project: parts[0], Name: parts[1]}, parts[2], true
}

// NodeCertSecretPrefix starts the name of the cluster secret that records a
// node's certificate: node-cert.<node>.
const NodeCertSecretPrefix = "node-cert."

// NodeCertSecret is the name of the cluster secret recording node's
// certificate.
func NodeCertSecret(node string) string { return NodeCertSecretPrefix + node }

// NodeCert is the record of a node's certificate (JSON).
type NodeCert struct {
	// Serial is the certificate the node's sessions present: the hex of
	// its serial number (SerialOf).
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

func encodeNodeCert(c NodeCert) []byte {
	b, _ := json.Marshal(c) // a struct of strings and a time: never fails
	return b
}

// ReadNodeCert reads node's certificate record; store.ErrNotFound when
// there is none.
func ReadNodeCert(ctx context.Context, st SecretReader, k store.Key, node string) (NodeCert, error) {
	c, _, err := readNodeCert(ctx, st, k, node)
	return c, err
}

// readNodeCert is ReadNodeCert with the raw value (for a compare-and-swap).
func readNodeCert(ctx context.Context, st SecretReader, k store.Key, node string) (NodeCert, []byte, error) {
	raw, err := st.GetClusterSecret(ctx, k, NodeCertSecret(node))
	if err != nil {
		return NodeCert{}, nil, err
	}
	var c NodeCert
	if err := json.Unmarshal(raw, &c); err != nil {
		return NodeCert{}, nil, fmt.Errorf("decode the certificate record of node %s: %w", node, err)
	}
	return c, raw, nil
}

// SerialOf is the hex of a certificate's serial number, as recorded.
func SerialOf(c *x509.Certificate) string { return c.SerialNumber.Text(16) }

// maxCASAttempts bounds the retries of a compare-and-swap that lost a race.
const maxCASAttempts = 20

// NodeCertRequest is what a node certificate is signed for.
type NodeCertRequest struct {
	// CSR is the agent's certificate request (PEM).
	CSR string
	// ValidFor is the certificate's lifetime; pki.DefaultValidity when
	// zero.
	ValidFor time.Duration
	Now      time.Time
}

// SignNodeCSR signs req's CSR with ca as the client certificate of node
// of cluster k. A CSR that is not valid is a pki.ErrInvalidCSR.
func SignNodeCSR(ca *pki.CA, k store.Key, node string, req NodeCertRequest) ([]byte, error) {
	return ca.SignCSR([]byte(req.CSR), pki.CertRequest{
		CommonName:   NodeCommonName(k, node),
		Organization: []string{NodeOrganization},
		Usage:        pki.UsageClient,
		ValidFor:     req.ValidFor,
		Now:          req.Now,
	})
}

// RecordNodeCert records serial as node's certificate: a registration.
// From then on the node's other certificates are refused.
func RecordNodeCert(ctx context.Context, st store.ClusterSecretUpdater, k store.Key, node, serial string) error {
	err := st.UpdateClusterSecrets(ctx, k, store.SecretWrite{Name: NodeCertSecret(node), Value: encodeNodeCert(NodeCert{Serial: serial})})
	if err != nil {
		return fmt.Errorf("record the certificate of node %s: %w", node, err)
	}
	return nil
}

// Admission is AdmitNodeCert's verdict on a certificate a node's session
// presents.
type Admission struct {
	// Refusal is the message the agent is refused with; empty when the
	// certificate is admitted.
	Refusal string
	// Recorded: the node had no record (registered before certificates
	// were recorded), and this certificate is now its.
	Recorded bool
	// Promoted: the certificate was the node's renewed one and is now its
	// current one; Previous, the one it replaced, is refused from now on.
	Promoted bool
	Previous string
}

// AdmitNodeCert decides whether a session of node may present cert (already
// verified against the cluster's CAs), promoting a renewed certificate to
// the node's current one.
func AdmitNodeCert(ctx context.Context, st CASecretStore, k store.Key, node string, cert *x509.Certificate, now time.Time) (Admission, error) {
	serial := SerialOf(cert)
	for range maxCASAttempts {
		rec, raw, err := readNodeCert(ctx, st, k, node)
		if errors.Is(err, store.ErrNotFound) {
			err := st.UpdateClusterSecrets(ctx, k, store.SecretWrite{
				Name: NodeCertSecret(node), Value: encodeNodeCert(NodeCert{Serial: serial}), IfMissing: true})
			if errors.Is(err, store.ErrExists) {
				continue
			} else if err != nil {
				return Admission{}, fmt.Errorf("record the certificate of node %s: %w", node, err)
			}
			return Admission{Recorded: true}, nil
		} else if err != nil {
			return Admission{}, err
		}
		switch {
		case rec.RevokedAt != nil:
			return Admission{Refusal: fmt.Sprintf("the certificates of node %s were revoked at %s (the node was deleted or reset): register it again with kiln-agent join --force",
				node, rec.RevokedAt.UTC().Format(time.RFC3339))}, nil
		case serial == rec.Serial:
			return Admission{}, nil
		case serial != rec.Next || rec.Next == "":
			return Admission{Refusal: fmt.Sprintf("the node certificate (serial %s) is no longer the certificate of node %s: the node registered again or renewed it since; to register this host again, kiln-agent join --force",
				serial, node)}, nil
		}
		renew := false
		if rec.Renew {
			// Still asked for until the certificate is the issuing CA's.
			cas, err := LoadCAs(ctx, st, k)
			if err != nil {
				return Admission{}, err
			}
			renew = cas.Issuer().VerifyCertificate(cert, pki.UsageClient, now) != nil
		}
		err = st.UpdateClusterSecrets(ctx, k, store.SecretWrite{
			Name: NodeCertSecret(node), Value: encodeNodeCert(NodeCert{Serial: serial, Renew: renew}), IfValue: raw})
		if errors.Is(err, store.ErrPreconditionFailed) {
			continue
		} else if err != nil {
			return Admission{}, fmt.Errorf("promote the renewed certificate of node %s: %w", node, err)
		}
		return Admission{Promoted: true, Previous: rec.Serial}, nil
	}
	return Admission{}, fmt.Errorf("the certificate record of node %s kept changing", node)
}

// Why RenewNodeCert refuses.
var (
	// ErrNotCurrentCert: the certificate the renewal was asked with is no
	// longer the node's (revoked, replaced).
	ErrNotCurrentCert = errors.New("this session's certificate is no longer the node's")
	// ErrNodeCertChanged: the node's record changed during the renewal.
	ErrNodeCertChanged = errors.New("the node's certificate changed during the renewal; try again")
)

// RenewNodeCert signs req's CSR with the issuing CA of cluster k as node's
// next certificate, if current (a serial) is still the node's certificate,
// and records it as the node's next one. It returns the certificate and the
// CA that signed it. Refusals are ErrNotCurrentCert, ErrNodeCertChanged or
// pki.ErrInvalidCSR.
func RenewNodeCert(ctx context.Context, st CASecretStore, k store.Key, node, current string, req NodeCertRequest) (*x509.Certificate, []byte, *pki.CA, error) {
	rec, raw, err := readNodeCert(ctx, st, k, node)
	if err != nil {
		return nil, nil, nil, fmt.Errorf("read the certificate record: %w", err)
	}
	if rec.RevokedAt != nil || rec.Serial != current {
		return nil, nil, nil, ErrNotCurrentCert
	}
	cas, err := LoadCAs(ctx, st, k)
	if err != nil {
		return nil, nil, nil, err
	}
	ca := cas.Issuer()
	certPEM, err := SignNodeCSR(ca, k, node, req)
	if err != nil {
		return nil, nil, nil, err // a pki.ErrInvalidCSR says what is wrong with the CSR
	}
	cert, err := pki.ParseCertificate(certPEM)
	if err != nil {
		return nil, nil, nil, fmt.Errorf("parse the new certificate: %w", err)
	}
	err = st.UpdateClusterSecrets(ctx, k, store.SecretWrite{
		Name: NodeCertSecret(node), Value: encodeNodeCert(NodeCert{Serial: rec.Serial, Next: SerialOf(cert), Renew: rec.Renew}), IfValue: raw})
	if errors.Is(err, store.ErrPreconditionFailed) {
		return nil, nil, nil, ErrNodeCertChanged
	} else if err != nil {
		return nil, nil, nil, fmt.Errorf("record the next certificate: %w", err)
	}
	return cert, certPEM, ca, nil
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
