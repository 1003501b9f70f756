package trust

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"

	"kiln.dev/kiln/internal/store"
)

// Revocation of node certificates. A cluster keeps the serials of the node
// certificates it revoked, with who revoked each, why and when, in one
// cluster secret (SecretRevokedCerts), changed by compare-and-swap. The
// agent gateway refuses a revoked certificate when a session or a pull
// presents it, before anything else about the node is looked at, so a node
// removed from the cluster is told why its certificate is refused.
//
// This covers what Kiln verifies itself: the agent's session and the
// node's pulls from kilnd's registry. It does not cover Kubernetes: the API
// server checks no revocation of client certificates, so the kubelet's
// certificate (issued by the same cluster CA) stays valid until it expires
// or the CA is replaced (docs/security.md, "Revoking node certificates").

// SecretRevokedCerts is the cluster secret holding the revoked node
// certificates (JSON revocationList).
const SecretRevokedCerts = "revoked-node-certs"

// maxRevoked bounds the revocation list: beyond it, the oldest entries are
// dropped. A dropped serial is still refused when its node's record names
// another certificate or is revoked (NodeCert), which is every case but a
// node registered before certificates were recorded.
const maxRevoked = 4096

// Why says who revoked a certificate and why, for the record and the
// refusal's message.
type Why struct {
	By     string // who: "operation <id> (<kind>)", a user
	Reason string // why: "the node was removed from the cluster"
}

// Revocation is a revoked node certificate.
type Revocation struct {
	Serial string    `json:"serial"` // SerialOf
	Node   string    `json:"node"`
	At     time.Time `json:"at"`
	By     string    `json:"by,omitempty"`
	Reason string    `json:"reason,omitempty"`
}

// String is the revocation as a refusal says it.
func (r *Revocation) String() string {
	s := fmt.Sprintf("the node certificate (serial %s) of node %s was revoked at %s", r.Serial, r.Node, r.At.UTC().Format(time.RFC3339))
	if r.By != "" {
		s += " by " + r.By
	}
	if r.Reason != "" {
		s += ": " + r.Reason
	}
	return s
}

type revocationList struct {
	Certs []Revocation `json:"certs"`
}

// readRevocations reads cluster k's revocation list and its raw value
// (nil when there is none, for a compare-and-swap).
func readRevocations(ctx context.Context, st SecretReader, k store.Key) (revocationList, []byte, error) {
	raw, err := st.GetClusterSecret(ctx, k, SecretRevokedCerts)
	if errors.Is(err, store.ErrNotFound) {
		return revocationList{}, nil, nil
	} else if err != nil {
		return revocationList{}, nil, fmt.Errorf("read the revoked certificates of cluster %s: %w", k, err)
	}
	var l revocationList
	if err := json.Unmarshal(raw, &l); err != nil {
		return revocationList{}, nil, fmt.Errorf("decode the revoked certificates of cluster %s: %w", k, err)
	}
	return l, raw, nil
}

// CertRevoked returns the revocation of the node certificate with serial
// (SerialOf) of cluster k, or nil when it is not revoked.
func CertRevoked(ctx context.Context, st SecretReader, k store.Key, serial string) (*Revocation, error) {
	l, _, err := readRevocations(ctx, st, k)
	if err != nil {
		return nil, err
	}
	for i := range l.Certs {
		if l.Certs[i].Serial == serial {
			return &l.Certs[i], nil
		}
	}
	return nil, nil
}

// RevokeNode revokes node's certificates: the serials of its current
// certificate and of a renewed one not presented yet go into cluster k's
// revocation list (with why and now), and its record is marked revoked
// (ForgetNodeCerts: no certificate of the node is accepted until it
// registers again), in one transaction. It returns the serials it added
// (none when the node had no certificate on record, or they were revoked
// already). A cluster that no longer exists has nothing to revoke: that is
// no error.
func RevokeNode(ctx context.Context, st CASecretStore, k store.Key, node string, why Why, now time.Time) ([]string, error) {
	now = now.UTC()
	wrap := func(err error) error {
		return fmt.Errorf("revoke the certificates of node %s of cluster %s: %w", node, k, err)
	}
	for range maxCASAttempts {
		rec, _, err := readNodeCert(ctx, st, k, node)
		if err != nil && !errors.Is(err, store.ErrNotFound) {
			return nil, wrap(err)
		}
		l, raw, err := readRevocations(ctx, st, k)
		if err != nil {
			return nil, wrap(err)
		}
		var added []string
		for _, serial := range []string{rec.Serial, rec.Next} {
			if serial == "" || slices.ContainsFunc(l.Certs, func(r Revocation) bool { return r.Serial == serial }) {
				continue
			}
			l.Certs = append(l.Certs, Revocation{Serial: serial, Node: node, At: now, By: why.By, Reason: why.Reason})
			added = append(added, serial)
		}
		if len(l.Certs) > maxRevoked {
			l.Certs = slices.Clone(l.Certs[len(l.Certs)-maxRevoked:])
		}
		writes := []store.SecretWrite{{Name: NodeCertSecret(node), Value: encodeNodeCert(NodeCert{RevokedAt: &now})}}
		if len(added) > 0 {
			value, _ := json.Marshal(l) // strings and times: never fails
			writes = append(writes, store.SecretWrite{Name: SecretRevokedCerts, Value: value, IfValue: raw, IfMissing: raw == nil})
		}
		err = st.UpdateClusterSecrets(ctx, k, writes...)
		switch {
		case errors.Is(err, store.ErrPreconditionFailed), errors.Is(err, store.ErrExists):
			continue
		case errors.Is(err, store.ErrNotFound):
			return nil, nil
		case err != nil:
			return nil, wrap(err)
		}
		return added, nil
	}
	return nil, wrap(errors.New("the revoked certificates kept changing"))
}
