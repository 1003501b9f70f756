package pki

import (
	"crypto/x509"
	"errors"
	"fmt"
	"slices"
	"time"
)

// Errors of Verify. Each is wrapped with the details (the certificate's
// subject, the times); a registration endpoint maps them with errors.Is to a
// message for the node's operator.
var (
	// ErrExpired: the certificate (or the CA that signed it) is past its
	// NotAfter.
	ErrExpired = errors.New("certificate has expired")
	// ErrNotYetValid: the certificate's NotBefore is in the future; the
	// presenting host's or this host's clock is wrong.
	ErrNotYetValid = errors.New("certificate is not valid yet")
	// ErrNotSignedByCA: the certificate was not issued by this CA (another
	// cluster's, or self-signed).
	ErrNotSignedByCA = errors.New("certificate is not signed by the cluster CA")
	// ErrWrongUsage: the certificate may not be used for what it is
	// presented for (a server certificate presented as a client).
	ErrWrongUsage = errors.New("certificate is not valid for this usage")
)

// Verify parses certPEM and checks that this CA signed it, that it is valid
// at now, and that it allows usage (both client and server auth for
// UsageBoth). It returns the parsed certificate; on failure the error wraps
// ErrInvalidPEM, ErrExpired, ErrNotYetValid, ErrNotSignedByCA or
// ErrWrongUsage.
func (ca *CA) Verify(certPEM []byte, usage Usage, now time.Time) (*x509.Certificate, error) {
	cert, err := ParseCertificate(certPEM)
	if err != nil {
		return nil, fmt.Errorf("verify certificate: %w", err)
	}
	if err := ca.VerifyCertificate(cert, usage, now); err != nil {
		return nil, err
	}
	return cert, nil
}

// VerifyCertificate is Verify for a parsed certificate, such as the peer
// certificate of a TLS connection (tls.ConnectionState.PeerCertificates[0]).
func (ca *CA) VerifyCertificate(cert *x509.Certificate, usage Usage, now time.Time) error {
	name := cert.Subject.CommonName
	if usage == 0 || usage&^UsageBoth != 0 {
		return fmt.Errorf("verify certificate %q: usage %s: %w", name, usage, ErrInvalidRequest)
	}
	switch {
	case now.After(cert.NotAfter):
		return fmt.Errorf("verify certificate %q: it expired at %s (now %s): %w",
			name, cert.NotAfter.UTC().Format(time.RFC3339), now.UTC().Format(time.RFC3339), ErrExpired)
	case now.Before(cert.NotBefore):
		return fmt.Errorf("verify certificate %q: it is valid from %s (now %s); check both clocks: %w",
			name, cert.NotBefore.UTC().Format(time.RFC3339), now.UTC().Format(time.RFC3339), ErrNotYetValid)
	}
	_, err := cert.Verify(x509.VerifyOptions{
		Roots:       ca.Pool(),
		CurrentTime: now,
		// Usages are checked below: Verify accepts any one of a list,
		// and UsageBoth needs both.
		KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageAny},
	})
	if err != nil {
		var unknown x509.UnknownAuthorityError
		var invalid x509.CertificateInvalidError
		switch {
		case errors.As(err, &unknown):
			return fmt.Errorf("verify certificate %q: issued by %q, not by CA %q: %w",
				name, cert.Issuer.CommonName, ca.cert.Subject.CommonName, ErrNotSignedByCA)
		case errors.As(err, &invalid) && invalid.Reason == x509.Expired:
			return fmt.Errorf("verify certificate %q: CA %q valid %s to %s: %w", name, ca.cert.Subject.CommonName,
				ca.cert.NotBefore.UTC().Format(time.RFC3339), ca.cert.NotAfter.UTC().Format(time.RFC3339), ErrExpired)
		}
		return fmt.Errorf("verify certificate %q: %w: %w", name, ErrNotSignedByCA, err)
	}
	for _, want := range usage.extKeyUsages() {
		if !slices.Contains(cert.ExtKeyUsage, want) && !slices.Contains(cert.ExtKeyUsage, x509.ExtKeyUsageAny) {
			return fmt.Errorf("verify certificate %q: wanted %s use: %w", name, usage, ErrWrongUsage)
		}
	}
	return nil
}
