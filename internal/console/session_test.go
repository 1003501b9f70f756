package console_test

import (
	"net/http"
	"net/url"
	"slices"
	"strings"
	"testing"

	"kiln.dev/kiln/api/client"
	v1 "kiln.dev/kiln/api/v1"
)

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
	tokens, err := e.api.ListTokens(t.Context(), client.TokenOwner{User: "admin"})
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
	tokens, _ = e.api.ListTokens(t.Context(), client.TokenOwner{User: "admin"})
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
	sa, err := e.api.CreateToken(t.Context(), client.TokenOwner{Project: "default", ServiceAccount: "ci"}, v1.TokenRequest{})
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
		for _, link := range []string{"/installer/download", "/clusters/new"} {
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
	// A viewer's own kubeconfig is theirs to download (the API's answer
	// for a sim cluster: it has no CA).
	if k := viewer.get("/projects/default/clusters/c1/kubeconfig"); k.status != http.StatusConflict {
		t.Errorf("viewer GET the kubeconfig of a sim cluster: %d, want the API's 409", k.status)
	}
	for _, path := range []string{"/projects/default/clusters/edge1/installer/download?arch=amd64"} {
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
