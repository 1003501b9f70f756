package pki

import (
	"crypto/ecdsa"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"net"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

var t0 = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

const day = 24 * time.Hour

func newCA(t *testing.T, name string) *CA {
	t.Helper()
	ca, err := NewCA(name, 0, t0)
	if err != nil {
		t.Fatalf("NewCA: %v", err)
	}
	return ca
}

func issue(t *testing.T, ca *CA, req CertRequest) (certPEM, keyPEM []byte) {
	t.Helper()
	certPEM, keyPEM, err := ca.Issue(req)
	if err != nil {
		t.Fatalf("Issue(%+v): %v", req, err)
	}
	return certPEM, keyPEM
}

func TestNewCA(t *testing.T) {
	ca := newCA(t, "kubernetes")
	c := ca.Certificate()
	if !c.IsCA || c.KeyUsage&x509.KeyUsageCertSign == 0 {
		t.Errorf("CA certificate: IsCA %v, KeyUsage %b", c.IsCA, c.KeyUsage)
	}
	if got, want := c.NotBefore, t0.Add(-time.Minute); !got.Equal(want) {
		t.Errorf("NotBefore = %s, want %s", got, want)
	}
	if got, want := c.NotAfter, t0.Add(DefaultCAValidity); !got.Equal(want) {
		t.Errorf("NotAfter = %s, want %s", got, want)
	}
	if _, ok := c.PublicKey.(*ecdsa.PublicKey); !ok {
		t.Errorf("public key is %T, want ECDSA", c.PublicKey)
	}
	if _, err := NewCA("", 0, t0); !errors.Is(err, ErrInvalidRequest) {
		t.Errorf("NewCA without a name: %v, want ErrInvalidRequest", err)
	}
}

func TestLoadCA(t *testing.T) {
	ca := newCA(t, "kubernetes")
	loaded, err := LoadCA(ca.CertPEM(), ca.KeyPEM())
	if err != nil {
		t.Fatalf("LoadCA: %v", err)
	}
	// A leaf issued by the loaded CA verifies against the original.
	certPEM, _ := issue(t, loaded, CertRequest{CommonName: "n1", Usage: UsageClient, Now: t0})
	if _, err := ca.Verify(certPEM, UsageClient, t0); err != nil {
		t.Errorf("Verify a leaf of the loaded CA: %v", err)
	}

	other := newCA(t, "other")
	leafPEM, leafKey := issue(t, ca, CertRequest{CommonName: "leaf", Usage: UsageServer, Now: t0})
	tests := []struct {
		name      string
		cert, key []byte
		want      error
	}{
		{"garbage certificate", []byte("not pem"), ca.KeyPEM(), ErrInvalidPEM},
		{"garbage key", ca.CertPEM(), []byte("-----BEGIN EC PRIVATE KEY-----\nAAAA\n-----END EC PRIVATE KEY-----\n"), ErrInvalidPEM},
		{"key of another CA", ca.CertPEM(), other.KeyPEM(), ErrKeyMismatch},
		{"leaf as a CA", leafPEM, leafKey, ErrNotCA},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if _, err := LoadCA(tt.cert, tt.key); !errors.Is(err, tt.want) {
				t.Errorf("LoadCA: %v, want %v", err, tt.want)
			}
		})
	}
}

func TestIssue(t *testing.T) {
	ca := newCA(t, "kubernetes")
	req := CertRequest{
		CommonName:   "system:node:n1",
		Organization: []string{"system:nodes"},
		DNSNames:     []string{"n1", "n1.example.com"},
		IPs:          []net.IP{net.IPv4(10, 0, 0, 5)},
		Usage:        UsageBoth,
		ValidFor:     30 * day,
		Now:          t0,
	}
	certPEM, keyPEM := issue(t, ca, req)
	cert, err := ca.Verify(certPEM, UsageBoth, t0)
	if err != nil {
		t.Fatalf("Verify: %v", err)
	}
	got := struct {
		CN, Issuer          string
		Org, DNS            []string
		IPs                 []string
		NotBefore, NotAfter time.Time
		ExtKeyUsage         []x509.ExtKeyUsage
		IsCA                bool
	}{cert.Subject.CommonName, cert.Issuer.CommonName, cert.Subject.Organization, cert.DNSNames,
		nil, cert.NotBefore, cert.NotAfter, cert.ExtKeyUsage, cert.IsCA}
	for _, ip := range cert.IPAddresses {
		got.IPs = append(got.IPs, ip.String())
	}
	want := got
	want.CN, want.Issuer = "system:node:n1", "kubernetes"
	want.Org, want.DNS, want.IPs = []string{"system:nodes"}, []string{"n1", "n1.example.com"}, []string{"10.0.0.5"}
	want.NotBefore, want.NotAfter = t0.Add(-time.Minute), t0.Add(30*day)
	want.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth}
	want.IsCA = false
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("issued certificate (-want +got):\n%s", diff)
	}
	if bits := cert.SerialNumber.BitLen(); bits < 64 || bits > 128 {
		t.Errorf("serial has %d bits, want a random 128-bit number", bits)
	}
	if _, err := parseKey(keyPEM); err != nil {
		t.Errorf("issued key: %v", err)
	}
	if got, want := IssuedAt(cert), t0; !got.Equal(want) {
		t.Errorf("IssuedAt = %s, want the issue time %s", got, want)
	}
	if got, want := RenewAt(cert), t0.Add(24*day); !got.Equal(want) {
		t.Errorf("RenewAt = %s, want %s (80%% of 30 days after the issue)", got, want)
	}

	// Two certificates never share a serial.
	other, _ := issue(t, ca, req)
	otherCert, _ := ParseCertificate(other)
	if otherCert.SerialNumber.Cmp(cert.SerialNumber) == 0 {
		t.Errorf("two certificates with serial %s", cert.SerialNumber)
	}

	// A certificate never outlives its CA, and a zero lifetime is the default.
	short, err := NewCA("short", 10*day, t0)
	if err != nil {
		t.Fatal(err)
	}
	capped, _ := issue(t, short, CertRequest{CommonName: "x", Usage: UsageClient, Now: t0})
	if c, _ := ParseCertificate(capped); !c.NotAfter.Equal(short.Certificate().NotAfter) {
		t.Errorf("NotAfter %s outlives the CA's %s", c.NotAfter, short.Certificate().NotAfter)
	}
	dflt, _ := issue(t, ca, CertRequest{CommonName: "x", Usage: UsageClient, Now: t0})
	if c, _ := ParseCertificate(dflt); !c.NotAfter.Equal(t0.Add(365 * day)) {
		t.Errorf("default NotAfter = %s, want 365 days after %s", c.NotAfter, t0)
	}
}

