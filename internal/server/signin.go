package server

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	v1 "kiln.dev/kiln/api/v1"
	"kiln.dev/kiln/internal/auth"
	"kiln.dev/kiln/internal/oidc"
	"kiln.dev/kiln/internal/store"
	"kiln.dev/kiln/internal/validate"
)

// Sign-in with an OpenID Connect provider is an exchange: the CLI and the
// console get an ID token from the provider with its own flows and trade it
// here for a Kiln token of the person, which lasts as long as the ID token
// (at most maxSignIn) and carries the groups the provider named. Every other
// route stays token-based; the groups' bindings are read at each request.

// maxSignIn caps a signed-in token's life whatever the ID token says.
const maxSignIn = 24 * time.Hour

// Sign-ins a second from one address, with bursts: verifying a token is
// cheap, but an unknown key makes kilnd ask the provider.
const (
	signInRate  = 1.0
	signInBurst = 30
)

// signInConfig answers which identity providers kilnd trusts: what the CLI
// needs to start a sign-in (no secret: the console's client secret stays
// in kilnd). Public, like a provider's own discovery document.
func (s *Server) signInConfig(w http.ResponseWriter, r *http.Request) error {
	out := v1.SignInConfig{Issuers: []v1.SignInIssuer{}}
	if s.oidc != nil {
		for _, is := range s.oidc.Issuers() {
			out.Issuers = append(out.Issuers, v1.SignInIssuer{URL: is.URL, ClientID: is.ClientID,
				UsernameClaim: is.UsernameClaim, GroupsClaim: is.GroupsClaim})
		}
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

// signIn trades an ID token for a Kiln token of its person.
func (s *Server) signIn(w http.ResponseWriter, r *http.Request) error {
	if wait := s.signIns.take("ip:" + clientIP(r)); wait > 0 {
		return throttled(w, wait, "too many sign-ins from %s", clientIP(r))
	}
	body, err := readBody(r)
	if err != nil {
		return err
	}
	var in v1.SignInRequest
	if err := decodeStrict(body, &in); err != nil {
		return err
	}
	if len(in.Description) > validate.MaxDisplayName {
		return badRequest("description", "description is longer than %d characters", validate.MaxDisplayName)
	}
	if in.IDToken == "" {
		return newError(http.StatusBadRequest, v1.CodeMissingParameter, "idToken", "idToken is required: an ID token of an identity provider kilnd trusts")
	}
	if s.oidc == nil || len(s.oidc.Issuers()) == 0 {
		return newError(http.StatusNotFound, v1.CodeNotFound, "",
			"kilnd trusts no identity provider; sign in with a token (kiln login), or start kilnd with --oidc-issuer")
	}
	id, err := s.oidc.Verify(r.Context(), in.IDToken)
	if err != nil {
		return signInError(err)
	}
	u, err := s.signInUser(r.Context(), id)
	if err != nil {
		return err
	}
	now := s.now().UTC()
	expires := id.Expiry
	if expires.After(now.Add(maxSignIn)) {
		expires = now.Add(maxSignIn)
	}
	desc := in.Description
	if desc == "" {
		desc = "sign-in with " + id.Issuer
	}
	out, err := s.newToken(r.Context(), auth.UserPrincipal(u.Name), desc, expires, id.Groups)
	if err != nil {
		return err
	}
	// The audit entry names the person, not "anonymous".
	info(r.Context()).principal = auth.Principal{Name: out.Principal, TokenID: out.ID, User: u.Name, Groups: id.Groups}
	writeJSON(w, http.StatusCreated, v1.SignIn{Token: out, User: userOut(u)})
	return nil
}

// signInUser finds the Kiln user of a verified identity, making it at the
// first sign-in. A user of that name that another identity made (or an
// owner made) is not taken over: the sign-in is refused.
func (s *Server) signInUser(ctx context.Context, id oidc.Identity) (*v1.User, error) {
	source := "oidc:" + id.Issuer
	for range 3 {
		u, err := s.identity.GetUser(ctx, id.User)
		switch {
		case errors.Is(err, store.ErrNotFound):
			u = &v1.User{Name: id.User, DisplayName: id.Claimed, Source: source, Subject: id.Subject, CreatedAt: s.now().UTC()}
			err := s.identity.PutUser(ctx, u, store.Cond{IfNoneMatch: "*"})
			if errors.Is(err, store.ErrExists) {
				continue // another sign-in made it: read it again
			}
			if err != nil {
				return nil, err
			}
			s.auth.Forget()
			return u, nil
		case err != nil:
			return nil, err
		case u.Source != source || u.Subject != id.Subject:
			return nil, newError(http.StatusConflict, v1.CodeConflict, "user",
				"the Kiln user %s (%s) belongs to another identity than %s of %s; an owner can delete that user or give this person another username claim",
				u.Name, describeSource(u.Source), id.Claimed, id.Issuer)
		case u.Disabled:
			return nil, forbidden("the user %s is disabled; an owner can enable them (kiln user enable %s)", u.Name, u.Name)
		}
		return u, nil
	}
	return nil, fmt.Errorf("sign in %s: the user %s keeps changing", id.Claimed, id.User)
}

func describeSource(source string) string {
	if issuer, ok := strings.CutPrefix(source, "oidc:"); ok {
		return "made at a sign-in with " + issuer
	}
	return "made by an owner"
}

// signInError is the answer to a token the verifier refused: 401 with the
// reason's code in details, or 503 when the provider could not be asked.
func signInError(err error) error {
	var refused *oidc.RefusedError
	var down *oidc.UnavailableError
	switch {
	case errors.As(err, &refused):
		e := newError(http.StatusUnauthorized, v1.CodeUnauthorized, "idToken", "the ID token is refused: %s", refused.Why)
		e.body.Details = []v1.Error{{Code: refused.Reason.Error(), Target: "idToken", Message: refused.Why}}
		return e
	case errors.As(err, &down):
		e := newError(http.StatusServiceUnavailable, v1.CodeUnavailable, "", "%s; try again later", down.Error())
		e.body.Details = []v1.Error{{Code: v1.CodeIssuerUnavailable, Message: down.Error()}}
		return e
	}
	return err
}
