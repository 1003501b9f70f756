package node

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"math/big"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"kiln.dev/kiln/internal/registry"
	"kiln.dev/kiln/internal/store"
)

// testRegistry is Kiln's registry (internal/registry) served as kilnd's agent listener serves it
// to nodes: TLS, a node's client certificate required, a node's credentials (registry.Nodes), its
// names read within the node's project with the system images as the fallback. The node's
// containerd reaches it on the test's Docker network, through the hosts.toml files kiln-agent
// writes (internal/agent/mirror).
type testRegistry struct {
	URL           string
	CA, Cert, Key []byte // PEM: the listener's CA, and the node's client certificate and key
	mu            sync.Mutex
	manifests     []string // "GET /v2/NAME/manifests/REF?ns=HOST" of every manifest request
}

// startRegistry serves a registry in dir on addr (the test network's gateway, the host's address
// there) and seeds the archives into its system namespace.
func startRegistry(t *testing.T, dir, addr string, archives ...string) *testRegistry {
	t.Helper()
	reg, err := registry.New(t.Context(), registry.Options{Dir: dir, Grace: -1, Interval: -1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(reg.Close)
	for _, a := range archives {
		if _, err := reg.Seed(t.Context(), a); err != nil {
			t.Fatal(err)
		}
	}
	tr := &testRegistry{}

	caKey, caCert, caDER := newCert(t, "kiln-nodetest-ca", nil, nil, nil)
	tr.CA = pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER})
	ip := net.ParseIP(strings.Split(addr, ":")[0])
	srvKey, _, srvDER := newCert(t, "kiln-nodetest-registry", caKey, caCert, []net.IP{ip})
	cliKey, _, cliDER := newCert(t, "kiln-nodetest-node", caKey, caCert, nil)
	tr.Cert = pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: cliDER})
	keyDER, err := x509.MarshalPKCS8PrivateKey(cliKey)
	if err != nil {
		t.Fatal(err)
	}
	tr.Key = pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER})
	pool := x509.NewCertPool()
	pool.AddCert(caCert)

	h := reg.Handler(registry.Nodes{Verifier: nodeVerifier{}})
	l, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.Contains(r.URL.Path, "/manifests/") {
			tr.mu.Lock()
			tr.manifests = append(tr.manifests, r.Method+" "+r.URL.Path+"?ns="+r.URL.Query().Get("ns"))
			tr.mu.Unlock()
		}
		h.ServeHTTP(w, r)
	}))
	srv.Listener.Close()
	srv.Listener = l
	srv.TLS = &tls.Config{
		Certificates: []tls.Certificate{{Certificate: [][]byte{srvDER}, PrivateKey: srvKey}},
		ClientAuth:   tls.RequireAndVerifyClientCert,
		ClientCAs:    pool,
	}
	srv.StartTLS()
	t.Cleanup(srv.Close)
	tr.URL = "https://" + l.Addr().String()
	return tr
}

// asked reports whether a manifest request for path (/v2/NAME/manifests/REF) naming the registry
// host ns came in.
func (tr *testRegistry) asked(path, ns string) bool {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	return slices.ContainsFunc(tr.manifests, func(m string) bool { return strings.HasSuffix(m, " "+path+"?ns="+ns) })
}

func (tr *testRegistry) requests() []string {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	return slices.Clone(tr.manifests)
}

// nodeVerifier takes any verified client certificate as the node nodetest of the cluster test/c
// (the TLS handshake verified it against the test's CA).
type nodeVerifier struct{}

func (nodeVerifier) VerifyNode(r *http.Request) (store.Key, string, error) {
	if r.TLS == nil || len(r.TLS.VerifiedChains) == 0 {
		return store.Key{}, "", errors.New("unauthenticated: no client certificate")
	}
	return store.Key{Project: "test", Name: "c"}, "nodetest", nil
}

// newCert makes an ECDSA key and a certificate for cn, signed by parent (self-signed, a CA, when
// parent is nil), valid for ips.
func newCert(t *testing.T, cn string, parentKey *ecdsa.PrivateKey, parent *x509.Certificate, ips []net.IP) (*ecdsa.PrivateKey, *x509.Certificate, []byte) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	serial, err := rand.Int(rand.Reader, big.NewInt(1<<62))
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial,
		Subject:      pkix.Name{CommonName: cn},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(24 * time.Hour),
		IPAddresses:  ips,
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
	}
	signer, signerKey := tmpl, key
	if parent == nil {
		tmpl.IsCA, tmpl.BasicConstraintsValid = true, true
		tmpl.KeyUsage |= x509.KeyUsageCertSign
		tmpl.ExtKeyUsage = nil
	} else {
		signer, signerKey = parent, parentKey
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, signer, &key.PublicKey, signerKey)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	return key, cert, der
}
