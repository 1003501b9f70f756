package console_test

import (
	"bufio"
	"context"
	"encoding/json"
	"encoding/pem"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/cenkalti/backoff/v5"

	"golang.org/x/net/html"

	"kiln.dev/kiln/api/client"
	v1 "kiln.dev/kiln/api/v1"
	"kiln.dev/kiln/internal/auth"
	"kiln.dev/kiln/internal/cli"
	"kiln.dev/kiln/internal/console"
	"kiln.dev/kiln/internal/distro"
	"kiln.dev/kiln/internal/gateway"
	"kiln.dev/kiln/internal/oidc"
	"kiln.dev/kiln/internal/plan"
	"kiln.dev/kiln/internal/provider"
	"kiln.dev/kiln/internal/provider/edge"
	"kiln.dev/kiln/internal/provider/local"
	"kiln.dev/kiln/internal/provider/sim"
	"kiln.dev/kiln/internal/server"
	"kiln.dev/kiln/internal/store"
	"kiln.dev/kiln/internal/store/sqlite"
	"kiln.dev/kiln/internal/worker"
	"kiln.dev/kiln/test/waitfor"
)

const ownerToken = "kiln_test-owner-token"

// env is kilnd's frontend (the API and the console over one real SQLite
// store) on loopback TLS; with a backend, a worker runs the real plan with
// the sim provider (and the edge provider) as kilnd's backend does, without
// one operations stay as the API wrote them.
type env struct {
	t     *testing.T
	srv   *httptest.Server
	store store.Store
	api   *client.Client // the owner's
}

// kiln runs the CLI in process against the env's server as its owner
// and returns what it printed; a failure fails the test.
func (e *env) kiln(args ...string) string {
	e.t.Helper()
	dir := e.t.TempDir()
	ca := filepath.Join(dir, "ca.crt")
	if err := os.WriteFile(ca, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: e.srv.Certificate().Raw}), 0o600); err != nil {
		e.t.Fatal(err)
	}
	var out, errs strings.Builder
	cmd := cli.New(strings.NewReader(""), &out, &errs, []string{"HOME=" + dir, "KILN_CONFIG=" + filepath.Join(dir, "config.json")})
	cmd.SetArgs(append([]string{"--server", e.srv.URL, "--token", ownerToken, "--ca-file", ca}, args...))
	if err := cmd.ExecuteContext(e.t.Context()); err != nil {
		e.t.Fatalf("kiln %s: %v: %s", strings.Join(args, " "), err, errs.String())
	}
	return out.String()
}

func newEnv(t *testing.T, backend bool) *env {
	t.Helper()
	return newEnvWith(t, backend, nil)
}

// newEnvWith is newEnv whose kilnd trusts the identity providers of v
// (nil: none).
func newEnvWith(t *testing.T, backend bool, v *oidc.Verifier) *env {
	t.Helper()
	st, err := sqlite.Open(t.Context(), filepath.Join(t.TempDir(), "kiln.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	if err := auth.EnsureOwnerToken(t.Context(), st, "admin", ownerToken); err != nil {
		t.Fatal(err)
	}
	l, err := local.New(local.Options{Dir: t.TempDir(), Versions: distro.LocalVersions(), Command: func(local.Machine) (*exec.Cmd, error) {
		return nil, errors.New("console tests start no machines")
	}})
	if err != nil {
		t.Fatal(err)
	}
	providers := provider.Registry{"local": l, "sim": sim.New(), "edge": edge.Edge{Versions: distro.Versions()}}
	// The agent gateway only makes and keeps activation material here: no
	// agent connects.
	gw := gateway.New(gateway.Options{Store: st.(gateway.Store), Controller: "https://agents.kiln.invalid:7443"})
	api := server.New(server.Options{Store: st, Providers: providers, Activation: gw, OIDC: v,
		Steps: func(kind string, spec *v1.ClusterSpec) []string {
			return plan.StepsFor(kind, providers.HostsJoin(spec.Provider))
		}})
	if backend {
		runBackend(t, st, providers)
	}
	con := console.New(console.Options{API: api, Providers: providers.Catalog(), HostsJoin: providers.HostsJoin,
		InstallCommand: func(d string) string { return server.InstallCommand(d, "/opt/kiln-kube") },
		InstallerArchs: server.InstallerArchs, DefaultVersion: server.DefaultKubernetesVersion,
		LiveInterval: 100 * time.Millisecond, OIDC: v})
	srv := httptest.NewTLSServer(root(api, con))
	t.Cleanup(srv.Close)
	t.Cleanup(con.Stop)
	e := &env{t: t, srv: srv, store: st}
	e.api = client.New(srv.URL, ownerToken, client.WithHTTPClient(srv.Client()))
	if _, err := e.api.CreateProject(t.Context(), &v1.Project{Name: "default"}); err != nil {
		t.Fatal(err)
	}
	return e
}

// root serves the API at its paths and the console beside it, as kilnd
// does.
func root(api, con http.Handler) http.Handler {
	mux := http.NewServeMux()
	for _, p := range server.Paths {
		mux.Handle(p, api)
	}
	mux.Handle("/", con)
	return mux
}

// user makes a user with role in project default and returns a token of
// theirs.
func (e *env) user(name, role string) string {
	e.t.Helper()
	ctx := e.t.Context()
	if _, err := e.api.CreateUser(ctx, &v1.User{Name: name}); err != nil {
		e.t.Fatal(err)
	}
	if _, err := e.api.PutMember(ctx, "default", &v1.Member{Name: name, Role: role}); err != nil {
		e.t.Fatal(err)
	}
	tok, err := e.api.CreateToken(ctx, client.TokenOwner{User: name}, v1.TokenRequest{})
	if err != nil {
		e.t.Fatal(err)
	}
	return tok.Value
}

// browser is a cookie-keeping client that does not follow redirects, so
// that tests see them.
type browser struct {
	e  *env
	hc *http.Client
}

func (e *env) browser() *browser {
	jar, _ := cookiejar.New(nil)
	hc := *e.srv.Client() // a copy: each browser its own cookies
	hc.Jar = jar
	hc.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	return &browser{e: e, hc: &hc}
}

// page is a response as a test reads it.
type page struct {
	status int
	header http.Header
	body   string
	// landed is where a refused form's 303 led (the page then is what
	// the browser shows there): the address bar after the refusal.
	landed string
}

// stream opens the live stream at path (for 30 s at most) and returns its
// events; the test's end closes it.
func (b *browser) stream(path string) <-chan event {
	t := b.e.t
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	t.Cleanup(cancel)
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, b.e.srv.URL+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := b.hc.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { resp.Body.Close() })
	return readEvents(resp.Body)
}

