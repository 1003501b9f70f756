package server_test

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	v1 "kiln.dev/kiln/api/v1"
	"kiln.dev/kiln/internal/server"
)

func TestHealthWithoutAuth(t *testing.T) {
	h := newHarness(t, nil)
	tests := []struct {
		name   string
		path   string
		auth   bool
		status int
	}{
		{name: "healthz", path: "/healthz", status: http.StatusOK},
		{name: "readyz", path: "/readyz", status: http.StatusOK},
		{name: "metrics needs auth", path: "/metrics", status: http.StatusUnauthorized},
		{name: "metrics", path: "/metrics", auth: true, status: http.StatusOK},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			hdr := "Authorization:"
			if tt.auth {
				hdr = "Authorization: Bearer " + token
			}
			h.must(tt.status, "GET", tt.path, "", hdr)
		})
	}
	r := h.must(http.StatusOK, "GET", "/metrics", "")
	if !strings.Contains(string(r.body), `kiln_http_requests_total{code="200",method="GET",route="GET /healthz"}`) {
		t.Errorf("metrics lack the healthz request count:\n%s", r.body)
	}
}

func TestAuthentication(t *testing.T) {
	h := newHarness(t, nil)
	const (
		missing = "a bearer token is required (Authorization: Bearer <token>)"
		invalid = "the token is not valid"
	)
	tests := []struct {
		name   string
		header string
		want   string
	}{
		{name: "no token", header: "Authorization:", want: missing},
		{name: "wrong token", header: "Authorization: Bearer nope", want: invalid},
		{name: "wrong scheme", header: "Authorization: Basic " + token, want: missing},
		{name: "token prefix", header: "Authorization: Bearer test-", want: invalid},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := h.must(http.StatusUnauthorized, "GET", "/v1/projects", "", tt.header)
			if got := r.header.Get("WWW-Authenticate"); !strings.HasPrefix(got, "Bearer") {
				t.Errorf("WWW-Authenticate = %q, want Bearer", got)
			}
			if e := r.errorBody(t); e.Code != v1.CodeUnauthorized || e.Message != tt.want {
				t.Errorf("error = %s %q, want %s %q", e.Code, e.Message, v1.CodeUnauthorized, tt.want)
			}
		})
	}
	for _, lower := range []string{"bearer", "BEARER"} {
		h.must(http.StatusOK, "GET", "/v1/projects", "", "Authorization: "+lower+" "+token)
	}
}

func TestRequestID(t *testing.T) {
	h := newHarness(t, nil)
	r := h.do("GET", "/healthz", "", "X-Request-Id: client-chosen-42")
	if got := r.header.Get("X-Request-Id"); got != "client-chosen-42" {
		t.Errorf("X-Request-Id = %q, want the client's", got)
	}
	r = h.do("GET", "/healthz", "", "X-Request-Id: bad id with spaces")
	if got := r.header.Get("X-Request-Id"); got == "" || strings.Contains(got, " ") {
		t.Errorf("X-Request-Id = %q, want a generated one", got)
	}
	r = h.do("GET", "/v1/projects", "")
	if got := r.header.Get("X-Request-Id"); len(got) != 36 {
		t.Errorf("X-Request-Id = %q, want a UUID", got)
	}
	for _, hdr := range []string{"X-Content-Type-Options: nosniff", "Cache-Control: no-store", "Content-Type: application/json"} {
		k, v, _ := strings.Cut(hdr, ": ")
		if got := r.header.Get(k); got != v {
			t.Errorf("%s = %q, want %q", k, got, v)
		}
	}
	logs := h.logs.String()
	if !strings.Contains(logs, "requestId=client-chosen-42") || !strings.Contains(logs, `route="GET /healthz"`) {
		t.Errorf("log lacks the request line:\n%s", logs)
	}
	if strings.Contains(logs, token) {
		t.Errorf("log contains the bearer token:\n%s", logs)
	}
}

