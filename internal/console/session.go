package console

import (
	"crypto/hmac"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"net/http"
	"net/url"
	"strings"
	"time"

	"kiln.dev/kiln/api/client"
	v1 "kiln.dev/kiln/api/v1"
	"kiln.dev/kiln/internal/auth"
)

// A console session is an API token of its own. Signing in with a token
// makes a new token for the same user (a day's life, described as a console
// session) through the API; the browser keeps it in an HttpOnly cookie and
// the token typed in is not kept anywhere. Signing out revokes the session's
// token, and so does anything that revokes tokens: 'kiln token list' shows
// console sessions among a user's tokens.
const (
	cookieName         = "kiln_session"
	sessionDescription = "console session"
	sessionDays        = 1
)

// maxForm is the largest form body the console reads.
const maxForm = 64 << 10

// session is the signed-in user of a request.
type session struct {
	token   string // the session's API token: never rendered
	Whoami  v1.Whoami
	User    string // the user's name
	CSRF    string // the form token of this session
	roleFor map[string]string
}

// Role returns the user's role in project: owner for an owner, "" for a
// project the user is not in.
func (s *session) Role(project string) string {
	if s.Whoami.Owner {
		return v1.RoleOwner
	}
	return s.roleFor[project]
}

// Can reports whether the user's role in project is at least need (viewer,
// operator, admin): what decides which buttons a page shows. The API
// decides again when a button is used.
func (s *session) Can(project, need string) bool { return auth.Allows(s.Role(project), need) }

// CanCreate reports whether the user may create clusters somewhere.
func (s *session) CanCreate() bool {
	if s.Whoami.Owner {
		return true
	}
	for _, role := range s.roleFor {
		if auth.Allows(role, v1.RoleOperator) {
			return true
		}
	}
	return false
}

// csrfToken derives the form token from the session's token: unguessable
// without the cookie, the same for the session's life, stored nowhere.
func csrfToken(sessionToken string) string {
	m := hmac.New(sha256.New, []byte(sessionToken))
	m.Write([]byte("kiln console form"))
	return hex.EncodeToString(m.Sum(nil))
}

// session wraps a page that needs a signed-in user: no session (or an
// expired or revoked one) goes to the sign-in page, and a form without the
// session's CSRF token is refused.
func (c *Console) session(fn pageFunc) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ck, err := r.Cookie(cookieName)
		if err != nil || ck.Value == "" {
			c.signedOut(w, r)
			return
		}
		var who v1.Whoami
		if _, err := c.call(r.Context(), r, ck.Value, http.MethodGet, "/v1/whoami", nil, &who); err != nil {
			if ae, ok := apiError(err); ok && ae.StatusCode == http.StatusUnauthorized {
				c.signedOut(w, r)
				return
			}
			c.fail(w, r, nil, err)
			return
		}
		s := &session{token: ck.Value, Whoami: who, CSRF: csrfToken(ck.Value), roleFor: who.Projects}
		s.User, _ = strings.CutPrefix(who.Principal, v1.PrincipalUser+":")
		if r.Method == http.MethodPost {
			r.Body = http.MaxBytesReader(w, r.Body, maxForm)
			sent := r.PostFormValue("csrf")
			if subtle.ConstantTimeCompare([]byte(sent), []byte(s.CSRF)) != 1 {
				c.errorPage(w, r, s, http.StatusForbidden,
					"This form's security token is missing or stale (was it open in an old tab?). Reload the page and try again.")
				return
			}
		}
		if err := fn(w, r, s); err != nil {
			c.fail(w, r, s, err)
		}
	})
}

// signedOut sends the browser to the sign-in page, back here afterwards;
// a script's request (live updates) gets a plain 401.
func (c *Console) signedOut(w http.ResponseWriter, r *http.Request) {
	clearCookie(w, r)
	switch {
	case r.Header.Get("Accept") == "text/event-stream":
		http.Error(w, "signed out: sign in again", http.StatusUnauthorized)
		return
	case r.Method != http.MethodGet:
		c.errorPage(w, r, nil, http.StatusUnauthorized,
			"You are signed out (your session ended, expired or was revoked): nothing was done. Sign in again and send the form again.")
		return
	}
	http.Redirect(w, r, "/login?next="+url.QueryEscape(r.URL.RequestURI()), http.StatusSeeOther)
}

