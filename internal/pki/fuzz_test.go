package pki

import (
	"crypto/x509"
	"encoding/pem"
	"testing"
	"time"
)

// An agent's certificate request (renewal, kiln-agent join) is outside
// input: SignCSR signs one whose signature and key check out, with the
// request's name, never the CSR's, and refuses anything else; it never
// panics.
func FuzzSignCSR(f *testing.F) {
	ca, err := NewCA("fuzz-ca", time.Hour, time.Now())
	if err != nil {
		f.Fatal(err)
	}
	key, _, err := NewKey()
	if err != nil {
		f.Fatal(err)
	}
	csr, err := NewCSR(key, "system:node:evil")
	if err != nil {
		f.Fatal(err)
	}
	f.Add(csr)
	f.Add([]byte("-----BEGIN CERTIFICATE REQUEST-----\nAAAA\n-----END CERTIFICATE REQUEST-----\n"))
	f.Add(ca.CertPEM())
	f.Fuzz(func(t *testing.T, csrPEM []byte) {
		cert, err := ca.SignCSR(csrPEM, CertRequest{CommonName: "system:node:n1", Usage: UsageClient, ValidFor: time.Hour})
		if err != nil {
			return
		}
		b, _ := pem.Decode(cert)
		if b == nil {
			t.Fatalf("signed %q: not PEM", cert)
		}
		c, err := x509.ParseCertificate(b.Bytes)
		if err != nil {
			t.Fatalf("signed a certificate that does not parse: %v", err)
		}
		if c.Subject.CommonName != "system:node:n1" {
			t.Errorf("signed for %q, want the request's system:node:n1", c.Subject.CommonName)
		}
	})
}
