// Package auth answers who a request acts for and what that identity may
// do: it turns a bearer token into a Principal (users and service accounts
// hold tokens; only a token's SHA-256 is stored) and says which role a
// principal has in a project. The frontend's route table decides which role
// each route needs.
package auth

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	v1 "kiln.dev/kiln/api/v1"
	"kiln.dev/kiln/internal/store"
)

// Store is what auth reads.
type Store interface {
	TokenByHash(ctx context.Context, hash string) (*store.Token, error)
	TouchToken(ctx context.Context, id string, at time.Time) error
	GetUser(ctx context.Context, name string) (*v1.User, error)
	GetMember(ctx context.Context, project, user string) (*store.Member, error)
	GetServiceAccount(ctx context.Context, project, name string) (*store.ServiceAccount, error)
	BindingsOf(ctx context.Context, project string, groups []string) ([]*store.GroupBinding, error)
}

// Principal is who a request acts for.
type Principal struct {
	// Name is "user:NAME" or "serviceaccount:PROJECT/NAME": what logs and
	// the audit log show. Never the token.
	Name    string
	TokenID string
	Owner   bool
	// User is the user's name; empty for a service account.
	User string
	// Project and Role are a service account's project and role there.
	Project string
	Role    string
	// Groups are the identity provider's groups of a user who signed in
	// with one: their bindings add roles (RoleIn).
	Groups []string
}

// ErrUnauthenticated means a request carries no valid token; the error
// wrapping it says why (safe to show the client: it names no secret). It
// is a *RefusedError.
var ErrUnauthenticated = errors.New("unauthenticated")

// Why a credential (a token; a node certificate, internal/gateway) is
// refused: the Reason of a *RefusedError.
var (
	// ErrNoCredential: the request presents none.
	ErrNoCredential = errors.New("no credential")
	// ErrInvalidCredential: not one Kiln issued (an unknown token, a
	// certificate of another CA), or of a kind it does not know.
	ErrInvalidCredential = errors.New("invalid credential")
	// ErrRevoked: the credential was revoked.
	ErrRevoked = errors.New("credential revoked")
	// ErrExpired: the credential expired.
	ErrExpired = errors.New("credential expired")
	// ErrPrincipalGone: the user, service account or node the credential
	// was issued to no longer exists.
	ErrPrincipalGone = errors.New("principal gone")
	// ErrDisabled: an owner disabled the user the credential was issued to.
	ErrDisabled = errors.New("user disabled")
)

// RefusedError is a refused credential. It matches ErrUnauthenticated
// and Reason; its message is "unauthenticated: " and Why, which is safe to
// show the client.
type RefusedError struct {
	Reason error // ErrNoCredential, ErrRevoked, ... or a sentinel of the package that refuses
	Why    string
}

func (e *RefusedError) Error() string { return ErrUnauthenticated.Error() + ": " + e.Why }

// Is makes errors.Is(err, ErrUnauthenticated) hold.
func (e *RefusedError) Is(target error) bool { return target == ErrUnauthenticated }

func (e *RefusedError) Unwrap() error { return e.Reason }

// rank orders the project roles; owner is above them all.
var rank = map[string]int{v1.RoleViewer: 1, v1.RoleOperator: 2, v1.RoleAdmin: 3, v1.RoleOwner: 4}

// ValidProjectRole reports whether role can be given in a project.
func ValidProjectRole(role string) bool {
	return role == v1.RoleViewer || role == v1.RoleOperator || role == v1.RoleAdmin
}

// Allows reports whether a principal holding role have may act where need
// is required.
func Allows(have, need string) bool { return have != "" && rank[have] >= rank[need] }

// TokenPrefix starts every token Kiln issues, so that secret scanners can
// find leaked ones.
const TokenPrefix = "kiln_"

// NewToken returns a fresh token value (256 random bits) and its hash.
func NewToken() (value, hash string, err error) {
	raw := make([]byte, 32)
	if _, err := rand.Read(raw); err != nil {
		return "", "", err
	}
	value = TokenPrefix + base64.RawURLEncoding.EncodeToString(raw)
	return value, Hash(value), nil
}

// Hash is what the store keeps of a token: hex SHA-256. Tokens carry 256
// random bits, so no slow hash is needed.
func Hash(value string) string {
	sum := sha256.Sum256([]byte(value))
	return hex.EncodeToString(sum[:])
}

