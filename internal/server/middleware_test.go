package server_test

import (
	"context"
	"log/slog"
	"net/http"
	"net/http/httptest"
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
	logs := &logBuffer{}
	h := newHarness(t, func(o *server.Options) {
		o.Logger = slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	})
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
	text := logs.String()
	if !strings.Contains(text, "requestId=client-chosen-42") || !strings.Contains(text, `route="GET /healthz"`) {
		t.Errorf("debug log lacks the request line:\n%s", text)
	}
	if strings.Contains(text, token) {
		t.Errorf("log contains the bearer token:\n%s", text)
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

// TestBodyErrors sends bodies the API refuses: each answer is a 4xx in the
// error shape whose code, target and message say what to fix.
func TestBodyErrors(t *testing.T) {
	h := newHarness(t, nil)
	h.project("p")
	existing, _ := h.createCluster("p", "d", `{}`)
	const (
		cluster      = "/v1/projects/p/clusters/c"
		patched      = "/v1/projects/p/clusters/d"
		profile      = "/v1/projects/p/profiles/prof"
		profileStart = `{"version": 1, "kubernetesVersion": "v1.36.3", "packs": [{"name": "a", "version": "1", "values": `
	)
	big := `{"spec": {"region": "` + strings.Repeat("x", server.MaxBodyBytes) + `"}}`
	tooDeep := `{"spec": {"labels": ` + nested(server.MaxBodyDepth-1) + `}}`
	tests := []struct {
		name    string
		method  string // PUT unless set
		path    string // the cluster unless set
		body    string
		headers []string
		status  int
		code    string
		target  string
		message string // a fragment of the message
		golden  string
	}{
		// Size and media type (middleware).
		{name: "too large", body: big, status: 413, code: v1.CodeRequestTooLarge, message: "larger than 1048576 bytes", golden: "too-large"},
		{name: "too large chunked", body: big, headers: []string{"Content-Length:"}, status: 413, code: v1.CodeRequestTooLarge, message: "larger than 1048576 bytes"},
		{name: "not json", body: `{}`, headers: []string{"Content-Type: text/plain"}, status: 415,
			code: v1.CodeUnsupportedMedia, target: "Content-Type", message: "send application/json", golden: "unsupported-media-type"},
		{name: "merge patch on put", body: `{}`, headers: []string{"Content-Type: application/merge-patch+json"}, status: 415,
			code: v1.CodeUnsupportedMedia, target: "Content-Type", message: "merge-patch+json with PATCH"},
		{name: "bad content type", body: `{}`, headers: []string{"Content-Type: ;;"}, status: 415, code: v1.CodeUnsupportedMedia, target: "Content-Type"},

		// Syntax and framing.
		{name: "empty", body: ``, status: 400, code: v1.CodeInvalidRequest, message: "a JSON request body is required"},
		{name: "white space only", body: " \n\t ", status: 400, code: v1.CodeInvalidRequest, message: "a JSON request body is required"},
		{name: "syntax", body: `{"spec": {"region": "x",}}`, status: 400, code: v1.CodeInvalidRequest, message: "not valid JSON (at byte 24)"},
		{name: "truncated", body: `{"spec": `, status: 400, code: v1.CodeInvalidRequest, message: "ends before its object does"},
		{name: "trailing data", body: `{"spec": {}} {"spec": {}}`, status: 400, code: v1.CodeInvalidRequest, message: "data after the JSON object", golden: "trailing-data"},
		{name: "trailing garbage", body: `{"spec": {}} x`, status: 400, code: v1.CodeInvalidRequest, message: "data after the JSON object"},
		{name: "not an object", body: `[]`, status: 400, code: v1.CodeInvalidRequest, message: "must be a JSON object"},
		{name: "null", body: `null`, status: 400, code: v1.CodeInvalidRequest, message: "must be a JSON object"},

		// Duplicate keys, at any depth.
		{name: "duplicate top-level key", body: `{"spec": {}, "spec": {}}`, status: 400,
			code: v1.CodeInvalidRequest, target: "spec", message: `duplicate key "spec" at the body's top level`, golden: "duplicate-key"},
		{name: "duplicate key in pool", body: `{"spec": {"workerPools": [{"name": "a", "size": 1, "size": 2}]}}`, status: 400,
			code: v1.CodeInvalidRequest, target: "spec.workerPools[0].size", message: `duplicate key "size" in spec.workerPools[0]`},
		{name: "duplicate label", body: `{"spec": {"labels": {"app.kubernetes.io/name": "a", "app.kubernetes.io/name": "b"}}}`, status: 400,
			code: v1.CodeInvalidRequest, target: `spec.labels["app.kubernetes.io/name"]`, message: `duplicate key "app.kubernetes.io/name" in spec.labels`},
		{name: "duplicate key spelled with an escape", body: `{"spec": {"region": "a", "re\u0067ion": "b"}}`, status: 400,
			code: v1.CodeInvalidRequest, target: "spec.region", message: `duplicate key "region" in spec`},
		{name: "duplicate key in patch", method: "PATCH", path: patched, body: `{"spec": {"controlPlane": {"size": 3, "size": 5}}}`, status: 400,
			code: v1.CodeInvalidRequest, target: "spec.controlPlane.size", message: `duplicate key "size" in spec.controlPlane`},

		// Nesting.
		{name: "too deep", body: tooDeep, status: 400, code: v1.CodeInvalidRequest,
			target: "spec.labels" + strings.Repeat(".a", server.MaxBodyDepth-2), message: "more than 32 levels deep"},
		{name: "far too deep", body: strings.Repeat(`{"a": `, 100_000), status: 400, code: v1.CodeInvalidRequest,
			target: "a" + strings.Repeat(".a", server.MaxBodyDepth-1), message: "more than 32 levels deep"},
		{name: "too deep patch", method: "PATCH", path: patched, body: tooDeep, status: 400, code: v1.CodeInvalidRequest,
			target: "spec.labels" + strings.Repeat(".a", server.MaxBodyDepth-2), message: "more than 32 levels deep"},
		{name: "too deep pack values", path: profile, body: profileStart + nested(server.MaxBodyDepth-2) + `}]}`, status: 400,
			code: v1.CodeInvalidRequest, target: "packs[0].values" + strings.Repeat(".a", server.MaxBodyDepth-3), message: "more than 32 levels deep"},

		// Text that is not UTF-8, or not Unicode.
		{name: "invalid UTF-8", body: "{\"spec\": {\"region\": \"eu\xff\"}}", status: 400,
			code: v1.CodeInvalidRequest, target: "spec.region", message: "not valid UTF-8 (in spec.region)"},
		{name: "invalid UTF-8 in a key", body: "{\"spec\": {\"re\xc0\xafgion\": \"eu\"}}", status: 400,
			code: v1.CodeInvalidRequest, target: "spec[\"re\uFFFD\uFFFDgion\"]", message: "not valid UTF-8"},
		{name: "UTF-8 surrogate", body: "{\"spec\": {\"workerPools\": [{\"name\": \"\xed\xa0\x80\"}]}}", status: 400,
			code: v1.CodeInvalidRequest, target: "spec.workerPools[0].name", message: "not valid UTF-8"},
		{name: "invalid UTF-8 outside a string", body: "{\"spec\": {}}\xff", status: 400, code: v1.CodeInvalidRequest, message: "data after the JSON object"},
		{name: "unpaired surrogate escape", body: `{"spec": {"region": "\ud800"}}`, status: 400,
			code: v1.CodeInvalidRequest, target: "spec.region", message: "surrogate pair without its other half"},
		{name: "reversed surrogate escapes", body: `{"spec": {"labels": {"a": "\udc00\ud800"}}}`, status: 400,
			code: v1.CodeInvalidRequest, target: `spec.labels.a`, message: "surrogate"},

		// Numbers the field cannot hold.
		{name: "exponent overflow", body: `{"spec": {"controlPlane": {"size": 1e400}}}`, status: 400,
			code: v1.CodeInvalidParameter, target: "spec.controlPlane.size", message: "must be an integer, written without a fraction or an exponent, not 1e400"},
		{name: "int overflow", body: `{"spec": {"controlPlane": {"size": 123456789012345678901234567890}}}`, status: 400,
			code: v1.CodeInvalidParameter, target: "spec.controlPlane.size", message: "must be an integer from -9223372036854775808 to 9223372036854775807"},
		{name: "negative overflow in pool", body: `{"spec": {"workerPools": [{"name": "a"}, {"name": "b", "size": -1e309}]}}`, status: 400,
			code: v1.CodeInvalidParameter, target: "spec.workerPools[1].size", message: "not -1e309"},
		{name: "fraction", body: `{"spec": {"certificateTTLDays": 1.5}}`, status: 400,
			code: v1.CodeInvalidParameter, target: "spec.certificateTTLDays", message: "must be an integer"},
		{name: "long number clipped", body: `{"spec": {"certificateTTLDays": 1` + strings.Repeat("0", 1000) + `}}`, status: 400,
			code: v1.CodeInvalidParameter, target: "spec.certificateTTLDays", message: "not 1" + strings.Repeat("0", 63) + "…"},
		{name: "NaN", body: `{"spec": {"controlPlane": {"size": NaN}}}`, status: 400, code: v1.CodeInvalidRequest, message: "not valid JSON"},
		{name: "Infinity", body: `{"spec": {"controlPlane": {"size": -Infinity}}}`, status: 400, code: v1.CodeInvalidRequest, message: "not valid JSON"},
		{name: "hex", body: `{"spec": {"controlPlane": {"size": 0x3}}}`, status: 400, code: v1.CodeInvalidRequest, message: "not valid JSON"},
		{name: "leading plus", body: `{"spec": {"controlPlane": {"size": +3}}}`, status: 400, code: v1.CodeInvalidRequest, message: "not valid JSON"},
		{name: "overflow in patch", method: "PATCH", path: patched, body: `{"spec": {"controlPlane": {"size": 1e400}}}`, status: 400,
			code: v1.CodeInvalidParameter, target: "spec.controlPlane.size", message: "not 1e400"},
		{name: "wrong type in patch", method: "PATCH", path: patched, body: `{"spec": {"workerPools": [{"name": "a", "size": "2"}]}}`, status: 400,
			code: v1.CodeInvalidParameter, target: "spec.workerPools[0].size", message: "must be an integer, not a JSON string"},
		{name: "huge pack value", path: profile, body: profileStart + `{"replicas": 1e400}}]}`, status: 400,
			code: v1.CodeInvalidParameter, target: `packs[0].values["replicas"]`, message: "must be a number of at most 1.7976931348623157e+308"},
		{name: "inexact pack value", path: profile, body: profileStart + `{"big": [9007199254740993]}}]}`, status: 400,
			code: v1.CodeInvalidParameter, target: `packs[0].values["big"][0]`, message: "send it as a string"},

		// Fields the resource lacks, values of the wrong type.
		{name: "unknown field", body: `{"spec": {"network": {"podCIDRs": "10.0.0.0/16"}}}`, status: 400,
			code: v1.CodeInvalidParameter, target: "spec.network.podCIDRs", message: `unknown field "spec.network.podCIDRs"`, golden: "unknown-field"},
		{name: "unknown field in pool", body: `{"spec": {"workerPools": [{"name": "a"}, {"name": "b", "sise": 1}]}}`, status: 400,
			code: v1.CodeInvalidParameter, target: "spec.workerPools[1].sise"},
		{name: "field in wrong case", body: `{"spec": {"Provider": "local"}}`, status: 400, code: v1.CodeInvalidParameter, target: "spec.Provider"},
		{name: "unknown top-level field", body: `{"specs": {}}`, status: 400, code: v1.CodeInvalidParameter, target: "specs"},
		{name: "unknown odd field", body: `{"spec": {"a b": 1}}`, status: 400, code: v1.CodeInvalidParameter, target: `spec["a b"]`},
		{name: "wrong type", body: `{"spec": {"controlPlane": {"size": "three"}}}`, status: 400,
			code: v1.CodeInvalidParameter, target: "spec.controlPlane.size", message: "spec.controlPlane.size must be an integer, not a JSON string"},
		{name: "wrong type in pool", body: `{"spec": {"workerPools": [{"name": "a"}, {"name": 7}]}}`, status: 400,
			code: v1.CodeInvalidParameter, target: "spec.workerPools[1].name", message: "must be a string, not a JSON number"},
		{name: "wrong type of label", body: `{"spec": {"labels": {"a": true}}}`, status: 400,
			code: v1.CodeInvalidParameter, target: `spec.labels["a"]`, message: "must be a string, not true or false"},
		{name: "array for object", body: `{"spec": []}`, status: 400, code: v1.CodeInvalidParameter, target: "spec", message: "spec must be an object, not a JSON array"},
		{name: "object for array", body: `{"spec": {"workerPools": {}}}`, status: 400,
			code: v1.CodeInvalidParameter, target: "spec.workerPools", message: "must be an array, not a JSON object"},
		{name: "name differs", body: `{"name": "other"}`, status: 400, code: v1.CodeInvalidParameter, target: "name"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			method, path := "PUT", cluster
			if tt.method != "" {
				method = tt.method
			}
			if tt.path != "" {
				path = tt.path
			}
			r := h.must(tt.status, method, path, tt.body, tt.headers...)
			e := r.errorBody(t)
			if e.Code != tt.code || e.Target != tt.target || !strings.Contains(e.Message, tt.message) {
				t.Errorf("error = %s %q %q, want %s %q with %q", e.Code, e.Target, e.Message, tt.code, tt.target, tt.message)
			}
			if got := r.header.Get("X-Kiln-Error-Code"); got != e.Code {
				t.Errorf("X-Kiln-Error-Code = %q, want %q", got, e.Code)
			}
			if tt.golden != "" {
				golden(t, tt.golden, r.body)
			}
		})
	}
	// Nothing was written.
	h.must(http.StatusNotFound, "GET", cluster, "")
	h.must(http.StatusNotFound, "GET", profile, "")
	r := h.must(http.StatusOK, "GET", patched, "")
	if got := r.header.Get("ETag"); got != `"`+existing.ETag+`"` {
		t.Errorf("cluster d's ETag = %s, want %q: a refused PATCH changed it", got, existing.ETag)
	}
}

// nested is n objects, one in the other: {"a": {"a": ... {}}}.
func nested(n int) string {
	return strings.Repeat(`{"a": `, n-1) + `{}` + strings.Repeat(`}`, n-1)
}

// TestBodiesAccepted sends bodies at the limits that the API takes.
func TestBodiesAccepted(t *testing.T) {
	h := newHarness(t, nil)
	h.project("p")
	// The deepest body accepted: the profile is level 1, its packs 2, a
	// pack 3, its values 4.
	deep := `{"version": 1, "kubernetesVersion": "v1.36.3", "packs": [{"name": "a", "version": "1", "values": ` +
		nested(server.MaxBodyDepth-3) + `}]}`
	h.must(http.StatusCreated, "PUT", "/v1/projects/p/profiles/deep", deep)
	exact := `{"version": 1, "kubernetesVersion": "v1.36.3", "packs": [{"name": "a", "version": "1",
		"values": {"max": 9007199254740992, "min": -9007199254740992, "small": 1e-5, "big": 1.5e300, "zero": -0}}]}`
	r := h.must(http.StatusCreated, "PUT", "/v1/projects/p/profiles/exact", exact)
	var prof v1.Profile
	r.decode(t, &prof)
	if got := prof.Packs[0].Values["max"]; got != float64(1<<53) {
		t.Errorf("values.max = %v, want 2^53", got)
	}
	// An escaped surrogate pair, an escaped U+FFFD and a literal one are text.
	r = h.must(http.StatusCreated, "PUT", "/v1/projects/q", `{"displayName": "\ud83d\ude00 \ufffd \u00e9 �"}`)
	var proj v1.Project
	r.decode(t, &proj)
	if want := "😀 � é �"; proj.DisplayName != want {
		t.Errorf("displayName = %q, want %q", proj.DisplayName, want)
	}
	// Keys that differ only in case are two keys (and Spec is not a field).
	r = h.must(http.StatusBadRequest, "PUT", "/v1/projects/p/clusters/c", `{"spec": {}, "Spec": {}}`)
	if e := r.errorBody(t); e.Target != "Spec" {
		t.Errorf("target = %q, want Spec", e.Target)
	}
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
	if e.Code != v1.CodeInvalidParameter || e.Target != "spec.provider" || len(e.Details) != 11 {
		t.Errorf("error = %s %s with %d details, want InvalidParameter spec.provider with 11", e.Code, e.Target, len(e.Details))
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

// TestRequestLogLevels: at Info, a read that went well is not logged (it is
// counted in /metrics); writes and failed requests are.
func TestRequestLogLevels(t *testing.T) {
	h := newHarness(t, nil)
	h.must(http.StatusOK, "GET", "/v1/projects", "", "X-Request-Id: read-ok")
	h.must(http.StatusNotFound, "GET", "/v1/projects/nope", "", "X-Request-Id: read-missing")
	h.must(http.StatusCreated, "PUT", "/v1/projects/logged", `{}`, "X-Request-Id: write")
	text := h.logs.String()
	if strings.Contains(text, "requestId=read-ok") {
		t.Errorf("a read that went well was logged at Info:\n%s", text)
	}
	for _, id := range []string{"read-missing", "write"} {
		if !strings.Contains(text, "msg=request method=") || !strings.Contains(text, "requestId="+id) {
			t.Errorf("request %s is not logged:\n%s", id, text)
		}
	}
}

// A request whose client went away before the answer is not a server
// failure: counted as 499, logged only at debug.
func TestClientGone(t *testing.T) {
	var logs logBuffer
	h := newHarness(t, func(o *server.Options) {
		o.Logger = slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	})
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	req := httptest.NewRequestWithContext(ctx, http.MethodGet, "/v1/projects", nil)
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("X-Request-Id", "gone")
	rec := httptest.NewRecorder()
	h.s.ServeHTTP(rec, req)
	if rec.Code != server.StatusClientClosedRequest {
		t.Errorf("status %d, want 499", rec.Code)
	}
	if text := logs.String(); strings.Contains(text, "level=ERROR") || strings.Contains(text, "level=INFO") ||
		!strings.Contains(text, "level=DEBUG msg=request method=GET") || !strings.Contains(text, "status=499") {
		t.Errorf("log:\n%s", text)
	}
}
