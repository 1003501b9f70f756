package server_test

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"

	v1 "kiln.dev/kiln/api/v1"
	"kiln.dev/kiln/internal/diagnose"
	"kiln.dev/kiln/internal/server"
	"kiln.dev/kiln/internal/store"
)

// What FuzzAPI chooses from by index. Append only: the seed corpus in
// testdata/fuzz/FuzzAPI names entries by their index.
var (
	fuzzMethods      = []string{"GET", "PUT", "PATCH", "POST", "DELETE"}
	fuzzContentTypes = []string{"application/json", "", "application/merge-patch+json",
		"text/plain", "application/json; charset=utf-8"}
	// fuzzPaths has a path for every route, in the world fuzzWorld makes.
	fuzzPaths = []string{
		"/v1/projects/p/clusters/c", // 0: the route with the most to decode
		"/healthz",
		"/readyz",
		"/metrics",
		"/openapi.json",
		"/v1/whoami",
		"/v1/fleet",
		"/v1/cost",
		"/debug/pprof/goroutine",
		"/v1/users",
		"/v1/users/u",
		"/v1/users/u/tokens",
		"/v1/users/u/tokens/tok_0000000000000000",
		"/v1/audit",
		"/v1/projects",
		"/v1/projects/p",
		"/v1/projects/p/audit",
		"/v1/operations/{operation}",
		"/v1/projects/p/clusters",
		"/v1/projects/p/clusters/c/kubeconfig",
		"/v1/projects/p/clusters/c/credential",
		"/v1/projects/p/clusters/c/admin-kubeconfig",
		"/v1/projects/p/clusters/c/activation",
		"/v1/projects/p/clusters/c/nodes",
		"/v1/projects/p/clusters/c/nodes/n",
		"/v1/projects/p/clusters/c/nodes/n/approve",
		"/v1/projects/p/clusters/c/nodes/n/configure",
		"/v1/projects/p/clusters/c/nodes/n/logs",
		"/v1/projects/p/clusters/c/operations",
		"/v1/projects/p/clusters/c/events",
		"/v1/projects/p/cloudaccounts",
		"/v1/projects/p/cloudaccounts/ca",
		"/v1/projects/p/profiles",
		"/v1/projects/p/profiles/pr",
		"/v1/projects/p/profiles/pr/versions/1",
		"/v1/projects/p/profiles/pr/versions/1/publish",
		"/v1/projects/p/members",
		"/v1/projects/p/members/u",
		"/v1/projects/p/serviceaccounts",
		"/v1/projects/p/serviceaccounts/sa",
		"/v1/projects/p/serviceaccounts/sa/tokens",
		"/v1/projects/p/serviceaccounts/sa/tokens/tok_0000000000000000",
		"/v1/projects/p/clusters/d", // 34: a cluster that does not exist
		"/v1/projects/p/clusters/c/validate",
		"/v1/projects/p/clusters/c/provision",
		"/v1/projects/p/clusters/c/reset",
		"/v1/projects/p/clusters/c/hibernate",
		"/v1/projects/p/clusters/c/jobs",
		"/v1/projects/p/clusters/c/jobs/j",
		"/v1/projects/p/clusters/c/jobs/j/logs",
		"/v1/projects/p/clusters/c/resume",
		"/v1/projects/p/clusters/c/reconcile",
		"/v1/projects/p/clusters/c/installer",
		"/v1/projects/p/clusters/c/retry",
		"/v1/operations/{operation}/cancel",
		"/v1/projects/p/clusters/c/upgrades",
		"/v1/projects/p/secrets",
		"/v1/projects/p/secrets/s",
		"/v1/projects/p/clusters/c/rotate-certificates",
		"/v1/projects/p/clusters/c/diagnostics",
		"/v1/projects/p/clusters/c/diagnostics/d",
		"/v1/projects/p/clusters/c/diagnostics/d/bundle",
		"/v1/projects/p/clusters/c/backups",
		"/v1/projects/p/clusters/c/backups/b",
		"/v1/projects/p/clusters/c/restore",
		"/v1/auth/oidc",
		"/v1/projects/p/groupbindings",
		"/v1/projects/p/groupbindings/eng",
	}
)

