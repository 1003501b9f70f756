package server_test

import (
	"encoding/base64"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	v1 "kiln.dev/kiln/api/v1"
	"kiln.dev/kiln/internal/oidc"
	"kiln.dev/kiln/internal/server"
	"kiln.dev/kiln/internal/store"
	"kiln.dev/kiln/test/oidcprovider"
)

var (
	ann  = oidcprovider.User{Name: "ann", Password: "ann-pw", Email: "ann@example.com", Groups: []string{"eng", "/platform/admins"}}
	dave = oidcprovider.User{Name: "dave", Password: "dave-pw", Email: "dave@example.com"}
)

// signInHarness is a harness whose kilnd trusts p and down (a provider
// that is stopped before anyone signs in with it); skew moves kilnd's
// clock for the ID tokens' expiry.
func signInHarness(t *testing.T, p, down *oidcprovider.Provider, skew *atomic.Int64) *harness {
	t.Helper()
	var issuers []oidc.Issuer
	for _, pr := range []*oidcprovider.Provider{p, down} {
		issuers = append(issuers, oidc.Issuer{URL: pr.URL, ClientID: oidcprovider.CLIClient,
			ConsoleClientID: oidcprovider.ConsoleClient, ConsoleClientSecret: oidcprovider.ConsoleSecret})
	}
	v, err := oidc.New(issuers, nil, func() time.Time { return time.Now().Add(time.Duration(skew.Load())) })
	if err != nil {
		t.Fatal(err)
	}
	return newHarness(t, func(o *server.Options) { o.OIDC = v })
}

func idToken(t *testing.T, p *oidcprovider.Provider, client string, u oidcprovider.User) string {
	t.Helper()
	id, _, err := p.Tokens(t.Context(), client, u.Name, u.Password)
	if err != nil {
		t.Fatalf("sign %s in at the provider: %v", u.Name, err)
	}
	return id
}

func signInBody(id string) string { return `{"idToken": "` + id + `"}` }

