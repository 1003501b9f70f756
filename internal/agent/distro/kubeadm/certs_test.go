package kubeadm

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	distrokubeadm "kiln.dev/kiln/internal/distro/kubeadm"
	"kiln.dev/kiln/internal/pki"
)

// certificateExpiry finds the first of kubeadm's certificates to expire,
// etcd's included, and passes over CAs, keys and a worker's empty dir.
func TestCertificateExpiry(t *testing.T) {
	root := t.TempDir()
	if _, ok, err := certificateExpiry(root); ok || err != nil {
		t.Fatalf("a node without %s: ok %v, err %v", distrokubeadm.PKIDir, ok, err)
	}
	now := time.Now()
	ca, err := pki.NewCA("kiln-cluster:p/c", 0, now)
	if err != nil {
		t.Fatal(err)
	}
	shortCA, err := pki.NewCA("front-proxy", time.Hour, now) // expires first, but is a CA
	if err != nil {
		t.Fatal(err)
	}
	pkiDir := filepath.Join(root, distrokubeadm.PKIDir)
	write := func(name string, b []byte) {
		p := filepath.Join(pkiDir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	issue := func(name string, ttl time.Duration) {
		req := pki.AdminRequest(name)
		req.ValidFor, req.Now = ttl, now
		cert, key, err := ca.Issue(req)
		if err != nil {
			t.Fatal(err)
		}
		write(name+".crt", cert)
		write(name+".key", key)
	}
	write("ca.crt", ca.CertPEM())
	write("front-proxy-ca.crt", shortCA.CertPEM())
	issue("apiserver", 300*24*time.Hour)
	issue("etcd/peer", 200*24*time.Hour)
	issue("front-proxy-client", 365*24*time.Hour)
	data, ok, err := certificateExpiry(root)
	if err != nil || !ok {
		t.Fatalf("ok %v, err %v", ok, err)
	}
	want := now.Add(200 * 24 * time.Hour).UTC().Truncate(time.Second)
	if data.Of != "/etc/kubernetes/pki/etcd/peer.crt" || data.CertificatesNotAfter.Sub(want).Abs() > time.Second {
		t.Errorf("first to expire: %s at %s, want etcd/peer.crt at %s", data.Of, data.CertificatesNotAfter, want)
	}
}
