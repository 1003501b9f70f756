package client

import (
	"context"
	"net/http"
	"net/url"
	"time"

	v1 "kiln.dev/kiln/api/v1"
)

func userPath(name string) string { return "/v1/users/" + url.PathEscape(name) }

func memberPath(project, name string) string {
	return projectPath(project) + "/members/" + url.PathEscape(name)
}

func serviceAccountPath(project, name string) string {
	return projectPath(project) + "/serviceaccounts/" + url.PathEscape(name)
}

// get, put and del are the one-record calls of the identity resources.
func get[T any](ctx context.Context, c *Client, path string) (*T, error) {
	var out T
	if _, err := c.do(ctx, http.MethodGet, path, nil, conditions{}, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

func put[T any](ctx context.Context, c *Client, path string, in *T) (*T, error) {
	var out T
	if _, err := c.do(ctx, http.MethodPut, path, in, conditions{}, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// create is put with If-None-Match: *: a record that exists already is
// not replaced, the call fails with 412 Precondition Failed.
func create[T any](ctx context.Context, c *Client, path string, in *T) (*T, error) {
	var out T
	if _, err := c.do(ctx, http.MethodPut, path, in, conditions{ifNoneMatch: true}, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

func (c *Client) del(ctx context.Context, path string) error {
	_, err := c.do(ctx, http.MethodDelete, path, nil, conditions{}, nil)
	return err
}

// CreateProject creates a project that must not exist yet (owners only);
// an existing one fails with 412 and is left as it is.
func (c *Client) CreateProject(ctx context.Context, p *v1.Project) (*v1.Project, error) {
	return create(ctx, c, projectPath(p.Name), p)
}

// Whoami says who the client's token acts for.
func (c *Client) Whoami(ctx context.Context) (*v1.Whoami, error) {
	return get[v1.Whoami](ctx, c, "/v1/whoami")
}

// ListUsers lists users (owners only).
func (c *Client) ListUsers(ctx context.Context) ([]v1.User, error) {
	return listAll[v1.User](ctx, c, "/v1/users")
}

// GetUser reads a user.
func (c *Client) GetUser(ctx context.Context, name string) (*v1.User, error) {
	return get[v1.User](ctx, c, userPath(name))
}

// PutUser creates or replaces a user (owners only).
func (c *Client) PutUser(ctx context.Context, u *v1.User) (*v1.User, error) {
	return put(ctx, c, userPath(u.Name), u)
}

// CreateUser creates a user that must not exist yet (owners only); an
// existing one fails with 412 and is left as it is.
func (c *Client) CreateUser(ctx context.Context, u *v1.User) (*v1.User, error) {
	return create(ctx, c, userPath(u.Name), u)
}

// DeleteUser deletes a user, its memberships and its tokens.
func (c *Client) DeleteUser(ctx context.Context, name string) error {
	return c.del(ctx, userPath(name))
}

// ListMembers lists a project's members.
func (c *Client) ListMembers(ctx context.Context, project string) ([]v1.Member, error) {
	return listAll[v1.Member](ctx, c, projectPath(project)+"/members")
}

// PutMember gives user m.Name the role m.Role in project (admins only).
func (c *Client) PutMember(ctx context.Context, project string, m *v1.Member) (*v1.Member, error) {
	return put(ctx, c, memberPath(project, m.Name), m)
}

// DeleteMember removes a user from a project.
func (c *Client) DeleteMember(ctx context.Context, project, name string) error {
	return c.del(ctx, memberPath(project, name))
}

// ListGroupBindings lists a project's group bindings.
func (c *Client) ListGroupBindings(ctx context.Context, project string) ([]v1.GroupBinding, error) {
	return listAll[v1.GroupBinding](ctx, c, projectPath(project)+"/groupbindings")
}

// PutGroupBinding gives everyone in the identity provider's group b.Name
// the role b.Role in project (admins only).
func (c *Client) PutGroupBinding(ctx context.Context, project string, b *v1.GroupBinding) (*v1.GroupBinding, error) {
	return put(ctx, c, groupBindingPath(project, b.Name), b)
}

// DeleteGroupBinding removes a group's binding from a project.
func (c *Client) DeleteGroupBinding(ctx context.Context, project, group string) error {
	return c.del(ctx, groupBindingPath(project, group))
}

func groupBindingPath(project, group string) string {
	return projectPath(project) + "/groupbindings/" + url.PathEscape(group)
}

// SignInConfig lists the identity providers the server trusts; it needs no
// token.
func (c *Client) SignInConfig(ctx context.Context) (*v1.SignInConfig, error) {
	return get[v1.SignInConfig](ctx, c, "/v1/auth/oidc")
}

// SignIn trades an identity provider's ID token for a Kiln token of its
// person; it needs no token.
func (c *Client) SignIn(ctx context.Context, req v1.SignInRequest) (*v1.SignIn, error) {
	var out v1.SignIn
	if _, err := c.do(ctx, http.MethodPost, "/v1/auth/oidc", req, conditions{}, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// ListServiceAccounts lists a project's service accounts.
func (c *Client) ListServiceAccounts(ctx context.Context, project string) ([]v1.ServiceAccount, error) {
	return listAll[v1.ServiceAccount](ctx, c, projectPath(project)+"/serviceaccounts")
}

// PutServiceAccount creates or replaces a service account (admins only).
func (c *Client) PutServiceAccount(ctx context.Context, project string, sa *v1.ServiceAccount) (*v1.ServiceAccount, error) {
	return put(ctx, c, serviceAccountPath(project, sa.Name), sa)
}

// CreateServiceAccount creates a service account that must not exist yet
// (admins only); an existing one fails with 412 and keeps its role.
func (c *Client) CreateServiceAccount(ctx context.Context, project string, sa *v1.ServiceAccount) (*v1.ServiceAccount, error) {
	return create(ctx, c, serviceAccountPath(project, sa.Name), sa)
}

// DeleteServiceAccount deletes a service account and its tokens.
func (c *Client) DeleteServiceAccount(ctx context.Context, project, name string) error {
	return c.del(ctx, serviceAccountPath(project, name))
}

// TokenOwner names whose tokens a call manages: a user, or a project's
// service account.
type TokenOwner struct {
	User           string
	Project        string // with ServiceAccount
	ServiceAccount string
}

func (o TokenOwner) path() string {
	if o.ServiceAccount != "" {
		return serviceAccountPath(o.Project, o.ServiceAccount) + "/tokens"
	}
	return userPath(o.User) + "/tokens"
}

// CreateToken creates a token; the answer holds its value, once.
func (c *Client) CreateToken(ctx context.Context, owner TokenOwner, req v1.TokenRequest) (*v1.Token, error) {
	var t v1.Token
	if _, err := c.do(ctx, http.MethodPost, owner.path(), req, conditions{}, &t); err != nil {
		return nil, err
	}
	return &t, nil
}

// ListTokens lists tokens, without their values.
func (c *Client) ListTokens(ctx context.Context, owner TokenOwner) ([]v1.Token, error) {
	return listAll[v1.Token](ctx, c, owner.path())
}

// RevokeToken revokes a token; the next request with it is refused.
func (c *Client) RevokeToken(ctx context.Context, owner TokenOwner, id string) error {
	return c.del(ctx, owner.path()+"/"+url.PathEscape(id))
}

// AuditFilter narrows an audit listing; zero fields match everything.
type AuditFilter struct {
	Project string // with an admin token of the project: that project's entries only
	Actor   string
	Action  string // a substring of the action, "DELETE" or "clusters"
	Result  string // AuditSuccess, AuditDenied or AuditFailed
	Since   time.Time
	Until   time.Time
	Limit   int // at most this many, newest first; 0 means all
}

// ListAudit lists audit entries, newest first. Owners read every
// project's entries at /v1/audit; with f.Project set the call reads the
// project's own log, which its admins may read too.
func (c *Client) ListAudit(ctx context.Context, f AuditFilter) ([]v1.AuditEntry, error) {
	path := "/v1/audit"
	if f.Project != "" {
		path = projectPath(f.Project) + "/audit"
	}
	q := url.Values{}
	set := func(k, v string) {
		if v != "" {
			q.Set(k, v)
		}
	}
	set("actor", f.Actor)
	set("action", f.Action)
	set("result", f.Result)
	if !f.Since.IsZero() {
		q.Set("since", f.Since.UTC().Format(time.RFC3339Nano))
	}
	if !f.Until.IsZero() {
		q.Set("until", f.Until.UTC().Format(time.RFC3339Nano))
	}
	if len(q) > 0 {
		path += "?" + q.Encode()
	}
	all, err := listAll[v1.AuditEntry](ctx, c, path)
	if err != nil {
		return nil, err
	}
	if f.Limit > 0 && len(all) > f.Limit {
		all = all[:f.Limit]
	}
	return all, nil
}