// loginView is the sign-in form, and a button for each identity provider.
type loginView struct {
	Next    string
	Issuers []issuerButton
}

func (c *Console) loginView(next string) loginView {
	return loginView{Next: next, Issuers: c.issuerButtons()}
}

func (c *Console) loginPage(w http.ResponseWriter, r *http.Request) {
	c.render(w, r, http.StatusOK, "login.html", page{Title: "Sign in", Data: c.loginView(safeNext(r.URL.Query().Get("next")))})
}

// login checks the token typed in through the API and opens a session with
// a token of its own.
func (c *Console) login(w http.ResponseWriter, r *http.Request) {
	r.Body = http.MaxBytesReader(w, r.Body, maxForm)
	token := strings.TrimSpace(r.PostFormValue("token"))
	next := safeNext(r.PostFormValue("next"))
	again := func(status int, field, msg string) {
		c.render(w, r, status, "login.html", page{Title: "Sign in", Data: c.loginView(next),
			Error: &v1.Error{Code: http.StatusText(status), Message: msg, Target: field}})
	}
	if token == "" {
		again(http.StatusBadRequest, "token", "Paste an API token: the token in kilnd's data directory (admin.token), or one from 'kiln token create'.")
		return
	}
	api := c.client(r, token)
	who, err := api.Whoami(r.Context())
	if err != nil {
		if ae, ok := apiError(err); ok && ae.StatusCode == http.StatusUnauthorized {
			again(http.StatusUnauthorized, "token", "That token is not valid: it is unknown, expired or revoked.")
			return
		}
		c.fail(w, r, nil, err)
		return
	}
	user, ok := strings.CutPrefix(who.Principal, v1.PrincipalUser+":")
	if !ok {
		again(http.StatusForbidden, "token", "That is a service account's token; the console is for users. Service accounts use the API and the CLI.")
		return
	}
	t, err := api.CreateToken(r.Context(), client.TokenOwner{User: user},
		v1.TokenRequest{Description: sessionDescription, ExpiresInDays: sessionDays})
	if err != nil {
		c.fail(w, r, nil, err)
		return
	}
	setSession(w, r, t.Value, t.ExpiresAt)
	http.Redirect(w, r, next, http.StatusSeeOther)
}

// setSession gives the browser the session's token, until it expires.
func setSession(w http.ResponseWriter, r *http.Request, token string, expires time.Time) {
	http.SetCookie(w, &http.Cookie{
		Name: cookieName, Value: token, Path: "/",
		HttpOnly: true, Secure: r.TLS != nil, SameSite: http.SameSiteStrictMode,
		Expires: expires,
	})
}

// logout revokes the session's token.
func (c *Console) logout(w http.ResponseWriter, r *http.Request, s *session) error {
	err := c.client(r, s.token).RevokeToken(r.Context(), client.TokenOwner{User: s.User}, s.Whoami.TokenID)
	if err != nil && !client.IsNotFound(err) {
		return err
	}
	clearCookie(w, r)
	http.Redirect(w, r, "/login", http.StatusSeeOther)
	return nil
}

func clearCookie(w http.ResponseWriter, r *http.Request) {
	http.SetCookie(w, &http.Cookie{Name: cookieName, Value: "", Path: "/", MaxAge: -1,
		HttpOnly: true, Secure: r.TLS != nil, SameSite: http.SameSiteStrictMode})
}

// safeNext keeps a return path only when it is a path on this site.
func safeNext(next string) string {
	if !strings.HasPrefix(next, "/") || strings.HasPrefix(next, "//") || strings.HasPrefix(next, "/\\") ||
		strings.HasPrefix(next, "/login") {
		return "/clusters"
	}
	return next
}
