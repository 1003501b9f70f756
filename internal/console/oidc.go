package console

import (
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"html"
	"net/http"
	"net/url"
	"strings"
	"time"

	"golang.org/x/oauth2"

	v1 "kiln.dev/kiln/api/v1"
	"kiln.dev/kiln/internal/oidc"
)

// Signing in with an identity provider: kilnd is the console's OpenID
// Connect client (the redirect flow with PKCE, and the console client's
// secret when kilnd has one). /login/oidc sends the browser to the
// provider with a state and a PKCE verifier kept in a short-lived cookie
// (HttpOnly, signed with a key of this process); the provider sends it back
// to /login/oidc/callback, where kilnd redeems the code, trades the ID token
// for a Kiln token (POST /v1/auth/oidc) and opens the session as the token
// form does. A callback served by another frontend than the one that
// started the sign-in finds no valid cookie and says to sign in again.

const (
	flowCookie = "kiln_oidc_flow"
	flowLife   = 10 * time.Minute
	callback   = "/login/oidc/callback"
)

// flow is what the flow cookie keeps between the two requests.
type flow struct {
	Issuer   string    `json:"iss"`
	State    string    `json:"state"`
	Verifier string    `json:"verifier"`
	Next     string    `json:"next"`
	Expires  time.Time `json:"exp"`
}

// issuerButton is a "Sign in with" button of the sign-in page.
type issuerButton struct {
	URL, Label string
}

func (c *Console) issuerButtons() []issuerButton {
	if c.oidc == nil {
		return nil
	}
	var out []issuerButton
	for _, is := range c.oidc.Issuers() {
		label := is.URL
		if u, err := url.Parse(is.URL); err == nil {
			label = u.Host
		}
		out = append(out, issuerButton{URL: is.URL, Label: label})
	}
	return out
}

// oauth2Config is the console client of issuer is, redirected back to the
// host the browser used.
func (c *Console) oauth2Config(ctx context.Context, r *http.Request, is oidc.Issuer) (*oauth2.Config, error) {
	authURL, tokenURL, err := c.oidc.Endpoints(ctx, is.URL)
	if err != nil {
		return nil, err
	}
	scheme := "http"
	if r.TLS != nil {
		scheme = "https"
	}
	return &oauth2.Config{ClientID: is.ConsoleClientID, ClientSecret: is.ConsoleClientSecret,
		Endpoint:    oauth2.Endpoint{AuthURL: authURL, TokenURL: tokenURL},
		RedirectURL: scheme + "://" + r.Host + callback,
		Scopes:      []string{"openid", "email", "profile", "groups"}}, nil
}

func (c *Console) issuer(url string) (oidc.Issuer, bool) {
	if c.oidc != nil {
		for _, is := range c.oidc.Issuers() {
			if is.URL == url {
				return is, true
			}
		}
	}
	return oidc.Issuer{}, false
}

// oidcStart sends the browser to the identity provider.
func (c *Console) oidcStart(w http.ResponseWriter, r *http.Request) {
	next := safeNext(r.URL.Query().Get("next"))
	is, ok := c.issuer(r.URL.Query().Get("issuer"))
	if !ok {
		c.signInFailed(w, r, next, http.StatusBadRequest, "Kiln does not trust that identity provider: pick one on this page.")
		return
	}
	cfg, err := c.oauth2Config(r.Context(), r, is)
	if err != nil {
		c.signInFailed(w, r, next, http.StatusServiceUnavailable, "The identity provider "+is.URL+" cannot be reached: try again later. ("+err.Error()+")")
		return
	}
	f := flow{Issuer: is.URL, State: randomString(), Verifier: oauth2.GenerateVerifier(), Next: next, Expires: time.Now().Add(flowLife)}
	http.SetCookie(w, &http.Cookie{Name: flowCookie, Value: c.sealFlow(f), Path: callback, MaxAge: int(flowLife / time.Second),
		HttpOnly: true, Secure: r.TLS != nil, SameSite: http.SameSiteLaxMode}) // Lax: the provider's redirect back is a cross-site navigation
	http.Redirect(w, r, cfg.AuthCodeURL(f.State, oauth2.S256ChallengeOption(f.Verifier)), http.StatusSeeOther)
}

