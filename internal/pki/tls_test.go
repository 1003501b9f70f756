package pki

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"sigs.k8s.io/yaml"

	"k8s.io/client-go/tools/clientcmd"
)

// TestMutualTLS runs a real handshake over loopback: a server that requires
// a client certificate from the cluster CA, a client that trusts only the
// cluster CA.
func TestMutualTLS(t *testing.T) {
	now := time.Now()
	ca, err := NewCA("kubernetes", 0, now)
	if err != nil {
		t.Fatal(err)
	}
	serverCert, serverKey := issue(t, ca, CertRequest{CommonName: "kube-apiserver", DNSNames: []string{"localhost"},
		IPs: []net.IP{net.IPv4(127, 0, 0, 1), net.IPv6loopback}, Usage: UsageServer, Now: now})
	srvPair, err := tls.X509KeyPair(serverCert, serverKey)
	if err != nil {
		t.Fatalf("server key pair: %v", err)
	}

	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		peer := r.TLS.PeerCertificates[0]
		// What a registration endpoint does with the peer.
		if err := ca.VerifyCertificate(peer, UsageClient, time.Now()); err != nil {
			http.Error(w, err.Error(), http.StatusForbidden)
			return
		}
		io.WriteString(w, "hello "+peer.Subject.CommonName)
	}))
	srv.TLS = &tls.Config{
		Certificates: []tls.Certificate{srvPair},
		ClientAuth:   tls.RequireAndVerifyClientCert,
		ClientCAs:    ca.Pool(),
		MinVersion:   tls.VersionTLS13,
	}
	srv.StartTLS()
	t.Cleanup(srv.Close)

	client := func(t *testing.T, certPEM, keyPEM []byte) *http.Client {
		t.Helper()
		cfg := &tls.Config{RootCAs: ca.Pool(), MinVersion: tls.VersionTLS13}
		if certPEM != nil {
			pair, err := tls.X509KeyPair(certPEM, keyPEM)
			if err != nil {
				t.Fatalf("client key pair: %v", err)
			}
			cfg.Certificates = []tls.Certificate{pair}
		}
		return &http.Client{Transport: &http.Transport{TLSClientConfig: cfg}, Timeout: 10 * time.Second}
	}

	t.Run("client certificate from the CA", func(t *testing.T) {
		c, k := issue(t, ca, NodeClientRequest("n1"))
		resp, err := client(t, c, k).Get(srv.URL)
		if err != nil {
			t.Fatalf("GET: %v", err)
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != http.StatusOK || string(body) != "hello system:node:n1" {
			t.Errorf("got %d %q", resp.StatusCode, body)
		}
	})

	t.Run("client certificate from another CA", func(t *testing.T) {
		other, err := NewCA("kubernetes", 0, now)
		if err != nil {
			t.Fatal(err)
		}
		c, k := issue(t, other, NodeClientRequest("n1"))
		if resp, err := client(t, c, k).Get(srv.URL); err == nil {
			resp.Body.Close()
			t.Fatalf("GET with a foreign certificate: %s, want a handshake failure", resp.Status)
		}
	})

	t.Run("no client certificate", func(t *testing.T) {
		if resp, err := client(t, nil, nil).Get(srv.URL); err == nil {
			resp.Body.Close()
			t.Fatalf("GET without a certificate: %s, want a handshake failure", resp.Status)
		}
	})

	t.Run("server certificate from another CA", func(t *testing.T) {
		other, err := NewCA("kubernetes", 0, now)
		if err != nil {
			t.Fatal(err)
		}
		c, k := issue(t, ca, NodeClientRequest("n1"))
		pair, _ := tls.X509KeyPair(c, k)
		hc := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{
			RootCAs: other.Pool(), Certificates: []tls.Certificate{pair}}}}
		_, err = hc.Get(srv.URL)
		var unknown x509.UnknownAuthorityError
		if err == nil || !errors.As(err, &unknown) {
			t.Fatalf("GET trusting another CA: %v, want an unknown authority error", err)
		}
	})
}

