package server_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	v1 "kiln.dev/kiln/api/v1"
	"kiln.dev/kiln/internal/auth"
	"kiln.dev/kiln/internal/distro"
	"kiln.dev/kiln/internal/plan"
	"kiln.dev/kiln/internal/provider"
	"kiln.dev/kiln/internal/provider/edge"
	"kiln.dev/kiln/internal/provider/local"
	"kiln.dev/kiln/internal/provider/sim"
	"kiln.dev/kiln/internal/server"
	"kiln.dev/kiln/internal/store"
	"kiln.dev/kiln/internal/store/sqlite"
)

var update = flag.Bool("update", false, "rewrite the golden files under testdata")

const token = "test-token"

// testSteps stands in for the backend's plan; edge clusters get theirs.
func testSteps(kind string, spec *v1.ClusterSpec) []string {
	if spec.Provider == "edge" {
		return plan.StepsFor(kind, true)
	}
	switch kind {
	case v1.KindDelete:
		return []string{"delete-machines", "delete-network"}
	default:
		return []string{"validate-dynamic", "ensure-network", "ensure-control-plane-machines"}
	}
}

// testProviders are the real local and sim providers. The server only asks
// them what they offer (no backend runs here), so the local provider's
// machine command is never called.
func testProviders(t testing.TB) provider.Registry {
	t.Helper()
	l, err := local.New(local.Options{Dir: t.TempDir(), Versions: distro.LocalVersions(), Command: func(local.Machine) (*exec.Cmd, error) {
		return nil, errors.New("server tests start no machines")
	}})
	if err != nil {
		t.Fatal(err)
	}
	return provider.Registry{"local": l, "sim": sim.New(), "edge": edge.Edge{Versions: distro.Versions()}}
}

type harness struct {
	t     testing.TB
	srv   *httptest.Server
	s     *server.Server
	store store.Store
	logs  *logBuffer
}

// newHarness runs the server over a real SQLite store on loopback. edit
// changes the options before New. t may be a fuzz target's *testing.F:
// one harness serves every input of a fuzz run.
func newHarness(t testing.TB, edit func(*server.Options)) *harness {
	t.Helper()
	st, err := sqlite.Open(t.Context(), filepath.Join(t.TempDir(), "kiln.db"))
	if err != nil {
		t.Fatalf("open store: %v", err)
	}
	t.Cleanup(func() { st.Close() })
	if err := auth.EnsureOwnerToken(t.Context(), st, "admin", token); err != nil {
		t.Fatal(err)
	}
	logs := &logBuffer{}
	opts := server.Options{
		Store:     st,
		Logger:    slog.New(slog.NewTextHandler(logs, nil)),
		Steps:     testSteps,
		Providers: testProviders(t),
	}
	if edit != nil {
		edit(&opts)
	}
	s := server.New(opts)
	srv := httptest.NewServer(validateOpenAPI(t, s))
	t.Cleanup(srv.Close)
	return &harness{t: t, srv: srv, s: s, store: st, logs: logs}
}

// response is what a test looks at.
type response struct {
	status int
	header http.Header
	body   []byte
}

func (r response) errorBody(t testing.TB) v1.Error {
	t.Helper()
	var e v1.ErrorResponse
	if err := json.Unmarshal(r.body, &e); err != nil {
		t.Fatalf("error body %q: %v", r.body, err)
	}
	return e.Error
}

func (r response) decode(t testing.TB, v any) {
	t.Helper()
	if err := json.Unmarshal(r.body, v); err != nil {
		t.Fatalf("decode %q: %v", r.body, err)
	}
}

// do sends a request with the test token; headers are "Name: value" pairs
// that override the defaults ("Authorization:" with no value drops it).
func (h *harness) do(method, path, body string, headers ...string) response {
	h.t.Helper()
	r, err := h.send(method, path, body, headers...)
	if err != nil {
		h.t.Fatal(err)
	}
	return r
}

