package pki

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"net"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

func TestEnsureCAFilesCreatesThenLoads(t *testing.T) {
	dir := t.TempDir()
	certPath, keyPath := filepath.Join(dir, "ca.crt"), filepath.Join(dir, "ca.key")
	first, err := EnsureCAFiles(certPath, keyPath, "test CA")
	if err != nil {
		t.Fatal(err)
	}
	if cn := first.Certificate().Subject.CommonName; cn != "test CA" {
		t.Errorf("common name %q", cn)
	}
	for path, want := range map[string]os.FileMode{keyPath: 0o600, certPath: 0o644} {
		fi, err := os.Stat(path)
		if err != nil {
			t.Fatal(err)
		}
		if fi.Mode().Perm() != want {
			t.Errorf("%s: mode %v, want %v", filepath.Base(path), fi.Mode().Perm(), want)
		}
	}
	certPEM, _ := os.ReadFile(certPath)
	if !bytes.Equal(certPEM, first.CertPEM()) {
		t.Error("ca.crt is not the CA's certificate")
	}
	if b, _ := os.ReadFile(certPath); bytes.Contains(b, []byte("PRIVATE KEY")) {
		t.Error("ca.crt holds a private key")
	}

	again, err := EnsureCAFiles(certPath, keyPath, "test CA")
	if err != nil {
		t.Fatal(err)
	}
	if !again.Certificate().Equal(first.Certificate()) {
		t.Error("a second EnsureCAFiles made a new CA")
	}

	// The certificate file is written again from the key file.
	if err := os.Remove(certPath); err != nil {
		t.Fatal(err)
	}
	restored, err := EnsureCAFiles(certPath, keyPath, "test CA")
	if err != nil {
		t.Fatal(err)
	}
	if !restored.Certificate().Equal(first.Certificate()) {
		t.Error("after losing ca.crt: a new CA")
	}
	if b, _ := os.ReadFile(certPath); !bytes.Equal(b, first.CertPEM()) {
		t.Error("ca.crt was not written again")
	}
}

// TestEnsureCAFilesLoadsSeparateFiles: a key file without the certificate
// (as kilnd wrote its agent CA before) loads with the certificate file; a
// key file without a certificate anywhere is replaced.
func TestEnsureCAFilesLoadsSeparateFiles(t *testing.T) {
	dir := t.TempDir()
	certPath, keyPath := filepath.Join(dir, "agent-ca.crt"), filepath.Join(dir, "agent-ca.key")
	old, err := NewCA("old", 0, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	writeFile(t, keyPath, old.KeyPEM())
	writeFile(t, certPath, old.CertPEM())
	got, err := EnsureCAFiles(certPath, keyPath, "new")
	if err != nil {
		t.Fatal(err)
	}
	if !got.Certificate().Equal(old.Certificate()) {
		t.Error("the CA in separate files was not loaded")
	}

	os.Remove(certPath)
	got, err = EnsureCAFiles(certPath, keyPath, "new")
	if err != nil {
		t.Fatal(err)
	}
	if got.Certificate().Subject.CommonName != "new" {
		t.Errorf("a key without any certificate was kept: CA %q", got.Certificate().Subject.CommonName)
	}
}

func TestEnsureCAFilesRefusesAMismatch(t *testing.T) {
	dir := t.TempDir()
	certPath, keyPath := filepath.Join(dir, "ca.crt"), filepath.Join(dir, "ca.key")
	if _, err := EnsureCAFiles(certPath, keyPath, "a"); err != nil {
		t.Fatal(err)
	}
	other, err := NewCA("b", 0, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	writeFile(t, certPath, other.CertPEM())
	if _, err := EnsureCAFiles(certPath, keyPath, "a"); err == nil {
		t.Fatal("a certificate that is not the key's was accepted")
	}
}

// TestEnsureCAFilesRace: processes that share a directory and start at once
// agree on one CA.
func TestEnsureCAFilesRace(t *testing.T) {
	dir := t.TempDir()
	certPath, keyPath := filepath.Join(dir, "ca.crt"), filepath.Join(dir, "ca.key")
	const n = 8
	cas := make([]*CA, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() { cas[i], errs[i] = EnsureCAFiles(certPath, keyPath, "raced") })
	}
	wg.Wait()
	for i := range n {
		if errs[i] != nil {
			t.Fatalf("caller %d: %v", i, errs[i])
		}
		if !cas[i].Certificate().Equal(cas[0].Certificate()) {
			t.Errorf("caller %d got another CA than caller 0", i)
		}
	}
	if b, _ := os.ReadFile(certPath); !bytes.Equal(b, cas[0].CertPEM()) {
		t.Error("ca.crt is not the CA every caller got")
	}
}

func TestServerRequestNames(t *testing.T) {
	loopback := []net.IP{net.IPv4(127, 0, 0, 1), net.IPv6loopback}
	tests := []struct {
		name    string
		hosts   []string
		wantDNS []string
		wantIPs []net.IP
	}{
		{"loopback", []string{"127.0.0.1:7080"}, []string{"localhost"}, loopback},
		{"an address", []string{"10.1.2.3:7080", "10.1.2.3:43211"}, []string{"localhost"},
			append(loopback, net.ParseIP("10.1.2.3"))},
		{"a name and extra names", []string{"kiln.example.com:7080", "kiln.internal", "192.0.2.7"},
			[]string{"localhost", "kiln.example.com", "kiln.internal"}, append(loopback, net.ParseIP("192.0.2.7"))},
		{"IPv6", []string{"[2001:db8::1]:7080"}, []string{"localhost"}, append(loopback, net.ParseIP("2001:db8::1"))},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			req := ServerRequest("kilnd", time.Hour, tt.hosts...)
			if diff := cmp.Diff(tt.wantDNS, req.DNSNames); diff != "" {
				t.Errorf("DNS names (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(ipStrings(tt.wantIPs), ipStrings(req.IPs)); diff != "" {
				t.Errorf("IPs (-want +got):\n%s", diff)
			}
			if req.Usage != UsageServer || req.ValidFor != time.Hour || req.CommonName != "kilnd" {
				t.Errorf("request %+v", req)
			}
		})
	}

	// Unspecified: this machine's host name and interface addresses.
	req := ServerRequest("kilnd", 0, "0.0.0.0:7080")
	if name, err := os.Hostname(); err == nil && !slices.Contains(req.DNSNames, name) {
		t.Errorf("0.0.0.0: DNS names %v lack the host name %q", req.DNSNames, name)
	}
	if len(req.IPs) < 2 {
		t.Errorf("0.0.0.0: IPs %v", req.IPs)
	}
}

