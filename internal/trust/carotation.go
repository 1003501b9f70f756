package trust

import (
	"context"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"kiln.dev/kiln/internal/pki"
	"kiln.dev/kiln/internal/store"
)

// CA rotation (kiln cluster rotate-certs --ca). A cluster's CA is replaced
// in phases, each a whole roll of its nodes, so that at no moment does one
// party present a certificate that another does not trust:
//
//	phase      nodes' certificates  nodes trust   handed out (kubeconfigs, agents, kilnd)
//	trusting   current              both          current
//	overlap    current              both          next
//	signing    next                 both          next
//	narrowing  next                 next          next
//
// The begin operation goes from trusting to overlap and leaves the cluster
// there: kubeconfigs issued before keep working (their certificates are the
// current CA's, which every node trusts, and the API server's serving
// certificate is still the current CA's, which they verify it with); those
// issued now are the next CA's and carry both. The finish operation goes
// through signing and narrowing and makes the next CA the cluster's
// (SecretCA): from then on the old CA's certificates are refused.
//
// The rotation is one record (SecretCARotation) next to SecretCA, changed
// by compare-and-swap; the finish writes SecretCA and the record in one
// transaction, so a crash leaves one phase or the other.

// SecretCARotation is the cluster secret holding a CA rotation (JSON
// caRotation): its phase and the next CA's certificate and key.
const SecretCARotation = "cluster-ca-rotation"

// CAPhase is how far a CA rotation went; CANoRotation when none is under way.
type CAPhase string

// The phases of a CA rotation, in order.
const (
	CANoRotation CAPhase = ""
	CATrusting   CAPhase = "trusting"
	CAOverlap    CAPhase = "overlap"
	CASigning    CAPhase = "signing"
	CANarrowing  CAPhase = "narrowing"
)

// caRotation is the record of a CA rotation.
type caRotation struct {
	Phase CAPhase `json:"phase"`
	// Next is the next CA: certificate PEM followed by its key PEM.
	Next string `json:"next,omitempty"`
	// Since is when the phase began.
	Since time.Time `json:"since"`
}

// ClusterCAs are a cluster's CA and, during a CA rotation, the CA replacing
// it.
type ClusterCAs struct {
	Current *pki.CA
	Next    *pki.CA // nil unless Phase is a rotation's
	Phase   CAPhase
	Since   time.Time // when Phase began; zero without a rotation

	raw []byte // the rotation record as read, for a compare-and-swap
}

// Rotating reports whether a CA rotation is under way.
func (c *ClusterCAs) Rotating() bool { return c.Phase != CANoRotation }

// Issuer is the CA that signs what Kiln hands out: kubeconfigs, node
// certificates of agents, kilnd's own client certificates. The next CA once
// every node trusts it (from overlap on), else the current one.
func (c *ClusterCAs) Issuer() *pki.CA {
	if c.Phase == CANoRotation || c.Phase == CATrusting {
		return c.Current
	}
	return c.Next
}

// NodeSigner is the CA that signs the Kubernetes certificates a node
// installs: the next CA from the signing phase on, else the current one.
func (c *ClusterCAs) NodeSigner() *pki.CA {
	if c.Phase == CASigning || c.Phase == CANarrowing {
		return c.Next
	}
	return c.Current
}

// Trusted are the CAs whose certificates are accepted (in this order):
// both during a rotation, else the current one.
func (c *ClusterCAs) Trusted() []*pki.CA {
	if c.Next == nil {
		return []*pki.CA{c.Current}
	}
	return []*pki.CA{c.Current, c.Next}
}

// TrustPEM is the bundle of Trusted's certificates: what a kubeconfig
// verifies the API server with.
func (c *ClusterCAs) TrustPEM() []byte { return bundle(c.Trusted()) }

// NodeTrustPEM is the bundle a node installs as its CA file: the next CA
// alone in the narrowing phase, else TrustPEM.
func (c *ClusterCAs) NodeTrustPEM() []byte {
	if c.Phase == CANarrowing {
		return c.Next.CertPEM()
	}
	return c.TrustPEM()
}

func bundle(cas []*pki.CA) []byte {
	var b []byte
	for _, ca := range cas {
		b = append(b, ca.CertPEM()...)
	}
	return b
}

// VerifyCertificate checks cert against every trusted CA; the error is the
// current CA's when none signed it.
func (c *ClusterCAs) VerifyCertificate(cert *x509.Certificate, usage pki.Usage, now time.Time) error {
	err := c.Current.VerifyCertificate(cert, usage, now)
	if err == nil || c.Next == nil || !errors.Is(err, pki.ErrNotSignedByCA) {
		return err
	}
	if c.Next.VerifyCertificate(cert, usage, now) == nil {
		return nil
	}
	return err
}

