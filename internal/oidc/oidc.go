// Package oidc is how kilnd trusts OpenID Connect identity providers: it
// verifies an ID token one of them issued (its signature against the
// issuer's published keys, its audience, its expiry) and reads who the
// person is and which groups they are in. Exchanging a verified token for a
// Kiln token is the API's (internal/server); the CLI and the console get ID
// tokens with the provider's own flows (golang.org/x/oauth2).
package oidc

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"sync"
	"time"

	"github.com/coreos/go-oidc/v3/oidc"
)

// Issuer is one identity provider kilnd trusts.
type Issuer struct {
	// URL is the issuer as its ID tokens spell it (their "iss"); its
	// discovery document is URL/.well-known/openid-configuration. https,
	// or http on a loopback address (tests, a provider on the same host).
	URL string `json:"url"`
	// ClientID is the client people sign in with from the CLI: a public
	// client (authorization code with PKCE, a loopback redirect, the device
	// flow). Its ID tokens are accepted.
	ClientID string `json:"clientID"`
	// ConsoleClientID and ConsoleClientSecret are the client the console
	// signs in with (the redirect flow; kilnd is the client). Empty: the
	// console uses ClientID with PKCE and no secret. Its ID tokens are
	// accepted too.
	ConsoleClientID     string `json:"consoleClientID,omitempty"`
	ConsoleClientSecret string `json:"-"`
	// ConsoleClientSecretFile is where ConsoleClientSecret is read from.
	ConsoleClientSecretFile string `json:"consoleClientSecretFile,omitempty"`
	// UsernameClaim names the person: "email" by default (then
	// "email_verified", when present, must be true).
	UsernameClaim string `json:"usernameClaim,omitempty"`
	// GroupsClaim lists the person's groups: "groups" by default. A token
	// without it has no groups; one where it is not a list of strings is
	// refused.
	GroupsClaim string `json:"groupsClaim,omitempty"`
}

// Defaults of Issuer's claims.
const (
	DefaultUsernameClaim = "email"
	DefaultGroupsClaim   = "groups"
)

// Identity is who a verified ID token says signed in.
type Identity struct {
	Issuer  string
	Subject string // the provider's id of the person: stable, unlike names
	// Claimed is the username claim's value as the provider spells it
	// ("ann@example.com"); User, the Kiln user name made of it.
	Claimed string
	User    string
	Groups  []string
	Expiry  time.Time // the ID token's
}

// Why a token is refused: the Reason of a *RefusedError, and the code the
// API answers with.
var (
	ErrMalformed     = errors.New("MalformedToken")
	ErrUnknownIssuer = errors.New("UnknownIssuer")
	ErrWrongAudience = errors.New("WrongAudience")
	ErrExpired       = errors.New("TokenExpired")
	ErrBadSignature  = errors.New("BadSignature")
	ErrBadClaim      = errors.New("BadClaim")
)

// RefusedError is an ID token refused: the client's fault (401).
type RefusedError struct {
	Reason error // one of the Err values above
	Why    string
}

func (e *RefusedError) Error() string { return e.Why }
func (e *RefusedError) Unwrap() error { return e.Reason }

// UnavailableError is an issuer that could not be asked (its discovery
// document or its keys): not the client's fault (503).
type UnavailableError struct {
	Issuer string
	Err    error
}

func (e *UnavailableError) Error() string {
	return fmt.Sprintf("the identity provider %s cannot be reached: %v", e.Issuer, e.Err)
}
func (e *UnavailableError) Unwrap() error { return e.Err }

// Verifier verifies ID tokens of the issuers it was made with.
type Verifier struct {
	issuers []*issuer
	client  *http.Client
	now     func() time.Time
}

// issuer is one Issuer and what was discovered of it: discovered lazily,
// so that kilnd starts while a provider is down, and again after a failure.
type issuer struct {
	Issuer
	mu       sync.Mutex
	provider *oidc.Provider
}

// New checks the issuers and returns a Verifier. client nil means a client
// with a 10 s timeout; now nil means time.Now.
func New(issuers []Issuer, client *http.Client, now func() time.Time) (*Verifier, error) {
	if client == nil {
		client = &http.Client{Timeout: 10 * time.Second}
	}
	if now == nil {
		now = time.Now
	}
	v := &Verifier{client: client, now: now}
	seen := map[string]bool{}
	for i, in := range issuers {
		if err := check(&in); err != nil {
			return nil, fmt.Errorf("OIDC issuer %d: %w", i+1, err)
		}
		if seen[in.URL] {
			return nil, fmt.Errorf("OIDC issuer %s is given twice", in.URL)
		}
		seen[in.URL] = true
		v.issuers = append(v.issuers, &issuer{Issuer: in})
	}
	return v, nil
}

// ConfigError is an Issuer that cannot work; Field names its field.
type ConfigError struct {
	Field string // "url", "clientID" or "consoleClientID"
	Why   string
}

