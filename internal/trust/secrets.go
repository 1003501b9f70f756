// Package trust is cluster trust: a cluster's CAs (its CA, the front-proxy
// CA, and a CA rotation's phases), its node certificates (the client
// certificates of its agents: signed, recorded per node, renewed, revoked)
// and its secrets (the service-account key, the agent credential and
// passphrase, which the API server revokes and issues again). Everything is
// a cluster secret in the store; the plan, the API, the certificate check
// and the agent gateway use it, and it knows none of them.
package trust

import (
	"context"
	"crypto/pbkdf2"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base32"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"kiln.dev/kiln/internal/pki"
	"kiln.dev/kiln/internal/store"
)

// Names of a cluster's secrets in the store. Values marked "clear" hold a
// secret kilnd can read again (the local provider starts agents with them
// after a restart) rather than only its hash; like every cluster secret they
// are encrypted at rest when the store has a sealer (docs/security.md).
const (
	SecretCA               = "cluster-ca"             // CA certificate PEM followed by its key PEM
	SecretServiceAccount   = "service-account-key"    // private key PEM followed by public key PEM
	SecretFrontProxyCA     = "front-proxy-ca"         // the aggregation layer's CA: certificate PEM followed by its key PEM
	SecretCredentialHash   = "agent-credential.hash"  // JSON CredentialHash
	SecretPassphraseHash   = "passphrase.hash"        // pbkdf2-sha256$iterations$salt$hash
	SecretCredentialClear  = "agent-credential.clear" // clear: JSON clearCredential
	SecretPassphraseClear  = "passphrase.clear"       // clear: the passphrase
	passphraseIterations   = 100_000
	credentialSecretLength = 32 // bytes of randomness: 256 bits
)

// SecretReader reads cluster secrets.
type SecretReader interface {
	GetClusterSecret(ctx context.Context, k store.Key, name string) ([]byte, error)
}

// SecretStore is what EnsureSecrets needs of the store.
type SecretStore interface {
	SecretReader
	PutClusterSecret(ctx context.Context, k store.Key, name string, value []byte, c store.Cond) error
}

// Secrets are a cluster's secrets as EnsureSecrets returns them.
type Secrets struct {
	// Created is true when this call created the credential and the
	// passphrase; only then are CredentialSecret and Passphrase set (show
	// them to the user once). ClearCredentials reads them again for kilnd's
	// own use.
	Created          bool
	CA               *pki.CA
	CredentialID     string
	CredentialSecret string
	Passphrase       string
	// ServiceAccountKey and ServiceAccountPublicKey are PEM.
	ServiceAccountKey       []byte
	ServiceAccountPublicKey []byte
}

type clearCredential struct {
	ID     string `json:"id"`
	Secret string `json:"secret"`
}

// CredentialHash is the stored record of a cluster's agent credential: its
// id and the hash of its secret, never the secret (JSON).
type CredentialHash struct {
	ID     string `json:"id"`
	SHA256 string `json:"sha256"` // hex of sha256(secret): the secret is 256 random bits, so no stretching is needed
	// RevokedAt is set by RevokeActivation: registration with the
	// credential is refused.
	RevokedAt *time.Time `json:"revokedAt,omitempty"`
	// IssuedAt is when the credential was made; it expires the cluster's
	// certificateTTLDays later (CredentialExpiry). Records written before
	// it existed have none and do not expire.
	IssuedAt *time.Time `json:"issuedAt,omitempty"`
	// Retired are the credentials ReissueActivation replaced, newest
	// first (at most maxRetired), so that registration with one says so.
	Retired []RetiredCredential `json:"retired,omitempty"`
}

// RetiredCredential is a credential replaced by a new one.
type RetiredCredential struct {
	ID string    `json:"id"`
	At time.Time `json:"at"`
}

// Expiry is when the credential stops admitting hosts, for a cluster whose
// certificates last ttlDays; ok is false when it does not expire.
func (c *CredentialHash) Expiry(ttlDays int) (t time.Time, ok bool) {
	if c.IssuedAt == nil || ttlDays <= 0 {
		return time.Time{}, false
	}
	return c.IssuedAt.Add(time.Duration(ttlDays) * 24 * time.Hour), true
}