// TestServingCertHandshakeAndRenewal: a client that trusts only the CA
// verifies the server by IP and by localhost, and the certificate is issued
// again once it is due.
func TestServingCertHandshakeAndRenewal(t *testing.T) {
	ca, err := NewCA("serving test CA", 0, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	sc, err := NewServingCert(ca, ServerRequest("kilnd", 0, "127.0.0.1:0"))
	if err != nil {
		t.Fatal(err)
	}
	ln, err := tls.Listen("tcp", "127.0.0.1:0", &tls.Config{GetCertificate: sc.GetCertificate, MinVersion: tls.VersionTLS12})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			c.(*tls.Conn).Handshake()
			c.Close()
		}
	}()
	_, port, _ := net.SplitHostPort(ln.Addr().String())
	for _, host := range []string{"127.0.0.1", "localhost"} {
		conn, err := tls.Dial("tcp", net.JoinHostPort(host, port), &tls.Config{RootCAs: ca.Pool(), ServerName: host})
		if err != nil {
			t.Errorf("dial %s: %v", host, err)
			continue
		}
		conn.Close()
	}
	other, _ := NewCA("other", 0, time.Now())
	if conn, err := tls.Dial("tcp", ln.Addr().String(), &tls.Config{RootCAs: other.Pool()}); err == nil {
		conn.Close()
		t.Error("a client trusting another CA verified the server")
	}

	first := sc.Leaf()
	if cert, _ := sc.current(RenewAt(first).Add(-time.Minute)); !cert.Leaf.Equal(first) {
		t.Error("issued again before it was due")
	}
	renewed, err := sc.current(RenewAt(first).Add(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	if renewed.Leaf.Equal(first) || !renewed.Leaf.NotAfter.After(first.NotAfter) {
		t.Errorf("not renewed: serial %v, NotAfter %v (first %v, %v)", renewed.Leaf.SerialNumber, renewed.Leaf.NotAfter, first.SerialNumber, first.NotAfter)
	}
	if _, err := renewed.Leaf.Verify(x509.VerifyOptions{Roots: ca.Pool(), DNSName: "localhost",
		CurrentTime: RenewAt(first).Add(time.Minute)}); err != nil {
		t.Errorf("renewed certificate: %v", err)
	}
}

func writeFile(t *testing.T, path string, data []byte) {
	t.Helper()
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
}

func ipStrings(ips []net.IP) []string {
	var out []string
	for _, ip := range ips {
		out = append(out, ip.String())
	}
	return out
}