// TestRenewAtShortLived: renewal counts from the issue time, not from the
// NotBefore put back by the clock-skew allowance, so a certificate valid for
// seconds is not due at once; a certificate not put back counts from its
// NotBefore.
func TestRenewAtShortLived(t *testing.T) {
	ca := newCA(t, "c")
	certPEM, _, err := ca.Issue(CertRequest{CommonName: "n", Usage: UsageClient, ValidFor: 10 * time.Second, Now: t0})
	if err != nil {
		t.Fatal(err)
	}
	cert, _ := ParseCertificate(certPEM)
	if got := IssuedAt(cert); !got.Equal(t0) {
		t.Errorf("IssuedAt = %s, want %s", got, t0)
	}
	if got, want := RenewAt(cert), t0.Add(8*time.Second); !got.Equal(want) {
		t.Errorf("RenewAt = %s, want %s", got, want)
	}
	foreign := &x509.Certificate{NotBefore: t0, NotAfter: t0.Add(30 * time.Second)}
	if got := IssuedAt(foreign); !got.Equal(t0) {
		t.Errorf("IssuedAt of a certificate valid for 30s from its NotBefore = %s, want %s", got, t0)
	}
}

func TestIssueInvalid(t *testing.T) {
	ca := newCA(t, "kubernetes")
	tests := []struct {
		name string
		req  CertRequest
	}{
		{"no common name", CertRequest{Usage: UsageClient}},
		{"no usage", CertRequest{CommonName: "x"}},
		{"unknown usage", CertRequest{CommonName: "x", Usage: 8}},
		{"negative lifetime", CertRequest{CommonName: "x", Usage: UsageClient, ValidFor: -time.Hour}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if _, _, err := ca.Issue(tt.req); !errors.Is(err, ErrInvalidRequest) {
				t.Errorf("Issue: %v, want ErrInvalidRequest", err)
			}
		})
	}
}

func TestVerify(t *testing.T) {
	ca := newCA(t, "kubernetes")
	other := newCA(t, "kubernetes") // same name, another key: another cluster
	client, _ := issue(t, ca, CertRequest{CommonName: "n1", Usage: UsageClient, ValidFor: 30 * day, Now: t0})
	server, _ := issue(t, ca, CertRequest{CommonName: "s", Usage: UsageServer, ValidFor: 30 * day, Now: t0})
	foreign, _ := issue(t, other, CertRequest{CommonName: "n1", Usage: UsageClient, Now: t0})
	tests := []struct {
		name  string
		cert  []byte
		usage Usage
		now   time.Time
		want  error
	}{
		{"valid client", client, UsageClient, t0.Add(day), nil},
		{"valid server", server, UsageServer, t0.Add(day), nil},
		{"within the skew allowance", client, UsageClient, t0.Add(-30 * time.Second), nil},
		{"expired", client, UsageClient, t0.Add(31 * day), ErrExpired},
		{"not yet valid", client, UsageClient, t0.Add(-time.Hour), ErrNotYetValid},
		{"another CA", foreign, UsageClient, t0.Add(day), ErrNotSignedByCA},
		{"the CA of another cluster itself", other.CertPEM(), UsageClient, t0.Add(day), ErrNotSignedByCA},
		{"server as client", server, UsageClient, t0.Add(day), ErrWrongUsage},
		{"client as both", client, UsageBoth, t0.Add(day), ErrWrongUsage},
		{"not PEM", []byte("hello"), UsageClient, t0, ErrInvalidPEM},
		{"CA expired", client, UsageClient, t0.Add(DefaultCAValidity + day), ErrExpired},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cert, err := ca.Verify(tt.cert, tt.usage, tt.now)
			if !errors.Is(err, tt.want) {
				t.Fatalf("Verify: %v, want %v", err, tt.want)
			}
			if err == nil && cert == nil {
				t.Errorf("Verify returned no certificate")
			}
		})
	}
}

func TestServiceAccountKey(t *testing.T) {
	priv, pub, err := NewServiceAccountKey()
	if err != nil {
		t.Fatal(err)
	}
	key, err := parseKey(priv)
	if err != nil {
		t.Fatalf("private key: %v", err)
	}
	pubKey, err := parsePublicKey(pub)
	if err != nil {
		t.Fatalf("public key: %v", err)
	}
	if !key.PublicKey.Equal(pubKey) {
		t.Errorf("public key does not belong to the private key")
	}
}

func parsePublicKey(pubPEM []byte) (any, error) {
	block, _ := pem.Decode(pubPEM)
	if block == nil || block.Type != pemPublicKey {
		return nil, fmt.Errorf("no %s block: %w", pemPublicKey, ErrInvalidPEM)
	}
	key, err := x509.ParsePKIXPublicKey(block.Bytes)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalidPEM, err)
	}
	return key, nil
}
