package gateway_test

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	v1 "kiln.dev/kiln/api/v1"
	"kiln.dev/kiln/internal/gateway"
	"kiln.dev/kiln/internal/gateway/gatewaytest"
	"kiln.dev/kiln/internal/pki"
	"kiln.dev/kiln/internal/store"
	"kiln.dev/kiln/internal/trust"
)

func client(e *gatewaytest.Env) *http.Client {
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(e.CAPEM)
	return &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}
}

func registration(t testing.TB, c *gatewaytest.Cluster, node string) v1.RegisterRequest {
	t.Helper()
	key, _, err := pki.NewKey()
	if err != nil {
		t.Fatal(err)
	}
	csr, err := pki.NewCSR(key, node)
	if err != nil {
		t.Fatal(err)
	}
	return v1.RegisterRequest{
		ProtocolVersion: v1.AgentProtocolVersion,
		Cluster:         c.Credentials.Cluster,
		CredentialID:    c.Credentials.ID,
		Secret:          c.Credentials.Secret,
		Passphrase:      c.Passphrase,
		NodeName:        node,
		Hostname:        "host-" + node,
		CSR:             string(csr),
		Prechecks:       []v1.PrecheckResult{{Name: "os", Result: v1.PrecheckPass}},
	}
}

// post registers and returns the status and either the response or the
// API error.
func post(t testing.TB, e *gatewaytest.Env, req any) (int, *v1.RegisterResponse, v1.Error) {
	t.Helper()
	body, _ := json.Marshal(req)
	resp, err := client(e).Post(e.URL+v1.AgentRegisterPath, "application/json", bytes.NewReader(body))
	if err != nil {
		t.Fatalf("register: %v", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		var er v1.ErrorResponse
		if err := json.NewDecoder(resp.Body).Decode(&er); err != nil {
			t.Fatalf("register: %d without an error body: %v", resp.StatusCode, err)
		}
		return resp.StatusCode, nil, er.Error
	}
	var out v1.RegisterResponse
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil {
		t.Fatalf("decode registration: %v", err)
	}
	return resp.StatusCode, &out, v1.Error{}
}

func nodeCount(t *testing.T, e *gatewaytest.Env, k store.Key) int {
	t.Helper()
	nodes, _, err := e.Store.ListNodes(context.Background(), k, store.Page{})
	if err != nil {
		t.Fatal(err)
	}
	return len(nodes)
}

func TestRegisterRefused(t *testing.T) {
	e := gatewaytest.New(t, gateway.Options{})
	a := e.CreateCluster("a", v1.ClusterSpec{NodeApproval: "auto"})
	b := e.CreateCluster("b", v1.ClusterSpec{NodeApproval: "auto"})

	tests := []struct {
		name    string
		mod     func(r *v1.RegisterRequest)
		status  int
		code    string
		message string
	}{
		{"wrong passphrase", func(r *v1.RegisterRequest) { r.Passphrase = "AAAAA-BBBBB-CCCCC-DDDDD" }, 401, v1.CodeUnauthorized, "the passphrase is wrong"},
		{"wrong credential secret", func(r *v1.RegisterRequest) { r.Secret += "x" }, 401, v1.CodeUnauthorized, "the credential's secret is wrong"},
		{"unknown credential id", func(r *v1.RegisterRequest) { r.CredentialID = a.Credentials.ID[:len(a.Credentials.ID)-2] + "zz" }, 401, v1.CodeUnauthorized, "unknown credential"},
		{"credential of another cluster", func(r *v1.RegisterRequest) {
			r.CredentialID, r.Secret, r.Passphrase = b.Credentials.ID, b.Credentials.Secret, b.Passphrase
		}, 401, v1.CodeUnauthorized, "the credential is not this cluster's"},
		{"unknown cluster", func(r *v1.RegisterRequest) { r.Cluster = "/v1/projects/p/clusters/nope" }, 401, v1.CodeUnauthorized, "unknown credential"},
		{"other protocol version", func(r *v1.RegisterRequest) { r.ProtocolVersion = 7 }, 409, v1.CodeConflict, "protocol version 7, this controller speaks version 1"},
		{"bad CSR", func(r *v1.RegisterRequest) { r.CSR = "nope" }, 400, v1.CodeInvalidParameter, "csr"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			req := registration(t, a, "n1")
			tt.mod(&req)
			status, _, apiErr := post(t, e, req)
			if status != tt.status || apiErr.Code != tt.code || !strings.Contains(apiErr.Message, tt.message) {
				t.Errorf("got %d %s %q, want %d %s containing %q", status, apiErr.Code, apiErr.Message, tt.status, tt.code, tt.message)
			}
			if n := nodeCount(t, e, a.Key) + nodeCount(t, e, b.Key); n != 0 {
				t.Errorf("%d node records written by a refused registration", n)
			}
		})
	}
	events, _, err := e.Store.ListEvents(context.Background(), a.Key, store.Page{})
	if err != nil {
		t.Fatal(err)
	}
	refusals := 0
	for _, ev := range events {
		if ev.Reason == gateway.ReasonRegistrationRefused {
			refusals++
		}
	}
	if refusals != 5 {
		t.Errorf("%d refusal events on cluster a, want 5 (each wrong factor and the bad CSR)", refusals)
	}

	t.Run("unknown field", func(t *testing.T) {
		status, _, apiErr := post(t, e, map[string]any{"protocolVersion": 1, "bogus": true})
		if status != 400 || apiErr.Code != v1.CodeInvalidRequest || !strings.Contains(apiErr.Message, "bogus") {
			t.Errorf("got %d %s %q, want 400 InvalidRequest naming the field", status, apiErr.Code, apiErr.Message)
		}
	})
}

