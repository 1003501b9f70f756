package kubeapi

import (
	"crypto/tls"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"sync"
	"testing"
	"time"

	"kiln.dev/kiln/internal/pki"
)

// fakeAPI is a tiny Kubernetes API: one node, namespaces and ConfigMaps.
type fakeAPI struct {
	mu         sync.Mutex
	labels     map[string]string
	namespaces map[string]bool
	configmaps map[string]map[string]string
	users      []string
}

func (f *fakeAPI) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(r.TLS.PeerCertificates) > 0 {
		f.users = append(f.users, r.TLS.PeerCertificates[0].Subject.CommonName)
	}
	status := func(code int, reason, msg string) {
		w.WriteHeader(code)
		_ = json.NewEncoder(w).Encode(map[string]any{"kind": "Status", "reason": reason, "message": msg})
	}
	var body map[string]any
	if r.Body != nil {
		b, _ := io.ReadAll(r.Body)
		_ = json.Unmarshal(b, &body)
	}
	node := func() map[string]any {
		return map[string]any{"metadata": map[string]any{"name": "n1", "labels": f.labels},
			"spec":   map[string]any{"taints": []any{map[string]any{"key": "k", "effect": "NoSchedule"}}},
			"status": map[string]any{"conditions": []any{map[string]any{"type": "Ready", "status": "True"}}}}
	}
	switch r.Method + " " + r.URL.Path {
	case "GET /readyz":
		_, _ = io.WriteString(w, "ok")
	case "GET /api/v1/nodes":
		_ = json.NewEncoder(w).Encode(map[string]any{"items": []any{node()}})
	case "GET /api/v1/nodes/n1":
		_ = json.NewEncoder(w).Encode(node())
	case "PATCH /api/v1/nodes/n1":
		if r.Header.Get("Content-Type") != "application/merge-patch+json" {
			status(http.StatusUnsupportedMediaType, "UnsupportedMediaType", r.Header.Get("Content-Type"))
			return
		}
		for k, v := range body["metadata"].(map[string]any)["labels"].(map[string]any) {
			f.labels[k] = v.(string)
		}
		_ = json.NewEncoder(w).Encode(node())
	case "POST /api/v1/namespaces":
		name := body["metadata"].(map[string]any)["name"].(string)
		if f.namespaces[name] {
			status(http.StatusConflict, "AlreadyExists", "namespaces \""+name+"\" already exists")
			return
		}
		f.namespaces[name] = true
		w.WriteHeader(http.StatusCreated)
	case "POST /api/v1/namespaces/kiln-system/configmaps":
		name := body["metadata"].(map[string]any)["name"].(string)
		if _, ok := f.configmaps[name]; ok {
			status(http.StatusConflict, "AlreadyExists", "exists")
			return
		}
		f.configmaps[name] = map[string]string{}
		for k, v := range body["data"].(map[string]any) {
			f.configmaps[name][k] = v.(string)
		}
		w.WriteHeader(http.StatusCreated)
	case "PATCH /api/v1/namespaces/kiln-system/configmaps/c":
		for k, v := range body["data"].(map[string]any) {
			f.configmaps["c"][k] = v.(string)
		}
	case "GET /api/v1/namespaces/kiln-system/configmaps/c":
		_ = json.NewEncoder(w).Encode(map[string]any{"data": f.configmaps["c"]})
	default:
		status(http.StatusNotFound, "NotFound", r.URL.Path+" not found")
	}
}