func TestRoutingErrors(t *testing.T) {
	h := newHarness(t, nil)
	tests := []struct {
		name   string
		method string
		path   string
		status int
		code   string
		target string
		allow  string
	}{
		{name: "unknown route", method: "GET", path: "/v2/things", status: 404, code: v1.CodeNotFound},
		{name: "method not allowed", method: "POST", path: "/v1/projects/p/clusters/c", status: 405,
			code: v1.CodeMethodNotAllowed, allow: "DELETE, GET, HEAD, PATCH, PUT"},
		{name: "bad project name", method: "GET", path: "/v1/projects/Bad_Name", status: 400,
			code: v1.CodeInvalidParameter, target: "project"},
		{name: "bad cluster name", method: "GET", path: "/v1/projects/p/clusters/-c", status: 400,
			code: v1.CodeInvalidParameter, target: "cluster"},
		{name: "bad node name", method: "GET", path: "/v1/projects/p/clusters/c/nodes/n.1", status: 400,
			code: v1.CodeInvalidParameter, target: "node"},
		{name: "bad operation id", method: "GET", path: "/v1/operations/" + strings.Repeat("a", 64), status: 400,
			code: v1.CodeInvalidParameter, target: "operation"},
		{name: "bad cloud account name", method: "GET", path: "/v1/projects/p/cloudaccounts/UP", status: 400,
			code: v1.CodeInvalidParameter, target: "cloudaccount"},
		{name: "missing project", method: "GET", path: "/v1/projects/nope", status: 404,
			code: v1.CodeNotFound, target: "project"},
		{name: "missing cluster's project", method: "GET", path: "/v1/projects/nope/clusters/c", status: 404,
			code: v1.CodeNotFound, target: "project"},
		{name: "missing operation", method: "GET", path: "/v1/operations/0196f3c2-8a4e-7c3b-9d2a-1b2c3d4e5f60", status: 404,
			code: v1.CodeNotFound, target: "operation"},
		{name: "bad top", method: "GET", path: "/v1/projects?top=0", status: 400,
			code: v1.CodeInvalidParameter, target: "top"},
		{name: "bad skipToken", method: "GET", path: "/v1/projects?skipToken=garbage", status: 400,
			code: v1.CodeInvalidParameter, target: "skipToken"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := h.must(tt.status, tt.method, tt.path, "")
			e := r.errorBody(t)
			if e.Code != tt.code || e.Target != tt.target {
				t.Errorf("error = %+v, want code %s target %q", e, tt.code, tt.target)
			}
			if got := r.header.Get("Allow"); got != tt.allow {
				t.Errorf("Allow = %q, want %q", got, tt.allow)
			}
		})
	}
}

func TestBodyErrors(t *testing.T) {
	h := newHarness(t, nil)
	h.project("p")
	big := `{"spec": {"region": "` + strings.Repeat("x", server.MaxBodyBytes) + `"}}`
	tests := []struct {
		name    string
		method  string
		body    string
		headers []string
		status  int
		golden  string
		target  string
	}{
		{name: "too large", method: "PUT", body: big, status: 413, golden: "too-large"},
		{name: "too large chunked", method: "PUT", body: big, headers: []string{"Content-Length:"}, status: 413},
		{name: "not json", method: "PUT", body: `{}`, headers: []string{"Content-Type: text/plain"}, status: 415, golden: "unsupported-media-type"},
		{name: "merge patch on put", method: "PUT", body: `{}`, headers: []string{"Content-Type: application/merge-patch+json"}, status: 415},
		{name: "unknown field", method: "PUT", body: `{"spec": {"network": {"podCIDRs": "10.0.0.0/16"}}}`, status: 400, golden: "unknown-field", target: "spec.network.podCIDRs"},
		{name: "unknown field in pool", method: "PUT", body: `{"spec": {"workerPools": [{"name": "a"}, {"name": "b", "sise": 1}]}}`, status: 400, target: "spec.workerPools[1].sise"},
		{name: "field in wrong case", method: "PUT", body: `{"spec": {"Provider": "local"}}`, status: 400, target: "spec.Provider"},
		{name: "unknown top-level field", method: "PUT", body: `{"specs": {}}`, status: 400, target: "specs"},
		{name: "wrong type", method: "PUT", body: `{"spec": {"controlPlane": {"size": "three"}}}`, status: 400, target: "spec.controlPlane.size"},
		{name: "trailing data", method: "PUT", body: `{"spec": {}} {"spec": {}}`, status: 400, golden: "trailing-data"},
		{name: "syntax", method: "PUT", body: `{"spec": `, status: 400},
		{name: "not an object", method: "PUT", body: `[]`, status: 400},
		{name: "empty", method: "PUT", body: ``, status: 400},
		{name: "name differs", method: "PUT", body: `{"name": "other"}`, status: 400, target: "name"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := h.must(tt.status, tt.method, "/v1/projects/p/clusters/c", tt.body, tt.headers...)
			if e := r.errorBody(t); tt.target != "" && e.Target != tt.target {
				t.Errorf("target = %q, want %q (%s)", e.Target, tt.target, e.Message)
			}
			if tt.golden != "" {
				golden(t, tt.golden, r.body)
			}
		})
	}
	// Nothing was written.
	h.must(http.StatusNotFound, "GET", "/v1/projects/p/clusters/c", "")
}