// FuzzAPI drives the whole handler in process, over one harness (SQLite)
// for the run, with a fuzzed method, route, content type and body, as the
// owner. No answer is a 5xx, every error answer is the error shape
// with its code in X-Kiln-Error-Code, and every answer matches the OpenAPI
// document (validateOpenAPI). Inputs change the store, so an input
// that fails may need the ones before it; the failure message has the
// request.
func FuzzAPI(f *testing.F) {
	h := newHarness(f, func(o *server.Options) {
		o.Logger = slog.New(slog.DiscardHandler)
		// As kilnd's frontends do: a bundle of what the store holds (the
		// sim cluster has no Kubernetes to ask).
		st := o.Store.(diagnose.Store)
		o.Diagnose = func(ctx context.Context, cl *store.Cluster, reason string) (*store.Diagnostics, error) {
			return diagnose.Gather(ctx, st, diagnose.Request{Cluster: cl, Operation: cl.Status.CurrentOperation, Reason: reason})
		}
	})
	paths := fuzzWorld(h)
	requireEveryRoute(f, h, paths)
	f.Fuzz(func(t *testing.T, method, path, contentType uint8, body []byte) {
		req := httptest.NewRequestWithContext(t.Context(), pick(fuzzMethods, method), pick(paths, path), bytes.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+token)
		if ct := pick(fuzzContentTypes, contentType); ct != "" {
			req.Header.Set("Content-Type", ct)
		}
		rec := httptest.NewRecorder()
		validateOpenAPI(t, h.s).ServeHTTP(rec, req)
		checkAnswer(t, req, body, rec)
	})
}

func pick[T any](from []T, i uint8) T { return from[int(i)%len(from)] }

// fuzzWorld makes one of everything fuzzPaths names and returns the paths
// with the operation's id filled in.
func fuzzWorld(h *harness) []string {
	h.project("p")
	_, opID := h.createCluster("p", "c", minimal)
	h.putNode("n", v1.NodeDiscovered)
	h.must(http.StatusCreated, "PUT", "/v1/users/u", `{}`)
	h.must(http.StatusCreated, "PUT", "/v1/projects/p/members/u", `{"role": "viewer"}`)
	h.must(http.StatusCreated, "PUT", "/v1/projects/p/serviceaccounts/sa", `{"role": "viewer"}`)
	h.must(http.StatusCreated, "PUT", "/v1/projects/p/profiles/pr", `{"version": 1, "kubernetesVersion": "v1.36.3"}`)
	h.must(http.StatusCreated, "PUT", "/v1/projects/p/cloudaccounts/ca", `{"provider": "sim"}`)
	h.must(http.StatusCreated, "PUT", "/v1/projects/p/secrets/s", `{"data": {"password": "hunter22"}}`)
	paths := slices.Clone(fuzzPaths)
	for i, p := range paths {
		paths[i] = strings.Replace(p, "{operation}", opID, 1)
	}
	return paths
}

// requireEveryRoute fails when the server has a route fuzzPaths lacks.
func requireEveryRoute(f *testing.F, h *harness, paths []string) {
	for _, rt := range h.s.Routes() {
		_, pattern, _ := strings.Cut(rt.Pattern, " ")
		mux := http.NewServeMux()
		mux.HandleFunc(pattern, func(http.ResponseWriter, *http.Request) {})
		if !slices.ContainsFunc(paths, func(p string) bool {
			_, matched := mux.Handler(httptest.NewRequest("GET", p, nil))
			return matched == pattern
		}) {
			f.Errorf("route %s has no path in fuzzPaths: append one", rt.Pattern)
		}
	}
}

// checkAnswer fails on a 5xx, and on an error answer that is not the
// error shape.
func checkAnswer(t *testing.T, req *http.Request, body []byte, rec *httptest.ResponseRecorder) {
	t.Helper()
	request := func() string {
		return req.Method + " " + req.URL.Path + " (Content-Type " + req.Header.Get("Content-Type") + "): " + truncate(body)
	}
	if rec.Code >= 500 {
		t.Fatalf("%s: status %d: %s", request(), rec.Code, rec.Body)
	}
	if rec.Code < 400 {
		return
	}
	var e v1.ErrorResponse
	dec := json.NewDecoder(rec.Body)
	dec.DisallowUnknownFields()
	if err := dec.Decode(&e); err != nil {
		t.Fatalf("%s: status %d with a body that is not the error shape (%v)", request(), rec.Code, err)
	}
	if e.Error.Code == "" || e.Error.Message == "" {
		t.Fatalf("%s: status %d with error %+v: no code or no message", request(), rec.Code, e.Error)
	}
	if got := rec.Header().Get("X-Kiln-Error-Code"); got != e.Error.Code {
		t.Fatalf("%s: X-Kiln-Error-Code %q, body's code %q", request(), got, e.Error.Code)
	}
}

func truncate(b []byte) string {
	const most = 512
	if len(b) > most {
		return string(b[:most]) + "..."
	}
	return string(b)
}
