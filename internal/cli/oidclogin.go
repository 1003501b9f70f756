package cli

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"html"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"time"

	"github.com/coreos/go-oidc/v3/oidc"
	"github.com/spf13/cobra"
	"golang.org/x/oauth2"

	"kiln.dev/kiln/api/client"
	v1 "kiln.dev/kiln/api/v1"
)

// OIDCLogin is what 'kiln login --oidc' keeps beside the Kiln token it got:
// how to get the next one without asking the person again.
type OIDCLogin struct {
	Issuer   string `json:"issuer"`
	ClientID string `json:"clientID"`
	// RefreshToken is the identity provider's: the config file is 0600,
	// and only its user may read it.
	RefreshToken string `json:"refreshToken,omitempty"`
	// Expires is when the Kiln token ends; within renewBefore of it a
	// command signs in again with RefreshToken first.
	Expires time.Time `json:"expires"`
}

// renewBefore is how long before its end a signed-in token is renewed.
const renewBefore = time.Minute

// oidcScopes are what a sign-in asks the provider for: the ID token, the
// email (the default username claim), groups and a refresh token.
var oidcScopes = []string{oidc.ScopeOpenID, "email", "profile", "groups", oidc.ScopeOfflineAccess}

// oidcLoginFlags are 'kiln login --oidc's flags.
type oidcLoginFlags struct {
	on      bool
	issuer  string
	device  bool
	timeout time.Duration
}

// loginOIDC signs in with the identity provider the server trusts: the
// authorization code flow with PKCE through a loopback redirect (the
// browser is $BROWSER, else xdg-open; the URL is printed either way), or the
// device flow; the ID token is traded for a Kiln token (POST /v1/auth/oidc).
func (a *app) loginOIDC(cmd *cobra.Command, server string, ca []byte, f oidcLoginFlags, path string, old Config) error {
	ctx, cancel := context.WithTimeout(cmd.Context(), f.timeout)
	defer cancel()
	api := newClient(server, "", ca)
	conf, err := api.SignInConfig(ctx)
	if err != nil {
		return &hintError{fmt.Sprintf("cannot ask %s which identity providers it trusts; nothing was saved", server), err}
	}
	is, err := pickIssuer(conf.Issuers, f.issuer, server)
	if err != nil {
		return err
	}
	provider, err := oidc.NewProvider(ctx, is.URL)
	if err != nil {
		return fmt.Errorf("cannot read the identity provider %s's discovery document: %w", is.URL, err)
	}
	cfg := &oauth2.Config{ClientID: is.ClientID, Endpoint: provider.Endpoint(), Scopes: oidcScopes}
	var tok *oauth2.Token
	if f.device {
		tok, err = a.deviceFlow(ctx, cfg, is.URL)
	} else {
		tok, err = a.browserFlow(ctx, cfg, is.URL, f.timeout)
	}
	if err != nil {
		return err
	}
	in, err := trade(ctx, api, tok, is.URL)
	if err != nil {
		return err
	}
	c := Config{Server: server, Token: in.Token.Value, Project: a.flags.project, CA: string(ca),
		OIDC: &OIDCLogin{Issuer: is.URL, ClientID: is.ClientID, RefreshToken: tok.RefreshToken, Expires: in.Token.ExpiresAt}}
	if c.Project == "" {
		c.Project = old.Project
	}
	if err := writeConfig(path, c); err != nil {
		return err
	}
	fmt.Fprintf(a.stderr, "Signed in to %s as %s with %s until %s. Saved %s\n", server, in.User.Name, is.URL,
		in.Token.ExpiresAt.Local().Format(time.RFC3339), path)
	if c.OIDC.RefreshToken == "" {
		fmt.Fprintln(a.stderr, "The identity provider gave no refresh token: sign in again when this one ends.")
	}
	return nil
}

