package gateway_test

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/random"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/remote/transport"
	"github.com/google/go-containerregistry/pkg/v1/validate"

	v1 "kiln.dev/kiln/api/v1"
	"kiln.dev/kiln/internal/auth"
	"kiln.dev/kiln/internal/gateway"
	"kiln.dev/kiln/internal/gateway/gatewaytest"
	"kiln.dev/kiln/internal/pki"
	"kiln.dev/kiln/internal/registry"
	"kiln.dev/kiln/internal/trust"
)

// TestVerifyNode: the registry's node credential is the node certificate
// the node's agent holds, while it is the node's.
func TestVerifyNode(t *testing.T) {
	e := gatewaytest.New(t, gateway.Options{})
	c := e.CreateCluster("c", v1.ClusterSpec{NodeApproval: "auto"})
	id := join(t, e, c, "c-w-0")
	presenting := func(certPEM []byte) *http.Request {
		r, _ := http.NewRequestWithContext(t.Context(), http.MethodGet, "/v2/library/nginx/manifests/1", nil)
		if certPEM != nil {
			cert, err := pki.ParseCertificate(certPEM)
			if err != nil {
				t.Fatal(err)
			}
			r.TLS = &tls.ConnectionState{PeerCertificates: []*x509.Certificate{cert}}
		}
		return r
	}
	k, node, err := e.Gateway.VerifyNode(presenting(id.cert))
	if err != nil || k != c.Key || node != "c-w-0" {
		t.Fatalf("VerifyNode of a joined node: %v %q %v, want %v c-w-0", k, node, err, c.Key)
	}
	refusedWith := func(what string, r *http.Request, reason error) {
		t.Helper()
		_, _, err := e.Gateway.VerifyNode(r)
		if !errors.Is(err, auth.ErrUnauthenticated) || !errors.Is(err, reason) {
			t.Errorf("%s: %v, want ErrUnauthenticated for %v", what, err, reason)
		}
	}
	refusedWith("no certificate", presenting(nil), auth.ErrNoCredential)

	// Another certificate of the node, signed by the cluster's CA but not
	// issued by registration: refused.
	ca := clusterCA(t, e, c)
	other, _, err := ca.Issue(pki.CertRequest{CommonName: trust.NodeCommonName(c.Key, "c-w-0"),
		Organization: []string{trust.NodeOrganization}, Usage: pki.UsageClient})
	if err != nil {
		t.Fatal(err)
	}
	refusedWith("an unrecorded certificate", presenting(other), gateway.ErrNotCurrent)
	// A certificate of another cluster's CA naming this cluster.
	c2 := e.CreateCluster("c2", v1.ClusterSpec{NodeApproval: "auto"})
	forged, _, err := clusterCA(t, e, c2).Issue(pki.CertRequest{CommonName: trust.NodeCommonName(c.Key, "c-w-0"),
		Organization: []string{trust.NodeOrganization}, Usage: pki.UsageClient})
	if err != nil {
		t.Fatal(err)
	}
	refusedWith("a certificate of another cluster's CA", presenting(forged), auth.ErrInvalidCredential)

	// A forgotten node (deleted or reset) pulls no more.
	if err := e.Gateway.ForgetNode(t.Context(), c.Key, "c-w-0", trust.Why{By: "test", Reason: "removed"}); err != nil {
		t.Fatal(err)
	}
	refusedWith("a forgotten node", presenting(id.cert), auth.ErrRevoked)
}

func clusterCA(t *testing.T, e *gatewaytest.Env, c *gatewaytest.Cluster) *pki.CA {
	t.Helper()
	ca, err := trust.LoadCA(t.Context(), e.Store, c.Key)
	if err != nil {
		t.Fatal(err)
	}
	return ca
}

// ownerOfP is a fake registry credential: an operator of project p.
type ownerOfP struct{}

func (ownerOfP) Authenticate(*http.Request) (registry.Principal, error) {
	return registry.Principal{Name: "user:pusher", RoleIn: func(_ context.Context, project string) (string, error) {
		if project == gatewaytest.Project {
			return v1.RoleOperator, nil
		}
		return "", nil
	}}, nil
}

// TestNodePullsItsProjectsImages: a node presenting its certificate on a
// listener serving the registry to Nodes pulls what a member pushed into
// its cluster's project, by the name containerd asks a mirror for.
func TestNodePullsItsProjectsImages(t *testing.T) {
	e := gatewaytest.New(t, gateway.Options{})
	c := e.CreateCluster("c", v1.ClusterSpec{NodeApproval: "auto"})
	id := join(t, e, c, "c-w-0")
	reg, err := registry.New(t.Context(), registry.Options{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(reg.Close)

	members := httptest.NewServer(reg.Handler(ownerOfP{}))
	t.Cleanup(members.Close)
	img, err := random.Image(256, 1)
	if err != nil {
		t.Fatal(err)
	}
	ref, _ := name.ParseReference(strings.TrimPrefix(members.URL, "http://")+"/p/nginx:1.27", name.Insecure)
	if err := remote.Write(ref, img, remote.WithContext(t.Context())); err != nil {
		t.Fatalf("push p/nginx:1.27: %v", err)
	}

	nodes := httptest.NewUnstartedServer(reg.Handler(registry.Nodes{Verifier: e.Gateway}))
	nodes.TLS = &tls.Config{ClientAuth: tls.RequestClientCert}
	nodes.StartTLS()
	t.Cleanup(nodes.Close)
	pool := x509.NewCertPool()
	pool.AddCert(nodes.Certificate())
	withCerts := func(certs ...tls.Certificate) *http.Transport {
		return &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, Certificates: certs}}
	}
	pair, err := tls.X509KeyPair(id.cert, id.key)
	if err != nil {
		t.Fatal(err)
	}
	host := strings.TrimPrefix(nodes.URL, "https://")
	for _, n := range []string{"library/nginx:1.27", "nginx:1.27"} {
		ref, _ := name.ParseReference(host + "/" + n)
		got, err := remote.Image(ref, remote.WithTransport(withCerts(pair)), remote.WithContext(t.Context()))
		if err != nil {
			t.Fatalf("node pulls %s: %v", n, err)
		}
		if err := validate.Image(got); err != nil {
			t.Errorf("node pulls %s: %v", n, err)
		}
	}
	// Without its certificate, nothing.
	ref, _ = name.ParseReference(host + "/library/nginx:1.27")
	_, err = remote.Image(ref, remote.WithTransport(withCerts()), remote.WithContext(t.Context()))
	var te *transport.Error
	if !errors.As(err, &te) || te.StatusCode != http.StatusUnauthorized {
		t.Errorf("pull without a certificate: %v, want 401", err)
	}
}