func (b *browser) get(path string) page {
	b.e.t.Helper()
	return b.send(http.MethodGet, path, nil)
}

// post sends a form as the page's own would: from this origin.
func (b *browser) post(path string, form url.Values) page {
	b.e.t.Helper()
	return b.send(http.MethodPost, path, form)
}

func (b *browser) send(method, path string, form url.Values) page {
	b.e.t.Helper()
	var body io.Reader
	if form != nil {
		body = strings.NewReader(form.Encode())
	}
	req, err := http.NewRequestWithContext(b.e.t.Context(), method, b.e.srv.URL+path, body)
	if err != nil {
		b.e.t.Fatal(err)
	}
	if form != nil {
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		req.Header.Set("Origin", b.e.srv.URL)
		req.Header.Set("Sec-Fetch-Site", "same-origin")
	}
	resp, err := b.hc.Do(req)
	if err != nil {
		b.e.t.Fatal(err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		b.e.t.Fatal(err)
	}
	// A refused form goes back to its page, which shows the refusal (with
	// its status): follow it, as a browser does.
	if loc := resp.Header.Get("Location"); resp.StatusCode == http.StatusSeeOther && slices.ContainsFunc(resp.Cookies(),
		func(c *http.Cookie) bool { return c.Name == "kiln_refusal" && c.Value != "" }) {
		p := b.send(http.MethodGet, loc, nil)
		p.landed = loc
		return p
	}
	return page{status: resp.StatusCode, header: resp.Header, body: string(data)}
}

// login signs in with token and returns the session's CSRF token.
func (b *browser) login(token string) string {
	b.e.t.Helper()
	p := b.post("/login", url.Values{"token": {token}, "next": {"/clusters"}})
	if p.status != http.StatusSeeOther || p.header.Get("Location") != "/clusters" {
		b.e.t.Fatalf("login: %d to %q: %s", p.status, p.header.Get("Location"), p.body)
	}
	return b.csrf()
}

var csrfRE = regexp.MustCompile(`name="csrf" value="([0-9a-f]+)"`)

// csrf reads the form token from the clusters page.
func (b *browser) csrf() string {
	b.e.t.Helper()
	m := csrfRE.FindStringSubmatch(b.get("/clusters").body)
	if m == nil {
		b.e.t.Fatal("no CSRF token on the clusters page")
	}
	return m[1]
}

// doc parses a page (it must be HTML).
func (p page) doc(t *testing.T) *html.Node {
	t.Helper()
	n, err := html.Parse(strings.NewReader(p.body))
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// postForms lists the actions of a page's POST forms.
func (p page) postForms(t *testing.T) []string {
	t.Helper()
	var out []string
	for n := range p.doc(t).Descendants() {
		if n.Type == html.ElementNode && n.Data == "form" && attr(n, "method") == "post" {
			out = append(out, attr(n, "action"))
		}
	}
	return out
}

// byID returns the text of the element with id, and whether there is one.
func (p page) byID(t *testing.T, id string) (string, bool) {
	t.Helper()
	for n := range p.doc(t).Descendants() {
		if n.Type == html.ElementNode && attr(n, "id") == id {
			var b strings.Builder
			for d := range n.Descendants() {
				if d.Type == html.TextNode {
					b.WriteString(d.Data)
				}
			}
			return strings.Join(strings.Fields(b.String()), " "), true
		}
	}
	return "", false
}

func attr(n *html.Node, key string) string {
	for _, a := range n.Attr {
		if a.Key == key {
			return a.Val
		}
	}
	return ""
}

func (e *env) createCluster(name string, spec v1.ClusterSpec) {
	e.t.Helper()
	if _, _, err := e.api.CreateCluster(e.t.Context(), "default", &v1.Cluster{Name: name, Spec: spec}); err != nil {
		e.t.Fatal(err)
	}
}

func (e *env) cluster(name string) *v1.Cluster {
	e.t.Helper()
	cl, err := e.api.GetCluster(e.t.Context(), "default", name)
	if err != nil {
		e.t.Fatal(err)
	}
	return cl
}

// runBackend runs a worker with the real plan until the test ends.
func runBackend(t *testing.T, st store.Store, providers provider.Registry) {
	r := plan.NewRunner(plan.Options{
		Store: st, Providers: providers, Logger: slog.New(slog.DiscardHandler),
		NewBackOff:  func() backoff.BackOff { return &backoff.ZeroBackOff{} },
		MaxAttempts: 3, CancelPoll: 10 * time.Millisecond, NodePoll: 10 * time.Millisecond,
		Drain: plan.Drain{Signal: worker.Draining, Err: worker.ErrDraining},
	})
	w := worker.New(worker.Options{Store: st, Runner: r, Poll: 10 * time.Millisecond, Logger: slog.New(slog.DiscardHandler)})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); w.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
}

// stepRunning waits until the operation's step is Running.
func (e *env) stepRunning(opID, step string) {
	e.t.Helper()
	waitfor.Cond(e.t, "step "+step+" of "+opID+" to be Running", time.Minute, func() (bool, error) {
		op, err := e.api.GetOperation(e.t.Context(), opID)
		if err != nil {
			return false, err
		}
		return slices.ContainsFunc(op.Properties.Steps, func(st v1.Step) bool {
			return st.Name == step && st.State == v1.StepRunning
		}), nil
	})
}

// wait waits for cluster's current operation to end and returns it.
func (e *env) wait(cluster string) *v1.Operation {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(e.t.Context(), time.Minute)
	defer cancel()
	op, err := e.api.WaitOperation(ctx, e.cluster(cluster).Status.CurrentOperation, nil)
	if err != nil {
		e.t.Fatal(err)
	}
	return op
}

func (e *env) putNode(cluster, name, state string, prechecks ...v1.PrecheckResult) {
	e.t.Helper()
	n := &store.Node{Project: "default", Node: v1.Node{Name: name, Cluster: cluster, State: state, Prechecks: prechecks,
		Address: "10.0.0.5",
		Facts: &v1.NodeFacts{Hostname: strings.TrimPrefix(name, cluster+"-"), OS: "debian 12", Arch: "amd64", CPUs: 4, MemoryMiB: 8192,
			Interfaces: []v1.Interface{{Name: "eth0", Addresses: []string{"10.0.0.5/24"}}}}}}
	if err := e.store.PutNode(e.t.Context(), n, store.Cond{}); err != nil {
		e.t.Fatal(err)
	}
}

// event is one server-sent event; fragments holds a "fragments" event's.
type event struct {
	name      string
	data      string
	fragments map[string]string
}

// readEvents reads server-sent events until r ends.
func readEvents(r io.Reader) <-chan event {
	out := make(chan event)
	go func() {
		defer close(out)
		sc := bufio.NewScanner(r)
		sc.Buffer(make([]byte, 1<<20), 1<<24)
		var ev event
		for sc.Scan() {
			line := sc.Text()
			switch {
			case strings.HasPrefix(line, "event: "):
				ev.name = strings.TrimPrefix(line, "event: ")
			case strings.HasPrefix(line, "data: "):
				ev.data = strings.TrimPrefix(line, "data: ")
			case line == "" && ev.name != "":
				if ev.name == "fragments" {
					_ = json.Unmarshal([]byte(ev.data), &ev.fragments)
				}
				out <- ev
				ev = event{}
			}
		}
	}()
	return out
}