// pickIssuer is the issuer named (or the only one).
func pickIssuer(all []v1.SignInIssuer, want, server string) (v1.SignInIssuer, error) {
	var urls []string
	for _, is := range all {
		if want == "" && len(all) == 1 || is.URL == want {
			return is, nil
		}
		urls = append(urls, is.URL)
	}
	switch {
	case len(all) == 0:
		return v1.SignInIssuer{}, fmt.Errorf("%s trusts no identity provider (kilnd --oidc-issuer): log in with a token instead", server)
	case want == "":
		return v1.SignInIssuer{}, usageErrorf("%s trusts several identity providers: pick one with --issuer (%s)", server, strings.Join(urls, ", "))
	}
	return v1.SignInIssuer{}, usageErrorf("%s does not trust the identity provider %s; it trusts %s", server, want, strings.Join(urls, ", "))
}

// browserFlow runs the authorization code flow with PKCE: a listener on a
// loopback port is the redirect URI, the browser does the rest.
func (a *app) browserFlow(ctx context.Context, cfg *oauth2.Config, issuer string, timeout time.Duration) (*oauth2.Token, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("listen for the identity provider's redirect on a loopback port: %w", err)
	}
	defer ln.Close()
	cfg.RedirectURL = "http://" + ln.Addr().String() + "/callback"
	state, verifier := randomHex(16), oauth2.GenerateVerifier()
	authURL := cfg.AuthCodeURL(state, oauth2.S256ChallengeOption(verifier))

	type result struct {
		code string
		err  error
	}
	done := make(chan result, 1)
	srv := &http.Server{ReadHeaderTimeout: 10 * time.Second, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/callback" {
			http.NotFound(w, r)
			return
		}
		q := r.URL.Query()
		var res result
		switch {
		case q.Get("state") != state:
			http.Error(w, "This sign-in is not the one kiln started (its state differs). Run kiln login --oidc again.", http.StatusBadRequest)
			return // not ours: keep waiting for the real one
		case q.Get("error") != "":
			res.err = fmt.Errorf("the identity provider %s refused the sign-in: %s %s", issuer, q.Get("error"), q.Get("error_description"))
		case q.Get("code") == "":
			res.err = fmt.Errorf("the identity provider %s sent no code back", issuer)
		default:
			res.code = q.Get("code")
		}
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		if res.err != nil {
			fmt.Fprintf(w, "<!doctype html><title>Kiln</title><p>Sign-in failed: %s</p>", html.EscapeString(res.err.Error()))
		} else {
			fmt.Fprint(w, "<!doctype html><title>Kiln</title><p>Signed in to Kiln: you can close this tab and go back to the terminal.</p>")
		}
		select {
		case done <- res:
		default:
		}
	})}
	go srv.Serve(ln)
	defer srv.Close()

	fmt.Fprintf(a.stderr, "Sign in with %s in your browser:\n  %s\n", issuer, authURL)
	if err := a.openBrowser(authURL); err != nil {
		fmt.Fprintf(a.stderr, "(no browser opened: %v; open the URL above)\n", err)
	}
	fmt.Fprintf(a.stderr, "Waiting up to %s for the sign-in...\n", timeout)
	select {
	case res := <-done:
		if res.err != nil {
			return nil, res.err
		}
		tok, err := cfg.Exchange(ctx, res.code, oauth2.VerifierOption(verifier))
		if err != nil {
			return nil, fmt.Errorf("redeem the code at %s: %w", issuer, err)
		}
		return tok, nil
	case <-ctx.Done():
		return nil, fmt.Errorf("no sign-in came back from %s's page within %s (--timeout); nothing was saved", issuer, timeout)
	}
}

// openBrowser runs $BROWSER URL, else xdg-open URL where a display is.
func (a *app) openBrowser(u string) error {
	prog := a.env["BROWSER"]
	if prog == "" {
		if a.env["DISPLAY"] == "" && a.env["WAYLAND_DISPLAY"] == "" {
			return errors.New("no display")
		}
		prog = "xdg-open"
	}
	cmd := exec.Command(prog, u)
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	if err := cmd.Start(); err != nil {
		return err
	}
	go cmd.Wait()
	return nil
}