// TestSignIn: an ID token of a provider kilnd trusts becomes a Kiln token
// of its person, made a user at the first sign-in, lasting as long as the ID
// token, with the provider's groups; a group binding gives them a role at
// once and its removal takes it away at once; an owner can disable them.
func TestSignIn(t *testing.T) {
	p := oidcprovider.Start(t, oidcprovider.Options{}, ann, dave)
	down := oidcprovider.Start(t, oidcprovider.Options{}, ann)
	var skew atomic.Int64
	h := signInHarness(t, p, down, &skew)
	h.project("p")
	anon := "Authorization:"

	var cfg v1.SignInConfig
	h.must(http.StatusOK, "GET", "/v1/auth/oidc", "", anon).decode(t, &cfg)
	if len(cfg.Issuers) != 2 || cfg.Issuers[0].URL != p.URL || cfg.Issuers[0].ClientID != oidcprovider.CLIClient {
		t.Errorf("sign-in configuration = %+v, want %s with the CLI's client first", cfg, p.URL)
	}
	raw := h.must(http.StatusOK, "GET", "/v1/auth/oidc", "", anon).body
	if strings.Contains(string(raw), oidcprovider.ConsoleSecret) {
		t.Error("the sign-in configuration shows the console's client secret")
	}

	var in v1.SignIn
	before := time.Now()
	h.must(http.StatusCreated, "POST", "/v1/auth/oidc", signInBody(idToken(t, p, oidcprovider.CLIClient, ann)), anon).decode(t, &in)
	if in.User.Name != "ann-example-com" || in.User.Source != "oidc:"+p.URL || in.User.DisplayName != "ann@example.com" {
		t.Errorf("signed-in user = %+v, want ann-example-com from %s", in.User, p.URL)
	}
	if left := in.Token.ExpiresAt.Sub(before); left < 55*time.Minute || left > 61*time.Minute {
		t.Errorf("the Kiln token lasts %v, want the ID token's hour", left)
	}
	if !strings.HasPrefix(in.Token.Value, "kiln_") || !slices.Equal(in.Token.Groups, ann.Groups) {
		t.Errorf("token = %+v, want a value and ann's groups", in.Token)
	}
	as := "Authorization: Bearer " + in.Token.Value

	h.must(http.StatusForbidden, "GET", "/v1/projects/p", "", as)
	h.must(http.StatusCreated, "PUT", "/v1/projects/p/groupbindings/"+url.PathEscape("/platform/admins"), `{"role": "operator"}`)
	var who v1.Whoami
	h.must(http.StatusOK, "GET", "/v1/whoami", "", as).decode(t, &who)
	if who.Principal != "user:ann-example-com" || who.Projects["p"] != v1.RoleOperator || !slices.Equal(who.Groups, ann.Groups) {
		t.Errorf("whoami = %+v, want ann, operator in p through /platform/admins", who)
	}
	h.must(http.StatusOK, "GET", "/v1/projects/p", "", as)
	h.must(http.StatusForbidden, "PUT", "/v1/projects/p/members/someone", `{"role": "viewer"}`, as)
	var b v1.GroupBinding
	h.must(http.StatusOK, "GET", "/v1/projects/p/groupbindings/"+url.PathEscape("/platform/admins"), "", as).decode(t, &b)
	if b.ID != "/v1/projects/p/groupbindings/%2Fplatform%2Fadmins" || b.Role != v1.RoleOperator {
		t.Errorf("binding = %+v", b)
	}
	h.must(http.StatusNoContent, "DELETE", "/v1/projects/p/groupbindings/"+url.PathEscape("/platform/admins"), "")
	h.must(http.StatusForbidden, "GET", "/v1/projects/p", "", as)

	// A second sign-in is the same user.
	h.must(http.StatusCreated, "POST", "/v1/auth/oidc", signInBody(idToken(t, p, oidcprovider.CLIClient, ann)), anon).decode(t, &in)
	if in.User.Name != "ann-example-com" {
		t.Errorf("second sign-in's user = %s", in.User.Name)
	}

	// Disabled: her tokens and her next sign-in are refused.
	h.must(http.StatusOK, "PUT", "/v1/users/ann-example-com", `{"disabled": true}`)
	if e := h.must(http.StatusUnauthorized, "GET", "/v1/whoami", "", as).errorBody(t); !strings.Contains(e.Message, "disabled") {
		t.Errorf("a disabled user's token: %q", e.Message)
	}
	if e := h.must(http.StatusForbidden, "POST", "/v1/auth/oidc", signInBody(idToken(t, p, oidcprovider.CLIClient, ann)), anon).errorBody(t); !strings.Contains(e.Message, "disabled") {
		t.Errorf("a disabled user's sign-in: %q", e.Message)
	}
	var u v1.User
	h.must(http.StatusOK, "PUT", "/v1/users/ann-example-com", `{"disabled": false}`).decode(t, &u)
	if u.Source != "oidc:"+p.URL || u.Subject == "" {
		t.Errorf("an owner's PUT changed where the user came from: %+v", u)
	}
	h.must(http.StatusOK, "GET", "/v1/whoami", "", as)
}

