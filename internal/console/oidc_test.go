package console_test

import (
	"net/http"
	"net/url"
	"strings"
	"testing"

	"kiln.dev/kiln/internal/oidc"
	"kiln.dev/kiln/test/oidcprovider"
)

// TestSignInWithProvider: the redirect flow as a browser follows it (the
// provider's login page filled in by oidcprovider.Login): the session opens
// as the person; a callback this console did not start, a forged flow
// cookie, a provider's refusal and an issuer kilnd does not trust change
// nothing and say what to do.
func TestSignInWithProvider(t *testing.T) {
	p := oidcprovider.Start(t, oidcprovider.Options{},
		oidcprovider.User{Name: "ann", Password: "ann-pw", Email: "ann@example.com", Groups: []string{"eng"}})
	v, err := oidc.New([]oidc.Issuer{{URL: p.URL, ClientID: oidcprovider.CLIClient, ConsoleClientID: oidcprovider.ConsoleClient,
		ConsoleClientSecret: oidcprovider.ConsoleSecret}}, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	e := newEnvWith(t, false, v)
	p.SetConsoleRedirect(e.srv.URL + "/login/oidc/callback")
	b := e.browser()

	login := b.get("/login?next=/clusters/new")
	start := `href="/login/oidc?issuer=` + strings.ToLower(url.QueryEscape(p.URL)) + `&amp;next=%2fclusters%2fnew"`
	if !strings.Contains(login.body, start) || !strings.Contains(login.body, "Sign in with 127.0.0.1:") {
		t.Fatalf("the sign-in page offers no sign-in with %s:\n%s", p.URL, login.body)
	}
	go1 := b.get("/login/oidc?issuer=" + url.QueryEscape(p.URL) + "&next=/clusters/new")
	if go1.status != http.StatusSeeOther || !strings.HasPrefix(go1.header.Get("Location"), p.URL+"/auth?") {
		t.Fatalf("start: %d to %q, want the provider's authorization endpoint", go1.status, go1.header.Get("Location"))
	}
	back, err := p.Login(t.Context(), go1.header.Get("Location"), "ann", "ann-pw")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(back.String(), e.srv.URL+"/login/oidc/callback?") {
		t.Fatalf("the provider sent the browser to %s", back)
	}
	// Another browser (no flow cookie) with the same answer: refused.
	if other := e.browser().get(back.RequestURI()); other.status != http.StatusBadRequest || !strings.Contains(other.body, "not started here") {
		t.Errorf("a callback without its flow cookie: %d %.200s", other.status, other.body)
	}
	done := b.get(back.RequestURI())
	if done.status != http.StatusOK || !strings.Contains(done.body, `url=/clusters/new`) {
		t.Fatalf("callback: %d %.300s", done.status, done.body)
	}
	if page := b.get("/clusters"); page.status != http.StatusOK || !strings.Contains(page.body, "user:ann-example-com") {
		t.Errorf("after the sign-in /clusters is %d, want ann's session", page.status)
	}
	// The flow cookie is spent: the same answer again is refused.
	if again := b.get(back.RequestURI()); again.status != http.StatusBadRequest {
		t.Errorf("the callback a second time: %d, want 400", again.status)
	}

	c := e.browser()
	if r := c.get("/login/oidc?issuer=https://idp.example.com"); r.status != http.StatusBadRequest || !strings.Contains(r.body, "does not trust") {
		t.Errorf("an issuer kilnd does not trust: %d %.200s", r.status, r.body)
	}
	r := c.get("/login/oidc?issuer=" + url.QueryEscape(p.URL))
	state := func(loc string) string { u, _ := url.Parse(loc); return u.Query().Get("state") }(r.header.Get("Location"))
	refused := c.get("/login/oidc/callback?error=access_denied&error_description=no+thanks&state=" + state)
	if refused.status != http.StatusUnauthorized || !strings.Contains(refused.body, "refused the sign-in: access_denied no thanks") {
		t.Errorf("the provider's refusal: %d %.200s", refused.status, refused.body)
	}
	forged := e.browser()
	forged.hc.Jar.SetCookies(mustURL(t, e.srv.URL+"/login/oidc/callback"), []*http.Cookie{{Name: "kiln_oidc_flow", Value: "eyJzdGF0ZSI6InMifQ.00", Path: "/login/oidc/callback"}})
	if r := forged.get("/login/oidc/callback?code=x&state=s"); r.status != http.StatusBadRequest {
		t.Errorf("a forged flow cookie: %d, want 400", r.status)
	}
}

func mustURL(t *testing.T, s string) *url.URL {
	t.Helper()
	u, err := url.Parse(s)
	if err != nil {
		t.Fatal(err)
	}
	return u
}