// deviceFlow runs the device authorization flow: for a terminal without a
// browser, the person opens the URL elsewhere and types the code.
func (a *app) deviceFlow(ctx context.Context, cfg *oauth2.Config, issuer string) (*oauth2.Token, error) {
	if cfg.Endpoint.DeviceAuthURL == "" {
		return nil, fmt.Errorf("the identity provider %s offers no device flow: sign in with the browser (without --device)", issuer)
	}
	resp, err := cfg.DeviceAuth(ctx)
	if err != nil {
		return nil, fmt.Errorf("start the device flow at %s: %w", issuer, err)
	}
	where := resp.VerificationURIComplete
	if where == "" {
		where = resp.VerificationURI
	}
	fmt.Fprintf(a.stderr, "On any device, open %s and enter the code %s (it expires at %s).\n", where, resp.UserCode,
		resp.Expiry.Local().Format(time.Kitchen))
	if a.env["BROWSER"] != "" { // a browser at hand after all: open the page there too
		if err := a.openBrowser(where); err != nil {
			fmt.Fprintf(a.stderr, "(no browser opened: %v)\n", err)
		}
	}
	tok, err := cfg.DeviceAccessToken(ctx, resp)
	if err != nil {
		return nil, fmt.Errorf("the device sign-in at %s did not complete: %w", issuer, err)
	}
	return tok, nil
}

// trade sends the ID token of tok to the server for a Kiln token.
func trade(ctx context.Context, api *client.Client, tok *oauth2.Token, issuer string) (*v1.SignIn, error) {
	raw, _ := tok.Extra("id_token").(string)
	if raw == "" {
		return nil, fmt.Errorf("the identity provider %s answered without an ID token (is the openid scope allowed for this client?)", issuer)
	}
	host, _ := os.Hostname()
	in, err := api.SignIn(ctx, v1.SignInRequest{IDToken: raw, Description: "kiln login on " + host})
	if err != nil {
		return nil, &hintError{"the server refused the sign-in; nothing was saved", err}
	}
	return in, nil
}

// renewOIDC signs in again with the refresh token when the config file's
// token is within renewBefore of its end, and saves the new one: commands
// keep working while the provider still vouches for the person.
func (a *app) renewOIDC(s *settings) error {
	o := s.file.OIDC
	if o == nil || time.Until(o.Expires) > renewBefore {
		return nil
	}
	// kubectl may run several 'kiln credential' at once: one renews, the
	// others wait and take what it saved (a refresh token is spent once).
	lock, err := os.OpenFile(s.Path+".lock", os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return fmt.Errorf("renew the sign-in: %w", err)
	}
	defer lock.Close()
	if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX); err != nil {
		return fmt.Errorf("renew the sign-in: lock %s: %w", lock.Name(), err)
	}
	if fresh, err := readConfig(s.Path); err == nil && fresh.OIDC != nil && fresh.Token != s.file.Token &&
		time.Until(fresh.OIDC.Expires) > renewBefore {
		s.file, s.Token, s.OIDC = fresh, fresh.Token, fresh.OIDC
		return nil
	}
	again := fmt.Sprintf("your sign-in with %s has ended: run kiln login --oidc --server %s", o.Issuer, s.Server)
	if o.RefreshToken == "" {
		return errors.New(again)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	provider, err := oidc.NewProvider(ctx, o.Issuer)
	if err != nil {
		return fmt.Errorf("renew the sign-in: cannot reach the identity provider %s: %w", o.Issuer, err)
	}
	cfg := &oauth2.Config{ClientID: o.ClientID, Endpoint: provider.Endpoint(), Scopes: oidcScopes}
	tok, err := cfg.TokenSource(ctx, &oauth2.Token{RefreshToken: o.RefreshToken}).Token()
	if err != nil {
		return &hintError{again, err}
	}
	// Providers rotate refresh tokens: keep the new one before anything
	// else can fail, or the next renewal would present a spent one.
	c := s.file
	next := *o
	if tok.RefreshToken != "" {
		next.RefreshToken = tok.RefreshToken
	}
	c.OIDC = &next
	if err := writeConfig(s.Path, c); err != nil {
		return err
	}
	s.file = c
	in, err := trade(ctx, newClient(s.Server, "", []byte(s.CA)), tok, o.Issuer)
	if err != nil {
		return err
	}
	c.Token, next.Expires = in.Token.Value, in.Token.ExpiresAt
	if err := writeConfig(s.Path, c); err != nil {
		return err
	}
	s.file, s.Token, s.OIDC = c, c.Token, c.OIDC
	return nil
}

func randomHex(n int) string {
	b := make([]byte, n)
	rand.Read(b)
	return hex.EncodeToString(b)
}
