// Package oidcprovider starts a real OpenID Connect provider for tests:
// zitadel/oidc's certified provider library (pkg/op) with its example
// storage and login page, on a loopback port, with static users, passwords
// and groups. It serves discovery, keys, the authorization code flow with
// PKCE, refresh tokens and the device flow, as an organisation's identity
// provider would; nothing in it knows about Kiln.
//
// Its ID tokens carry "email", "email_verified" and "groups" whatever
// scopes are asked for (like a provider configured with a groups claim).
package oidcprovider

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/url"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/zitadel/oidc/v3/example/server/exampleop"
	"github.com/zitadel/oidc/v3/example/server/storage"
	"github.com/zitadel/oidc/v3/pkg/oidc"
	"github.com/zitadel/oidc/v3/pkg/op"
	"golang.org/x/oauth2"
	"golang.org/x/text/language"
)

// Clients the provider knows.
const (
	// CLIClient is a public (native) client: PKCE, any loopback port.
	CLIClient = "kiln-cli"
	// ConsoleClient is a confidential (web) client with ConsoleSecret.
	ConsoleClient = "kiln-console"
	ConsoleSecret = "console-secret"
	// OtherClient is another application's public client: its ID tokens
	// are not for Kiln.
	OtherClient = "other-app"
)

// User is a person the provider signs in.
type User struct {
	Name     string // what they type on the login page
	Password string
	Email    string
	Groups   []string
	// GroupsClaim, when set, is sent as the groups claim instead of Groups:
	// how a test makes a provider send a claim of the wrong type.
	GroupsClaim any
	// Unverified sends email_verified false.
	Unverified bool
}

// Provider is a running provider.
type Provider struct {
	// URL is the issuer: http://127.0.0.1:PORT.
	URL string
	srv *httptest.Server
	st  *store
}

// Options change what Start makes.
type Options struct {
	// ConsoleRedirect is the console client's redirect URI (kilnd's
	// callback), known only once kilnd listens; SetConsoleRedirect sets
	// it later.
	ConsoleRedirect string
	// IDTokenLifetime is the life of every ID token; 0 means an hour.
	IDTokenLifetime time.Duration
}

// Start starts a provider with users; it stops when the test ends.
func Start(t testing.TB, opts Options, users ...User) *Provider {
	t.Helper()
	st := &store{users: map[string]*entry{}, life: opts.IDTokenLifetime}
	if st.life == 0 {
		st.life = time.Hour
	}
	for _, u := range users {
		// The id is the name: the example's device flow records the
		// name typed in as the subject.
		id := u.Name
		st.users[id] = &entry{User: u, su: &storage.User{ID: id, Username: u.Name, Password: u.Password,
			Email: u.Email, EmailVerified: !u.Unverified, PreferredLanguage: language.English}}
	}
	p := &Provider{st: st}
	// The issuer must be known before the handler is made: listen first.
	p.srv = httptest.NewUnstartedServer(nil)
	p.URL = "http://" + p.srv.Listener.Addr().String()
	st.console = storage.WebClient(ConsoleClient, ConsoleSecret, opts.ConsoleRedirect)
	clients := map[string]*storage.Client{
		CLIClient:     storage.NativeClient(CLIClient, "http://127.0.0.1/callback"),
		OtherClient:   storage.NativeClient(OtherClient, "http://127.0.0.1/callback"),
		ConsoleClient: st.console,
	}
	st.Storage = storage.NewStorageWithClients(st, clients)
	st.clients = clients
	p.srv.Config.Handler = exampleop.SetupServer(p.URL, st, nil, false)
	p.srv.Start()
	t.Cleanup(p.srv.Close)
	return p
}

// SetConsoleRedirect registers the console client's redirect URI.
func (p *Provider) SetConsoleRedirect(uri string) {
	p.st.clients[ConsoleClient] = storage.WebClient(ConsoleClient, ConsoleSecret, uri)
}

// Login signs user in on the provider's login page as a browser would:
// it follows authURL's redirects, fills in the form, and follows the
// provider's redirects until one leaves the provider. It returns that
// last location (the client's redirect URI with code and state) without
// requesting it.
func (p *Provider) Login(ctx context.Context, authURL, user, password string) (*url.URL, error) {
	return Browse(ctx, authURL, user, password)
}

