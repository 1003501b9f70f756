package server_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/getkin/kin-openapi/openapi3filter"
	"github.com/getkin/kin-openapi/routers"
	"github.com/getkin/kin-openapi/routers/legacy"

	"kiln.dev/kiln/internal/server"
)

// The document is loaded and checked once per test binary.
var openAPI = sync.OnceValues(func() (*openapi3.T, error) {
	doc, err := openapi3.NewLoader().LoadFromData(server.OpenAPIDocument())
	if err != nil {
		return nil, err
	}
	if err := doc.Validate(context.Background()); err != nil {
		return nil, err
	}
	return doc, nil
})

var openAPIRouter = sync.OnceValues(func() (routers.Router, error) {
	// The installer's gzipped tar is checked as bytes, as
	// application/octet-stream is.
	openapi3filter.RegisterBodyDecoder("application/gzip", openapi3filter.FileBodyDecoder)
	doc, err := openAPI()
	if err != nil {
		return nil, err
	}
	return legacy.NewRouter(doc)
})

// TestOpenAPIIsValid: the served document is OpenAPI 3.1 that kin-openapi
// loads and validates.
func TestOpenAPIIsValid(t *testing.T) {
	doc, err := openAPI()
	if err != nil {
		t.Fatal(err)
	}
	if doc.OpenAPI != "3.1.0" || !doc.IsOpenAPI31OrLater() {
		t.Errorf("openapi %q, want 3.1.0", doc.OpenAPI)
	}
}

// TestOpenAPICoversEveryRoute walks the route table the server registers
// (the ServeMux patterns) and fails on a route the document does not
// describe, and on an operation in the document the server does not have.
func TestOpenAPICoversEveryRoute(t *testing.T) {
	doc, err := openAPI()
	if err != nil {
		t.Fatal(err)
	}
	registered := map[string]bool{}
	for _, rt := range newHarness(t, nil).s.Routes() {
		registered[rt.Pattern] = true
		method, path, _ := strings.Cut(rt.Pattern, " ")
		item := doc.Paths.Value(path)
		if item == nil || item.GetOperation(method) == nil {
			t.Errorf("%s is served but not in the OpenAPI document: add it to apiRoutes (openapi_gen_test.go) and run -update", rt.Pattern)
		}
	}
	for path, item := range doc.Paths.Map() {
		for method := range item.Operations() {
			if !registered[method+" "+path] {
				t.Errorf("the OpenAPI document has %s %s, which the server does not serve", method, path)
			}
		}
	}
	if len(registered) < 40 {
		t.Fatalf("only %d routes registered: is the table read right?", len(registered))
	}
}

// TestOpenAPIServed: GET /openapi.json answers the document to any caller
// with a token, and 401 without one.
func TestOpenAPIServed(t *testing.T) {
	h := newHarness(t, nil)
	r := h.must(http.StatusOK, "GET", "/openapi.json", "")
	if !bytes.Equal(r.body, server.OpenAPIDocument()) || r.header.Get("Content-Type") != "application/json" {
		t.Errorf("GET /openapi.json answered %s, %d bytes, not the document", r.header.Get("Content-Type"), len(r.body))
	}
	h.must(http.StatusUnauthorized, "GET", "/openapi.json", "", "Authorization:")
}

