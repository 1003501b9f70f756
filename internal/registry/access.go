package registry

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"net/http"
	"strings"

	v1 "kiln.dev/kiln/api/v1"
	"kiln.dev/kiln/internal/auth"
	"kiln.dev/kiln/internal/store"
)

// Who may do what. A principal's role in a project (internal/auth) decides:
//
//	pull (GET, HEAD)                      viewer and above
//	push (POST, PUT, PATCH), delete       operator and above
//
// A node of a cluster of project P pulls P's images and the system images
// (System), nothing else. Every token pulls the system images; only
// owners push and delete them.

// Actions of the distribution API, and the least role each needs.
const (
	actionPull   = "pull"
	actionPush   = "push"
	actionDelete = "delete"
)

var actionRole = map[string]string{actionPull: v1.RoleViewer, actionPush: v1.RoleOperator, actionDelete: v1.RoleOperator}

// actionOf is the action of a request to a repository, by its method.
func actionOf(method string) string {
	switch method {
	case http.MethodGet, http.MethodHead:
		return actionPull
	case http.MethodDelete:
		return actionDelete
	}
	return actionPush
}

// Principal is who a registry request acts for.
type Principal struct {
	// Name is what logs and refusals show: user:NAME,
	// serviceaccount:PROJECT/NAME, node:PROJECT/CLUSTER/NODE. Never a
	// secret.
	Name string
	// Project, when set, binds the principal to that project: the names in
	// its requests are read within it (names.go) and it reaches no other.
	Project string
	// RoleIn returns the principal's role in a project, "" for none, or an
	// error wrapping ErrNoProject when the project does not exist (said
	// only to whom may know: an owner).
	RoleIn func(ctx context.Context, project string) (string, error)
}

// ErrNoProject: the project a request names does not exist.
var ErrNoProject = errors.New("no such project")

// Credentials authenticate registry requests. A request without a valid
// credential is an error wrapping auth.ErrUnauthenticated whose text after
// "unauthenticated: " is safe to show the client; any other error is the
// server's (logged, answered 503).
type Credentials interface {
	Authenticate(r *http.Request) (Principal, error)
}

// AuthStore is what Tokens reads: whether a project exists.
type AuthStore interface {
	GetProject(ctx context.Context, name string) (*v1.Project, error)
}

// Tokens are the credentials of the API listener: a Kiln token (a user's
// or a service account's), as "Authorization: Bearer TOKEN" or as the
// password of HTTP basic authentication (any user name), which is what
// `docker login -u ANYTHING -p TOKEN` and containerd's registry auth send.
type Tokens struct {
	Auth     *auth.Authenticator
	Projects AuthStore
}

// Authenticate implements Credentials.
func (t Tokens) Authenticate(r *http.Request) (Principal, error) {
	token := tokenOf(r)
	p, err := t.Auth.Authenticate(r.Context(), token)
	if err != nil {
		return Principal{}, err
	}
	return Principal{
		Name: p.Name,
		RoleIn: func(ctx context.Context, project string) (string, error) {
			if project == System {
				return systemRole(p.Owner), nil
			}
			role, err := t.Auth.RoleIn(ctx, p, project)
			if err != nil || role == "" || !p.Owner {
				return role, err
			}
			// An owner has every role in every project, those that do not
			// exist too: say so rather than make a repository of none.
			if _, err := t.Projects.GetProject(ctx, project); errors.Is(err, store.ErrNotFound) {
				return "", fmt.Errorf("project %s: %w", project, ErrNoProject)
			} else if err != nil {
				return "", err
			}
			return role, nil
		},
	}, nil
}

// systemRole is a token's role in the System namespace: owners own it,
// everyone else pulls.
func systemRole(owner bool) string {
	if owner {
		return v1.RoleOwner
	}
	return v1.RoleViewer
}

// tokenOf is the token of a request: a bearer token, or a basic
// authentication password.
func tokenOf(r *http.Request) string {
	scheme, rest, ok := strings.Cut(r.Header.Get("Authorization"), " ")
	if !ok {
		return ""
	}
	rest = strings.TrimSpace(rest)
	switch {
	case strings.EqualFold(scheme, "Bearer"):
		return rest
	case strings.EqualFold(scheme, "Basic"):
		raw, err := base64.StdEncoding.DecodeString(rest)
		if err != nil {
			return ""
		}
		_, password, _ := strings.Cut(string(raw), ":")
		return password
	}
	return ""
}

// NodeVerifier says which node of which cluster a request comes from, by
// the client certificate it presents (the agent gateway does:
// gateway.Gateway.VerifyNode). A certificate that is no current node
// certificate is an error wrapping auth.ErrUnauthenticated.
type NodeVerifier interface {
	VerifyNode(r *http.Request) (store.Key, string, error)
}

// Nodes are the credentials of the agent listener: the node certificate a
// node's agent holds (issued at registration, renewed over its session),
// presented as a TLS client certificate. containerd presents it through
// its hosts.toml (client = [cert, key]). A node pulls its cluster's
// project's images, with names read within that project.
type Nodes struct {
	Verifier NodeVerifier
}

// Authenticate implements Credentials.
func (n Nodes) Authenticate(r *http.Request) (Principal, error) {
	k, node, err := n.Verifier.VerifyNode(r)
	if err != nil {
		return Principal{}, err
	}
	project := k.Project
	return Principal{
		Name:    "node:" + k.Project + "/" + k.Name + "/" + node,
		Project: project,
		RoleIn: func(_ context.Context, p string) (string, error) {
			if p == project || p == System {
				return v1.RoleViewer, nil // pull only
			}
			return "", nil
		},
	}, nil
}