// Browse is Login for a provider known only by authURL (a program a CLI
// runs as its $BROWSER): the provider is authURL's scheme and host.
func Browse(ctx context.Context, authURL, user, password string) (*url.URL, error) {
	start, err := url.Parse(authURL)
	if err != nil {
		return nil, err
	}
	origin := start.Scheme + "://" + start.Host
	jar, _ := cookiejar.New(nil)
	var left *url.URL
	c := &http.Client{Jar: jar, Timeout: 30 * time.Second,
		CheckRedirect: func(req *http.Request, via []*http.Request) error {
			if !strings.HasPrefix(req.URL.String(), origin+"/") {
				left = req.URL
				return http.ErrUseLastResponse
			}
			return nil
		}}
	get := func(u string) (*http.Response, error) {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
		if err != nil {
			return nil, err
		}
		return c.Do(req)
	}
	resp, err := get(authURL)
	if err != nil {
		return nil, err
	}
	resp.Body.Close()
	if left != nil { // an error sent back to the client, or a session
		return left, nil
	}
	id := resp.Request.URL.Query().Get("authRequestID")
	if resp.StatusCode != http.StatusOK || id == "" {
		return nil, fmt.Errorf("the provider did not show its login page for %s: %s at %s", authURL, resp.Status, resp.Request.URL)
	}
	form := url.Values{"id": {id}, "username": {user}, "password": {password}}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, origin+"/login/username", strings.NewReader(form.Encode()))
	if err != nil {
		return nil, err
	}
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	resp, err = c.Do(req)
	if err != nil {
		return nil, err
	}
	resp.Body.Close()
	if left == nil {
		return nil, fmt.Errorf("the provider refused %s's login: %s", user, resp.Status)
	}
	return left, nil
}

// ApproveDevice signs user in on the provider's device page and allows the
// device whose code is userCode, as the person would on their phone.
func ApproveDevice(ctx context.Context, deviceURL, userCode, user, password string) error {
	start, err := url.Parse(deviceURL)
	if err != nil {
		return err
	}
	origin := start.Scheme + "://" + start.Host
	jar, _ := cookiejar.New(nil)
	c := &http.Client{Jar: jar, Timeout: 30 * time.Second}
	post := func(path string, form url.Values) error {
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, origin+path, strings.NewReader(form.Encode()))
		if err != nil {
			return err
		}
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		resp, err := c.Do(req)
		if err != nil {
			return err
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK || resp.Request.URL.Query().Get("prompt") != "" {
			return fmt.Errorf("the provider's %s answered %s at %s: %.200s", path, resp.Status, resp.Request.URL, body)
		}
		return nil
	}
	if err := post("/device/login", url.Values{"user_code": {userCode}, "username": {user}, "password": {password}}); err != nil {
		return err
	}
	return post("/device/confirm", url.Values{"action": {"allowed"}})
}

// BrowserMain is a program that stands in for a person's browser: run as
// "PROGRAM URL" (a CLI's $BROWSER), it signs in $OIDC_USER with
// $OIDC_PASSWORD at the provider of URL and then requests the location the
// provider sends it back to (the CLI's loopback redirect), as a browser
// would. It returns the exit code.
func BrowserMain() int {
	if len(os.Args) != 2 {
		fmt.Fprintln(os.Stderr, "usage: oidc-browser URL (with OIDC_USER and OIDC_PASSWORD)")
		return 2
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if u, err := url.Parse(os.Args[1]); err == nil && strings.HasPrefix(u.Path, "/device") {
		if err := ApproveDevice(ctx, os.Args[1], u.Query().Get("user_code"), os.Getenv("OIDC_USER"), os.Getenv("OIDC_PASSWORD")); err != nil {
			fmt.Fprintln(os.Stderr, "oidc-browser:", err)
			return 1
		}
		return 0
	}
	back, err := Browse(ctx, os.Args[1], os.Getenv("OIDC_USER"), os.Getenv("OIDC_PASSWORD"))
	if err == nil {
		var req *http.Request
		if req, err = http.NewRequestWithContext(ctx, http.MethodGet, back.String(), nil); err == nil {
			var resp *http.Response
			if resp, err = http.DefaultClient.Do(req); err == nil {
				resp.Body.Close()
			}
		}
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "oidc-browser:", err)
		return 1
	}
	return 0
}