func TestKubeconfig(t *testing.T) {
	ca := newCA(t, "kubernetes")
	cert, key := issue(t, ca, AdminRequest("kiln-admin"))
	kc := Kubeconfig("https://127.0.0.2:6443", ca.CertPEM(), cert, key, "demo", "kiln-admin")

	// The shape client-go reads (k8s.io/client-go/tools/clientcmd/api/v1).
	type config struct {
		APIVersion string `json:"apiVersion"`
		Kind       string `json:"kind"`
		Clusters   []struct {
			Name    string `json:"name"`
			Cluster struct {
				Server string `json:"server"`
				CAData []byte `json:"certificate-authority-data"`
			} `json:"cluster"`
		} `json:"clusters"`
		Users []struct {
			Name string `json:"name"`
			User struct {
				CertData []byte `json:"client-certificate-data"`
				KeyData  []byte `json:"client-key-data"`
			} `json:"user"`
		} `json:"users"`
		Contexts []struct {
			Name    string `json:"name"`
			Context struct {
				Cluster string `json:"cluster"`
				User    string `json:"user"`
			} `json:"context"`
		} `json:"contexts"`
		CurrentContext string         `json:"current-context"`
		Preferences    map[string]any `json:"preferences"`
	}
	var c config
	if err := yaml.UnmarshalStrict(kc, &c); err != nil {
		t.Fatalf("kubeconfig does not parse: %v\n%s", err, kc)
	}
	if c.APIVersion != "v1" || c.Kind != "Config" || len(c.Clusters) != 1 || len(c.Users) != 1 || len(c.Contexts) != 1 {
		t.Fatalf("kubeconfig shape:\n%s", kc)
	}
	if c.Clusters[0].Name != "demo" || c.Clusters[0].Cluster.Server != "https://127.0.0.2:6443" ||
		string(c.Clusters[0].Cluster.CAData) != string(ca.CertPEM()) {
		t.Errorf("cluster entry: %+v", c.Clusters[0])
	}
	if c.Users[0].Name != "kiln-admin" || string(c.Users[0].User.CertData) != string(cert) || string(c.Users[0].User.KeyData) != string(key) {
		t.Errorf("user entry: %+v", c.Users[0])
	}
	if ctx := c.Contexts[0]; ctx.Name != "kiln-admin@demo" || ctx.Context.Cluster != "demo" || ctx.Context.User != "kiln-admin" ||
		c.CurrentContext != ctx.Name {
		t.Errorf("context: %+v, current %q", ctx, c.CurrentContext)
	}
	if _, err := tls.X509KeyPair(c.Users[0].User.CertData, c.Users[0].User.KeyData); err != nil {
		t.Errorf("embedded key pair: %v", err)
	}

	// Names that YAML would otherwise read as something else stay strings.
	odd := Kubeconfig("https://h:1", nil, nil, nil, "a: b #c", "true")
	var o config
	if err := yaml.UnmarshalStrict(odd, &o); err != nil {
		t.Fatalf("kubeconfig with odd names: %v\n%s", err, odd)
	}
	if o.Clusters[0].Name != "a: b #c" || o.Users[0].Name != "true" || !strings.HasPrefix(o.CurrentContext, "true@") {
		t.Errorf("odd names came back as %q, %q", o.Clusters[0].Name, o.Users[0].Name)
	}
}

// An exec kubeconfig is what client-go reads as one: the cluster with its
// CA, and a user whose credential comes from the plugin's command, run
// with its arguments, never interactively.
func TestExecKubeconfig(t *testing.T) {
	ca := newCA(t, "kubernetes")
	kc := ExecKubeconfig("https://127.0.0.2:6443", ca.CertPEM(), "demo", "alice",
		Exec{Command: "/usr/local/bin/kiln", Args: []string{"credential", "demo", "--project", "a: b"}, InstallHint: "install kiln"})
	cfg, err := clientcmd.Load(kc)
	if err != nil {
		t.Fatalf("client-go does not load it: %v\n%s", err, kc)
	}
	rc, err := clientcmd.NewDefaultClientConfig(*cfg, nil).ClientConfig()
	if err != nil {
		t.Fatalf("client-go makes no client of it: %v", err)
	}
	if rc.Host != "https://127.0.0.2:6443" || string(rc.CAData) != string(ca.CertPEM()) || rc.CertData != nil || rc.KeyData != nil {
		t.Errorf("client config: host %q, CA %t, certificate %t; want the cluster's endpoint and CA and no credential of its own",
			rc.Host, string(rc.CAData) == string(ca.CertPEM()), rc.CertData != nil)
	}
	ex := rc.ExecProvider
	if ex == nil || ex.Command != "/usr/local/bin/kiln" || !slices.Equal(ex.Args, []string{"credential", "demo", "--project", "a: b"}) ||
		ex.APIVersion != "client.authentication.k8s.io/v1" || ex.InteractiveMode != "Never" || ex.InstallHint != "install kiln" {
		t.Errorf("exec plugin: %+v", ex)
	}
}