// Replaced returns the retired credential id (ReissueActivation replaced
// it), or nil.
func (c *CredentialHash) Replaced(id string) *RetiredCredential {
	for i := range c.Retired {
		if c.Retired[i].ID == id {
			return &c.Retired[i]
		}
	}
	return nil
}

// EnsureSecret writes cluster k's secret name as value unless it exists
// (IfNoneMatch "*", fenced by f) and returns what is stored: value and true
// when this call wrote it, else the existing value and false. A crashed
// step that runs again gets the secret its first run made.
func EnsureSecret(ctx context.Context, st SecretStore, k store.Key, f store.Fence, name string, value []byte) ([]byte, bool, error) {
	err := st.PutClusterSecret(ctx, k, name, value, store.Cond{IfNoneMatch: "*", Fence: &f})
	switch {
	case err == nil:
		return value, true, nil
	case errors.Is(err, store.ErrExists):
		got, err := st.GetClusterSecret(ctx, k, name)
		return got, false, err
	}
	return nil, false, err
}

// EnsureSecrets creates, once, cluster k's CA (valid for caValidity;
// pki.DefaultCAValidity when zero), agent credential, passphrase and
// service-account key pair, each written with IfNoneMatch "*" and fenced by
// the cluster's lease; it reads back those that exist. A plan step calls it
// first thing in a create: run again, it changes nothing.
//
// Each secret is one record, so a crash between two writes leaves whole
// secrets; a hash is written after the clear value it is derived from and
// derived again from it when missing.
func EnsureSecrets(ctx context.Context, st SecretStore, k store.Key, f store.Fence, caValidity time.Duration) (*Secrets, error) {
	wrap := func(err error) error { return fmt.Errorf("ensure secrets of cluster %s: %w", k, err) }
	put := func(name string, value []byte) ([]byte, bool, error) { return EnsureSecret(ctx, st, k, f, name, value) }
	out := &Secrets{}

	ca, err := pki.NewCA("kiln-cluster:"+k.String(), caValidity, time.Now())
	if err != nil {
		return nil, wrap(err)
	}
	caPEM, _, err := put(SecretCA, append(ca.CertPEM(), ca.KeyPEM()...))
	if err != nil {
		return nil, wrap(err)
	}
	if out.CA, err = pki.LoadCA(caPEM, caPEM); err != nil {
		return nil, wrap(fmt.Errorf("stored CA: %w", err))
	}

	if _, err := EnsureFrontProxyCA(ctx, st, k, f, caValidity); err != nil {
		return nil, wrap(err)
	}

	priv, pub, err := pki.NewServiceAccountKey()
	if err != nil {
		return nil, wrap(err)
	}
	sa, _, err := put(SecretServiceAccount, append(priv, pub...))
	if err != nil {
		return nil, wrap(err)
	}
	if out.ServiceAccountKey, out.ServiceAccountPublicKey, err = splitKeyPair(sa); err != nil {
		return nil, wrap(err)
	}

	secret, err := randomString(credentialSecretLength)
	if err != nil {
		return nil, wrap(err)
	}
	cred := clearCredential{ID: newCredentialID(k), Secret: secret}
	raw, _ := json.Marshal(cred)
	raw, created, err := put(SecretCredentialClear, raw)
	if err != nil {
		return nil, wrap(err)
	}
	if err := json.Unmarshal(raw, &cred); err != nil {
		return nil, wrap(fmt.Errorf("stored credential: %w", err))
	}
	issued := time.Now().UTC()
	hashed, _ := json.Marshal(CredentialHash{ID: cred.ID, SHA256: hashSecret(cred.Secret), IssuedAt: &issued})
	if _, _, err := put(SecretCredentialHash, hashed); err != nil {
		return nil, wrap(err)
	}
	out.CredentialID = cred.ID

	pass, err := newPassphrase()
	if err != nil {
		return nil, wrap(err)
	}
	rawPass, passCreated, err := put(SecretPassphraseClear, []byte(pass))
	if err != nil {
		return nil, wrap(err)
	}
	passHash, err := hashPassphrase(string(rawPass))
	if err != nil {
		return nil, wrap(err)
	}
	if _, _, err := put(SecretPassphraseHash, []byte(passHash)); err != nil {
		return nil, wrap(err)
	}
	if created || passCreated {
		out.Created = true
		out.CredentialSecret, out.Passphrase = cred.Secret, string(rawPass)
	}
	return out, nil
}