// store is the example storage with the users above, ID tokens that carry
// email and groups, and one ID token lifetime.
type store struct {
	*storage.Storage
	users   map[string]*entry
	clients map[string]*storage.Client
	console *storage.Client
	life    time.Duration
}

type entry struct {
	User
	su *storage.User
}

// The storage.UserStore the example storage reads users from.

func (s *store) GetUserByID(id string) *storage.User {
	if e, ok := s.users[id]; ok {
		return e.su
	}
	return nil
}

func (s *store) GetUserByUsername(name string) *storage.User {
	for _, e := range s.users {
		if e.Name == name {
			return e.su
		}
	}
	return nil
}

func (s *store) ExampleClientID() string { return "service" }

// GetClientByClientID gives every client the provider's ID token lifetime.
func (s *store) GetClientByClientID(ctx context.Context, id string) (op.Client, error) {
	c, ok := s.clients[id]
	if !ok {
		return nil, errors.New("no such client")
	}
	return lifetime{Client: c, life: s.life}, nil
}

type lifetime struct {
	*storage.Client
	life time.Duration
}

func (c lifetime) IDTokenLifetime() time.Duration { return c.life }

// GrantTypes adds the device flow to the CLI's client.
func (c lifetime) GrantTypes() []oidc.GrantType {
	gt := c.Client.GrantTypes()
	if c.GetID() == CLIClient {
		gt = append(gt, oidc.GrantTypeDeviceCode)
	}
	return gt
}

// SetUserinfoFromRequest puts email and groups in every ID token.
func (s *store) SetUserinfoFromRequest(ctx context.Context, info *oidc.UserInfo, token op.IDTokenRequest, scopes []string) error {
	if err := s.Storage.SetUserinfoFromRequest(ctx, info, token, scopes); err != nil {
		return err
	}
	e, ok := s.users[token.GetSubject()]
	if !ok {
		return errors.New("no such user")
	}
	info.Email, info.EmailVerified = e.Email, oidc.Bool(!e.Unverified)
	if e.Unverified { // a false oidc.Bool is left out of the JSON
		info.AppendClaims("email_verified", false)
	}
	var groups any = e.Groups
	if e.GroupsClaim != nil {
		groups = e.GroupsClaim
	}
	info.AppendClaims("groups", groups)
	return nil
}

// Tokens signs user in with a public client (CLIClient, OtherClient) as
// an app would: the authorization code flow with PKCE through Login, the
// code redeemed at the token endpoint. It returns the ID token and the
// refresh token.
func (p *Provider) Tokens(ctx context.Context, client, user, password string) (idToken, refresh string, err error) {
	cfg := p.OAuth2(client, "http://127.0.0.1:9/callback")
	verifier := oauth2.GenerateVerifier()
	back, err := p.Login(ctx, cfg.AuthCodeURL("state-1", oauth2.S256ChallengeOption(verifier)), user, password)
	if err != nil {
		return "", "", err
	}
	code := back.Query().Get("code")
	if code == "" {
		return "", "", fmt.Errorf("the provider sent no code back: %s", back)
	}
	tok, err := cfg.Exchange(ctx, code, oauth2.VerifierOption(verifier))
	if err != nil {
		return "", "", err
	}
	id, _ := tok.Extra("id_token").(string)
	if id == "" {
		return "", "", errors.New("the token answer has no id_token")
	}
	return id, tok.RefreshToken, nil
}

// OAuth2 is a public client's configuration against this provider.
func (p *Provider) OAuth2(client, redirect string) *oauth2.Config {
	return &oauth2.Config{ClientID: client, RedirectURL: redirect,
		Endpoint: oauth2.Endpoint{AuthURL: p.URL + "/auth", TokenURL: p.URL + "/oauth/token", AuthStyle: oauth2.AuthStyleInParams},
		Scopes:   []string{"openid", "email", "groups", "offline_access"}}
}

// Stop stops the provider: what an identity provider that cannot be
// reached looks like.
func (p *Provider) Stop() { p.srv.Close() }
