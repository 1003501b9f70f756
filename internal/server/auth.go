package server

import (
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"errors"
	"net/http"
	"strings"
)

// Principal is who a request acts for.
type Principal struct {
	// Name identifies the caller in logs and per-caller limits; it is never
	// the secret itself.
	Name string
}

// Auth authenticates a request. It returns ErrUnauthenticated (or an error
// wrapping it) when the request carries no valid credentials; any other
// error is a server fault.
type Auth interface {
	Authenticate(r *http.Request) (Principal, error)
}

// ErrUnauthenticated means the request has no valid credentials.
var ErrUnauthenticated = errors.New("unauthenticated")

// StaticTokens accepts "Authorization: Bearer <token>" for any of tokens.
// Real users and roles come later; until then every token is an admin.
func StaticTokens(tokens ...string) Auth {
	st := staticTokens{}
	for _, t := range tokens {
		if t == "" {
			continue
		}
		sum := sha256.Sum256([]byte(t))
		st = append(st, staticToken{sum: sum, name: "token:" + hex.EncodeToString(sum[:4])})
	}
	return st
}

type staticToken struct {
	sum  [sha256.Size]byte
	name string
}

type staticTokens []staticToken

// Authenticate compares the hash of the presented token with every known
// hash in constant time, without stopping at a match, so timing says
// nothing about which token or how much of one matched.
func (st staticTokens) Authenticate(r *http.Request) (Principal, error) {
	token, ok := bearer(r)
	if !ok {
		return Principal{}, ErrUnauthenticated
	}
	sum := sha256.Sum256([]byte(token))
	match := -1
	for i := range st {
		if subtle.ConstantTimeCompare(sum[:], st[i].sum[:]) == 1 {
			match = i
		}
	}
	if match < 0 {
		return Principal{}, ErrUnauthenticated
	}
	return Principal{Name: st[match].name}, nil
}

// bearer returns the token of an "Authorization: Bearer <token>" header.
func bearer(r *http.Request) (string, bool) {
	h := r.Header.Get("Authorization")
	scheme, token, ok := strings.Cut(h, " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") {
		return "", false
	}
	token = strings.TrimSpace(token)
	return token, token != ""
}