// ClearCredentials reads cluster k's agent credential (id and secret) and
// passphrase in clear, for kilnd's own use (a provider that starts agents).
// After ReissueActivation they are the new ones; after RevokeActivation
// they are the revoked ones, which agents that joined already start with
// (they do not register again) and registration refuses.
func ClearCredentials(ctx context.Context, st SecretReader, k store.Key) (id, secret, passphrase string, err error) {
	raw, err := st.GetClusterSecret(ctx, k, SecretCredentialClear)
	if err != nil {
		return "", "", "", fmt.Errorf("read agent credential of cluster %s: %w", k, err)
	}
	var cred clearCredential
	if err := json.Unmarshal(raw, &cred); err != nil {
		return "", "", "", fmt.Errorf("read agent credential of cluster %s: %w", k, err)
	}
	pass, err := st.GetClusterSecret(ctx, k, SecretPassphraseClear)
	if err != nil {
		return "", "", "", fmt.Errorf("read passphrase of cluster %s: %w", k, err)
	}
	return cred.ID, cred.Secret, string(pass), nil
}

// LoadCA reads cluster k's CA (certificate and key).
func LoadCA(ctx context.Context, st SecretReader, k store.Key) (*pki.CA, error) {
	raw, err := st.GetClusterSecret(ctx, k, SecretCA)
	if err != nil {
		return nil, fmt.Errorf("read CA of cluster %s: %w", k, err)
	}
	ca, err := pki.LoadCA(raw, raw)
	if err != nil {
		return nil, fmt.Errorf("load CA of cluster %s: %w", k, err)
	}
	return ca, nil
}

// EnsureFrontProxyCA reads cluster k's front-proxy CA (the aggregation
// layer's: it issues only the API server's front-proxy-client certificate),
// creating it (valid for validity, fenced by f) when the cluster has none.
// A cluster made before Kiln had an aggregation layer gets one at its next
// install this way.
func EnsureFrontProxyCA(ctx context.Context, st SecretStore, k store.Key, f store.Fence, validity time.Duration) (*pki.CA, error) {
	raw, err := st.GetClusterSecret(ctx, k, SecretFrontProxyCA)
	if errors.Is(err, store.ErrNotFound) {
		var ca *pki.CA
		if ca, err = pki.NewCA("kiln-front-proxy:"+k.String(), validity, time.Now()); err != nil {
			return nil, err
		}
		raw, _, err = EnsureSecret(ctx, st, k, f, SecretFrontProxyCA, append(ca.CertPEM(), ca.KeyPEM()...))
	}
	if err != nil {
		return nil, fmt.Errorf("front-proxy CA of cluster %s: %w", k, err)
	}
	ca, err := pki.LoadCA(raw, raw)
	if err != nil {
		return nil, fmt.Errorf("load front-proxy CA of cluster %s: %w", k, err)
	}
	return ca, nil
}

func splitKeyPair(b []byte) (priv, pub []byte, err error) {
	const marker = "-----BEGIN PUBLIC KEY-----"
	i := strings.Index(string(b), marker)
	if i < 0 {
		return nil, nil, errors.New("stored service-account key has no public key")
	}
	return b[:i], b[i:], nil
}

// newCredentialID returns a credential id that starts with a tag of its
// cluster, so that a credential of another cluster is told apart from an
// unknown one without looking every cluster up.
func newCredentialID(k store.Key) string {
	r, _ := randomString(12)
	return clusterTag(k) + "." + r[:16]
}

