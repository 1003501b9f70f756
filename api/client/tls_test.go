package client

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"io"
	"log"
	"math/big"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	v1 "kiln.dev/kiln/api/v1"
)

// tlsServer is an HTTPS server answering every request with one project,
// with a self-signed certificate of its own for 127.0.0.1, and the PEM of
// that certificate.
func tlsServer(t *testing.T) (*httptest.Server, []byte) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(time.Now().UnixNano()),
		Subject:               pkix.Name{CommonName: "test server"},
		IPAddresses:           []net.IP{net.IPv4(127, 0, 0, 1)},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(time.Hour),
		KeyUsage:              x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, key.Public(), key)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, 200, v1.Project{Name: "p"})
	}))
	srv.TLS = &tls.Config{Certificates: []tls.Certificate{{Certificate: [][]byte{der}, PrivateKey: key}}}
	srv.Config.ErrorLog = log.New(io.Discard, "", 0) // handshakes fail on purpose
	srv.StartTLS()
	t.Cleanup(srv.Close)
	return srv, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
}

func TestWithCAVerifiesTheServer(t *testing.T) {
	srv, caPEM := tlsServer(t)
	_, otherPEM := tlsServer(t) // another self-signed certificate

	if _, err := New(srv.URL, "", WithCA(caPEM)).GetProject(t.Context(), "p"); err != nil {
		t.Fatalf("with the server's CA: %v", err)
	}

	var cve *tls.CertificateVerificationError
	if _, err := New(srv.URL, "").GetProject(t.Context(), "p"); !errors.As(err, &cve) {
		t.Errorf("with the system roots: %v, want a certificate verification error", err)
	}
	if _, err := New(srv.URL, "", WithCA(otherPEM)).GetProject(t.Context(), "p"); !errors.As(err, &cve) {
		t.Errorf("with another CA: %v, want a certificate verification error", err)
	}
}

// TestWithCAKeepsTheHTTPClient: WithCA applies to a client given with
// WithHTTPClient, in either order, without changing the one given.
func TestWithCAKeepsTheHTTPClient(t *testing.T) {
	srv, caPEM := tlsServer(t)
	var calls atomic.Int32
	given := &http.Client{Timeout: 7 * time.Second, CheckRedirect: func(*http.Request, []*http.Request) error {
		calls.Add(1)
		return nil
	}}
	for _, opts := range [][]Option{
		{WithHTTPClient(given), WithCA(caPEM)},
		{WithCA(caPEM), WithHTTPClient(given)},
	} {
		c := New(srv.URL, "", opts...)
		if _, err := c.GetProject(t.Context(), "p"); err != nil {
			t.Fatal(err)
		}
		if c.hc == given || c.hc.Timeout != 7*time.Second || c.hc.CheckRedirect == nil {
			t.Errorf("client used: %+v; want a copy of the one given with its timeout and redirect policy", c.hc)
		}
	}
	if given.Transport != nil {
		t.Errorf("the client given was changed: Transport %T", given.Transport)
	}
}

func TestWithCAErrors(t *testing.T) {
	srv, caPEM := tlsServer(t)
	tests := []struct {
		name string
		opts []Option
		want error
	}{
		{"no certificate", []Option{WithCA([]byte("not PEM"))}, ErrNoCACertificate},
		{"empty", []Option{WithCA(nil)}, ErrNoCACertificate},
		{"other transport", []Option{WithHTTPClient(&http.Client{Transport: roundTripper(nil)}), WithCA(caPEM)},
			ErrCATransport},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := New(srv.URL, "", tt.opts...).GetProject(t.Context(), "p")
			if !errors.Is(err, tt.want) {
				t.Errorf("err = %v, want %v", err, tt.want)
			}
		})
	}
}

type roundTripper func(*http.Request) (*http.Response, error)

func (f roundTripper) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// TestWaitOperationStopsOnTLSErrors: a certificate that does not verify, or
// a plain HTTP server behind an https URL, ends the wait at once instead of
// being retried as a network failure.
func TestWaitOperationStopsOnTLSErrors(t *testing.T) {
	tlsSrv, _ := tlsServer(t)
	plain := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, 200, op(v1.OpInProgress, 0))
	}))
	t.Cleanup(plain.Close)
	tests := []struct {
		name string
		url  string
		is   func(error) bool
	}{
		{"unknown CA", tlsSrv.URL, func(err error) bool {
			var cve *tls.CertificateVerificationError
			return errors.As(err, &cve)
		}},
		{"plain HTTP", strings.Replace(plain.URL, "http://", "https://", 1), func(err error) bool {
			return errors.Is(err, http.ErrSchemeMismatch)
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := New(tt.url, "")
			c.retryFor = time.Hour // a retried error would last until ctx ends
			c.backoff = func(int) time.Duration { return time.Millisecond }
			ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
			defer cancel()
			if _, err := c.WaitOperation(ctx, "o1", nil); !tt.is(err) {
				t.Fatalf("err = %v, want the TLS error at once", err)
			}
		})
	}
}
