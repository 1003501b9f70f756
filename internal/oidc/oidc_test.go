package oidc_test

import (
	"encoding/base64"
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	v1 "kiln.dev/kiln/api/v1"
	"kiln.dev/kiln/internal/oidc"
	"kiln.dev/kiln/test/oidcprovider"
)

var (
	ann   = oidcprovider.User{Name: "ann", Password: "ann-pw", Email: "Ann.Lee@example.com", Groups: []string{"eng", "/platform/admins"}}
	bob   = oidcprovider.User{Name: "bob", Password: "bob-pw", Email: "bob@example.com", GroupsClaim: "eng"}
	carol = oidcprovider.User{Name: "carol", Password: "carol-pw", Email: "carol@example.com", Unverified: true}
)

func verifier(t *testing.T, p *oidcprovider.Provider, now func() time.Time) *oidc.Verifier {
	t.Helper()
	v, err := oidc.New([]oidc.Issuer{{URL: p.URL, ClientID: oidcprovider.CLIClient,
		ConsoleClientID: oidcprovider.ConsoleClient}}, nil, now)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

func token(t *testing.T, p *oidcprovider.Provider, client string, u oidcprovider.User) string {
	t.Helper()
	id, _, err := p.Tokens(t.Context(), client, u.Name, u.Password)
	if err != nil {
		t.Fatalf("sign %s in with %s: %v", u.Name, client, err)
	}
	return id
}

// refused checks err is a refusal for reason, and that the reason is an
// error code the API documents.
func refused(t *testing.T, what string, err, reason error) {
	t.Helper()
	var r *oidc.RefusedError
	if !errors.As(err, &r) || !errors.Is(err, reason) {
		t.Errorf("%s: %v, want a refusal for %v", what, err, reason)
		return
	}
	if _, ok := v1.LookupCode(reason.Error()); !ok {
		t.Errorf("%s: the reason %v is not in the API's error codes", what, reason)
	}
}

// TestVerify: a real provider's ID token gives the person and their
// groups; one for another app, an expired one, a tampered one, one from a
// provider kilnd does not trust, and ones with bad claims are refused, each
// for its reason; a provider that cannot be reached is not the client's
// fault.
func TestVerify(t *testing.T) {
	p := oidcprovider.Start(t, oidcprovider.Options{}, ann, bob, carol)
	v := verifier(t, p, nil)
	ctx := t.Context()

	raw := token(t, p, oidcprovider.CLIClient, ann)
	id, err := v.Verify(ctx, raw)
	if err != nil {
		t.Fatalf("Verify(ann's token): %v", err)
	}
	if id.User != "ann-lee-example-com" || id.Claimed != "Ann.Lee@example.com" || id.Issuer != p.URL || id.Subject == "" {
		t.Errorf("identity = %+v, want user ann-lee-example-com of %s", id, p.URL)
	}
	if !slices.Equal(id.Groups, []string{"eng", "/platform/admins"}) {
		t.Errorf("groups = %v, want eng and /platform/admins", id.Groups)
	}
	if left := time.Until(id.Expiry); left < 50*time.Minute || left > 61*time.Minute {
		t.Errorf("expiry in %v, want the provider's hour", left)
	}

	_, err = v.Verify(ctx, token(t, p, oidcprovider.OtherClient, ann))
	refused(t, "another app's token", err, oidc.ErrWrongAudience)

	_, err = verifier(t, p, func() time.Time { return time.Now().Add(2 * time.Hour) }).Verify(ctx, raw)
	refused(t, "a token two hours later", err, oidc.ErrExpired)

	// Ann makes herself an owner's group: the signature no longer holds.
	parts := strings.Split(raw, ".")
	payload, _ := base64.RawURLEncoding.DecodeString(parts[1])
	var claims map[string]any
	if err := json.Unmarshal(payload, &claims); err != nil {
		t.Fatal(err)
	}
	claims["groups"] = []string{"eng", "owners"}
	payload, _ = json.Marshal(claims)
	parts[1] = base64.RawURLEncoding.EncodeToString(payload)
	_, err = v.Verify(ctx, strings.Join(parts, "."))
	refused(t, "a tampered token", err, oidc.ErrBadSignature)

	_, err = v.Verify(ctx, "not-a-jwt")
	refused(t, "a string that is no JWT", err, oidc.ErrMalformed)

	other := oidcprovider.Start(t, oidcprovider.Options{}, ann)
	_, err = v.Verify(ctx, token(t, other, oidcprovider.CLIClient, ann))
	refused(t, "another provider's token", err, oidc.ErrUnknownIssuer)

	_, err = v.Verify(ctx, token(t, p, oidcprovider.CLIClient, bob))
	refused(t, "a groups claim that is a string", err, oidc.ErrBadClaim)
	_, err = v.Verify(ctx, token(t, p, oidcprovider.CLIClient, carol))
	refused(t, "an email not verified", err, oidc.ErrBadClaim)

	// A verifier that never reached its provider before it went away.
	late := verifier(t, p, nil)
	raw = token(t, p, oidcprovider.CLIClient, ann)
	p.Stop()
	var down *oidc.UnavailableError
	if _, err := late.Verify(ctx, raw); !errors.As(err, &down) || down.Issuer != p.URL {
		t.Errorf("a provider that cannot be reached: %v, want UnavailableError naming %s", err, p.URL)
	}
}

func TestNew(t *testing.T) {
	for _, tc := range []struct {
		in    oidc.Issuer
		field string
	}{
		{oidc.Issuer{ClientID: "c"}, "url"},
		{oidc.Issuer{URL: "http://idp.example.com", ClientID: "c"}, "url"},
		{oidc.Issuer{URL: "https://idp.example.com?x=1", ClientID: "c"}, "url"},
		{oidc.Issuer{URL: "https://idp.example.com"}, "clientID"},
		{oidc.Issuer{URL: "https://idp.example.com", ClientID: "c", ConsoleClientSecret: "s"}, "consoleClientID"},
	} {
		var ce *oidc.ConfigError
		if _, err := oidc.New([]oidc.Issuer{tc.in}, nil, nil); !errors.As(err, &ce) || ce.Field != tc.field {
			t.Errorf("New(%+v) = %v, want a ConfigError of %s", tc.in, err, tc.field)
		}
	}
	v, err := oidc.New([]oidc.Issuer{{URL: "http://127.0.0.1:5556", ClientID: "c"}}, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	if is := v.Issuers()[0]; is.UsernameClaim != "email" || is.GroupsClaim != "groups" || is.ConsoleClientID != "c" {
		t.Errorf("defaults = %+v", is)
	}
}

func TestUserName(t *testing.T) {
	for claim, want := range map[string]string{
		"ann":                   "ann",
		"Ann.Lee@example.com":   "ann-lee-example-com",
		"--x--":                 "x",
		strings.Repeat("a", 70): strings.Repeat("a", 54) + "-" + "", // checked below
		"日本":                    "oidc-",
	} {
		got := oidc.UserName(claim)
		if len(got) > oidc.MaxUserName || !strings.HasPrefix(got, want) {
			t.Errorf("UserName(%q) = %q, want a label starting %q", claim, got, want)
		}
	}
	if oidc.UserName(strings.Repeat("a", 70)) == oidc.UserName(strings.Repeat("a", 71)) {
		t.Error("two long claims cut to one name")
	}
}