// LoadCAs reads cluster k's CA and its rotation, if one is under way.
func LoadCAs(ctx context.Context, st SecretReader, k store.Key) (*ClusterCAs, error) {
	cur, err := LoadCA(ctx, st, k)
	if err != nil {
		return nil, err
	}
	out := &ClusterCAs{Current: cur}
	raw, err := st.GetClusterSecret(ctx, k, SecretCARotation)
	if errors.Is(err, store.ErrNotFound) {
		return out, nil
	} else if err != nil {
		return nil, fmt.Errorf("read the CA rotation of cluster %s: %w", k, err)
	}
	out.raw = raw
	var rot caRotation
	if err := json.Unmarshal(raw, &rot); err != nil {
		return nil, fmt.Errorf("decode the CA rotation of cluster %s: %w", k, err)
	}
	if rot.Phase == CANoRotation {
		return out, nil
	}
	if out.Next, err = pki.LoadCA([]byte(rot.Next), []byte(rot.Next)); err != nil {
		return nil, fmt.Errorf("load the next CA of cluster %s: %w", k, err)
	}
	out.Phase, out.Since = rot.Phase, rot.Since
	return out, nil
}

// CASecretStore is what changing a CA rotation needs of the store.
type CASecretStore interface {
	SecretReader
	UpdateClusterSecrets(ctx context.Context, k store.Key, writes ...store.SecretWrite) error
}

// BeginCARotation starts a CA rotation of cluster k in the trusting phase,
// with a new CA valid for validity (pki.DefaultCAValidity when zero), and
// returns the cluster's CAs. A rotation under way is returned as it is:
// run again, the step that called it changes nothing.
func BeginCARotation(ctx context.Context, st CASecretStore, k store.Key, validity time.Duration, now time.Time) (*ClusterCAs, error) {
	cas, err := LoadCAs(ctx, st, k)
	if err != nil || cas.Rotating() {
		return cas, err
	}
	// A distinct name: people and tools tell the two apart by it.
	next, err := pki.NewCA("kiln-cluster:"+k.String()+" "+now.UTC().Format("20060102T150405Z"), validity, now)
	if err != nil {
		return nil, err
	}
	rot := caRotation{Phase: CATrusting, Next: string(append(next.CertPEM(), next.KeyPEM()...)), Since: now.UTC()}
	if err := casRotation(ctx, st, k, cas.raw, rot); err != nil {
		return nil, err
	}
	return LoadCAs(ctx, st, k)
}

// SetCAPhase moves cluster k's CA rotation from phase from to phase to. It
// is done already when the rotation is in to; any other phase is an error.
func SetCAPhase(ctx context.Context, st CASecretStore, k store.Key, from, to CAPhase, now time.Time) (*ClusterCAs, error) {
	cas, err := LoadCAs(ctx, st, k)
	switch {
	case err != nil:
		return nil, err
	case cas.Phase == to:
		return cas, nil
	case cas.Phase != from:
		return nil, fmt.Errorf("the CA rotation of cluster %s is in phase %q, not %q", k, cas.Phase, from)
	}
	rot := caRotation{Phase: to, Next: string(append(cas.Next.CertPEM(), cas.Next.KeyPEM()...)), Since: now.UTC()}
	if err := casRotation(ctx, st, k, cas.raw, rot); err != nil {
		return nil, err
	}
	return LoadCAs(ctx, st, k)
}

// FinishCARotation makes the next CA cluster k's CA and ends the rotation,
// in one transaction; the old CA is forgotten. It must be in the narrowing
// phase; without a rotation it is done already.
func FinishCARotation(ctx context.Context, st CASecretStore, k store.Key) error {
	cas, err := LoadCAs(ctx, st, k)
	switch {
	case err != nil:
		return err
	case !cas.Rotating():
		return nil
	case cas.Phase != CANarrowing:
		return fmt.Errorf("the CA rotation of cluster %s is in phase %q, not %q", k, cas.Phase, CANarrowing)
	}
	raw, _ := json.Marshal(caRotation{Phase: CANoRotation})
	err = st.UpdateClusterSecrets(ctx, k,
		store.SecretWrite{Name: SecretCARotation, Value: raw, IfValue: cas.raw},
		store.SecretWrite{Name: SecretCA, Value: append(cas.Next.CertPEM(), cas.Next.KeyPEM()...)})
	if err != nil {
		return fmt.Errorf("make the next CA the CA of cluster %s: %w", k, err)
	}
	return nil
}

// casRotation writes rot as cluster k's rotation record if it still holds
// was (nil: if there is none).
func casRotation(ctx context.Context, st CASecretStore, k store.Key, was []byte, rot caRotation) error {
	raw, _ := json.Marshal(rot) // strings and a time: never fails
	w := store.SecretWrite{Name: SecretCARotation, Value: raw, IfValue: was, IfMissing: was == nil}
	if err := st.UpdateClusterSecrets(ctx, k, w); err != nil {
		return fmt.Errorf("record the CA rotation of cluster %s (phase %s): %w", k, rot.Phase, err)
	}
	return nil
}
