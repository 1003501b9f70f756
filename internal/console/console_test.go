package console_test

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/url"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/cenkalti/backoff/v5"

	"golang.org/x/net/html"

	v1 "kiln.dev/kiln/api/v1"
	"kiln.dev/kiln/internal/auth"
	"kiln.dev/kiln/internal/console"
	"kiln.dev/kiln/internal/gateway"
	"kiln.dev/kiln/internal/plan"
	"kiln.dev/kiln/internal/provider"
	"kiln.dev/kiln/internal/provider/edge"
	"kiln.dev/kiln/internal/provider/local"
	"kiln.dev/kiln/internal/provider/sim"
	"kiln.dev/kiln/internal/server"
	"kiln.dev/kiln/internal/store"
	"kiln.dev/kiln/internal/store/sqlite"
	"kiln.dev/kiln/internal/worker"
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
	api   *v1.Client // the owner's
}

func newEnv(t *testing.T, backend bool) *env {
	t.Helper()
	st, err := sqlite.Open(t.Context(), filepath.Join(t.TempDir(), "kiln.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	if err := auth.EnsureOwnerToken(t.Context(), st, "admin", ownerToken); err != nil {
		t.Fatal(err)
	}
	l, err := local.New(local.Options{Dir: t.TempDir(), Command: func(local.Machine) (*exec.Cmd, error) {
		return nil, errors.New("console tests start no machines")
	}})
	if err != nil {
		t.Fatal(err)
	}
	providers := provider.Registry{"local": l, "sim": sim.New(), "edge": edge.Edge{}}
	// The agent gateway only makes and keeps activation material here: no
	// agent connects.
	gw := gateway.New(gateway.Options{Store: st.(gateway.Store), Controller: "https://agents.kiln.invalid:7443"})
	api := server.New(server.Options{Store: st, Providers: providers, Activation: gw,
		Steps: func(kind string, spec *v1.ClusterSpec) []string {
			return plan.StepsFor(kind, providers.HostsJoin(spec.Provider))
		}})
	if backend {
		runBackend(t, st, providers)
	}
	con := console.New(console.Options{API: api, Providers: providers.Catalog(), HostsJoin: providers.HostsJoin,
		InstallCommand: func(d string) string { return server.InstallCommand(d, "/opt/kiln-kube") },
		LiveInterval:   100 * time.Millisecond})
	srv := httptest.NewTLSServer(con.Root())
	t.Cleanup(srv.Close)
	t.Cleanup(con.Stop)
	e := &env{t: t, srv: srv, store: st}
	e.api = v1.NewClient(srv.URL, ownerToken, v1.WithHTTPClient(srv.Client()))
	if _, err := e.api.CreateProject(t.Context(), &v1.Project{Name: "default"}); err != nil {
		t.Fatal(err)
	}
	return e
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
	tok, err := e.api.CreateToken(ctx, v1.TokenOwner{User: name}, v1.TokenRequest{})
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
	deadline := time.Now().Add(time.Minute)
	for {
		op, err := e.api.GetOperation(e.t.Context(), opID)
		if err != nil {
			e.t.Fatal(err)
		}
		for _, st := range op.Properties.Steps {
			if st.Name == step && st.State == v1.StepRunning {
				return
			}
		}
		if time.Now().After(deadline) {
			e.t.Fatalf("step %s of %s is not Running: %+v", step, opID, op.Properties.Steps)
		}
		time.Sleep(10 * time.Millisecond)
	}
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

func TestSignInRequired(t *testing.T) {
	e := newEnv(t, false)
	b := e.browser()
	for _, path := range []string{"/", "/clusters", "/clusters/new", "/projects/default/clusters/x",
		"/projects/default/clusters/x/nodes", "/projects/default/clusters/x/installer"} {
		p := b.get(path)
		if p.status != http.StatusSeeOther || !strings.HasPrefix(p.header.Get("Location"), "/login?next=") {
			t.Errorf("GET %s signed out: %d to %q, want 303 to /login", path, p.status, p.header.Get("Location"))
		}
	}
	// A form without a session changes nothing: every action answers 401.
	e.createCluster("c1", v1.ClusterSpec{Provider: "edge"})
	e.putNode("c1", "c1-host1", v1.NodeDiscovered)
	etag := e.cluster("c1").ETag
	for _, path := range []string{"/clusters/new", "/logout", "/projects/default/clusters/c1/scale", "/projects/default/clusters/c1/pools",
		"/projects/default/clusters/c1/pools/default/remove", "/projects/default/clusters/c1/upgrade",
		"/projects/default/clusters/c1/provision", "/projects/default/clusters/c1/reset", "/projects/default/clusters/c1/retry",
		"/projects/default/clusters/c1/cancel", "/projects/default/clusters/c1/delete",
		"/projects/default/clusters/c1/nodes/c1-host1/approve", "/projects/default/clusters/c1/nodes/c1-host1/configure"} {
		form := url.Values{"name": {"x"}, "project": {"default"}, "size": {"1"}, "confirm": {"c1"}, "role": {"worker"}}
		if p := b.post(path, form); p.status != http.StatusUnauthorized {
			t.Errorf("POST %s signed out: %d, want 401", path, p.status)
		}
	}
	for _, path := range []string{"/projects/default/clusters/c1/kubeconfig", "/projects/default/clusters/c1/installer/download?arch=amd64",
		"/projects/default/clusters/c1/live?view=overview", "/clusters/live", "/projects/default/clusters/c1/nodes/c1-host1/logs/live"} {
		if p := b.get(path); p.status != http.StatusSeeOther && p.status != http.StatusUnauthorized {
			t.Errorf("GET %s signed out: %d, want a redirect to sign in or 401", path, p.status)
		}
	}
	if cls, _ := e.api.ListClusters(t.Context(), "default"); len(cls) != 1 || e.cluster("c1").ETag != etag {
		t.Errorf("signed-out forms changed the clusters: %d of them", len(cls))
	}
	if n, _ := e.api.GetNode(t.Context(), "default", "c1", "c1-host1"); n.State != v1.NodeDiscovered {
		t.Errorf("a signed-out approve changed the node to %s", n.State)
	}
	// The login page and the static files are public, and hold no data.
	for _, path := range []string{"/login", "/static/console.css", "/static/console.js"} {
		if p := b.get(path); p.status != http.StatusOK {
			t.Errorf("GET %s: %d, want 200", path, p.status)
		}
	}
	// The API is where it was, with its own answers.
	if p := b.get("/v1/projects"); p.status != http.StatusUnauthorized || !strings.Contains(p.body, `"code":"Unauthorized"`) {
		t.Errorf("GET /v1/projects without a token: %d %s", p.status, p.body)
	}
	if p := b.get("/healthz"); p.status != http.StatusOK {
		t.Errorf("GET /healthz: %d", p.status)
	}
}

func TestPageNotFound(t *testing.T) {
	e := newEnv(t, false)
	b := e.browser()
	b.login(ownerToken)
	for _, path := range []string{"/nope", "/projects/default/clusters/missing", "/projects/default/clusters/missing/nodes",
		"/projects/nope/clusters/x"} {
		p := b.get(path)
		if p.status != http.StatusNotFound && p.status != http.StatusForbidden {
			t.Errorf("GET %s: %d, want 404 (or the API's 403 for a project one is not in)", path, p.status)
		}
		if !strings.Contains(p.header.Get("Content-Type"), "text/html") || !strings.Contains(p.body, `href="/clusters"`) {
			t.Errorf("GET %s: not a page leading back: %s", path, p.header.Get("Content-Type"))
		}
	}
}

func TestLogin(t *testing.T) {
	e := newEnv(t, false)
	b := e.browser()
	for _, tc := range []struct{ token, want string }{
		{"", "Paste an API token"},
		{"kiln_nope", "That token is not valid"},
	} {
		p := b.post("/login", url.Values{"token": {tc.token}})
		if p.status < 400 || !strings.Contains(p.body, tc.want) {
			t.Errorf("login with %q: %d, want an error saying %q", tc.token, p.status, tc.want)
		}
	}
	// A return path elsewhere is not followed.
	p := b.post("/login", url.Values{"token": {ownerToken}, "next": {"//evil.example/x"}})
	if p.status != http.StatusSeeOther || p.header.Get("Location") != "/clusters" {
		t.Fatalf("login: %d to %q, want /clusters", p.status, p.header.Get("Location"))
	}
	// The cookie is the session's own token: not the one typed in, and
	// out of reach of scripts and other sites.
	ck := p.header.Get("Set-Cookie")
	for _, want := range []string{"kiln_session=kiln_", "HttpOnly", "Secure", "SameSite=Strict"} {
		if !strings.Contains(ck, want) {
			t.Errorf("session cookie %q lacks %s", ck, want)
		}
	}
	if strings.Contains(ck, ownerToken) {
		t.Error("the session cookie holds the token typed in")
	}
	tokens, err := e.api.ListTokens(t.Context(), v1.TokenOwner{User: "admin"})
	if err != nil {
		t.Fatal(err)
	}
	i := slices.IndexFunc(tokens, func(tk v1.Token) bool { return tk.Description == "console session" })
	if i < 0 {
		t.Fatalf("no console session among the owner's tokens: %+v", tokens)
	}
	session := tokens[i]
	if got := b.get("/clusters"); got.status != http.StatusOK || !strings.Contains(got.body, "Signed in as") {
		t.Fatalf("clusters page after login: %d", got.status)
	}

	// Signing out revokes the session's token.
	csrf := b.csrf()
	if p := b.post("/logout", url.Values{"csrf": {csrf}}); p.status != http.StatusSeeOther {
		t.Fatalf("logout: %d", p.status)
	}
	tokens, _ = e.api.ListTokens(t.Context(), v1.TokenOwner{User: "admin"})
	for _, tk := range tokens {
		if tk.ID == session.ID && tk.RevokedAt == nil {
			t.Error("the session's token is not revoked after signing out")
		}
	}
	if p := b.get("/clusters"); p.status != http.StatusSeeOther {
		t.Errorf("clusters page after logout: %d, want a redirect to sign in", p.status)
	}

	// A service account's token does not open a session.
	if _, err := e.api.CreateServiceAccount(t.Context(), "default", &v1.ServiceAccount{Name: "ci", Role: v1.RoleOperator}); err != nil {
		t.Fatal(err)
	}
	sa, err := e.api.CreateToken(t.Context(), v1.TokenOwner{Project: "default", ServiceAccount: "ci"}, v1.TokenRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if p := e.browser().post("/login", url.Values{"token": {sa.Value}}); p.status != http.StatusForbidden || !strings.Contains(p.body, "service account") {
		t.Errorf("login with a service account's token: %d, want 403 saying why", p.status)
	}
}

func TestFormsNeedTheSessionsCSRFToken(t *testing.T) {
	e := newEnv(t, false)
	b := e.browser()
	csrf := b.login(ownerToken)
	form := url.Values{"project": {"default"}, "name": {"c1"}, "provider": {"sim"}, "controlPlane": {"1"}, "workers": {"1"}}
	if p := b.post("/clusters/new", form); p.status != http.StatusForbidden {
		t.Errorf("create without a CSRF token: %d, want 403", p.status)
	}
	form.Set("csrf", strings.Repeat("0", len(csrf)))
	if p := b.post("/clusters/new", form); p.status != http.StatusForbidden {
		t.Errorf("create with a wrong CSRF token: %d, want 403", p.status)
	}
	// A form posted from another site is refused whatever it carries.
	form.Set("csrf", csrf)
	req, _ := http.NewRequestWithContext(t.Context(), http.MethodPost, e.srv.URL+"/clusters/new", strings.NewReader(form.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("Origin", "https://evil.example")
	req.Header.Set("Sec-Fetch-Site", "cross-site")
	resp, err := b.hc.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusForbidden {
		t.Errorf("cross-site create: %d, want 403", resp.StatusCode)
	}
	if cls, _ := e.api.ListClusters(t.Context(), "default"); len(cls) != 0 {
		t.Fatalf("refused forms created %d clusters", len(cls))
	}
	if p := b.post("/clusters/new", form); p.status != http.StatusSeeOther {
		t.Errorf("create with the token: %d, want 303: %s", p.status, p.body)
	}
}

func TestCreateForm(t *testing.T) {
	e := newEnv(t, false)
	b := e.browser()
	csrf := b.login(ownerToken)
	p := b.get("/clusters/new")
	for _, id := range []string{"project", "name", "provider", "version", "controlPlane", "dedicated", "workers",
		"instanceType", "nodeApproval", "region", "cloudAccount", "labels"} {
		if _, ok := p.byID(t, id); !ok {
			t.Errorf("the create form has no field %s", id)
		}
	}
	// Each label names its field.
	for n := range p.doc(t).Descendants() {
		if n.Type == html.ElementNode && (n.Data == "input" || n.Data == "select" || n.Data == "textarea") &&
			attr(n, "type") != "hidden" && !strings.Contains(p.body, `for="`+attr(n, "id")+`"`) {
			t.Errorf("field %s has no label", attr(n, "id"))
		}
	}

	// The API's own messages, at the field at fault; nothing is created.
	for _, tc := range []struct {
		field, value, input, want string
	}{
		{"controlPlane", "2", "controlPlane", "1, 3 or 5"},
		{"provider", "nope", "provider", "nope"},
		{"name", "Bad_Name", "name", "DNS-1123"},
		{"workers", "many", "workers", "whole number"},
		{"labels", "nokey", "labels", "key=value"},
	} {
		form := url.Values{"csrf": {csrf}, "project": {"default"}, "name": {"c1"}, "provider": {"sim"},
			"controlPlane": {"1"}, "workers": {"1"}, "nodeApproval": {"auto"}}
		form.Set(tc.field, tc.value)
		p := b.post("/clusters/new", form)
		if p.status != http.StatusBadRequest {
			t.Errorf("%s=%q: %d, want 400", tc.field, tc.value, p.status)
		}
		msg, ok := p.byID(t, tc.input+"-error")
		if !ok || !strings.Contains(msg, tc.want) {
			t.Errorf("%s=%q: message at %s is %q, want one with %q", tc.field, tc.value, tc.input, msg, tc.want)
		}
		// What was typed is kept.
		if !strings.Contains(p.body, `value="`+tc.value+`"`) && tc.field != "provider" && tc.field != "labels" {
			t.Errorf("%s=%q: the form lost what was typed", tc.field, tc.value)
		}
	}
	// The API says the same about the control plane.
	_, _, apiErr := e.api.CreateCluster(t.Context(), "default", &v1.Cluster{Name: "c1", Spec: v1.ClusterSpec{Provider: "sim", ControlPlane: v1.ControlPlane{Size: 2}}})
	ae, ok := apiErr.(*v1.APIError)
	if !ok {
		t.Fatalf("API create with 2 control-plane nodes: %v", apiErr)
	}
	form := url.Values{"csrf": {csrf}, "project": {"default"}, "name": {"c1"}, "provider": {"sim"}, "controlPlane": {"2"}, "workers": {"1"}}
	if msg, _ := b.post("/clusters/new", form).byID(t, "controlPlane-error"); msg != ae.Err.Message {
		t.Errorf("console says %q, API says %q", msg, ae.Err.Message)
	}
	if cls, _ := e.api.ListClusters(t.Context(), "default"); len(cls) != 0 {
		t.Fatalf("refused forms created %d clusters", len(cls))
	}

	form = url.Values{"csrf": {csrf}, "project": {"default"}, "name": {"c1"}, "provider": {"sim"}, "controlPlane": {"3"},
		"dedicated": {"on"}, "workers": {"2"}, "nodeApproval": {"auto"}, "labels": {"team=a\nenv=dev"}}
	p = b.post("/clusters/new", form)
	if p.status != http.StatusSeeOther || p.header.Get("Location") != "/projects/default/clusters/c1" {
		t.Fatalf("create: %d to %q: %s", p.status, p.header.Get("Location"), p.body)
	}
	cl := e.cluster("c1")
	if s := cl.Spec; s.Provider != "sim" || s.ControlPlane.Size != 3 || !s.ControlPlane.Dedicated ||
		len(s.WorkerPools) != 1 || s.WorkerPools[0].Size != 2 || s.Labels["team"] != "a" || s.Labels["env"] != "dev" {
		t.Errorf("created spec %+v", s)
	}
	if got := b.get("/projects/default/clusters/c1"); !strings.Contains(got.body, "Creating cluster c1 (operation") {
		t.Error("the cluster page does not say what the create did")
	}
}

func TestClustersList(t *testing.T) {
	e := newEnv(t, false)
	e.createCluster("alpha", v1.ClusterSpec{Provider: "sim"})
	e.createCluster("beta", v1.ClusterSpec{Provider: "edge"})
	e.createCluster("gamma", v1.ClusterSpec{Provider: "local"})
	b := e.browser()
	b.login(ownerToken)
	rows := func(p page) []string {
		var out []string
		for n := range p.doc(t).Descendants() {
			if n.Type == html.ElementNode && n.Data == "tr" && attr(n, "data-cluster") != "" {
				out = append(out, attr(n, "data-cluster"))
			}
		}
		return out
	}
	p := b.get("/clusters")
	if got := rows(p); !slices.Equal(got, []string{"alpha", "beta", "gamma"}) {
		t.Errorf("clusters %v", got)
	}
	// State, provider, version, node counts and the running operation's percent.
	for _, want := range []string{"Creating", "sim", "edge", "v1.36.3", "0 + 0, 0 ready", `<progress max="100" value="0"`} {
		if !strings.Contains(p.body, want) {
			t.Errorf("the list does not show %q", want)
		}
	}
	if got := rows(b.get("/clusters?q=edge")); !slices.Equal(got, []string{"beta"}) {
		t.Errorf("search edge: %v", got)
	}
	if got := rows(b.get("/clusters?q=zzz")); len(got) != 0 {
		t.Errorf("search zzz: %v", got)
	}
	if got := rows(b.get("/clusters?sort=provider")); !slices.Equal(got, []string{"beta", "gamma", "alpha"}) {
		t.Errorf("sorted by provider: %v, want edge, local, sim", got)
	}

	// The list is live: a new cluster that matches the search arrives.
	p = b.get("/clusters?q=sim")
	live := attr(findElement(p.doc(t), "body"), "data-live")
	if live != "/clusters/live?q=sim&sort=name" {
		t.Fatalf("the list's stream is %q", live)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, e.srv.URL+live, nil)
	resp, err := b.hc.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	events := readEvents(resp.Body)
	if ev := <-events; !strings.Contains(ev.fragments["clusters"], `data-cluster="alpha"`) || strings.Contains(ev.fragments["clusters"], `data-cluster="beta"`) {
		t.Errorf("first list event: %+v", ev)
	}
	e.createCluster("delta", v1.ClusterSpec{Provider: "sim"})
	if ev := <-events; !strings.Contains(ev.fragments["clusters"], `data-cluster="delta"`) {
		t.Errorf("after a create: %+v", ev)
	}
}

// findElement returns the first element named name.
func findElement(doc *html.Node, name string) *html.Node {
	for n := range doc.Descendants() {
		if n.Type == html.ElementNode && n.Data == name {
			return n
		}
	}
	return &html.Node{}
}

// An operator sees and can use every action; a viewer sees the same
// cluster without a button, and each action's endpoint answers 403.
func TestViewerSeesNoActionsAndIsRefused(t *testing.T) {
	e := newEnv(t, false)
	e.createCluster("c1", v1.ClusterSpec{Provider: "sim", WorkerPools: []v1.WorkerPool{{Name: "default", Size: 1}}})
	e.createCluster("edge1", v1.ClusterSpec{Provider: "edge", NodeApproval: "manual"})
	e.putNode("edge1", "edge1-host1", v1.NodeDiscovered)
	viewer := e.browser()
	csrf := viewer.login(e.user("vera", v1.RoleViewer))
	op := e.browser()
	op.login(e.user("otto", v1.RoleOperator))

	pages := []string{"/projects/default/clusters/c1", "/projects/default/clusters/edge1", "/projects/default/clusters/edge1/nodes",
		"/projects/default/clusters/edge1/nodes/edge1-host1", "/projects/default/clusters/edge1/installer", "/clusters"}
	for _, path := range pages {
		p := viewer.get(path)
		if p.status != http.StatusOK {
			t.Fatalf("viewer GET %s: %d", path, p.status)
		}
		if forms := p.postForms(t); !slices.Equal(forms, []string{"/logout"}) {
			t.Errorf("viewer sees forms %v on %s; want only sign out", forms, path)
		}
		for _, link := range []string{"/kubeconfig", "/installer/download", "/clusters/new"} {
			if strings.Contains(p.body, link) {
				t.Errorf("viewer sees a link to %s on %s", link, path)
			}
		}
	}
	if p := op.get("/projects/default/clusters/c1"); len(p.postForms(t)) < 6 {
		t.Errorf("operator sees forms %v; want the actions", p.postForms(t))
	}

	before := e.cluster("c1").ETag
	for _, a := range []struct {
		path string
		form url.Values
	}{
		{"/projects/default/clusters/c1/scale", url.Values{"pool": {"default"}, "size": {"3"}}},
		{"/projects/default/clusters/c1/pools", url.Values{"name": {"gpu"}, "size": {"1"}}},
		{"/projects/default/clusters/c1/pools/default/remove", url.Values{}},
		{"/projects/default/clusters/c1/upgrade", url.Values{"version": {"v1.35.4"}}},
		{"/projects/default/clusters/c1/retry", url.Values{}},
		{"/projects/default/clusters/c1/cancel", url.Values{}},
		{"/projects/default/clusters/c1/delete", url.Values{"confirm": {"c1"}}},
		{"/projects/default/clusters/edge1/provision", url.Values{}},
		{"/projects/default/clusters/edge1/reset", url.Values{}},
		{"/projects/default/clusters/edge1/nodes/edge1-host1/approve", url.Values{}},
		{"/projects/default/clusters/edge1/nodes/edge1-host1/configure", url.Values{"role": {"worker"}}},
		{"/clusters/new", url.Values{"project": {"default"}, "name": {"c2"}, "provider": {"sim"}}},
	} {
		a.form.Set("csrf", csrf)
		if p := viewer.post(a.path, a.form); p.status != http.StatusForbidden || !strings.Contains(p.body, "Forbidden") {
			t.Errorf("viewer POST %s: %d, want 403 with the API's Forbidden", a.path, p.status)
		}
	}
	for _, path := range []string{"/projects/default/clusters/c1/kubeconfig", "/projects/default/clusters/edge1/installer/download?arch=amd64"} {
		if p := viewer.get(path); p.status != http.StatusForbidden || strings.Contains(p.header.Get("Content-Disposition"), "attachment") {
			t.Errorf("viewer GET %s: %d, want a 403 page", path, p.status)
		}
	}
	if e.cluster("c1").ETag != before {
		t.Error("a viewer's refused actions changed the cluster")
	}
	if cls, _ := e.api.ListClusters(t.Context(), "default"); len(cls) != 2 {
		t.Errorf("%d clusters after the viewer's create, want 2", len(cls))
	}
	if n, _ := e.api.GetNode(t.Context(), "default", "edge1", "edge1-host1"); n.State != v1.NodeDiscovered {
		t.Errorf("node %s after the viewer's approve", n.State)
	}
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

// An operator's actions, each through the API: scale, add and remove a
// pool, upgrade, cancel, retry, delete (only with the name typed); each
// redirects back with what it did, and a refusal shows the API's message
// with its status.
func TestClusterActions(t *testing.T) {
	e := newEnv(t, true)
	b := e.browser()
	csrf := b.login(e.user("otto", v1.RoleOperator))
	const c1 = "/projects/default/clusters/c1"
	post := func(path string, form url.Values) page {
		t.Helper()
		form.Set("csrf", csrf)
		return b.post(path, form)
	}
	done := func(path string, form url.Values, notice string) {
		t.Helper()
		p := post(path, form)
		if p.status != http.StatusSeeOther || p.header.Get("Location") != c1 {
			t.Fatalf("POST %s: %d to %q: %s", path, p.status, p.header.Get("Location"), p.body)
		}
		if got := b.get(c1); !strings.Contains(got.body, notice) {
			t.Errorf("after POST %s the page does not say %q", path, notice)
		}
		if op := e.wait("c1"); op.Status != v1.OpSucceeded {
			t.Fatalf("operation after POST %s: %s %+v", path, op.Status, op.Error)
		}
	}
	p := post("/clusters/new", url.Values{"project": {"default"}, "name": {"c1"}, "provider": {"sim"},
		"controlPlane": {"1"}, "workers": {"1"}, "version": {"v1.35.5"}})
	if p.status != http.StatusSeeOther {
		t.Fatalf("create: %d %s", p.status, p.body)
	}
	e.wait("c1")

	done(c1+"/scale", url.Values{"pool": {"default"}, "size": {"3"}}, "Scaling pool default to 3")
	if cl := e.cluster("c1"); cl.Spec.WorkerPools[0].Size != 3 || cl.Status.Nodes.Workers != 3 {
		t.Errorf("after scaling: size %d, %d workers", cl.Spec.WorkerPools[0].Size, cl.Status.Nodes.Workers)
	}
	done(c1+"/scale", url.Values{"pool": {"control-plane"}, "size": {"3"}}, "Scaling the control plane to 3")
	done(c1+"/pools", url.Values{"name": {"gpu"}, "size": {"1"}, "labels": {"accel=gpu"}, "taints": {"gpu=true:NoSchedule"}}, "Adding pool gpu")
	if gpu := e.cluster("c1").Spec.WorkerPools[1]; gpu.Name != "gpu" || gpu.Labels["accel"] != "gpu" || len(gpu.Taints) != 1 {
		t.Errorf("added pool %+v", gpu)
	}
	done(c1+"/pools/gpu/remove", url.Values{}, "Removing pool gpu")
	if pools := e.cluster("c1").Spec.WorkerPools; len(pools) != 1 {
		t.Errorf("pools after remove: %+v", pools)
	}
	done(c1+"/upgrade", url.Values{"version": {"v1.36.3"}}, "Upgrading to v1.36.3")
	if v := e.cluster("c1").Spec.KubernetesVersion; v != "v1.36.3" {
		t.Errorf("version after upgrade: %s", v)
	}

	// Refusals: the API's words and status, nothing changed.
	etag := e.cluster("c1").ETag
	for _, tc := range []struct {
		path   string
		form   url.Values
		status int
		want   string
	}{
		{c1 + "/scale", url.Values{"pool": {"default"}, "size": {"-1"}}, http.StatusBadRequest, "size"},
		{c1 + "/scale", url.Values{"pool": {"default"}, "size": {"x"}}, http.StatusBadRequest, "whole number"},
		{c1 + "/scale", url.Values{"pool": {"nope"}, "size": {"1"}}, http.StatusBadRequest, `no worker pool "nope"`},
		{c1 + "/upgrade", url.Values{"version": {"v9.9.9"}}, http.StatusBadRequest, "v9.9.9"},
		{c1 + "/pools", url.Values{"name": {"Bad Name"}, "size": {"1"}}, http.StatusBadRequest, "Bad Name"},
		{c1 + "/retry", url.Values{}, http.StatusConflict, "Conflict"},
		{c1 + "/delete", url.Values{"confirm": {"c2"}}, http.StatusBadRequest, "Type the cluster's name, c1"},
	} {
		p := post(tc.path, tc.form)
		msg, _ := p.byID(t, "error")
		if p.status != tc.status || !strings.Contains(msg, tc.want) {
			t.Errorf("POST %s %v: %d %q, want %d with %q", tc.path, tc.form, p.status, msg, tc.status, tc.want)
		}
	}
	if e.cluster("c1").ETag != etag {
		t.Error("a refused action changed the cluster")
	}

	// Cancel stops a running operation (the sim holds this one's step
	// until it is canceled); retry runs it again from the step that
	// stopped.
	const hung = "/projects/default/clusters/hung"
	e.createCluster("hung", v1.ClusterSpec{Provider: "sim", Labels: map[string]string{sim.LabelHangStep: "ensure-control-plane-machines"}})
	first := e.cluster("hung").Status.CurrentOperation
	e.stepRunning(first, "ensure-control-plane-machines")
	if page := b.get(hung); !slices.Contains(page.postForms(t), hung+"/cancel") {
		t.Errorf("a running operation's page has no cancel form: %v", page.postForms(t))
	}
	if p := post(hung+"/cancel", url.Values{}); p.status != http.StatusSeeOther {
		t.Fatalf("cancel: %d %s", p.status, p.body)
	}
	if op := e.wait("hung"); op.Status != v1.OpCanceled {
		t.Fatalf("operation after cancel: %s", op.Status)
	}
	if page := b.get(hung); !slices.Contains(page.postForms(t), hung+"/retry") {
		t.Errorf("a canceled operation's page has no retry form: %v", page.postForms(t))
	}
	if p := post(hung+"/retry", url.Values{}); p.status != http.StatusSeeOther {
		t.Fatalf("retry: %d %s", p.status, p.body)
	}
	retry, err := e.api.GetOperation(t.Context(), e.cluster("hung").Status.CurrentOperation)
	if err != nil || v1.OperationID(retry.Properties.RetryOf) != v1.OperationID(first) {
		t.Fatalf("after retry: %+v %v, want a retry of %s", retry, err, first)
	}
	e.stepRunning(retry.ID, "ensure-control-plane-machines") // held again: the label is still there
	if p := post(hung+"/cancel", url.Values{}); p.status != http.StatusSeeOther {
		t.Fatalf("cancel the retry: %d %s", p.status, p.body)
	}
	e.wait("hung")

	p = post(c1+"/delete", url.Values{"confirm": {"c1"}})
	if p.status != http.StatusSeeOther {
		t.Fatalf("delete: %d %s", p.status, p.body)
	}
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	for {
		if _, err := e.api.GetCluster(ctx, "default", "c1"); v1.IsNotFound(err) {
			break
		}
		if ctx.Err() != nil {
			t.Fatal("the cluster was not deleted")
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// The live stream sends the cluster page's fragments as they change, each
// only when it changed: a new event, an operation's steps until it has
// Succeeded; a deleted cluster's stream says so and ends.
func TestClusterLive(t *testing.T) {
	e := newEnv(t, true)
	b := e.browser()
	b.login(ownerToken)
	e.createCluster("c1", v1.ClusterSpec{Provider: "sim", WorkerPools: []v1.WorkerPool{{Name: "default", Size: 1}}})
	e.wait("c1")
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, e.srv.URL+"/projects/default/clusters/c1/live?view=overview", nil)
	req.Header.Set("Accept", "text/event-stream")
	resp, err := b.hc.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if ct := resp.Header.Get("Content-Type"); resp.StatusCode != http.StatusOK || ct != "text/event-stream" {
		t.Fatalf("live: %d %s", resp.StatusCode, ct)
	}
	events := readEvents(resp.Body)
	first := <-events
	if first.name != "fragments" {
		t.Fatalf("first event %+v", first)
	}
	for _, name := range []string{"status", "current", "past", "pools", "events"} {
		if _, ok := first.fragments[name]; !ok {
			t.Errorf("the first event lacks fragment %s", name)
		}
	}
	if !strings.Contains(first.fragments["current"], `data-operation-status="Succeeded"`) {
		t.Errorf("current operation fragment: %s", first.fragments["current"])
	}
	// Nothing changes (the page is read again every 100ms): nothing is sent.
	select {
	case ev := <-events:
		t.Errorf("an event with nothing changed: %+v", ev)
	case <-time.After(time.Second):
	}
	// An event is appended: only the timeline is sent.
	if err := e.store.AppendEvent(ctx, &store.Event{Project: "default", Cluster: "c1",
		Event: v1.Event{Time: time.Now(), Type: "Normal", Reason: "Test", Message: "a test event"}}); err != nil {
		t.Fatal(err)
	}
	ev := <-events
	if !strings.Contains(ev.fragments["events"], "a test event") || len(ev.fragments) != 1 {
		t.Errorf("after an event: %+v", ev)
	}
	// A scale: its operation arrives, step by step, until Succeeded.
	_, opID, err := e.api.PatchCluster(ctx, "default", "c1", map[string]any{"spec": map[string]any{
		"workerPools": []v1.WorkerPool{{Name: "default", Size: 2}}}})
	if err != nil {
		t.Fatal(err)
	}
	for {
		ev := <-events
		cur := ev.fragments["current"]
		if strings.Contains(cur, v1.OperationID(opID)) && strings.Contains(cur, `data-operation-status="Succeeded"`) {
			if strings.Contains(cur, `data-state="Pending"`) || strings.Contains(cur, `data-state="Running"`) {
				t.Errorf("the operation is Succeeded with steps not done: %s", cur)
			}
			break
		}
		if ev.name != "fragments" {
			t.Fatalf("during the scale: %+v", ev)
		}
	}
	// Deleted: the stream says so and ends.
	if _, err := e.api.DeleteCluster(ctx, "default", "c1"); err != nil {
		t.Fatal(err)
	}
	for ev := range events {
		if ev.name == "gone" {
			return
		}
	}
	t.Fatal("the stream ended without saying the cluster is gone")
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

// The nodes tab: each node's state, role, pool, facts, failed prechecks
// with their message, last heartbeat; search and sort; approve and
// configure buttons where they apply, and both work.
func TestNodesTab(t *testing.T) {
	e := newEnv(t, false)
	e.createCluster("edge1", v1.ClusterSpec{Provider: "edge", NodeApproval: "manual"})
	e.putNode("edge1", "edge1-bravo", v1.NodeDiscovered, v1.PrecheckResult{Name: "os", Result: v1.PrecheckPass})
	e.putNode("edge1", "edge1-alpha", v1.NodePrecheckFailed,
		v1.PrecheckResult{Name: "dns-port", Result: v1.PrecheckFail, Message: "port 53 is taken by dnsmasq"},
		v1.PrecheckResult{Name: "os", Result: v1.PrecheckPass})
	e.putNode("edge1", "edge1-charlie", v1.NodeApproved)
	b := e.browser()
	csrf := b.login(ownerToken)
	const nodes = "/projects/default/clusters/edge1/nodes"

	rows := func(p page) []string {
		var out []string
		for n := range p.doc(t).Descendants() {
			if n.Type == html.ElementNode && n.Data == "tr" && attr(n, "data-node") != "" {
				out = append(out, attr(n, "data-node")+"="+attr(n, "data-state"))
			}
		}
		return out
	}
	p := b.get(nodes)
	if got := rows(p); !slices.Equal(got, []string{"edge1-alpha=PRECHECK_FAILED", "edge1-bravo=DISCOVERED", "edge1-charlie=APPROVED"}) {
		t.Errorf("nodes %v", got)
	}
	for _, want := range []string{`<li class="bad"><strong>dns-port</strong>: port 53 is taken by dnsmasq</li>`,
		"debian 12 · amd64 · 4 CPU · 8.0 GiB", "10.0.0.5", "1 passed"} {
		if !strings.Contains(p.body, want) {
			t.Errorf("the nodes tab does not show %q", want)
		}
	}
	// Approve for the DISCOVERED node only, configure for the APPROVED one.
	forms := p.postForms(t)
	for _, want := range []string{nodes + "/edge1-bravo/approve", nodes + "/edge1-charlie/configure"} {
		if !slices.Contains(forms, want) {
			t.Errorf("no form %s among %v", want, forms)
		}
	}
	if slices.Contains(forms, nodes+"/edge1-alpha/approve") {
		t.Error("a node whose prechecks failed has an approve button")
	}
	if got := rows(b.get(nodes + "?q=discovered")); !slices.Equal(got, []string{"edge1-bravo=DISCOVERED"}) {
		t.Errorf("search discovered: %v", got)
	}
	if got := rows(b.get(nodes + "?sort=state")); !slices.Equal(got, []string{"edge1-charlie=APPROVED", "edge1-bravo=DISCOVERED", "edge1-alpha=PRECHECK_FAILED"}) {
		t.Errorf("sorted by state: %v", got)
	}
	if got := rows(b.get(nodes + "?sort=hostname")); !slices.Equal(got, []string{"edge1-alpha=PRECHECK_FAILED", "edge1-bravo=DISCOVERED", "edge1-charlie=APPROVED"}) {
		t.Errorf("sorted by hostname: %v", got)
	}

	p = b.post(nodes+"/edge1-bravo/approve", url.Values{"csrf": {csrf}})
	if p.status != http.StatusSeeOther || p.header.Get("Location") != nodes {
		t.Fatalf("approve: %d to %q", p.status, p.header.Get("Location"))
	}
	if n, _ := e.api.GetNode(t.Context(), "default", "edge1", "edge1-bravo"); n.State != v1.NodeApproved {
		t.Errorf("node after approve: %s", n.State)
	}
	// The API's refusal, with its words, on the nodes tab.
	p = b.post(nodes+"/edge1-alpha/approve", url.Values{"csrf": {csrf}})
	if msg, _ := p.byID(t, "error"); p.status != http.StatusConflict || !strings.Contains(msg, "dns-port") {
		t.Errorf("approving a node whose prechecks failed: %d %q", p.status, msg)
	}
	p = b.post(nodes+"/edge1-charlie/configure", url.Values{"csrf": {csrf}, "role": {"control-plane"}, "interface": {"eth0"}})
	if p.status != http.StatusSeeOther {
		t.Fatalf("configure: %d %s", p.status, p.body)
	}
	if n, _ := e.api.GetNode(t.Context(), "default", "edge1", "edge1-charlie"); n.State != v1.NodeConfigured ||
		n.Role != v1.RoleControlPlane || n.Interface != "eth0" {
		t.Errorf("node after configure: %+v", n)
	}
	p = b.post(nodes+"/edge1-bravo/configure", url.Values{"csrf": {csrf}, "role": {"boss"}})
	if msg, _ := p.byID(t, "error"); p.status != http.StatusBadRequest || !strings.Contains(msg, "role") {
		t.Errorf("configure with role boss: %d %q", p.status, msg)
	}

	// A node's page: its facts, every precheck, its events, and its live log.
	if err := e.store.AppendEvent(t.Context(), &store.Event{Project: "default", Cluster: "edge1", Event: v1.Event{
		Time: time.Now(), Type: "Warning", Reason: "PrecheckFailed", Message: "dns-port failed", Node: "edge1-alpha"}}); err != nil {
		t.Fatal(err)
	}
	p = b.get(nodes + "/edge1-alpha")
	if evs, _ := p.byID(t, "node-events"); !strings.Contains(evs, "PrecheckFailed dns-port failed") {
		t.Errorf("the node's events: %q", evs)
	}
	if other, _ := b.get(nodes+"/edge1-bravo").byID(t, "node-events"); strings.Contains(other, "dns-port") {
		t.Errorf("another node's page shows edge1-alpha's events: %q", other)
	}
	for _, want := range []string{"PRECHECK_FAILED", "port 53 is taken by dnsmasq", "eth0 10.0.0.5/24", `data-live="/projects/default/clusters/edge1/nodes/edge1-alpha/logs/live"`} {
		if !strings.Contains(p.body, want) {
			t.Errorf("the node page does not show %q", want)
		}
	}
	if p := b.get(nodes + "/nope"); p.status != http.StatusNotFound {
		t.Errorf("a missing node's page: %d, want 404", p.status)
	}
}

// A node's log streams: the lines kept first, then each new one.
func TestNodeLogsLive(t *testing.T) {
	e := newEnv(t, false)
	e.createCluster("edge1", v1.ClusterSpec{Provider: "edge"})
	e.putNode("edge1", "edge1-host1", v1.NodeDiscovered)
	key := store.Key{Project: "default", Name: "edge1"}
	if err := e.store.AppendNodeLogs(t.Context(), key, "edge1-host1", []v1.LogLine{{Time: time.Now(), Stream: "agent", Line: "first line"}}); err != nil {
		t.Fatal(err)
	}
	b := e.browser()
	b.login(ownerToken)
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, e.srv.URL+"/projects/default/clusters/edge1/nodes/edge1-host1/logs/live", nil)
	resp, err := b.hc.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	events := readEvents(resp.Body)
	var lines []string
	want := func(line string) {
		t.Helper()
		for !slices.Contains(lines, line) {
			ev, ok := <-events
			if !ok {
				t.Fatalf("the stream ended before %q; lines %v", line, lines)
			}
			if ev.name == "lines" {
				var got []v1.LogLine
				if err := json.Unmarshal([]byte(ev.data), &got); err != nil {
					t.Fatal(err)
				}
				for _, l := range got {
					lines = append(lines, l.Line)
				}
			}
		}
	}
	want("first line")
	if err := e.store.AppendNodeLogs(t.Context(), key, "edge1-host1", []v1.LogLine{{Time: time.Now(), Stream: "etcd", Line: "second line"}}); err != nil {
		t.Fatal(err)
	}
	want("second line")
	if !slices.Equal(lines, []string{"first line", "second line"}) {
		t.Errorf("lines %v, want each once, in order", lines)
	}
}

// The installer tab: per architecture, the download (admins) and the
// commands; the command install.sh runs.
func TestInstallerPage(t *testing.T) {
	e := newEnv(t, false)
	e.createCluster("edge1", v1.ClusterSpec{Provider: "edge", Distribution: v1.DistroLocal})
	e.createCluster("sim1", v1.ClusterSpec{Provider: "sim"})
	b := e.browser()
	b.login(ownerToken)
	p := b.get("/projects/default/clusters/edge1/installer")
	for _, arch := range []string{"amd64", "arm64"} {
		cmds, ok := p.byID(t, "cmd-"+arch)
		if !ok || !strings.Contains(cmds, "tar -xzf kiln-installer-edge1-"+arch+".tar.gz") || !strings.Contains(cmds, "sudo ./install.sh") {
			t.Errorf("%s commands: %q", arch, cmds)
		}
		if !strings.Contains(p.body, `href="/projects/default/clusters/edge1/installer/download?arch=`+arch+`"`) {
			t.Errorf("no %s download", arch)
		}
	}
	if got, _ := p.byID(t, "install-command"); got != server.InstallCommand(v1.DistroLocal, "/opt/kiln-kube") {
		t.Errorf("install command %q", got)
	}
	// No backend has run the create, so there is no activation credential
	// to put in an installer: the API's answer is shown, not a broken
	// download.
	d := b.get("/projects/default/clusters/edge1/installer/download?arch=amd64")
	if msg, _ := d.byID(t, "error"); d.status != http.StatusConflict || !strings.Contains(msg, "no activation credential yet") ||
		strings.Contains(d.header.Get("Content-Disposition"), "attachment") {
		t.Errorf("download before the create ran: %d %q %s", d.status, msg, d.header.Get("Content-Disposition"))
	}
	if d := b.get("/projects/default/clusters/edge1/installer/download?arch=mips"); d.status != http.StatusBadRequest {
		t.Errorf("download for mips: %d, want 400", d.status)
	}
	// A sim cluster has no installer tab.
	if p := b.get("/projects/default/clusters/sim1"); strings.Contains(p.body, "/installer") {
		t.Error("a sim cluster's page links an installer")
	}
	// Nor a kubeconfig: the API's reason is shown.
	k := b.get("/projects/default/clusters/sim1/kubeconfig")
	if msg, _ := k.byID(t, "error"); k.status != http.StatusConflict || !strings.Contains(msg, "no certificate authority") {
		t.Errorf("sim kubeconfig: %d %q", k.status, msg)
	}
}

// An edge cluster's own actions: provision refuses until its hosts are
// configured (the API's NodeCountMismatch, shown); reset starts a reset.
func TestEdgeActions(t *testing.T) {
	e := newEnv(t, true)
	b := e.browser()
	csrf := b.login(ownerToken)
	const edge1 = "/projects/default/clusters/edge1"
	e.createCluster("edge1", v1.ClusterSpec{Provider: "edge", NodeApproval: "manual", ControlPlane: v1.ControlPlane{Size: 1}})
	if op := e.wait("edge1"); op.Status != v1.OpSucceeded {
		t.Fatalf("edge create: %s", op.Status)
	}
	p := b.get(edge1)
	for _, want := range []string{edge1 + "/provision", edge1 + "/reset"} {
		if !slices.Contains(p.postForms(t), want) {
			t.Errorf("the edge cluster's page has no form %s", want)
		}
	}
	p = b.post(edge1+"/provision", url.Values{"csrf": {csrf}})
	if msg, _ := p.byID(t, "error"); p.status != http.StatusConflict || !strings.Contains(msg, "NodeCountMismatch") {
		t.Errorf("provision without hosts: %d %q", p.status, msg)
	}
	p = b.post(edge1+"/reset", url.Values{"csrf": {csrf}})
	if p.status != http.StatusSeeOther {
		t.Fatalf("reset: %d %s", p.status, p.body)
	}
	op := e.wait("edge1")
	if op.Properties.Kind != v1.KindReset || op.Status != v1.OpSucceeded {
		t.Errorf("after reset: a %s operation, %s", op.Properties.Kind, op.Status)
	}
}

// An admin issues a new activation credential, or revokes it, from the
// installer page; an operator sees neither button, and is refused.
func TestActivation(t *testing.T) {
	e := newEnv(t, true)
	e.createCluster("edge1", v1.ClusterSpec{Provider: "edge"})
	e.wait("edge1") // its create makes the first credential
	const installer = "/projects/default/clusters/edge1/installer"
	ctx := t.Context()
	before, err := e.api.ReissueActivation(ctx, "default", "edge1")
	if err != nil {
		t.Fatal(err)
	}

	operator := e.browser()
	csrf := operator.login(e.user("otto", v1.RoleOperator))
	if forms := operator.get(installer).postForms(t); slices.Contains(forms, "/projects/default/clusters/edge1/activation/reissue") {
		t.Errorf("an operator sees %v", forms)
	}
	if p := operator.post("/projects/default/clusters/edge1/activation/reissue", url.Values{"csrf": {csrf}}); p.status != http.StatusForbidden {
		t.Errorf("an operator's reissue: %d, want 403", p.status)
	}

	admin := e.browser()
	csrf = admin.login(ownerToken)
	p := admin.post("/projects/default/clusters/edge1/activation/reissue", url.Values{"csrf": {csrf}})
	if p.status != http.StatusSeeOther || p.header.Get("Location") != installer {
		t.Fatalf("reissue: %d to %q", p.status, p.header.Get("Location"))
	}
	page := admin.get(installer)
	if !strings.Contains(page.body, "A new activation credential and passphrase were issued") {
		t.Error("the installer page does not say a new credential was issued")
	}
	// The new material is not on the page.
	after, err := e.api.ReissueActivation(ctx, "default", "edge1") // a third, to compare with
	if err != nil {
		t.Fatal(err)
	}
	for _, secret := range []string{before.Passphrase, after.Passphrase} {
		if strings.Contains(page.body, secret) {
			t.Error("an activation passphrase is on the page")
		}
	}
	p = admin.post("/projects/default/clusters/edge1/activation/revoke", url.Values{"csrf": {csrf}})
	if p.status != http.StatusSeeOther {
		t.Fatalf("revoke: %d %s", p.status, p.body)
	}
	if !strings.Contains(admin.get(installer).body, "The activation credential is revoked") {
		t.Error("the installer page does not say the credential is revoked")
	}
	// A sim cluster has no activation: the API's refusal, on the page.
	e.createCluster("sim1", v1.ClusterSpec{Provider: "sim"})
	p = admin.post("/projects/default/clusters/sim1/activation/reissue", url.Values{"csrf": {csrf}})
	if msg, _ := p.byID(t, "error"); p.status < 400 || msg == "" {
		t.Errorf("reissue for a sim cluster: %d %q", p.status, msg)
	}
}

// A fleet's list shows its first 500 clusters and says how to narrow it.
func TestClustersListCap(t *testing.T) {
	e := newEnv(t, false)
	for i := range 501 {
		e.createCluster(fmt.Sprintf("c%03d", i), v1.ClusterSpec{Provider: "sim"})
	}
	b := e.browser()
	b.login(ownerToken)
	p := b.get("/clusters")
	if n := strings.Count(p.body, "<tr data-cluster="); n != 500 {
		t.Errorf("%d rows, want 500", n)
	}
	if !strings.Contains(p.body, "The first 500 of 501 matching clusters (501 in all)") {
		t.Error("the list does not say it is cut")
	}
	p = b.get("/clusters?q=c500")
	if n := strings.Count(p.body, "<tr data-cluster="); n != 1 || !strings.Contains(p.body, "1 of 501 clusters") {
		t.Errorf("search c500: %d rows", n)
	}
}