func TestRegister(t *testing.T) {
	e := gatewaytest.New(t, gateway.Options{})
	c := e.CreateCluster("c", v1.ClusterSpec{NodeApproval: "auto", CertificateTTLDays: 30})
	manual := e.CreateCluster("m", v1.ClusterSpec{NodeApproval: "manual"})
	ctx := context.Background()

	req := registration(t, c, "c-cp-0")
	req.Passphrase = strings.ToLower(strings.ReplaceAll(req.Passphrase, "-", " ")) // as a person may type it
	status, resp, apiErr := post(t, e, req)
	if status != 200 {
		t.Fatalf("register: %d %s", status, apiErr.Message)
	}
	if resp.Node != "c-cp-0" || !strings.HasPrefix(resp.Session, "wss://127.0.0.1:") {
		t.Errorf("response %+v", resp)
	}
	ca, err := pki.LoadCA([]byte(resp.CA), nil)
	if err == nil || ca != nil {
		t.Fatal("the response carries the CA's key")
	}
	cert, err := pki.ParseCertificate([]byte(resp.Certificate))
	if err != nil {
		t.Fatal(err)
	}
	if want := "kiln:node:p/c/c-cp-0"; cert.Subject.CommonName != want {
		t.Errorf("CN %q, want %q", cert.Subject.CommonName, want)
	}
	if d := cert.NotAfter.Sub(time.Now()); d < 29*24*time.Hour || d > 31*24*time.Hour {
		t.Errorf("certificate valid for %s, want certificateTTLDays (30 days)", d)
	}
	n, err := e.Store.GetNode(ctx, c.Key, "c-cp-0")
	if err != nil {
		t.Fatal(err)
	}
	if n.State != v1.NodeApproved || n.Facts.Hostname != "host-c-cp-0" || n.Address != "127.0.0.1" {
		t.Errorf("node %+v, want APPROVED (auto) with hostname and address", n.Node)
	}

	// The same node again (a new key, a restarted agent): one record.
	if status, _, apiErr := post(t, e, registration(t, c, "c-cp-0")); status != 200 {
		t.Fatalf("register again: %d %s", status, apiErr.Message)
	}
	if got := nodeCount(t, e, c.Key); got != 1 {
		t.Errorf("%d nodes after registering twice, want 1", got)
	}

	// Without a node name: <cluster>-<hostname>; a failed precheck.
	req = registration(t, c, "")
	req.Hostname = "Edge-1.example.com"
	req.Prechecks = []v1.PrecheckResult{{Name: "dns-port", Result: v1.PrecheckFail}, {Name: "os", Result: v1.PrecheckPass}}
	if status, resp, apiErr = post(t, e, req); status != 200 || resp.Node != "c-edge-1" {
		t.Fatalf("register edge host: %d %s %+v", status, apiErr.Message, resp)
	}
	if n, _ = e.Store.GetNode(ctx, c.Key, "c-edge-1"); n.State != v1.NodePrecheckFailed || !strings.Contains(n.Message, "dns-port") {
		t.Errorf("node %s %q, want PRECHECK_FAILED naming dns-port", n.State, n.Message)
	}

	// Manual approval: DISCOVERED.
	if status, _, apiErr := post(t, e, registration(t, manual, "m-w-0")); status != 200 {
		t.Fatalf("register: %d %s", status, apiErr.Message)
	}
	if n, _ = e.Store.GetNode(ctx, manual.Key, "m-w-0"); n.State != v1.NodeDiscovered {
		t.Errorf("node %s, want DISCOVERED (manual approval)", n.State)
	}

	// A cluster being deleted: 409, no node.
	cl, _ := e.Store.GetCluster(ctx, manual.Key)
	cl.Status.ProvisioningState = v1.StateDeleting
	if err := e.Store.PutClusterStatus(ctx, cl, store.Cond{Fence: &manual.Fence}); err != nil {
		t.Fatal(err)
	}
	if status, _, apiErr := post(t, e, registration(t, manual, "m-w-1")); status != 409 || apiErr.Code != v1.CodeConflict ||
		!strings.Contains(apiErr.Message, "being deleted") {
		t.Errorf("register in a deleting cluster: %d %s %q, want 409 Conflict", status, apiErr.Code, apiErr.Message)
	}
	if got := nodeCount(t, e, manual.Key); got != 1 {
		t.Errorf("%d nodes, want 1", got)
	}
}

