package e2e

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/chromedp/chromedp"

	"kiln.dev/kiln/api/client"
	v1 "kiln.dev/kiln/api/v1"
	"kiln.dev/kiln/test/oidcprovider"
)

// TestConsoleSignInWithProvider: a person signs in to the console with the
// organisation's identity provider in a real browser (the redirect flow:
// the provider's own login page, kilnd as the console's client with its
// secret), is who the provider says, and has the role their group is bound to.
func TestConsoleSignInWithProvider(t *testing.T) {
	t.Parallel()
	chromium(t)
	p := oidcprovider.Start(t, oidcprovider.Options{},
		oidcprovider.User{Name: "ann", Password: "ann-pw", Email: "ann@example.com", Groups: []string{"eng"}})
	secret := filepath.Join(t.TempDir(), "console-secret")
	if err := os.WriteFile(secret, []byte(oidcprovider.ConsoleSecret+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	e := startWithoutKube(t, "kilnd", "--oidc-issuer", p.URL, "--oidc-client-id", oidcprovider.CLIClient,
		"--oidc-console-client-id", oidcprovider.ConsoleClient, "--oidc-console-client-secret-file", secret)
	p.SetConsoleRedirect(e.k.URL() + "/login/oidc/callback")
	if _, err := e.c.PutGroupBinding(t.Context(), "default", &v1.GroupBinding{Name: "eng", Role: v1.RoleOperator}); err != nil {
		t.Fatal(err)
	}

	b := e.signedOutBrowser(t)
	b.navigate("/clusters", "#token")
	b.checkAccessible("the sign-in page with an identity provider")
	provider := `a[href^="/login/oidc?issuer="]`
	b.land("go to the identity provider", "#username", click(provider))
	if loc := b.location(); !strings.HasPrefix(loc, p.URL+"/login/username") {
		t.Fatalf("the provider's button led to %s, want %s's login page", loc, p.URL)
	}
	b.land("sign in at the provider", `header form[action="/logout"]`,
		chromedp.SendKeys(chromedp.CSS("#username"), "ann"),
		chromedp.SendKeys(chromedp.CSS("#password"), "ann-pw"),
		chromedp.Click(chromedp.CSS(`button[type=submit]`)),
	)
	if loc := b.location(); loc != b.url+"/clusters" {
		t.Errorf("after signing in the browser is at %s, want /clusters", loc)
	}
	who := eval[string](b, `document.querySelector("header .who strong").innerText`)
	if who != "user:ann-example-com" {
		t.Errorf("signed in as %q, want user:ann-example-com", who)
	}
	// Her group's role: operator may create clusters.
	if !eval[bool](b, `document.querySelector('header nav a[href="/clusters/new"]') !== null`) {
		t.Error("an operator (through the group eng) is not offered cluster creation")
	}
	tokens, err := e.c.ListTokens(t.Context(), client.TokenOwner{User: "ann-example-com"})
	if err != nil || len(tokens) != 1 || tokens[0].Description != "console session" || len(tokens[0].Groups) != 1 {
		t.Errorf("ann's tokens: %+v (%v), want one console session with her group", tokens, err)
	}
}