// validateOpenAPI wraps the server the harness runs, so every request the
// server tests make, and every answer, is checked against the OpenAPI
// document with kin-openapi (openapi3filter, which validates OpenAPI 3.1
// schemas as JSON Schema 2020-12):
//
//   - every answer to a route of the document matches it: its status is one
//     the operation lists, or an error in the one error shape;
//   - a request the document refuses is answered 4xx (the server found
//     the fault too); one it accepts may still be refused, for what a
//     schema does not say (a name taken, a CIDR that overlaps).
//
// A mismatch fails the test that made the request.
func validateOpenAPI(t testing.TB, next http.Handler) http.Handler {
	router, err := openAPIRouter()
	if err != nil {
		t.Fatalf("openapi: %v", err)
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		route, params, err := router.FindRoute(r)
		if err != nil { // a route the server does not have: its 404 or 405
			next.ServeHTTP(w, r)
			return
		}
		var reqBody []byte
		if r.Body != nil {
			reqBody, _ = io.ReadAll(r.Body)
			r.Body = io.NopCloser(bytes.NewReader(reqBody))
		}
		check := r.Clone(r.Context())
		checkBody := reqBody
		if len(bytes.TrimSpace(checkBody)) == 0 {
			checkBody = nil // kilnd takes a blank body as none (readOptionalBody)
		}
		check.Body = io.NopCloser(bytes.NewReader(checkBody))
		if len(checkBody) > 0 && check.Header.Get("Content-Type") == "" {
			check.Header.Set("Content-Type", "application/json") // kilnd takes a missing Content-Type as JSON
		}
		in := &openapi3filter.RequestValidationInput{Request: check, PathParams: params, Route: route,
			Options: &openapi3filter.Options{AuthenticationFunc: openapi3filter.NoopAuthenticationFunc}}
		reqErr := openapi3filter.ValidateRequest(r.Context(), in)

		rec := httptest.NewRecorder()
		next.ServeHTTP(rec, r)
		res := rec.Result()
		for k, vs := range res.Header {
			w.Header()[k] = vs
		}
		w.WriteHeader(res.StatusCode)
		_, _ = w.Write(rec.Body.Bytes())

		what := r.Method + " " + r.URL.RequestURI()
		if reqErr != nil && (res.StatusCode < 400 || res.StatusCode >= 500) {
			t.Errorf("openapi: %s: the document refuses the request (%v) but the server answered %d", what, reqErr, res.StatusCode)
		}
		out := &openapi3filter.ResponseValidationInput{RequestValidationInput: in, Status: res.StatusCode,
			Header: res.Header, Body: io.NopCloser(bytes.NewReader(rec.Body.Bytes())),
			Options: &openapi3filter.Options{IncludeResponseStatus: true}}
		if err := openapi3filter.ValidateResponse(r.Context(), out); err != nil {
			t.Errorf("openapi: %s: the answer %d does not match the document: %v\nbody: %.2000s", what, res.StatusCode, err, rec.Body.Bytes())
		}
	})
}

// complaints is a testing.TB that keeps what validateOpenAPI reports.
type complaints struct {
	testing.TB
	mu   sync.Mutex
	msgs []string
}

func (c *complaints) Errorf(format string, args ...any) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.msgs = append(c.msgs, fmt.Sprintf(format, args...))
}

// TestOpenAPIValidatorCatchesMismatches: the check every harness runs is
// not a no-op: an answer off the document, and a request the document
// refuses that the handler accepts, are both reported.
func TestOpenAPIValidatorCatchesMismatches(t *testing.T) {
	tests := []struct {
		name, method, path, body, answer string
		status                           int
		want                             string
	}{
		{name: "a field the document lacks", method: "GET", path: "/v1/projects/p", status: 200,
			answer: `{"name": "p", "id": "/v1/projects/p", "etag": "1", "createdAt": "2026-01-01T00:00:00Z", "color": "red"}`,
			want:   "does not match the document"},
		{name: "a required field missing", method: "GET", path: "/v1/projects/p/clusters/c/upgrades", status: 200,
			answer: `{"kubernetesVersion": "v1.36.3"}`, want: "does not match the document"},
		{name: "a status the operation does not list", method: "GET", path: "/v1/projects/p", status: 202,
			answer: `{"name": "p", "id": "/v1/projects/p", "etag": "1", "createdAt": "2026-01-01T00:00:00Z"}`,
			want:   "does not match the document"},
		{name: "an error off the error shape", method: "GET", path: "/v1/projects/p", status: 404,
			answer: `{"message": "no"}`, want: "does not match the document"},
		{name: "a request the document refuses, accepted", method: "PUT", path: "/v1/projects/p/members/u", status: 201,
			body:   `{"role": 7}`,
			answer: `{"name": "u", "id": "/v1/projects/p/members/u", "etag": "1", "role": "viewer", "createdAt": "2026-01-01T00:00:00Z"}`,
			want:   "the document refuses the request"},
		{name: "an answer that matches", method: "GET", path: "/v1/projects/p", status: 200,
			answer: `{"name": "p", "id": "/v1/projects/p", "etag": "1", "createdAt": "2026-01-01T00:00:00Z"}`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c := &complaints{TB: t}
			h := validateOpenAPI(c, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Content-Type", "application/json")
				w.WriteHeader(tc.status)
				io.WriteString(w, tc.answer)
			}))
			var rd io.Reader
			if tc.body != "" {
				rd = strings.NewReader(tc.body)
			}
			req := httptest.NewRequest(tc.method, tc.path, rd)
			if tc.body != "" {
				req.Header.Set("Content-Type", "application/json")
			}
			h.ServeHTTP(httptest.NewRecorder(), req)
			got := strings.Join(c.msgs, "\n")
			if tc.want == "" && got != "" || !strings.Contains(got, tc.want) {
				t.Errorf("reported %q, want %q", got, tc.want)
			}
		})
	}
}