// send is do for any goroutine: it returns its error.
func (h *harness) send(method, path, body string, headers ...string) (response, error) {
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequestWithContext(h.t.Context(), method, h.srv.URL+path, rd)
	if err != nil {
		return response{}, err
	}
	req.Header.Set("Authorization", "Bearer "+token)
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	for _, hv := range headers {
		k, v, _ := strings.Cut(hv, ":")
		v = strings.TrimSpace(v)
		if k == "Content-Length" && v == "" {
			// Send the body chunked, its length unknown.
			req.ContentLength = -1
			req.Body = io.NopCloser(io.MultiReader(strings.NewReader(body)))
			req.GetBody = nil
			continue
		}
		if v == "" {
			req.Header.Del(k)
		} else {
			req.Header.Set(k, v)
		}
	}
	resp, err := h.srv.Client().Do(req)
	if err != nil {
		return response{}, fmt.Errorf("%s %s: %w", method, path, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return response{}, fmt.Errorf("%s %s: read body: %w", method, path, err)
	}
	return response{status: resp.StatusCode, header: resp.Header, body: b}, nil
}

// must sends a request and fails the test unless the status is want.
func (h *harness) must(want int, method, path, body string, headers ...string) response {
	h.t.Helper()
	r := h.do(method, path, body, headers...)
	if r.status != want {
		h.t.Fatalf("%s %s: status %d, want %d; body %s", method, path, r.status, want, r.body)
	}
	return r
}

func (h *harness) project(name string) {
	h.t.Helper()
	h.must(http.StatusCreated, "PUT", "/v1/projects/"+name, `{}`)
}

// createCluster creates a cluster and returns its body and operation id.
func (h *harness) createCluster(project, name, body string) (v1.Cluster, string) {
	h.t.Helper()
	r := h.must(http.StatusCreated, "PUT", "/v1/projects/"+project+"/clusters/"+name, body)
	var cl v1.Cluster
	r.decode(h.t, &cl)
	return cl, cl.Status.CurrentOperation
}

// claim takes the cluster's lease as a backend would.
func (h *harness) claim() *store.Cluster {
	h.t.Helper()
	cl, err := h.store.ClaimCluster(h.t.Context(), "test-worker", time.Minute)
	if err != nil {
		h.t.Fatalf("claim: %v", err)
	}
	return cl
}

// finish drives the claimed cluster's operation to a terminal status.
func (h *harness) finish(cl *store.Cluster, opID, status string, edit func(*store.Cluster)) {
	h.t.Helper()
	ctx := h.t.Context()
	op, err := h.store.GetOperation(ctx, opID)
	if err != nil {
		h.t.Fatal(err)
	}
	now := time.Now().UTC()
	op.Status = status
	op.EndTime = &now
	for i := range op.Steps {
		op.Steps[i].State = v1.StepSucceeded
	}
	cl.Status.ProvisioningState = v1.StateSucceeded
	if status == v1.OpFailed {
		op.Steps[0].State = v1.StepFailed
		op.Error = &v1.Error{Code: v1.CodeProviderError, Message: "the machine did not boot"}
		cl.Status.ProvisioningState = v1.StateFailed
	}
	cl.Status.CurrentOperation = ""
	if edit != nil {
		edit(cl)
	}
	if err := h.store.FinishOperation(ctx, cl, op, cl.Lease.Fence(), false); err != nil {
		h.t.Fatalf("finish: %v", err)
	}
}

// golden compares a JSON body, indented, with testdata/<name>.golden.
func golden(t *testing.T, name string, body []byte) {
	t.Helper()
	var buf bytes.Buffer
	if err := json.Indent(&buf, bytes.TrimSpace(body), "", "  "); err != nil {
		t.Fatalf("indent %q: %v", body, err)
	}
	buf.WriteByte('\n')
	path := filepath.Join("testdata", name+".golden")
	if *update {
		if err := os.MkdirAll("testdata", 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, buf.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run with -update to create it)", err)
	}
	if diff := cmp.Diff(string(want), buf.String()); diff != "" {
		t.Errorf("%s mismatch (-want +got):\n%s", path, diff)
	}
}

// logBuffer collects log lines from concurrent handlers.
type logBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (l *logBuffer) Write(b []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.Write(b)
}

func (l *logBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.String()
}