// TestSignInRefused: each bad ID token is 401 with its reason's code,
// audited, and makes nothing; a name another identity holds is 409; a
// provider that cannot be reached is 503.
func TestSignInRefused(t *testing.T) {
	p := oidcprovider.Start(t, oidcprovider.Options{}, ann, dave)
	down := oidcprovider.Start(t, oidcprovider.Options{}, ann)
	var skew atomic.Int64
	h := signInHarness(t, p, down, &skew)
	anon := "Authorization:"
	good := idToken(t, p, oidcprovider.CLIClient, ann)
	parts := strings.Split(good, ".")
	payload, _ := base64.RawURLEncoding.DecodeString(parts[1])
	parts[1] = base64.RawURLEncoding.EncodeToString([]byte(strings.Replace(string(payload), `"eng"`, `"own"`, 1)))
	tampered := strings.Join(parts, ".")
	other := oidcprovider.Start(t, oidcprovider.Options{}, ann)

	for _, c := range []struct {
		name, token, reason string
		skew                time.Duration
	}{
		{"tampered", tampered, v1.CodeBadSignature, 0},
		{"another app's", idToken(t, p, oidcprovider.OtherClient, ann), v1.CodeWrongAudience, 0},
		{"expired", good, v1.CodeTokenExpired, 2 * time.Hour},
		{"another provider's", idToken(t, other, oidcprovider.CLIClient, ann), v1.CodeUnknownIssuer, 0},
		{"not a JWT", "abc", v1.CodeMalformedToken, 0},
	} {
		skew.Store(int64(c.skew))
		r := h.must(http.StatusUnauthorized, "POST", "/v1/auth/oidc", signInBody(c.token), anon)
		e := r.errorBody(t)
		if e.Code != v1.CodeUnauthorized || e.Target != "idToken" || len(e.Details) != 1 || e.Details[0].Code != c.reason {
			t.Errorf("%s token: %+v, want Unauthorized with %s in details", c.name, e, c.reason)
		}
	}
	skew.Store(0)
	if users, _, _ := h.store.ListUsers(t.Context(), store.Page{}); len(users) != 1 {
		t.Errorf("refused sign-ins made users: %d, want the owner alone", len(users))
	}
	entries, _, err := h.store.ListAudit(t.Context(), store.AuditFilter{Action: "POST /v1/auth/oidc"}, store.Page{})
	if err != nil || len(entries) != 5 || entries[0].Actor != "anonymous" || entries[0].Status != http.StatusUnauthorized || entries[0].Code != v1.CodeUnauthorized {
		t.Errorf("audit of refused sign-ins: %d entries (%v), first %+v; want 5, anonymous, 401", len(entries), err, entries[0])
	}

	h.must(http.StatusBadRequest, "POST", "/v1/auth/oidc", `{}`, anon)
	h.must(http.StatusBadRequest, "POST", "/v1/auth/oidc", `{"idToken": "x", "extra": 1}`, anon)

	// Dave's name is an owner-made user's: not taken over.
	h.must(http.StatusCreated, "PUT", "/v1/users/dave-example-com", `{}`)
	e := h.must(http.StatusConflict, "POST", "/v1/auth/oidc", signInBody(idToken(t, p, oidcprovider.CLIClient, dave)), anon).errorBody(t)
	if e.Target != "user" || !strings.Contains(e.Message, "dave-example-com") {
		t.Errorf("a taken name: %+v", e)
	}
	if toks, _, _ := h.store.ListTokens(t.Context(), "user:dave-example-com", store.Page{}); len(toks) != 0 {
		t.Errorf("a refused sign-in gave the owner-made user %d tokens", len(toks))
	}

	raw := idToken(t, down, oidcprovider.CLIClient, ann)
	down.Stop()
	e = h.must(http.StatusServiceUnavailable, "POST", "/v1/auth/oidc", signInBody(raw), anon).errorBody(t)
	if len(e.Details) != 1 || e.Details[0].Code != v1.CodeIssuerUnavailable || !strings.Contains(e.Message, down.URL) {
		t.Errorf("a provider that cannot be reached: %+v", e)
	}

	// Without an identity provider the route says how to sign in instead.
	plain := newHarness(t, nil)
	if e := plain.must(http.StatusNotFound, "POST", "/v1/auth/oidc", signInBody(good), anon).errorBody(t); !strings.Contains(e.Message, "--oidc-issuer") {
		t.Errorf("no provider: %q", e.Message)
	}
	var cfg v1.SignInConfig
	plain.must(http.StatusOK, "GET", "/v1/auth/oidc", "", anon).decode(t, &cfg)
	if cfg.Issuers == nil || len(cfg.Issuers) != 0 {
		t.Errorf("no provider: configuration %+v, want an empty list", cfg)
	}
}
