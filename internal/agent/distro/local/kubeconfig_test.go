package local

import (
	"crypto/tls"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"kiln.dev/kiln/internal/pki"
)

// A kubeconfig that names its client certificate and key by file, as the
// kubelet's names its rotated one, gives a client that presents them: the
// pod network of kubeadm installs patches its Node with it.
func TestKubeconfigClientReadsCertificateFiles(t *testing.T) {
	ca, err := pki.NewCA("test-ca", time.Hour, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	serverCert, serverKey, err := ca.Issue(pki.NodeServingRequest("server", []net.IP{net.ParseIP("127.0.0.1")}))
	if err != nil {
		t.Fatal(err)
	}
	pair, err := tls.X509KeyPair(serverCert, serverKey)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, r.TLS.PeerCertificates[0].Subject.CommonName)
	}))
	srv.TLS = &tls.Config{Certificates: []tls.Certificate{pair}, ClientCAs: ca.Pool(), ClientAuth: tls.RequireAndVerifyClientCert}
	srv.StartTLS()
	defer srv.Close()

	cert, key, err := ca.Issue(pki.NodeClientRequest("node-1"))
	if err != nil {
		t.Fatal(err)
	}
	root := t.TempDir()
	pem := filepath.Join(root, "var/lib/kubelet/pki/kubelet-client-current.pem")
	if err := os.MkdirAll(filepath.Dir(pem), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(pem, append(cert, key...), 0o600); err != nil {
		t.Fatal(err)
	}
	// pki.Kubeconfig's, with the user's credentials moved to the file.
	kc := string(pki.Kubeconfig(srv.URL, ca.CertPEM(), cert, key, "c", "system:node:node-1"))
	var lines []string
	for _, l := range strings.Split(kc, "\n") {
		switch {
		case strings.Contains(l, "client-certificate-data:"):
			l = l[:strings.Index(l, "client-certificate-data:")] + "client-certificate: /var/lib/kubelet/pki/kubelet-client-current.pem"
		case strings.Contains(l, "client-key-data:"):
			l = l[:strings.Index(l, "client-key-data:")] + "client-key: /var/lib/kubelet/pki/kubelet-client-current.pem"
		}
		lines = append(lines, l)
	}
	if err := os.WriteFile(filepath.Join(root, "kubelet.conf"), []byte(strings.Join(lines, "\n")), 0o600); err != nil {
		t.Fatal(err)
	}
	c, err := KubeconfigClient(root, "kubelet.conf")()
	if err != nil {
		t.Fatal(err)
	}
	got, err := Get(t.Context(), c, srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	if string(got) != "system:node:node-1" {
		t.Errorf("the server saw the client as %q, want system:node:node-1 (the file's certificate)", got)
	}
}
