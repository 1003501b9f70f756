package gateway

import (
	"errors"
	"fmt"
	"net/http"
	"slices"
	"time"

	"kiln.dev/kiln/internal/auth"
	"kiln.dev/kiln/internal/pki"
	"kiln.dev/kiln/internal/store"
	"kiln.dev/kiln/internal/trust"
)

// VerifyNode says which node of which cluster a request on the agent
// listener comes from, by the client certificate it presents: the node
// certificate its agent holds, signed by the cluster's CA, and still the
// node's (its current one or the renewed one not yet presented to a
// session; not revoked). It is the credential nodes pull images from
// kilnd's registry with (internal/registry.Nodes): containerd presents it
// through hosts.toml. Unlike a session, a pull never promotes a renewed
// certificate, nor records one. A refusal is an *auth.RefusedError
// (auth.ErrUnauthenticated) whose Why is safe to show the node, and whose
// Reason is auth's (ErrNoCredential, ErrInvalidCredential, ErrExpired,
// ErrRevoked) or ErrNoSession or ErrNotCurrent.
func (g *Gateway) VerifyNode(r *http.Request) (store.Key, string, error) {
	ctx := r.Context()
	deny := func(reason error, format string, args ...any) (store.Key, string, error) {
		return store.Key{}, "", &auth.RefusedError{Reason: reason, Why: fmt.Sprintf(format, args...)}
	}
	if r.TLS == nil || len(r.TLS.PeerCertificates) == 0 {
		return deny(auth.ErrNoCredential, "the registry on the agent listener needs the node's client certificate (hosts.toml: client = [cert, key])")
	}
	peer := r.TLS.PeerCertificates[0]
	k, node, ok := trust.ParseNodeCommonName(peer.Subject.CommonName)
	if !ok || !slices.Contains(peer.Subject.Organization, trust.NodeOrganization) {
		return deny(auth.ErrInvalidCredential, "certificate %q is not a Kiln node certificate", peer.Subject.CommonName)
	}
	ca, err := trust.LoadCAs(ctx, g.st, k)
	if errors.Is(err, store.ErrNotFound) {
		return deny(auth.ErrInvalidCredential, "cluster %s does not exist (or has no CA): the node certificate is not valid", clusterID(k))
	} else if err != nil {
		return store.Key{}, "", fmt.Errorf("load the CA of cluster %s: %w", clusterID(k), err)
	}
	if err := ca.VerifyCertificate(peer, pki.UsageClient, g.opts.Now()); err != nil {
		if errors.Is(err, pki.ErrExpired) {
			return deny(auth.ErrExpired, "the node certificate expired at %s", peer.NotAfter.UTC().Format(time.RFC3339))
		}
		return deny(auth.ErrInvalidCredential, "the node certificate is not valid for cluster %s", clusterID(k))
	}
	if rev, err := trust.CertRevoked(ctx, g.st, k, trust.SerialOf(peer)); err != nil {
		return store.Key{}, "", err
	} else if rev != nil {
		return deny(auth.ErrRevoked, "%s", rev)
	}
	rec, err := trust.ReadNodeCert(ctx, g.st, k, node)
	switch {
	case errors.Is(err, store.ErrNotFound):
		return deny(ErrNoSession, "node %s of cluster %s has no certificate on record: its agent has not opened a session yet", node, clusterID(k))
	case err != nil:
		return store.Key{}, "", err
	case rec.RevokedAt != nil:
		return deny(auth.ErrRevoked, "the certificates of node %s were revoked (the node was deleted or reset)", node)
	case trust.SerialOf(peer) != rec.Serial && trust.SerialOf(peer) != rec.Next:
		return deny(ErrNotCurrent, "the certificate (serial %s) is no longer node %s's", trust.SerialOf(peer), node)
	}
	return k, node, nil
}

// Reasons of VerifyNode's refusals of its own (an *auth.RefusedError's).
var (
	// ErrNoSession: the node's agent has not opened a session, so no
	// certificate of the node is on record.
	ErrNoSession = errors.New("no node certificate on record")
	// ErrNotCurrent: a certificate of the node, signed by its cluster's
	// CA, that is neither its current one nor the renewed one.
	ErrNotCurrent = errors.New("not the node's current certificate")
)