func clusterTag(k store.Key) string {
	sum := sha256.Sum256([]byte(k.String()))
	return "kc" + hex.EncodeToString(sum[:5])
}

func randomString(n int) (string, error) {
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		return "", fmt.Errorf("random: %w", err)
	}
	return base64.RawURLEncoding.EncodeToString(b), nil
}

func hashSecret(s string) string {
	sum := sha256.Sum256([]byte(s))
	return hex.EncodeToString(sum[:])
}

// SecretMatches reports whether s is the credential's secret.
func (c *CredentialHash) SecretMatches(s string) bool {
	return subtle.ConstantTimeCompare([]byte(hashSecret(s)), []byte(c.SHA256)) == 1
}

// CredentialOf reports whether credential id was made for cluster k (its
// id starts with a tag of the cluster), without reading anything: a
// credential of another cluster is told apart from an unknown one.
func CredentialOf(k store.Key, id string) bool { return strings.HasPrefix(id, clusterTag(k)+".") }

// passphraseEncoding is base32 without the letters and digits people
// confuse (Crockford's: no I, L, O, U).
var passphraseEncoding = base32.NewEncoding("0123456789ABCDEFGHJKMNPQRSTVWXYZ").WithPadding(base32.NoPadding)

// newPassphrase returns 100 random bits as four groups of five characters
// that a person can read and type: "7K3QX-M2D9P-...".
func newPassphrase() (string, error) {
	b := make([]byte, 13)
	if _, err := rand.Read(b); err != nil {
		return "", fmt.Errorf("random: %w", err)
	}
	s := passphraseEncoding.EncodeToString(b)[:20]
	return s[0:5] + "-" + s[5:10] + "-" + s[10:15] + "-" + s[15:20], nil
}

// normalizePassphrase lets a person type it in lower case, with spaces or
// without dashes.
func normalizePassphrase(p string) string {
	p = strings.ToUpper(p)
	return strings.Map(func(r rune) rune {
		if r == '-' || r == ' ' || r == '\t' || r == '\n' || r == '\r' {
			return -1
		}
		return r
	}, p)
}

func hashPassphrase(p string) (string, error) {
	salt := make([]byte, 16)
	if _, err := rand.Read(salt); err != nil {
		return "", fmt.Errorf("random: %w", err)
	}
	key, err := pbkdf2.Key(sha256.New, normalizePassphrase(p), salt, passphraseIterations, 32)
	if err != nil {
		return "", fmt.Errorf("hash passphrase: %w", err)
	}
	return fmt.Sprintf("pbkdf2-sha256$%d$%s$%s", passphraseIterations,
		base64.RawStdEncoding.EncodeToString(salt), base64.RawStdEncoding.EncodeToString(key)), nil
}

// errBadHash: a stored hash is not in the format hashPassphrase writes.
var errBadHash = errors.New("stored passphrase hash has an unknown format")

// PassphraseMatches reports whether p (as a person typed it) is the
// passphrase whose hash is stored (SecretPassphraseHash's value).
func PassphraseMatches(p, stored string) (bool, error) {
	parts := strings.Split(stored, "$")
	if len(parts) != 4 || parts[0] != "pbkdf2-sha256" {
		return false, errBadHash
	}
	var iter int
	if _, err := fmt.Sscanf(parts[1], "%d", &iter); err != nil || iter <= 0 {
		return false, errBadHash
	}
	salt, err1 := base64.RawStdEncoding.DecodeString(parts[2])
	want, err2 := base64.RawStdEncoding.DecodeString(parts[3])
	if err1 != nil || err2 != nil {
		return false, errBadHash
	}
	got, err := pbkdf2.Key(sha256.New, normalizePassphrase(p), salt, iter, len(want))
	if err != nil {
		return false, fmt.Errorf("hash passphrase: %w", err)
	}
	return subtle.ConstantTimeCompare(got, want) == 1, nil
}
