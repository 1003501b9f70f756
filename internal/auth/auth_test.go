package auth_test

import (
	"errors"
	"path/filepath"
	"testing"
	"time"

	v1 "kiln.dev/kiln/api/v1"
	"kiln.dev/kiln/internal/auth"
	"kiln.dev/kiln/internal/store"
	"kiln.dev/kiln/internal/store/sqlite"
)

func openStore(t *testing.T) store.Store {
	t.Helper()
	st, err := sqlite.Open(t.Context(), filepath.Join(t.TempDir(), "kiln.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	return st
}

// TestEnsureOwnerToken: the data dir's token becomes an owner's, once;
// running it again adds nothing and does not bring back a revoked token.
func TestEnsureOwnerToken(t *testing.T) {
	st := openStore(t)
	ctx := t.Context()
	value, _, err := auth.NewToken()
	if err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if err := auth.EnsureOwnerToken(ctx, st, "admin", value); err != nil {
			t.Fatal(err)
		}
	}
	tokens, _, err := st.ListTokens(ctx, "user:admin", store.Page{})
	if err != nil || len(tokens) != 1 {
		t.Fatalf("tokens of admin: %d, %v; want 1", len(tokens), err)
	}
	a := auth.New(st, nil)
	p, err := a.Authenticate(ctx, value)
	if err != nil || !p.Owner || p.Name != "user:admin" {
		t.Fatalf("Authenticate = %+v, %v; want the owner admin", p, err)
	}
	if err := st.RevokeToken(ctx, "user:admin", tokens[0].ID, time.Now()); err != nil {
		t.Fatal(err)
	}
	if err := auth.EnsureOwnerToken(ctx, st, "admin", value); err != nil {
		t.Fatal(err)
	}
	a = auth.New(st, nil) // the restarted process's
	if _, err := a.Authenticate(ctx, value); !errors.Is(err, auth.ErrUnauthenticated) || !errors.Is(err, auth.ErrRevoked) {
		t.Errorf("a revoked initial token after a restart: %v, want it still revoked", err)
	}
}

func TestRoles(t *testing.T) {
	st := openStore(t)
	ctx := t.Context()
	if err := st.PutProject(ctx, &v1.Project{Name: "p"}, store.Cond{}); err != nil {
		t.Fatal(err)
	}
	if err := st.PutUser(ctx, &v1.User{Name: "u"}, store.Cond{}); err != nil {
		t.Fatal(err)
	}
	if err := st.PutMember(ctx, &store.Member{Project: "p", Member: v1.Member{Name: "u", Role: v1.RoleOperator}}, store.Cond{}); err != nil {
		t.Fatal(err)
	}
	a := auth.New(st, nil)
	for _, tc := range []struct {
		p       auth.Principal
		project string
		want    string
	}{
		{auth.Principal{User: "u"}, "p", v1.RoleOperator},
		{auth.Principal{User: "u"}, "q", ""},
		{auth.Principal{User: "root", Owner: true}, "q", v1.RoleOwner},
		{auth.Principal{Project: "p", Role: v1.RoleViewer}, "p", v1.RoleViewer},
		{auth.Principal{Project: "p", Role: v1.RoleViewer}, "q", ""},
	} {
		got, err := a.RoleIn(ctx, tc.p, tc.project)
		if err != nil || got != tc.want {
			t.Errorf("RoleIn(%+v, %s) = %q, %v; want %q", tc.p, tc.project, got, err, tc.want)
		}
	}
	for _, tc := range []struct {
		have, need string
		want       bool
	}{
		{v1.RoleViewer, v1.RoleViewer, true},
		{v1.RoleViewer, v1.RoleOperator, false},
		{v1.RoleAdmin, v1.RoleOperator, true},
		{v1.RoleOwner, v1.RoleAdmin, true},
		{"", v1.RoleViewer, false},
	} {
		if got := auth.Allows(tc.have, tc.need); got != tc.want {
			t.Errorf("Allows(%q, %q) = %v", tc.have, tc.need, got)
		}
	}
}

// TestCache: an Authenticator answers a token from memory for CacheTTL at
// most (so a token revoked through another replica is refused within it),
// never past the token's expiry, and not at all after Forget.
func TestCache(t *testing.T) {
	st := openStore(t)
	ctx := t.Context()
	now := time.Now()
	a := auth.New(st, func() time.Time { return now })
	if err := st.PutUser(ctx, &v1.User{Name: "u"}, store.Cond{}); err != nil {
		t.Fatal(err)
	}
	token := func(expires time.Time) (value, id string) {
		t.Helper()
		value, hash, err := auth.NewToken()
		if err != nil {
			t.Fatal(err)
		}
		id = auth.NewTokenID()
		if err := st.CreateToken(ctx, &store.Token{ID: id, Principal: "user:u", Hash: hash, CreatedAt: now, ExpiresAt: expires}); err != nil {
			t.Fatal(err)
		}
		return value, id
	}
	refused := func(what, value string, why error) {
		t.Helper()
		if _, err := a.Authenticate(ctx, value); !errors.Is(err, auth.ErrUnauthenticated) || !errors.Is(err, why) {
			t.Errorf("%s: %v, want refused (%v)", what, err, why)
		}
	}
	accepted := func(what, value string) {
		t.Helper()
		if p, err := a.Authenticate(ctx, value); err != nil || p.User != "u" {
			t.Errorf("%s: %+v, %v; want user u", what, p, err)
		}
	}

	v1tok, id1 := token(time.Time{})
	accepted("a new token", v1tok)
	if err := st.RevokeToken(ctx, "user:u", id1, now); err != nil {
		t.Fatal(err)
	}
	accepted("revoked elsewhere, within CacheTTL", v1tok)
	now = now.Add(auth.CacheTTL)
	refused("revoked elsewhere, CacheTTL later", v1tok, auth.ErrRevoked)

	v2tok, id2 := token(time.Time{})
	accepted("another token", v2tok)
	if err := st.RevokeToken(ctx, "user:u", id2, now); err != nil {
		t.Fatal(err)
	}
	a.Forget()
	refused("revoked, then Forget", v2tok, auth.ErrRevoked)

	v3tok, _ := token(now.Add(auth.CacheTTL / 2))
	accepted("a token about to expire", v3tok)
	now = now.Add(auth.CacheTTL / 2)
	refused("an expired token answered from memory", v3tok, auth.ErrExpired)
}

// TestGroupRoles: a user who signed in with groups has the highest of their
// membership and their groups' bindings, read at each call; a disabled
// user's tokens are refused.
func TestGroupRoles(t *testing.T) {
	st := openStore(t)
	ctx := t.Context()
	for _, p := range []string{"p", "q"} {
		if err := st.PutProject(ctx, &v1.Project{Name: p}, store.Cond{}); err != nil {
			t.Fatal(err)
		}
	}
	if err := st.PutUser(ctx, &v1.User{Name: "ann@example.com"}, store.Cond{}); err != nil {
		t.Fatal(err)
	}
	value, hash, _ := auth.NewToken()
	if err := st.CreateToken(ctx, &store.Token{ID: auth.NewTokenID(), Hash: hash, Principal: "user:ann@example.com",
		ExpiresAt: time.Now().Add(time.Hour), Groups: []string{"eng", "oncall"}}); err != nil {
		t.Fatal(err)
	}
	a := auth.New(st, nil)
	p, err := a.Authenticate(ctx, value)
	if err != nil {
		t.Fatal(err)
	}
	role := func(project string) string {
		t.Helper()
		r, err := a.RoleIn(ctx, p, project)
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	if got := role("p"); got != "" {
		t.Fatalf("role with no binding = %q, want none", got)
	}
	bind := func(project, group, role string) {
		t.Helper()
		if err := st.PutGroupBinding(ctx, &store.GroupBinding{Project: project,
			GroupBinding: v1.GroupBinding{Name: group, Role: role}}, store.Cond{}); err != nil {
			t.Fatal(err)
		}
	}
	bind("p", "eng", v1.RoleViewer)
	bind("p", "oncall", v1.RoleOperator)
	bind("q", "sales", v1.RoleAdmin)
	if err := st.PutMember(ctx, &store.Member{Project: "q", Member: v1.Member{Name: "ann@example.com", Role: v1.RoleViewer}}, store.Cond{}); err != nil {
		t.Fatal(err)
	}
	if got := role("p"); got != v1.RoleOperator {
		t.Errorf("role in p (eng viewer, oncall operator) = %q, want operator", got)
	}
	if got := role("q"); got != v1.RoleViewer {
		t.Errorf("role in q (member viewer; sales, not hers, admin) = %q, want viewer", got)
	}
	if err := st.DeleteGroupBinding(ctx, "p", "oncall", store.Cond{}); err != nil {
		t.Fatal(err)
	}
	if got := role("p"); got != v1.RoleViewer {
		t.Errorf("role in p once oncall's binding is gone = %q, want viewer at once", got)
	}

	u, _ := st.GetUser(ctx, "ann@example.com")
	u.Disabled = true
	if err := st.PutUser(ctx, u, store.Cond{}); err != nil {
		t.Fatal(err)
	}
	a.Forget()
	if _, err := a.Authenticate(ctx, value); !errors.Is(err, auth.ErrDisabled) {
		t.Errorf("a disabled user's token: %v, want ErrDisabled", err)
	}
}
