// Package pki holds a cluster's certificate authority: it creates and loads
// CAs, issues client and server certificates signed by them, verifies what a
// node presents, and renders kubeconfigs. Every key is ECDSA P-256, which
// Go's TLS, etcd and every Kubernetes component accept. Time is always passed
// in, so tests and callers decide what "now" is.
package pki

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"time"
)

// Lifetimes.
const (
	// DefaultCAValidity is how long a new cluster CA is valid: ten years, as
	// kubeadm does, so the CA outlives many rotations of its leaves.
	DefaultCAValidity = 10 * 365 * 24 * time.Hour
	// DefaultValidity is a leaf certificate's lifetime when a CertRequest
	// names none: 365 days, the default of spec.certificateTTLDays.
	DefaultValidity = 365 * 24 * time.Hour
	// ClockSkewAllowance is how far in the past NotBefore is put, so that a
	// host whose clock is slightly behind the issuer's accepts the
	// certificate at once.
	ClockSkewAllowance = time.Minute
	// RenewFraction is the part of a certificate's lifetime after which its
	// holder should renew it.
	RenewFraction = 0.8
)

// PEM block types.
const (
	pemCertificate = "CERTIFICATE"
	pemECKey       = "EC PRIVATE KEY"
	pemPKCS8Key    = "PRIVATE KEY"
	pemPublicKey   = "PUBLIC KEY"
)

// Errors of loading and issuing. Verify's errors are in verify.go.
var (
	// ErrInvalidPEM: the input holds no PEM block of the expected type, or
	// the block does not parse.
	ErrInvalidPEM = errors.New("invalid PEM")
	// ErrNotCA: a certificate given as a CA is not marked as one.
	ErrNotCA = errors.New("certificate is not a CA")
	// ErrKeyMismatch: a CA's key is not the key of its certificate.
	ErrKeyMismatch = errors.New("private key does not match the certificate")
	// ErrInvalidRequest: a CertRequest cannot be issued (no common name, no
	// usage, a negative lifetime).
	ErrInvalidRequest = errors.New("invalid certificate request")
)

// Usage says what a certificate may authenticate: a TLS client, a TLS server,
// or both (etcd peers, for example).
type Usage int

// Usages. The zero Usage is invalid, so a request must say what it wants.
const (
	UsageClient Usage = 1 << iota
	UsageServer
	UsageBoth = UsageClient | UsageServer
)

func (u Usage) String() string {
	switch u {
	case UsageClient:
		return "client"
	case UsageServer:
		return "server"
	case UsageBoth:
		return "client and server"
	}
	return fmt.Sprintf("Usage(%d)", int(u))
}

func (u Usage) extKeyUsages() []x509.ExtKeyUsage {
	var out []x509.ExtKeyUsage
	if u&UsageServer != 0 {
		out = append(out, x509.ExtKeyUsageServerAuth)
	}
	if u&UsageClient != 0 {
		out = append(out, x509.ExtKeyUsageClientAuth)
	}
	return out
}

// CA is a certificate authority: a self-signed CA certificate and its key.
// Its methods are safe for concurrent use.
type CA struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
}

