package kubeadm

import (
	"archive/tar"
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"io"
	"io/fs"
	"log"
	"net"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/tarball"

	"kiln.dev/kiln/internal/agent/mirror"
	distrokubeadm "kiln.dev/kiln/internal/distro/kubeadm"
	"kiln.dev/kiln/internal/pki"
)

// testRegistry is go-containerregistry's registry (an OCI distribution
// server, in memory) behind TLS that requires a client certificate, as
// Kiln's agent listener does; it returns what a node's agent holds to
// reach it.
func testRegistry(t *testing.T) *mirror.Mirror {
	t.Helper()
	ca, err := pki.NewCA("test registry CA", time.Hour, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	srvCert, srvKey, err := ca.Issue(pki.CertRequest{CommonName: "registry", IPs: []net.IP{net.IPv4(127, 0, 0, 1)}, Usage: pki.UsageServer})
	if err != nil {
		t.Fatal(err)
	}
	nodeCert, nodeKey, err := ca.Issue(pki.CertRequest{CommonName: "node", Usage: pki.UsageClient})
	if err != nil {
		t.Fatal(err)
	}
	pair, err := tls.X509KeyPair(srvCert, srvKey)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(ca.CertPEM())
	srv := httptest.NewUnstartedServer(registry.New(registry.Logger(log.New(io.Discard, "", 0))))
	srv.TLS = &tls.Config{Certificates: []tls.Certificate{pair}, ClientCAs: pool, ClientAuth: tls.RequireAndVerifyClientCert}
	srv.StartTLS()
	t.Cleanup(srv.Close)
	dir := t.TempDir()
	m := &mirror.Mirror{URL: srv.URL, CAFile: filepath.Join(dir, "ca.crt"), CertFile: filepath.Join(dir, "node.crt"),
		KeyFile: filepath.Join(dir, "node.key")}
	for f, b := range map[string][]byte{m.CAFile: ca.CertPEM(), m.CertFile: nodeCert, m.KeyFile: nodeKey} {
		if err := os.WriteFile(f, b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return m
}

// push stores an image of one layer holding files (path -> content) as
// repo:tag, with the node's certificate.
func push(t *testing.T, m *mirror.Mirror, ref string, files map[string]string) {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for p, content := range files {
		if err := tw.WriteHeader(&tar.Header{Name: p, Mode: 0o644, Size: int64(len(content)), Typeflag: tar.TypeReg}); err != nil {
			t.Fatal(err)
		}
		if _, err := tw.Write([]byte(content)); err != nil {
			t.Fatal(err)
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	layer, err := tarball.LayerFromReader(bytes.NewReader(buf.Bytes()))
	if err != nil {
		t.Fatal(err)
	}
	img, err := mutate.AppendLayers(empty.Image, layer)
	if err != nil {
		t.Fatal(err)
	}
	tr, err := registryTransport(m)
	if err != nil {
		t.Fatal(err)
	}
	r, err := name.ParseReference(strings.TrimPrefix(m.URL, "https://") + "/" + ref)
	if err != nil {
		t.Fatal(err)
	}
	if err := remote.Write(r, img, remote.WithTransport(tr)); err != nil {
		t.Fatal(err)
	}
}

// A fetch copies one file of an image, named as a node names it (the
// registry host kiln.dev dropped), to its path with mode 0755; a missing
// image says it is not in Kiln's registry, a missing file names it.
func TestFetch(t *testing.T) {
	m := testRegistry(t)
	push(t, m, "kube:v1.36.3", map[string]string{"usr/local/bin/kiln-kube": "#!/bin/sh\necho kube\n", "etc/other": "x"})
	root := t.TempDir()
	f := &distrokubeadm.Fetch{Image: "kiln.dev/kube:v1.36.3", File: "usr/local/bin/kiln-kube", Path: "/opt/kiln/kube/v1.36.3/kiln-kube"}
	if err := fetch(t.Context(), m, root, f); err != nil {
		t.Fatal(err)
	}
	got := filepath.Join(root, "opt/kiln/kube/v1.36.3/kiln-kube")
	b, err := os.ReadFile(got)
	if err != nil || string(b) != "#!/bin/sh\necho kube\n" {
		t.Errorf("fetched file: %q, %v", b, err)
	}
	if st, err := os.Stat(got); err != nil || st.Mode().Perm() != 0o755 {
		t.Errorf("fetched file's mode: %v, %v; want 0755", st.Mode(), err)
	}
	if left, _ := filepath.Glob(filepath.Join(filepath.Dir(got), ".*")); len(left) != 0 {
		t.Errorf("temporary files left: %v", left)
	}

	missing := *f
	missing.Image = "kiln.dev/kube:v9.9.9"
	if err := fetch(t.Context(), m, root, &missing); !errors.Is(err, errImageMissing) {
		t.Errorf("an image the registry lacks: %v, want errImageMissing", err)
	}
	noFile := *f
	noFile.File = "usr/local/bin/kubeadm"
	var fm *fileMissingError
	if err := fetch(t.Context(), m, root, &noFile); !errors.Is(err, fs.ErrNotExist) || !errors.As(err, &fm) || fm.File != "usr/local/bin/kubeadm" {
		t.Errorf("a file the image lacks: %v, want a *fileMissingError of usr/local/bin/kubeadm", err)
	}
	if err := fetch(t.Context(), nil, root, f); err == nil {
		t.Error("fetch without a registry succeeded")
	}
}