func TestEnsureSecretsOnce(t *testing.T) {
	e := gatewaytest.New(t, gateway.Options{})
	c := e.CreateCluster("c", v1.ClusterSpec{})
	again, err := trust.EnsureSecrets(context.Background(), e.Store, c.Key, c.Fence, 0)
	if err != nil {
		t.Fatal(err)
	}
	if again.Created || again.Passphrase != "" || again.CredentialSecret != "" || again.CredentialID != c.Credentials.ID {
		t.Errorf("second EnsureSecrets %+v: want nothing created and no secret in clear", again)
	}
	for _, name := range []string{trust.SecretCredentialHash, trust.SecretPassphraseHash} {
		raw, err := e.Store.GetClusterSecret(context.Background(), c.Key, name)
		if err != nil {
			t.Fatal(err)
		}
		if strings.Contains(string(raw), c.Credentials.Secret) || strings.Contains(string(raw), c.Passphrase) {
			t.Errorf("%s holds a secret in clear", name)
		}
	}
	stale := c.Fence
	stale.Token--
	if _, err := trust.EnsureSecrets(context.Background(), e.Store, store.Key{Project: "p", Name: "c"}, stale, 0); err == nil {
		t.Error("EnsureSecrets with a stale fence succeeded")
	}
}

// The activation credential admits hosts for the cluster's
// certificateTTLDays after it was issued, then says it expired.
func TestCredentialExpires(t *testing.T) {
	now := time.Now()
	clock := &now
	e := gatewaytest.New(t, gateway.Options{Now: func() time.Time { return *clock }})
	c := e.CreateCluster("c", v1.ClusterSpec{NodeApproval: "auto", CertificateTTLDays: 2})

	later := now.Add(3 * 24 * time.Hour)
	clock = &later
	status, _, apiErr := post(t, e, registration(t, c, "n1"))
	if status != 401 || apiErr.Code != v1.CodeUnauthorized ||
		!strings.Contains(apiErr.Message, "expired at") || !strings.Contains(apiErr.Message, "reissue the activation") {
		t.Fatalf("registration after the TTL: %d %q, want 401 saying it expired and what to do", status, apiErr.Message)
	}
	if n := nodeCount(t, e, c.Key); n != 0 {
		t.Errorf("%d node records written by a refused registration", n)
	}
	creds, _, err := e.Gateway.Credentials(context.Background(), c.Key)
	if err != nil {
		t.Fatal(err)
	}
	if creds.ExpiresAt == nil || creds.ExpiresAt.Sub(now) < 47*time.Hour || creds.ExpiresAt.Sub(now) > 49*time.Hour {
		t.Errorf("credentials expire at %v, want two days after %v", creds.ExpiresAt, now)
	}

	// A cluster whose certificates last longer admits hosts at that time.
	clock = &now
	long := e.CreateCluster("long", v1.ClusterSpec{NodeApproval: "auto", CertificateTTLDays: 30})
	clock = &later
	if status, _, apiErr := post(t, e, registration(t, long, "n1")); status >= 300 {
		t.Errorf("registration within a 30-day TTL: %d %q", status, apiErr.Message)
	}
}

// A cluster has a front-proxy CA of its own, made with its other secrets,
// and EnsureFrontProxyCA reads it again rather than making another.
func TestFrontProxyCA(t *testing.T) {
	ctx := context.Background()
	e := gatewaytest.New(t, gateway.Options{})
	c := e.CreateCluster("c", v1.ClusterSpec{})
	stored, err := e.Store.GetClusterSecret(ctx, c.Key, trust.SecretFrontProxyCA)
	if err != nil {
		t.Fatalf("EnsureSecrets made no front-proxy CA: %v", err)
	}
	got, err := trust.EnsureFrontProxyCA(ctx, e.Store, c.Key, c.Fence, 0)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(string(stored), string(got.CertPEM())) {
		t.Error("EnsureFrontProxyCA made another CA")
	}
	cluster, err := trust.LoadCA(ctx, e.Store, c.Key)
	if err != nil {
		t.Fatal(err)
	}
	if string(got.CertPEM()) == string(cluster.CertPEM()) {
		t.Error("the front-proxy CA is the cluster CA")
	}
}