func (e *ConfigError) Error() string { return e.Why }

// check fills in an Issuer's defaults and says what is wrong with it.
func check(in *Issuer) error {
	bad := func(field, format string, args ...any) error {
		return &ConfigError{Field: field, Why: fmt.Sprintf(format, args...)}
	}
	u, err := url.Parse(in.URL)
	switch {
	case in.URL == "":
		return bad("url", "the issuer URL is required")
	case err != nil || u.Host == "" || u.RawQuery != "" || u.Fragment != "":
		return bad("url", "the issuer URL %q is not an absolute URL without a query", in.URL)
	case u.Scheme == "http" && !loopback(u.Hostname()):
		return bad("url", "the issuer URL %s must be https (http only on a loopback address)", in.URL)
	case u.Scheme != "https" && u.Scheme != "http":
		return bad("url", "the issuer URL %s must be https", in.URL)
	case in.ClientID == "":
		return bad("clientID", "issuer %s: a client ID is required", in.URL)
	case in.ConsoleClientSecret != "" && in.ConsoleClientID == "":
		return bad("consoleClientID", "issuer %s: a console client secret needs its console client ID", in.URL)
	}
	if in.UsernameClaim == "" {
		in.UsernameClaim = DefaultUsernameClaim
	}
	if in.GroupsClaim == "" {
		in.GroupsClaim = DefaultGroupsClaim
	}
	if in.ConsoleClientID == "" {
		in.ConsoleClientID = in.ClientID
	}
	return nil
}