// newTestClient serves api over TLS with a fresh cluster CA and returns an
// admin client of it.
func newTestClient(t *testing.T, api http.Handler) (*Client, *pki.CA, string) {
	t.Helper()
	ca, err := pki.NewCA("test", pki.DefaultCAValidity, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	srvCert, srvKey, err := ca.Issue(pki.CertRequest{CommonName: "api", IPs: []net.IP{net.IPv4(127, 0, 0, 1)}, Usage: pki.UsageServer})
	if err != nil {
		t.Fatal(err)
	}
	pair, err := tls.X509KeyPair(srvCert, srvKey)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewUnstartedServer(api)
	srv.TLS = &tls.Config{Certificates: []tls.Certificate{pair}, ClientCAs: ca.Pool(), ClientAuth: tls.RequireAndVerifyClientCert}
	srv.StartTLS()
	t.Cleanup(srv.Close)
	cert, key, err := ca.Issue(pki.AdminRequest("admin"))
	if err != nil {
		t.Fatal(err)
	}
	c, err := New(srv.URL, ca.CertPEM(), cert, key)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return c, ca, srv.URL
}

func TestClient(t *testing.T) {
	api := &fakeAPI{labels: map[string]string{}, namespaces: map[string]bool{}, configmaps: map[string]map[string]string{}}
	c, ca, url := newTestClient(t, api)
	ctx := t.Context()

	if err := c.Ready(ctx); err != nil {
		t.Fatal(err)
	}
	nodes, err := c.ListNodes(ctx)
	if err != nil || len(nodes) != 1 || !nodes[0].Ready() || nodes[0].Taints[0].Key != "k" {
		t.Fatalf("ListNodes = %+v, %v", nodes, err)
	}
	if err := c.LabelNode(ctx, "n1", map[string]string{"node-role.kubernetes.io/worker": ""}); err != nil {
		t.Fatal(err)
	}
	n, err := c.GetNode(ctx, "n1")
	if _, ok := n.Labels["node-role.kubernetes.io/worker"]; err != nil || !ok {
		t.Fatalf("GetNode after label = %+v, %v", n, err)
	}
	_, err = c.GetNode(ctx, "missing")
	var se *StatusError
	if !errors.Is(err, ErrNotFound) || !errors.As(err, &se) || se.Reason != "NotFound" {
		t.Fatalf("GetNode(missing) = %v", err)
	}
	for range 2 {
		if err := c.EnsureNamespace(ctx, "kiln-system"); err != nil {
			t.Fatal(err)
		}
	}
	if err := c.ApplyConfigMap(ctx, "kiln-system", "c", map[string]string{"id": "1"}); err != nil {
		t.Fatal(err)
	}
	if err := c.ApplyConfigMap(ctx, "kiln-system", "c", map[string]string{"id": "2", "x": "y"}); err != nil {
		t.Fatal(err)
	}
	data, err := c.GetConfigMap(ctx, "kiln-system", "c")
	if err != nil || data["id"] != "2" || data["x"] != "y" {
		t.Fatalf("GetConfigMap = %v, %v", data, err)
	}
	if api.users[0] != "admin" {
		t.Errorf("server saw user %q", api.users[0])
	}
	cert, key, err := ca.Issue(pki.AdminRequest("admin"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := New(url, []byte("no pem"), cert, key); err == nil {
		t.Error("New with a bad CA succeeded")
	}
}

// A node takes pods once it is Ready, its network is not unavailable, and
// the node controller has taken its not-ready, unreachable or
// network-unavailable taint off; a pool's taint or a cordon is not its
// health.
func TestNotReadyYet(t *testing.T) {
	ready := []Condition{{Type: "Ready", Status: "True"}}
	for _, c := range []struct {
		name string
		node Node
		want string
	}{
		{"no conditions", Node{}, "not Ready"},
		{"Ready False", Node{Conditions: []Condition{{Type: "Ready", Status: "False"}}}, "not Ready"},
		{"Ready, not-ready taint still on", Node{Conditions: ready, Taints: []Taint{{Key: TaintNotReady, Effect: "NoSchedule"}}},
			"Ready, still tainted node.kubernetes.io/not-ready:NoSchedule"},
		{"Ready, unreachable taint still on", Node{Conditions: ready, Taints: []Taint{{Key: TaintUnreachable, Effect: "NoExecute"}}},
			"Ready, still tainted node.kubernetes.io/unreachable:NoExecute"},
		{"Ready, network unavailable", Node{Conditions: append(slices.Clone(ready), Condition{Type: ConditionNetworkUnavailable, Status: "True", Reason: "KilnPodNetworkPending"})},
			"Ready, network unavailable (KilnPodNetworkPending)"},
		{"Ready, network available, its taint still on", Node{Conditions: append(slices.Clone(ready), Condition{Type: ConditionNetworkUnavailable, Status: "False"}),
			Taints: []Taint{{Key: TaintNetworkUnavailable, Effect: "NoSchedule"}}},
			"Ready, still tainted node.kubernetes.io/network-unavailable:NoSchedule"},
		{"Ready, network available", Node{Conditions: append(slices.Clone(ready), Condition{Type: ConditionNetworkUnavailable, Status: "False"})}, ""},
		{"Ready, a pool's taint, cordoned", Node{Conditions: ready, Unschedulable: true, Taints: []Taint{{Key: "gpu", Value: "true", Effect: "NoSchedule"}}}, ""},
	} {
		if got := c.node.NotReadyYet(); got != c.want {
			t.Errorf("%s: NotReadyYet() = %q, want %q", c.name, got, c.want)
		}
	}
}