// oidcCallback finishes the sign-in the provider sends the browser back
// from.
func (c *Console) oidcCallback(w http.ResponseWriter, r *http.Request) {
	http.SetCookie(w, &http.Cookie{Name: flowCookie, Value: "", Path: callback, MaxAge: -1,
		HttpOnly: true, Secure: r.TLS != nil, SameSite: http.SameSiteLaxMode})
	ck, err := r.Cookie(flowCookie)
	var f flow
	if err == nil {
		f, err = c.openFlow(ck.Value)
	}
	q := r.URL.Query()
	switch {
	case err != nil || f.State != q.Get("state"):
		c.signInFailed(w, r, "/clusters", http.StatusBadRequest, "This sign-in was not started here, or it took longer than 10 minutes: sign in again.")
		return
	case q.Get("error") != "":
		c.signInFailed(w, r, f.Next, http.StatusUnauthorized, "The identity provider refused the sign-in: "+q.Get("error")+" "+q.Get("error_description"))
		return
	}
	is, ok := c.issuer(f.Issuer)
	if !ok {
		c.signInFailed(w, r, f.Next, http.StatusBadRequest, "Kiln no longer trusts "+f.Issuer+": sign in another way.")
		return
	}
	cfg, err := c.oauth2Config(r.Context(), r, is)
	if err != nil {
		c.signInFailed(w, r, f.Next, http.StatusServiceUnavailable, "The identity provider "+is.URL+" cannot be reached: try again later.")
		return
	}
	tok, err := cfg.Exchange(r.Context(), q.Get("code"), oauth2.VerifierOption(f.Verifier))
	if err != nil {
		c.signInFailed(w, r, f.Next, http.StatusBadGateway, "The identity provider did not redeem the sign-in: "+err.Error())
		return
	}
	raw, _ := tok.Extra("id_token").(string)
	in, err := c.client(r, "").SignIn(r.Context(), v1.SignInRequest{IDToken: raw, Description: sessionDescription})
	if err != nil {
		if ae, ok := apiError(err); ok && ae.StatusCode < 500 {
			c.signInFailed(w, r, f.Next, ae.StatusCode, "Kiln refused the sign-in: "+ae.Err.Message)
			return
		}
		c.fail(w, r, nil, err)
		return
	}
	setSession(w, r, in.Token.Value, in.Token.ExpiresAt)
	// Not a redirect: this request came from the provider's site, and a
	// redirect would carry that on, so the browser would not send the
	// SameSite=Strict session cookie to the next page. A page of our own
	// that moves on starts a navigation from this site.
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	next := html.EscapeString(f.Next)
	fmt.Fprintf(w, `<!doctype html><html><head><meta http-equiv="refresh" content="0;url=%s"><title>Signed in</title></head>`+
		`<body><p>Signed in as %s. <a href="%s">Continue</a></p></body></html>`, next, html.EscapeString(in.User.Name), next)
}

func (c *Console) signInFailed(w http.ResponseWriter, r *http.Request, next string, status int, msg string) {
	c.render(w, r, status, "login.html", page{Title: "Sign in", Data: c.loginView(next),
		Error: &v1.Error{Code: http.StatusText(status), Message: msg}})
}

// sealFlow and openFlow sign the flow cookie with the process's key.
func (c *Console) sealFlow(f flow) string {
	b, _ := json.Marshal(f)
	payload := base64.RawURLEncoding.EncodeToString(b)
	return payload + "." + c.flowMAC(payload)
}

func (c *Console) openFlow(v string) (flow, error) {
	var f flow
	payload, mac, ok := strings.Cut(v, ".")
	if !ok || !hmac.Equal([]byte(mac), []byte(c.flowMAC(payload))) {
		return f, http.ErrNoCookie
	}
	b, err := base64.RawURLEncoding.DecodeString(payload)
	if err != nil || json.Unmarshal(b, &f) != nil || time.Now().After(f.Expires) {
		return f, http.ErrNoCookie
	}
	return f, nil
}

func (c *Console) flowMAC(payload string) string {
	m := hmac.New(sha256.New, c.flowKey)
	m.Write([]byte(payload))
	return hex.EncodeToString(m.Sum(nil))
}

func randomString() string {
	b := make([]byte, 16)
	rand.Read(b)
	return hex.EncodeToString(b)
}
