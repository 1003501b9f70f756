package pki

import (
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
)

const pemCSR = "CERTIFICATE REQUEST"

// ErrInvalidCSR: a certificate request does not parse, its signature does
// not verify (the requester does not hold the key), or its key is too weak.
var ErrInvalidCSR = errors.New("invalid certificate signing request")

// NewCSR creates a PKCS #10 request signed by key, for a holder that keeps
// its key (a node agent). The subject is a hint: SignCSR decides the
// certificate's subject.
func NewCSR(key *ecdsa.PrivateKey, commonName string) ([]byte, error) {
	der, err := x509.CreateCertificateRequest(rand.Reader, &x509.CertificateRequest{
		Subject: pkix.Name{CommonName: commonName},
	}, key)
	if err != nil {
		return nil, fmt.Errorf("create certificate request: %w", err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: pemCSR, Bytes: der}), nil
}

// SubjectCSR creates a PKCS #10 request signed by key whose subject is
// req's common name and organizations: for a signer that takes the
// subject from the request (a cluster's kubernetes.io/kube-apiserver-client
// signer, for a person's credential on an attached cluster).
func SubjectCSR(key *ecdsa.PrivateKey, req CertRequest) ([]byte, error) {
	der, err := x509.CreateCertificateRequest(rand.Reader, &x509.CertificateRequest{
		Subject: pkix.Name{CommonName: req.CommonName, Organization: req.Organization},
	}, key)
	if err != nil {
		return nil, fmt.Errorf("create certificate request for %s: %w", req.CommonName, err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: pemCSR, Bytes: der}), nil
}

// NewKey creates an ECDSA P-256 private key and returns it with its PEM
// (SEC 1) encoding.
func NewKey() (*ecdsa.PrivateKey, []byte, error) {
	key, err := newKey()
	if err != nil {
		return nil, nil, err
	}
	keyPEM, err := encodeKey(key)
	if err != nil {
		return nil, nil, err
	}
	return key, keyPEM, nil
}

// SignCSR issues a certificate for the public key of a PEM certificate
// request, signed by the CA. Only the key comes from the request: its
// subject, names and extensions are ignored, and req says what the
// certificate holds (as for Issue). The requester's private key never
// reaches the CA. An unparsable request, a bad signature or a weak key is
// ErrInvalidCSR.
func (ca *CA) SignCSR(csrPEM []byte, req CertRequest) ([]byte, error) {
	if err := req.check(); err != nil {
		return nil, fmt.Errorf("sign certificate request: %w", err)
	}
	csr, err := parseCSR(csrPEM)
	if err != nil {
		return nil, fmt.Errorf("sign certificate request %q: %w", req.CommonName, err)
	}
	cert, err := ca.sign(req, csr.PublicKey)
	if err != nil {
		return nil, fmt.Errorf("sign certificate request %q: %w", req.CommonName, err)
	}
	return cert, nil
}

// parseCSR parses the first CERTIFICATE REQUEST block, checks its signature
// and its key.
func parseCSR(csrPEM []byte) (*x509.CertificateRequest, error) {
	rest := csrPEM
	for {
		var block *pem.Block
		block, rest = pem.Decode(rest)
		if block == nil {
			return nil, fmt.Errorf("no %s block: %w", pemCSR, ErrInvalidCSR)
		}
		if block.Type != pemCSR {
			continue
		}
		csr, err := x509.ParseCertificateRequest(block.Bytes)
		if err != nil {
			return nil, fmt.Errorf("%w: %w", ErrInvalidCSR, err)
		}
		if err := csr.CheckSignature(); err != nil {
			return nil, fmt.Errorf("%w: signature: %w", ErrInvalidCSR, err)
		}
		switch k := csr.PublicKey.(type) {
		case *ecdsa.PublicKey:
			if k.Curve != elliptic.P256() && k.Curve != elliptic.P384() {
				return nil, fmt.Errorf("ECDSA key on %s, want P-256 or P-384: %w", k.Curve.Params().Name, ErrInvalidCSR)
			}
		case *rsa.PublicKey:
			if k.N.BitLen() < 2048 {
				return nil, fmt.Errorf("RSA key of %d bits, want at least 2048: %w", k.N.BitLen(), ErrInvalidCSR)
			}
		case ed25519.PublicKey:
		default:
			return nil, fmt.Errorf("key of type %T: %w", k, ErrInvalidCSR)
		}
		return csr, nil
	}
}
