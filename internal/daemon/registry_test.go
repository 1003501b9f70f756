package daemon

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/random"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/remote/transport"

	"kiln.dev/kiln/internal/gateway"
	"kiln.dev/kiln/internal/registry"
)

// TestRegistryOnBothListeners: kilnd serves its registry at /v2/ of the
// API listener to tokens and of the agent listener to node certificates,
// and keeps its images in DATA_DIR/registry.
func TestRegistryOnBothListeners(t *testing.T) {
	dir := t.TempDir()
	d, err := Start(t.Context(), Config{DataDir: dir, Listen: "127.0.0.1:0", AgentListen: "127.0.0.1:0", Dev: true,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Shutdown(t.Context()) })
	trusting := func(caPEM []byte) remote.Option {
		pool := x509.NewCertPool()
		pool.AppendCertsFromPEM(caPEM)
		return remote.WithTransport(&http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}})
	}

	img, err := random.Image(128, 1)
	if err != nil {
		t.Fatal(err)
	}
	ref, _ := name.ParseReference(strings.TrimPrefix(d.URL, "https://") + "/default/nginx:1.27")
	if err := remote.Write(ref, img, trusting(d.CACert), remote.WithAuth(&authn.Bearer{Token: d.Token})); err != nil {
		t.Fatalf("push with the admin token: %v", err)
	}
	if _, err := os.Stat(filepath.Join(dir, "registry", "docker/registry/v2/repositories/default/library/nginx")); err != nil {
		t.Errorf("the image is not in DATA_DIR/registry: %v", err)
	}
	_, err = remote.Image(ref, trusting(d.CACert), remote.WithAuth(&authn.Bearer{Token: "kiln_forged"}))
	var te *transport.Error
	if !errors.As(err, &te) || te.StatusCode != http.StatusUnauthorized {
		t.Errorf("pull with a forged token: %v, want 401", err)
	}

	// The agent listener: a node certificate is needed.
	agentCA, err := os.ReadFile(filepath.Join(dir, gateway.AgentCACertFile))
	if err != nil {
		t.Fatal(err)
	}
	nodeRef, _ := name.ParseReference(d.AgentAddr + "/library/nginx:1.27")
	_, err = remote.Image(nodeRef, trusting(agentCA))
	if !errors.As(err, &te) || te.StatusCode != http.StatusUnauthorized {
		t.Errorf("pull from the agent listener without a node certificate: %v, want 401", err)
	}
	req, _ := http.NewRequestWithContext(t.Context(), http.MethodGet, "https://"+d.AgentAddr+"/v2/", nil)
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(agentCA)
	resp, err := (&http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.Header.Get("WWW-Authenticate") != registry.Challenge {
		t.Errorf("agent listener /v2/: %d %q, want the registry's challenge", resp.StatusCode, resp.Header.Get("WWW-Authenticate"))
	}
}