func TestValidationDetails(t *testing.T) {
	h := newHarness(t, nil)
	h.project("p")
	body := `{"spec": {
		"provider": "aws",
		"kubernetesVersion": "1.36",
		"network": {"podCIDR": "10.96.0.0/16", "cni": "weave"},
		"controlPlane": {"size": 2},
		"workerPools": [{"name": "", "size": 2000}, {"name": "x"}, {"name": "x"}],
		"labels": {"bad key": "v"}
	}}`
	r := h.must(http.StatusBadRequest, "PUT", "/v1/projects/p/clusters/c", body)
	golden(t, "validation", r.body)
	e := r.errorBody(t)
	if e.Code != v1.CodeInvalidParameter || e.Target != "spec.provider" || len(e.Details) != 10 {
		t.Errorf("error = %s %s with %d details, want InvalidParameter spec.provider with 10", e.Code, e.Target, len(e.Details))
	}
	r = h.must(http.StatusBadRequest, "PUT", "/v1/projects/p/clusters/toolong-toolong-toolong-toolong-toolong-x", `{}`)
	if e := r.errorBody(t); e.Target != "name" {
		t.Errorf("target = %q, want name", e.Target)
	}
	r = h.must(http.StatusBadRequest, "PUT", "/v1/projects/p/clusters/c", `{"spec": {"workerPools": [{"size": 1}]}}`)
	if e := r.errorBody(t); e.Code != v1.CodeMissingParameter || e.Target != "spec.workerPools[0].name" {
		t.Errorf("error = %s %s, want MissingParameter spec.workerPools[0].name", e.Code, e.Target)
	}
	h.must(http.StatusNotFound, "GET", "/v1/projects/p/clusters/c", "")
}

func TestPanicRecovery(t *testing.T) {
	h := newHarness(t, nil)
	h.s.HandleForTest("GET /v1/boom", func(http.ResponseWriter, *http.Request) {
		panic("secret internal detail")
	})
	r := h.must(http.StatusInternalServerError, "GET", "/v1/boom", "", "X-Request-Id: req-500")
	golden(t, "internal", r.body)
	if strings.Contains(string(r.body), "secret") {
		t.Errorf("500 body leaks the panic: %s", r.body)
	}
	if logs := h.logs.String(); !strings.Contains(logs, "secret internal detail") || !strings.Contains(logs, "goroutine") {
		t.Errorf("log lacks the panic and its stack:\n%s", logs)
	}
	// The server still serves.
	h.must(http.StatusOK, "GET", "/healthz", "")
}

func TestRateLimit(t *testing.T) {
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	h := newHarness(t, func(o *server.Options) {
		o.RateLimit, o.RateBurst = 0.5, 2
		o.Now = func() time.Time { return now }
	})
	h.must(http.StatusOK, "GET", "/v1/projects", "")
	h.must(http.StatusOK, "GET", "/v1/projects", "")
	r := h.must(http.StatusTooManyRequests, "GET", "/v1/projects", "")
	if got := r.header.Get("Retry-After"); got != "2" {
		t.Errorf("Retry-After = %q, want 2", got)
	}
	if diff := cmp.Diff(v1.CodeThrottled, r.errorBody(t).Code); diff != "" {
		t.Errorf("code (-want +got):\n%s", diff)
	}
	// Health is not limited.
	h.must(http.StatusOK, "GET", "/healthz", "")
}