// NewTokenID returns a token's public id ("tok_" and 16 hex digits).
func NewTokenID() string {
	b := make([]byte, 8)
	rand.Read(b)
	return "tok_" + hex.EncodeToString(b)
}

// UserPrincipal and ServiceAccountPrincipal name principals.
func UserPrincipal(user string) string { return v1.PrincipalUser + ":" + user }

// ServiceAccountPrincipal names a project's service account.
func ServiceAccountPrincipal(project, name string) string {
	return v1.PrincipalServiceAccount + ":" + project + "/" + name
}

// touchEvery is how stale a token's last-used time may get before a
// request writes it again: one write a minute per token at most.
const touchEvery = time.Minute

// CacheTTL is how long an Authenticator answers a token from memory after
// reading it from the store: every request used to read the token and its
// user (two queries before any work). A change made through this process
// (a token revoked, a user or service account changed or deleted) takes
// effect at once (Forget); one made through another replica, within
// CacheTTL.
const CacheTTL = 2 * time.Second

// Authenticator checks tokens against the store.
type Authenticator struct {
	st  Store
	now func() time.Time

	mu    sync.Mutex
	cache map[string]cached // by token hash
	gen   uint64            // Forget's count: an answer read before a Forget is not kept
}

// cached is a principal Authenticate found, and until when it may be used
// without reading the store again.
type cached struct {
	p     Principal
	until time.Time
}

// maxCached bounds the cache; when full it starts again empty.
const maxCached = 10000

// New returns an Authenticator; now nil means time.Now.
func New(st Store, now func() time.Time) *Authenticator {
	if now == nil {
		now = time.Now
	}
	return &Authenticator{st: st, now: now, cache: map[string]cached{}}
}

// Forget drops every principal Authenticate remembers. The API calls it
// around every change to tokens, users and service accounts.
func (a *Authenticator) Forget() {
	a.mu.Lock()
	clear(a.cache)
	a.gen++
	a.mu.Unlock()
}

// Authenticate returns the principal a token acts for. A token that is
// unknown, revoked or expired, or whose user or service account is gone,
// is a *RefusedError (ErrUnauthenticated); a store failure is another
// error.
func (a *Authenticator) Authenticate(ctx context.Context, token string) (Principal, error) {
	if token == "" {
		return Principal{}, &RefusedError{Reason: ErrNoCredential, Why: "a bearer token is required (Authorization: Bearer <token>)"}
	}
	hash := Hash(token)
	now := a.now()
	a.mu.Lock()
	c, ok := a.cache[hash]
	gen := a.gen
	a.mu.Unlock()
	if ok && now.Before(c.until) {
		return c.p, nil
	}
	p, until, err := a.authenticate(ctx, hash, now)
	if err != nil {
		return Principal{}, err
	}
	a.mu.Lock()
	if a.gen == gen {
		if len(a.cache) >= maxCached {
			clear(a.cache)
		}
		a.cache[hash] = cached{p: p, until: until}
	}
	a.mu.Unlock()
	return p, nil
}

