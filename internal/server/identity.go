package server

import (
	"context"
	"errors"
	"net/http"
	"net/url"
	"time"

	v1 "kiln.dev/kiln/api/v1"
	"kiln.dev/kiln/internal/auth"
	"kiln.dev/kiln/internal/oidc"
	"kiln.dev/kiln/internal/store"
	"kiln.dev/kiln/internal/validate"
)

// whoami says who the caller is and where it has roles.
func (s *Server) whoami(w http.ResponseWriter, r *http.Request) error {
	p := info(r.Context()).principal
	out := v1.Whoami{Principal: p.Name, Owner: p.Owner, TokenID: p.TokenID, Groups: p.Groups}
	projects, err := s.projectsOf(r, p)
	if err != nil {
		return err
	}
	if p.Owner {
		// An owner is in every project, as owner: say which they are.
		projects = map[string]string{}
		err := store.Each(func(pg store.Page) ([]*v1.Project, string, error) { return s.projects.ListProjects(r.Context(), pg) },
			func(pr *v1.Project) error { projects[pr.Name] = v1.RoleOwner; return nil })
		if err != nil {
			return err
		}
	}
	if len(projects) > 0 {
		out.Projects = projects
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

// projectsOf maps each project p has a role in to that role; nil for an
// owner, who has every project.
func (s *Server) projectsOf(r *http.Request, p auth.Principal) (map[string]string, error) {
	switch {
	case p.Owner:
		return nil, nil
	case p.User == "":
		return map[string]string{p.Project: p.Role}, nil
	}
	ms, err := s.identity.Memberships(r.Context(), p.User)
	if err != nil {
		return nil, err
	}
	out := make(map[string]string, len(ms))
	for _, m := range ms {
		out[m.Project] = m.Role
	}
	bs, err := s.identity.BindingsOf(r.Context(), "", p.Groups)
	if err != nil {
		return nil, err
	}
	for _, b := range bs {
		out[b.Project] = auth.Higher(out[b.Project], b.Role)
	}
	return out, nil
}

func userOut(u *v1.User) v1.User {
	out := *u
	out.ID = "/v1/users/" + u.Name
	return out
}

func (s *Server) listUsers(w http.ResponseWriter, r *http.Request) error {
	pg, err := page(r)
	if err != nil {
		return err
	}
	items, next, err := s.identity.ListUsers(r.Context(), pg)
	if err != nil {
		return err
	}
	list(w, r, pg, items, next, userOut)
	return nil
}

func (s *Server) getUser(w http.ResponseWriter, r *http.Request) error {
	u, err := s.identity.GetUser(r.Context(), r.PathValue("user"))
	if err != nil {
		return err
	}
	w.Header().Set("ETag", quoteETag(u.ETag))
	writeJSON(w, http.StatusOK, userOut(u))
	return nil
}

// putUser creates (201) or replaces (200) a user. An owner cannot take
// its own owner flag away: a system with no owner left cannot be managed.
func (s *Server) putUser(w http.ResponseWriter, r *http.Request) error {
	name := r.PathValue("user")
	conds, err := readConditions(r)
	if err != nil {
		return err
	}
	body, err := readBody(r)
	if err != nil {
		return err
	}
	var in v1.User
	if err := decodeStrict(body, &in); err != nil {
		return err
	}
	if err := checkName(in.Name, name); err != nil {
		return err
	}
	if len(in.DisplayName) > validate.MaxDisplayName {
		return badRequest("displayName", "displayName is longer than %d characters", validate.MaxDisplayName)
	}
	if p := info(r.Context()).principal; p.User == name && !in.Owner {
		return badRequest("owner", "you cannot remove your own owner flag; another owner can")
	} else if p.User == name && in.Disabled {
		return badRequest("disabled", "you cannot disable yourself; another owner can")
	}
	return putRecord(w, r, conds, putLoop[*v1.User, v1.User]{
		what: "user",
		get:  func(ctx context.Context) (*v1.User, error) { return s.identity.GetUser(ctx, name) },
		build: func(existing *v1.User, exists bool) (*v1.User, error) {
			u := &v1.User{Name: name, DisplayName: in.DisplayName, Owner: in.Owner, Disabled: in.Disabled, CreatedAt: s.now().UTC()}
			if exists { // where a user came from is the server's to say
				u.CreatedAt, u.Source, u.Subject = existing.CreatedAt, existing.Source, existing.Subject
			}
			return u, nil
		},
		put:  s.identity.PutUser,
		etag: func(u *v1.User) string { return u.ETag },
		out:  userOut,
	})
}

func (s *Server) deleteUser(w http.ResponseWriter, r *http.Request) error {
	name := r.PathValue("user")
	if info(r.Context()).principal.User == name {
		return badRequest("user", "you cannot delete yourself; another owner can")
	}
	conds, err := readConditions(r)
	if err != nil {
		return err
	}
	if err := s.identity.DeleteUser(r.Context(), name, store.Cond{IfMatch: conds.ifMatch}); err != nil {
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

// members: a user's role in a project. The user must exist.
func members(s *Server) syncResource[*store.Member, v1.Member] {
	return syncResource[*store.Member, v1.Member]{
		what: "member", plural: "members",
		read: v1.RoleViewer, write: v1.RoleAdmin,
		get: s.identity.GetMember, list: s.identity.ListMembers,
		put: s.identity.PutMember, del: s.identity.DeleteMember,
		build: func(r *http.Request, project, name string, body []byte, existing *store.Member, exists bool) (*store.Member, error) {
			var in v1.Member
			if err := decodeStrict(body, &in); err != nil {
				return nil, err
			}
			if err := checkName(in.Name, name); err != nil {
				return nil, err
			}
			if err := checkRole(in.Role); err != nil {
				return nil, err
			}
			if _, err := s.identity.GetUser(r.Context(), name); errors.Is(err, store.ErrNotFound) {
				e := missing(ref{kind: "user", name: name}).withHint("only a user can be a member, and an owner creates users (kiln user create)")
				e.body.Target = "name" // the member's name, which names the user
				return nil, e
			} else if err != nil {
				return nil, err
			}
			m := &store.Member{Project: project, Member: v1.Member{Name: name, Role: in.Role, CreatedAt: s.now().UTC()}}
			if exists {
				m.CreatedAt = existing.CreatedAt
			}
			return m, nil
		},
		out: func(m *store.Member) v1.Member {
			out := m.Member
			out.ID = childPath(m.Project, "members", m.Name)
			return out
		},
		etag: func(m *store.Member) string { return m.ETag },
	}
}

// groupBindings: a role in a project for everyone an identity provider
// says is in a group. The group need not have signed in yet.
func groupBindings(s *Server) syncResource[*store.GroupBinding, v1.GroupBinding] {
	return syncResource[*store.GroupBinding, v1.GroupBinding]{
		what: "groupbinding", plural: "groupbindings",
		read: v1.RoleViewer, write: v1.RoleAdmin,
		get: s.identity.GetGroupBinding, list: s.identity.ListGroupBindings,
		put: s.identity.PutGroupBinding, del: s.identity.DeleteGroupBinding,
		build: func(r *http.Request, project, name string, body []byte, existing *store.GroupBinding, exists bool) (*store.GroupBinding, error) {
			var in v1.GroupBinding
			if err := decodeStrict(body, &in); err != nil {
				return nil, err
			}
			if err := checkName(in.Name, name); err != nil {
				return nil, err
			}
			if !oidc.ValidGroup(name) {
				return nil, badRequest("name", "the group %q is not one Kiln can bind: %s", name, oidc.GroupRule)
			}
			if err := checkRole(in.Role); err != nil {
				return nil, err
			}
			b := &store.GroupBinding{Project: project, GroupBinding: v1.GroupBinding{Name: name, Role: in.Role, CreatedAt: s.now().UTC()}}
			if exists {
				b.CreatedAt = existing.CreatedAt
			}
			return b, nil
		},
		out: func(b *store.GroupBinding) v1.GroupBinding {
			out := b.GroupBinding
			out.ID = childPath(b.Project, "groupbindings", url.PathEscape(b.Name))
			return out
		},
		etag: func(b *store.GroupBinding) string { return b.ETag },
	}
}

func serviceAccounts(s *Server) syncResource[*store.ServiceAccount, v1.ServiceAccount] {
	return syncResource[*store.ServiceAccount, v1.ServiceAccount]{
		what: "serviceaccount", plural: "serviceaccounts",
		read: v1.RoleViewer, write: v1.RoleAdmin,
		get: s.identity.GetServiceAccount, list: s.identity.ListServiceAccounts,
		put: s.identity.PutServiceAccount, del: s.identity.DeleteServiceAccount,
		build: func(r *http.Request, project, name string, body []byte, existing *store.ServiceAccount, exists bool) (*store.ServiceAccount, error) {
			var in v1.ServiceAccount
			if err := decodeStrict(body, &in); err != nil {
				return nil, err
			}
			if err := checkName(in.Name, name); err != nil {
				return nil, err
			}
			if err := checkRole(in.Role); err != nil {
				return nil, err
			}
			if len(in.Description) > validate.MaxDisplayName {
				return nil, badRequest("description", "description is longer than %d characters", validate.MaxDisplayName)
			}
			sa := &store.ServiceAccount{Project: project, ServiceAccount: v1.ServiceAccount{
				Name: name, Role: in.Role, Description: in.Description, CreatedAt: s.now().UTC(),
			}}
			if exists {
				sa.CreatedAt = existing.CreatedAt
			}
			return sa, nil
		},
		out: func(sa *store.ServiceAccount) v1.ServiceAccount {
			out := sa.ServiceAccount
			out.ID = childPath(sa.Project, "serviceaccounts", sa.Name)
			return out
		},
		etag: func(sa *store.ServiceAccount) string { return sa.ETag },
	}
}

func checkRole(role string) error {
	switch {
	case role == "":
		return newError(http.StatusBadRequest, v1.CodeMissingParameter, "role", "role is required: viewer, operator or admin")
	case role == v1.RoleOwner:
		return badRequest("role", "owner is not a project role: it is a flag on a user (kiln user create --owner)")
	case !auth.ValidProjectRole(role):
		return badRequest("role", "role %q is not one of viewer, operator, admin", role)
	}
	return nil
}

// Token lifetimes.
const (
	defaultTokenDays = 90
	maxTokenDays     = 3650
)

// tokenPrincipal is the principal whose tokens the path names; for a
// service account, it must exist.
func (s *Server) tokenPrincipal(r *http.Request) (string, error) {
	if user := r.PathValue("user"); user != "" {
		if _, err := s.identity.GetUser(r.Context(), user); err != nil {
			return "", toAPIError(err, refOf(r, "user"))
		}
		return auth.UserPrincipal(user), nil
	}
	project, name := r.PathValue("project"), r.PathValue("serviceaccount")
	if _, err := s.identity.GetServiceAccount(r.Context(), project, name); err != nil {
		return "", toAPIError(err, refOf(r, "serviceaccount"))
	}
	return auth.ServiceAccountPrincipal(project, name), nil
}

func tokenOut(t *store.Token) v1.Token {
	out := v1.Token{ID: t.ID, Principal: t.Principal, Description: t.Description,
		CreatedAt: t.CreatedAt, ExpiresAt: t.ExpiresAt, Groups: t.Groups}
	if !t.LastUsedAt.IsZero() {
		out.LastUsedAt = &t.LastUsedAt
	}
	if !t.RevokedAt.IsZero() {
		out.RevokedAt = &t.RevokedAt
	}
	return out
}

// createToken issues a token: the answer is the only time its value is
// shown; the store keeps its hash.
func (s *Server) createToken(w http.ResponseWriter, r *http.Request) error {
	body, err := readOptionalBody(r) // no body: the defaults
	if err != nil {
		return err
	}
	var in v1.TokenRequest
	if body != nil {
		if err := decodeStrict(body, &in); err != nil {
			return err
		}
	}
	switch {
	case in.ExpiresInDays < 0 || in.ExpiresInDays > maxTokenDays:
		return badRequest("expiresInDays", "expiresInDays must be from 1 to %d (0 means %d)", maxTokenDays, defaultTokenDays)
	case len(in.Description) > validate.MaxDisplayName:
		return badRequest("description", "description is longer than %d characters", validate.MaxDisplayName)
	case in.ExpiresInDays == 0:
		in.ExpiresInDays = defaultTokenDays
	}
	principal, err := s.tokenPrincipal(r)
	if err != nil {
		return err
	}
	out, err := s.newToken(r.Context(), principal, in.Description,
		s.now().UTC().Add(time.Duration(in.ExpiresInDays)*24*time.Hour), nil)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusCreated, out)
	return nil
}

// newToken records a new token of principal, until expires, with the
// identity provider's groups of a sign-in (nil for others), and returns its
// wire form holding its value: the only time it is shown.
func (s *Server) newToken(ctx context.Context, principal, description string, expires time.Time, groups []string) (v1.Token, error) {
	value, hash, err := auth.NewToken()
	if err != nil {
		return v1.Token{}, err
	}
	t := &store.Token{ID: auth.NewTokenID(), Hash: hash, Principal: principal, Description: description,
		CreatedAt: s.now().UTC(), ExpiresAt: expires, Groups: groups}
	if err := s.identity.CreateToken(ctx, t); err != nil {
		return v1.Token{}, err
	}
	out := tokenOut(t)
	out.Value = value
	return out, nil
}

func (s *Server) listTokens(w http.ResponseWriter, r *http.Request) error {
	pg, err := page(r)
	if err != nil {
		return err
	}
	principal, err := s.tokenPrincipal(r)
	if err != nil {
		return err
	}
	items, next, err := s.identity.ListTokens(r.Context(), principal, pg)
	if err != nil {
		return err
	}
	list(w, r, pg, items, next, tokenOut)
	return nil
}

// revokeToken revokes a token at once: the next request with it is 401.
func (s *Server) revokeToken(w http.ResponseWriter, r *http.Request) error {
	principal, err := s.tokenPrincipal(r)
	if err != nil {
		return err
	}
	id := r.PathValue("token")
	if err := s.identity.RevokeToken(r.Context(), principal, id, s.now().UTC()); err != nil {
		return toAPIError(err, refOf(r, "token"))
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}