func loopback(host string) bool {
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// Issuers returns the issuers, defaults filled in.
func (v *Verifier) Issuers() []Issuer {
	out := make([]Issuer, len(v.issuers))
	for i, is := range v.issuers {
		out[i] = is.Issuer
	}
	return out
}

// Endpoints returns what url's discovery document says: where to send a
// person to sign in and where to redeem a code.
func (v *Verifier) Endpoints(ctx context.Context, url string) (auth, token string, err error) {
	is := v.find(url)
	if is == nil {
		return "", "", &RefusedError{Reason: ErrUnknownIssuer, Why: "kilnd does not trust the issuer " + url}
	}
	p, err := v.discover(ctx, is)
	if err != nil {
		return "", "", err
	}
	ep := p.Endpoint()
	return ep.AuthURL, ep.TokenURL, nil
}

func (v *Verifier) find(url string) *issuer {
	for _, is := range v.issuers {
		if is.URL == url {
			return is
		}
	}
	return nil
}

// discover reads an issuer's discovery document once it answers.
func (v *Verifier) discover(ctx context.Context, is *issuer) (*oidc.Provider, error) {
	is.mu.Lock()
	defer is.mu.Unlock()
	if is.provider != nil {
		return is.provider, nil
	}
	p, err := oidc.NewProvider(oidc.ClientContext(ctx, v.client), is.URL)
	if err != nil {
		return nil, &UnavailableError{Issuer: is.URL, Err: err}
	}
	// The key set fetches with the provider's client; it must outlive ctx.
	is.provider = p
	return p, nil
}

// Verify checks rawIDToken and returns who it names. A refused token is a
// *RefusedError; an issuer that cannot be asked, an *UnavailableError.
func (v *Verifier) Verify(ctx context.Context, rawIDToken string) (Identity, error) {
	iss, err := unverifiedIssuer(rawIDToken)
	if err != nil {
		return Identity{}, &RefusedError{Reason: ErrMalformed, Why: "the ID token is not a JWT: " + err.Error()}
	}
	is := v.find(iss)
	if is == nil {
		return Identity{}, &RefusedError{Reason: ErrUnknownIssuer,
			Why: fmt.Sprintf("the ID token's issuer %q is not one kilnd trusts", iss)}
	}
	p, err := v.discover(ctx, is)
	if err != nil {
		return Identity{}, err
	}
	tok, err := p.VerifierContext(oidc.ClientContext(context.WithoutCancel(ctx), v.client), &oidc.Config{
		SkipClientIDCheck: true, // two clients' tokens are accepted: checked below
		Now:               v.now,
	}).Verify(ctx, rawIDToken)
	if err != nil {
		return Identity{}, refusal(is.URL, err)
	}
	if !audienceOf(tok.Audience, is.ClientID, is.ConsoleClientID) {
		return Identity{}, &RefusedError{Reason: ErrWrongAudience, Why: fmt.Sprintf(
			"the ID token is for %q, not for Kiln's client %s", strings.Join(tok.Audience, ", "), is.ClientID)}
	}
	return identity(is.Issuer, tok)
}

// refusal turns go-oidc's verification error into a RefusedError, or an
// UnavailableError when the issuer's keys could not be fetched.
func refusal(iss string, err error) error {
	var expired *oidc.TokenExpiredError
	msg := err.Error()
	switch {
	case errors.As(err, &expired):
		return &RefusedError{Reason: ErrExpired,
			Why: "the ID token expired at " + expired.Expiry.UTC().Format(time.RFC3339) + "; sign in again"}
	case strings.Contains(msg, "fetching keys"):
		return &UnavailableError{Issuer: iss, Err: err}
	case strings.Contains(msg, "failed to verify signature"), strings.Contains(msg, "not signed"):
		return &RefusedError{Reason: ErrBadSignature, Why: "the ID token's signature is not the issuer's"}
	case strings.Contains(msg, "malformed jwt"):
		return &RefusedError{Reason: ErrMalformed, Why: "the ID token is not a JWT"}
	}
	return &RefusedError{Reason: ErrBadClaim, Why: "the ID token is not valid: " + strings.TrimPrefix(msg, "oidc: ")}
}

func audienceOf(aud []string, ids ...string) bool {
	for _, a := range aud {
		for _, id := range ids {
			if a == id {
				return true
			}
		}
	}
	return false
}

// identity reads the person and their groups from a verified token.
func identity(is Issuer, tok *oidc.IDToken) (Identity, error) {
	var claims map[string]json.RawMessage
	if err := tok.Claims(&claims); err != nil {
		return Identity{}, &RefusedError{Reason: ErrBadClaim, Why: "the ID token's claims cannot be read"}
	}
	bad := func(format string, args ...any) (Identity, error) {
		return Identity{}, &RefusedError{Reason: ErrBadClaim, Why: fmt.Sprintf(format, args...)}
	}
	var name string
	if raw, ok := claims[is.UsernameClaim]; !ok {
		return bad("the ID token has no %q claim (the username claim)", is.UsernameClaim)
	} else if json.Unmarshal(raw, &name) != nil || name == "" {
		return bad("the ID token's %q claim (the username claim) is not a string", is.UsernameClaim)
	}
	if is.UsernameClaim == "email" {
		var verified bool
		if raw, ok := claims["email_verified"]; ok && (json.Unmarshal(raw, &verified) != nil || !verified) {
			return bad("the ID token's email %s is not verified by the identity provider", name)
		}
	}
	var groups []string
	if raw, ok := claims[is.GroupsClaim]; ok && string(raw) != "null" {
		if err := json.Unmarshal(raw, &groups); err != nil {
			return bad("the ID token's %q claim (the groups claim) is not a list of strings", is.GroupsClaim)
		}
	}
	for _, g := range groups {
		if !ValidGroup(g) {
			return bad("the ID token's group %q is not a group name Kiln can bind (%s)", g, GroupRule)
		}
	}
	return Identity{Issuer: is.URL, Subject: tok.Subject, Claimed: name, User: UserName(name),
		Groups: groups, Expiry: tok.Expiry}, nil
}

// unverifiedIssuer reads a JWT's "iss" without checking anything: only to
// pick which issuer verifies it.
func unverifiedIssuer(raw string) (string, error) {
	parts := strings.Split(raw, ".")
	if len(parts) != 3 {
		return "", errors.New("it does not have three parts")
	}
	payload, err := base64.RawURLEncoding.DecodeString(parts[1])
	if err != nil {
		return "", errors.New("its payload is not base64url")
	}
	var c struct {
		Issuer string `json:"iss"`
	}
	if err := json.Unmarshal(payload, &c); err != nil {
		return "", errors.New("its payload is not a JSON object")
	}
	return c.Issuer, nil
}

// MaxUserName is the longest Kiln user name (a DNS label).
const MaxUserName = 63

var notLabel = regexp.MustCompile(`[^a-z0-9]+`)

// UserName is the Kiln user name of a username claim: lower case, each run
// of other characters a hyphen ("Ann.Lee@example.com" is
// "ann-lee-example-com"), cut with a hash of the claim when longer than a
// DNS label may be. Two claims can map to one name: the API refuses a
// sign-in whose name belongs to another identity.
func UserName(claim string) string {
	s := strings.Trim(notLabel.ReplaceAllString(strings.ToLower(claim), "-"), "-")
	if s == "" || len(s) > MaxUserName {
		sum := sha256.Sum256([]byte(claim))
		h := hex.EncodeToString(sum[:4])
		if len(s) > MaxUserName-len(h)-1 {
			s = strings.TrimRight(s[:MaxUserName-len(h)-1], "-")
		}
		if s == "" {
			return "oidc-" + h
		}
		return s + "-" + h
	}
	return s
}

// GroupRule is what ValidGroup allows, for messages.
const GroupRule = "1 to 128 characters: letters, digits and . _ - : / @"

var groupRE = regexp.MustCompile(`^[A-Za-z0-9._:/@-]{1,128}$`)

// ValidGroup reports whether g can be a group binding's name: the groups
// providers send ("eng", "org:team", "/platform/admins", "ops@corp").
func ValidGroup(g string) bool { return groupRE.MatchString(g) }