// NewCA creates a self-signed CA valid from a minute before now for validFor
// (DefaultCAValidity when zero).
func NewCA(commonName string, validFor time.Duration, now time.Time) (*CA, error) {
	if commonName == "" {
		return nil, fmt.Errorf("new CA: no common name: %w", ErrInvalidRequest)
	}
	if validFor == 0 {
		validFor = DefaultCAValidity
	}
	if validFor < 0 {
		return nil, fmt.Errorf("new CA %q: negative validity %s: %w", commonName, validFor, ErrInvalidRequest)
	}
	key, err := newKey()
	if err != nil {
		return nil, fmt.Errorf("new CA %q: %w", commonName, err)
	}
	serial, err := newSerial()
	if err != nil {
		return nil, fmt.Errorf("new CA %q: %w", commonName, err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          serial,
		Subject:               pkix.Name{CommonName: commonName},
		NotBefore:             now.Add(-ClockSkewAllowance).UTC(),
		NotAfter:              now.Add(validFor).UTC(),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
		MaxPathLenZero:        true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, key.Public(), key)
	if err != nil {
		return nil, fmt.Errorf("new CA %q: sign: %w", commonName, err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, fmt.Errorf("new CA %q: parse: %w", commonName, err)
	}
	return &CA{cert: cert, key: key}, nil
}

// LoadCA loads a CA from PEM, as written by CertPEM and KeyPEM. The key may
// be SEC 1 ("EC PRIVATE KEY") or PKCS #8 ("PRIVATE KEY") ECDSA.
func LoadCA(certPEM, keyPEM []byte) (*CA, error) {
	cert, err := ParseCertificate(certPEM)
	if err != nil {
		return nil, fmt.Errorf("load CA certificate: %w", err)
	}
	if !cert.IsCA {
		return nil, fmt.Errorf("load CA %q: %w", cert.Subject.CommonName, ErrNotCA)
	}
	key, err := parseKey(keyPEM)
	if err != nil {
		return nil, fmt.Errorf("load CA key: %w", err)
	}
	if !key.PublicKey.Equal(cert.PublicKey) {
		return nil, fmt.Errorf("load CA %q: %w", cert.Subject.CommonName, ErrKeyMismatch)
	}
	return &CA{cert: cert, key: key}, nil
}

// Certificate returns the CA's certificate. The caller must not modify it.
func (ca *CA) Certificate() *x509.Certificate { return ca.cert }

// Pool returns a certificate pool holding only this CA, for a tls.Config's
// RootCAs or ClientCAs.
func (ca *CA) Pool() *x509.CertPool {
	p := x509.NewCertPool()
	p.AddCert(ca.cert)
	return p
}

// CertPEM returns the CA certificate in PEM.
func (ca *CA) CertPEM() []byte {
	return pem.EncodeToMemory(&pem.Block{Type: pemCertificate, Bytes: ca.cert.Raw})
}

// KeyPEM returns the CA's private key in PEM (SEC 1). It is a secret: store
// it encrypted.
func (ca *CA) KeyPEM() []byte {
	pemKey, err := encodeKey(ca.key)
	if err != nil {
		// MarshalECPrivateKey fails only for a curve it does not know, and
		// every key here is P-256.
		panic(fmt.Sprintf("pki: encode a P-256 key: %v", err))
	}
	return pemKey
}

// CertRequest is what to put in a certificate.
type CertRequest struct {
	// CommonName is required. For Kubernetes it is the user name
	// (system:node:NAME, system:kube-scheduler, ...).
	CommonName string
	// Organization holds Kubernetes groups (system:nodes, system:masters).
	Organization []string
	// DNSNames and IPs are the subject alternative names of a server.
	DNSNames []string
	IPs      []net.IP
	// Usage is required.
	Usage Usage
	// ValidFor is the lifetime; DefaultValidity when zero. A certificate
	// never outlives its CA: NotAfter is cut to the CA's.
	ValidFor time.Duration
	// Now is the issue time; time.Now() when zero.
	Now time.Time
}

// Issue creates a new key and a certificate for it signed by the CA, and
// returns both in PEM. The serial number is a random 128-bit number.
func (ca *CA) Issue(req CertRequest) (certPEM, keyPEM []byte, err error) {
	if err := req.check(); err != nil {
		return nil, nil, fmt.Errorf("issue certificate: %w", err)
	}
	key, err := newKey()
	if err != nil {
		return nil, nil, fmt.Errorf("issue certificate %q: %w", req.CommonName, err)
	}
	if certPEM, err = ca.sign(req, key.Public()); err != nil {
		return nil, nil, fmt.Errorf("issue certificate %q: %w", req.CommonName, err)
	}
	if keyPEM, err = encodeKey(key); err != nil {
		return nil, nil, fmt.Errorf("issue certificate %q: %w", req.CommonName, err)
	}
	return certPEM, keyPEM, nil
}

// check validates req and fills in its defaults (validity, issue time).
func (req *CertRequest) check() error {
	if req.CommonName == "" {
		return fmt.Errorf("no common name: %w", ErrInvalidRequest)
	}
	if req.Usage&^UsageBoth != 0 || req.Usage == 0 {
		return fmt.Errorf("%q: usage %s: %w", req.CommonName, req.Usage, ErrInvalidRequest)
	}
	if req.ValidFor < 0 {
		return fmt.Errorf("%q: negative validity %s: %w", req.CommonName, req.ValidFor, ErrInvalidRequest)
	}
	if req.ValidFor == 0 {
		req.ValidFor = DefaultValidity
	}
	if req.Now.IsZero() {
		req.Now = time.Now()
	}
	return nil
}

// sign issues the certificate of req for pub, valid from a clock-skew
// allowance before req.Now and never past the CA's own end.
func (ca *CA) sign(req CertRequest, pub crypto.PublicKey) ([]byte, error) {
	serial, err := newSerial()
	if err != nil {
		return nil, err
	}
	notAfter := req.Now.Add(req.ValidFor)
	if notAfter.After(ca.cert.NotAfter) {
		notAfter = ca.cert.NotAfter
	}
	tmpl := &x509.Certificate{
		SerialNumber:          serial,
		Subject:               pkix.Name{CommonName: req.CommonName, Organization: req.Organization},
		DNSNames:              req.DNSNames,
		IPAddresses:           req.IPs,
		NotBefore:             req.Now.Add(-ClockSkewAllowance).UTC(),
		NotAfter:              notAfter.UTC(),
		KeyUsage:              x509.KeyUsageDigitalSignature,
		ExtKeyUsage:           req.Usage.extKeyUsages(),
		BasicConstraintsValid: true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, pub, ca.key)
	if err != nil {
		return nil, fmt.Errorf("sign: %w", err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: pemCertificate, Bytes: der}), nil
}

// ParseCertificate parses the first CERTIFICATE block of a PEM input.
func ParseCertificate(certPEM []byte) (*x509.Certificate, error) {
	rest := certPEM
	for {
		var block *pem.Block
		block, rest = pem.Decode(rest)
		if block == nil {
			return nil, fmt.Errorf("no %s block: %w", pemCertificate, ErrInvalidPEM)
		}
		if block.Type != pemCertificate {
			continue
		}
		cert, err := x509.ParseCertificate(block.Bytes)
		if err != nil {
			return nil, fmt.Errorf("%w: %w", ErrInvalidPEM, err)
		}
		return cert, nil
	}
}

// IssuedAt is when cert was issued, as far as the certificate tells: its
// NotBefore plus the ClockSkewAllowance this package puts it back by, or
// NotBefore itself when that would not leave it valid (a certificate from
// elsewhere). Renewal times count from it: a certificate valid for seconds
// (in tests) is otherwise past any fraction of its lifetime at once.
func IssuedAt(cert *x509.Certificate) time.Time {
	t := cert.NotBefore.Add(ClockSkewAllowance)
	if !t.Before(cert.NotAfter) {
		return cert.NotBefore
	}
	return t
}

// RenewAt is when the holder of cert should have a new one: after
// RenewFraction of its lifetime since it was issued (IssuedAt). Holders
// start asking earlier (kiln-agent at two thirds), so that a failed
// attempt can be tried again by then.
func RenewAt(cert *x509.Certificate) time.Time {
	issued := IssuedAt(cert)
	life := cert.NotAfter.Sub(issued)
	return issued.Add(time.Duration(float64(life) * RenewFraction))
}

func newKey() (*ecdsa.PrivateKey, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("generate P-256 key: %w", err)
	}
	return key, nil
}

// newSerial returns a random positive 128-bit serial number.
func newSerial() (*big.Int, error) {
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 128))
	if err != nil {
		return nil, fmt.Errorf("serial number: %w", err)
	}
	if serial.Sign() == 0 {
		serial.SetInt64(1)
	}
	return serial, nil
}

func encodeKey(key *ecdsa.PrivateKey) ([]byte, error) {
	der, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return nil, fmt.Errorf("encode key: %w", err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: pemECKey, Bytes: der}), nil
}

func parseKey(keyPEM []byte) (*ecdsa.PrivateKey, error) {
	rest := keyPEM
	for {
		var block *pem.Block
		block, rest = pem.Decode(rest)
		if block == nil {
			return nil, fmt.Errorf("no private key block: %w", ErrInvalidPEM)
		}
		var (
			key any
			err error
		)
		switch block.Type {
		case pemECKey:
			key, err = x509.ParseECPrivateKey(block.Bytes)
		case pemPKCS8Key:
			key, err = x509.ParsePKCS8PrivateKey(block.Bytes)
		default:
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("%w: %w", ErrInvalidPEM, err)
		}
		ec, ok := key.(*ecdsa.PrivateKey)
		if !ok {
			return nil, fmt.Errorf("key is %T, not ECDSA: %w", key, ErrInvalidPEM)
		}
		return ec, nil
	}
}
