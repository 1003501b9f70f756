package pki

import (
	"errors"
	"slices"
	"testing"
	"time"
)

func TestSignCSR(t *testing.T) {
	now := time.Now()
	ca, err := NewCA("cluster", 0, now)
	if err != nil {
		t.Fatal(err)
	}
	key, _, err := NewKey()
	if err != nil {
		t.Fatal(err)
	}
	csr, err := NewCSR(key, "ignored")
	if err != nil {
		t.Fatal(err)
	}
	certPEM, err := ca.SignCSR(csr, CertRequest{CommonName: "kiln:node:p/c/n", Organization: []string{"kiln:nodes"},
		Usage: UsageClient, ValidFor: 48 * time.Hour, Now: now})
	if err != nil {
		t.Fatalf("SignCSR: %v", err)
	}
	cert, err := ca.Verify(certPEM, UsageClient, now)
	if err != nil {
		t.Fatalf("Verify: %v", err)
	}
	if cert.Subject.CommonName != "kiln:node:p/c/n" || !slices.Equal(cert.Subject.Organization, []string{"kiln:nodes"}) {
		t.Errorf("subject %v, want the request's, not the CSR's", cert.Subject)
	}
	if !key.PublicKey.Equal(cert.PublicKey) {
		t.Error("certificate is not for the CSR's key")
	}
	if got := cert.NotAfter.Sub(now); got < 47*time.Hour || got > 49*time.Hour {
		t.Errorf("validity %s, want 48h", got)
	}
	if _, err := ca.Verify(certPEM, UsageServer, now); !errors.Is(err, ErrWrongUsage) {
		t.Errorf("server use of a client certificate: %v, want ErrWrongUsage", err)
	}

	t.Run("refused", func(t *testing.T) {
		tampered := slices.Clone(csr)
		tampered[len(tampered)/2] ^= 1
		for name, in := range map[string][]byte{"empty": nil, "garbage": []byte("nope"), "tampered": tampered, "certificate": certPEM} {
			if _, err := ca.SignCSR(in, CertRequest{CommonName: "x", Usage: UsageClient}); !errors.Is(err, ErrInvalidCSR) {
				t.Errorf("%s: %v, want ErrInvalidCSR", name, err)
			}
		}
		if _, err := ca.SignCSR(csr, CertRequest{Usage: UsageClient}); !errors.Is(err, ErrInvalidRequest) {
			t.Errorf("no common name: %v, want ErrInvalidRequest", err)
		}
	})
}