// authenticate reads the token with hash from the store; until is when the
// answer stops holding: CacheTTL from now, or the token's expiry if sooner.
func (a *Authenticator) authenticate(ctx context.Context, hash string, now time.Time) (p Principal, until time.Time, err error) {
	deny := func(reason error, why string) (Principal, time.Time, error) {
		return Principal{}, time.Time{}, &RefusedError{Reason: reason, Why: why}
	}
	t, err := a.st.TokenByHash(ctx, hash)
	if errors.Is(err, store.ErrNotFound) {
		return deny(ErrInvalidCredential, "the token is not valid")
	} else if err != nil {
		return Principal{}, time.Time{}, err
	}
	switch {
	case !t.RevokedAt.IsZero():
		return deny(ErrRevoked, "the token "+t.ID+" was revoked")
	case !t.ExpiresAt.IsZero() && !now.Before(t.ExpiresAt):
		return deny(ErrExpired, "the token "+t.ID+" expired at "+t.ExpiresAt.UTC().Format(time.RFC3339))
	}
	p = Principal{Name: t.Principal, TokenID: t.ID, Groups: t.Groups}
	kind, rest, _ := strings.Cut(t.Principal, ":")
	switch kind {
	case v1.PrincipalUser:
		u, err := a.st.GetUser(ctx, rest)
		if errors.Is(err, store.ErrNotFound) {
			return deny(ErrPrincipalGone, "the token's user "+rest+" no longer exists")
		} else if err != nil {
			return Principal{}, time.Time{}, err
		}
		if u.Disabled {
			return deny(ErrDisabled, "the user "+rest+" is disabled; an owner can enable them (kiln user enable)")
		}
		p.User, p.Owner = u.Name, u.Owner
	case v1.PrincipalServiceAccount:
		project, name, _ := strings.Cut(rest, "/")
		sa, err := a.st.GetServiceAccount(ctx, project, name)
		if errors.Is(err, store.ErrNotFound) {
			return deny(ErrPrincipalGone, "the token's service account "+rest+" no longer exists")
		} else if err != nil {
			return Principal{}, time.Time{}, err
		}
		p.Project, p.Role = project, sa.Role
	default:
		return deny(ErrInvalidCredential, "the token names an unknown kind of principal")
	}
	if now.Sub(t.LastUsedAt) > touchEvery {
		// Best effort: a failed write must not refuse a valid token.
		_ = a.st.TouchToken(ctx, t.ID, now)
	}
	until = now.Add(CacheTTL)
	if !t.ExpiresAt.IsZero() && t.ExpiresAt.Before(until) {
		until = t.ExpiresAt
	}
	return p, until, nil
}

// RoleIn returns p's role in project: owner for owners, the service
// account's role in its own project, the highest of a user's membership
// role and their groups' bindings, or "" for none. Bindings are read at
// each call, so one removed takes effect at once.
func (a *Authenticator) RoleIn(ctx context.Context, p Principal, project string) (string, error) {
	switch {
	case p.Owner:
		return v1.RoleOwner, nil
	case p.User == "":
		if p.Project == project {
			return p.Role, nil
		}
		return "", nil
	}
	role := ""
	m, err := a.st.GetMember(ctx, project, p.User)
	switch {
	case err == nil:
		role = m.Role
	case !errors.Is(err, store.ErrNotFound):
		return "", err
	}
	bs, err := a.st.BindingsOf(ctx, project, p.Groups)
	if err != nil {
		return "", err
	}
	for _, b := range bs {
		role = Higher(role, b.Role)
	}
	return role, nil
}

// Higher returns the higher of two roles ("" is below every role).
func Higher(a, b string) string {
	if rank[b] > rank[a] {
		return b
	}
	return a
}

// BootstrapStore is what EnsureOwnerToken writes.
type BootstrapStore interface {
	Store
	PutUser(ctx context.Context, u *v1.User, c store.Cond) error
	CreateToken(ctx context.Context, t *store.Token) error
}

// bootstrapValidity is the lifetime of the first owner token: it is how an
// operator gets in at all, so it lasts (revoke it once other owners exist).
const bootstrapValidity = 10 * 365 * 24 * time.Hour

// EnsureOwnerToken makes sure value is a valid token of the owner user
// named user, creating the user and the token when missing: how kilnd
// turns its data dir's admin.token into an identity.
func EnsureOwnerToken(ctx context.Context, st BootstrapStore, user, value string) error {
	err := st.PutUser(ctx, &v1.User{Name: user, Owner: true, DisplayName: "created by kilnd at initialization"},
		store.Cond{IfNoneMatch: "*"})
	if err != nil && !errors.Is(err, store.ErrExists) {
		return fmt.Errorf("create owner user %s: %w", user, err)
	}
	hash := Hash(value)
	if _, err := st.TokenByHash(ctx, hash); err == nil {
		return nil
	} else if !errors.Is(err, store.ErrNotFound) {
		return err
	}
	err = st.CreateToken(ctx, &store.Token{
		ID: NewTokenID(), Hash: hash, Principal: UserPrincipal(user),
		Description: "initial owner token (DATA_DIR/admin.token)",
		ExpiresAt:   time.Now().Add(bootstrapValidity),
	})
	if err != nil && !errors.Is(err, store.ErrExists) {
		return fmt.Errorf("record the initial owner token: %w", err)
	}
	return nil
}
