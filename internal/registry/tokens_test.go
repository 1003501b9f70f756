package registry_test

import (
	"context"
	"encoding/base64"
	"errors"
	"net/http"
	"testing"
	"time"

	v1 "kiln.dev/kiln/api/v1"
	"kiln.dev/kiln/internal/auth"
	"kiln.dev/kiln/internal/registry"
	"kiln.dev/kiln/internal/store"
)

// idStore is a fake of what auth and Tokens read: one owner, one member
// of p, project p.
type idStore struct{ tokens map[string]string } // hash -> principal

func (s idStore) TokenByHash(_ context.Context, hash string) (*store.Token, error) {
	p, ok := s.tokens[hash]
	if !ok {
		return nil, store.ErrNotFound
	}
	return &store.Token{ID: "tok_1", Hash: hash, Principal: p, LastUsedAt: time.Now()}, nil
}
func (idStore) TouchToken(context.Context, string, time.Time) error { return nil }
func (idStore) GetUser(_ context.Context, name string) (*v1.User, error) {
	return &v1.User{Name: name, Owner: name == "root"}, nil
}
func (idStore) GetMember(_ context.Context, project, user string) (*store.Member, error) {
	if project == "p" && user == "alice" {
		return &store.Member{Project: "p", Member: v1.Member{Name: "alice", Role: v1.RoleOperator}}, nil
	}
	return nil, store.ErrNotFound
}
func (idStore) GetServiceAccount(context.Context, string, string) (*store.ServiceAccount, error) {
	return nil, store.ErrNotFound
}
func (idStore) BindingsOf(context.Context, string, []string) ([]*store.GroupBinding, error) {
	return nil, nil
}
func (idStore) GetProject(_ context.Context, name string) (*v1.Project, error) {
	if name == "p" {
		return &v1.Project{Name: "p"}, nil
	}
	return nil, store.ErrNotFound
}

func TestTokensBearerOrBasicPassword(t *testing.T) {
	st := idStore{tokens: map[string]string{auth.Hash("kiln_alice"): "user:alice", auth.Hash("kiln_root"): "user:root"}}
	tokens := registry.Tokens{Auth: auth.New(st, nil), Projects: st}
	req := func(header string) *http.Request {
		r, _ := http.NewRequestWithContext(t.Context(), http.MethodGet, "/v2/", nil)
		if header != "" {
			r.Header.Set("Authorization", header)
		}
		return r
	}
	basic := func(user, pass string) string {
		return "Basic " + base64.StdEncoding.EncodeToString([]byte(user+":"+pass))
	}
	for _, h := range []string{"Bearer kiln_alice", basic("alice", "kiln_alice"), basic("anything", "kiln_alice")} {
		p, err := tokens.Authenticate(req(h))
		if err != nil || p.Name != "user:alice" || p.Project != "" {
			t.Errorf("%q: %+v %v", h, p, err)
			continue
		}
		if role, err := p.RoleIn(t.Context(), "p"); role != v1.RoleOperator || err != nil {
			t.Errorf("%q: role in p %q %v", h, role, err)
		}
		if role, err := p.RoleIn(t.Context(), "q"); role != "" || err != nil {
			t.Errorf("%q: role in q %q %v, want none", h, role, err)
		}
		if role, err := p.RoleIn(t.Context(), registry.System); role != v1.RoleViewer || err != nil {
			t.Errorf("%q: role in the system images %q %v, want viewer", h, role, err)
		}
	}
	for _, h := range []string{"", "Bearer kiln_forged", basic("alice", "wrong"), "Basic !!!", "Digest x"} {
		if _, err := tokens.Authenticate(req(h)); !errors.Is(err, auth.ErrUnauthenticated) {
			t.Errorf("%q: %v, want ErrUnauthenticated", h, err)
		}
	}
	// An owner is told a project does not exist.
	p, err := tokens.Authenticate(req("Bearer kiln_root"))
	if err != nil {
		t.Fatal(err)
	}
	if role, err := p.RoleIn(t.Context(), "p"); role != v1.RoleOwner || err != nil {
		t.Errorf("owner in p: %q %v", role, err)
	}
	if role, err := p.RoleIn(t.Context(), registry.System); role != v1.RoleOwner || err != nil {
		t.Errorf("owner in the system images: %q %v, want owner", role, err)
	}
	if _, err := p.RoleIn(t.Context(), "ghost"); !errors.Is(err, registry.ErrNoProject) {
		t.Errorf("owner in ghost: %v, want ErrNoProject", err)
	}
}
