package server

import (
	"errors"
	"fmt"
	"net/http"
	"strings"

	v1 "kiln.dev/kiln/api/v1"
	"kiln.dev/kiln/internal/auth"
	"kiln.dev/kiln/internal/store"
)

// Scope says how a route's caller is authorized. Every route is
// registered with one (see routes()); authorize is the one place that
// enforces it.
type Scope string

const (
	// Public routes need no token: health checks only.
	Public Scope = "public"
	// Anyone with a valid token.
	Anyone Scope = "anyone"
	// Owners: system-wide owners only.
	Owners Scope = "owner"
	// InProject: at least Access.Role in the project named by the path.
	// A caller with no role there gets 403 whether or not the project
	// exists, so the answer says nothing about other tenants.
	InProject Scope = "project"
	// Self: the user named by the path is the caller, or an owner.
	Self Scope = "self"
	// InOperationProject: at least Access.Role in the project of the
	// operation named by the path; anyone else gets 404, as for an
	// operation that does not exist.
	InOperationProject Scope = "operation"
)

// Access is who may call a route.
type Access struct {
	Scope Scope
	Role  string // InProject, InOperationProject: the least role
	// Audited: reads are audited too (they return secrets). Every
	// mutating request is audited anyway.
	Audited bool
}

// Route is one entry of the route table.
type Route struct {
	Pattern string
	Access  Access
}

// Routes returns the route table, in registration order.
func (s *Server) Routes() []Route { return append([]Route(nil), s.table...) }

func public() Access               { return Access{Scope: Public} }
func anyone() Access               { return Access{Scope: Anyone} }
func owners() Access               { return Access{Scope: Owners} }
func self() Access                 { return Access{Scope: Self} }
func inProject(role string) Access { return Access{Scope: InProject, Role: role} }
func audited(a Access) Access      { a.Audited = true; return a }

// authenticate finds the principal of the request's bearer token.
func (s *Server) authenticate(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		token, _ := bearer(r)
		p, err := s.auth.Authenticate(r.Context(), token)
		if err != nil {
			if !errors.Is(err, auth.ErrUnauthenticated) {
				s.writeError(w, r, fmt.Errorf("authenticate: %w", err), "")
				return
			}
			w.Header().Set("WWW-Authenticate", `Bearer realm="kiln"`)
			_, why, _ := strings.Cut(err.Error(), ": ")
			errorBody(w, http.StatusUnauthorized, v1.CodeUnauthorized, "", why)
			return
		}
		info(r.Context()).principal = p
		next.ServeHTTP(w, r)
	})
}

// authorize enforces a route's Access for the authenticated principal.
func (s *Server) authorize(acc Access, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ri := info(r.Context())
		p := ri.principal
		ri.project = r.PathValue("project")
		var err error
		switch acc.Scope {
		case Anyone:
		case Owners:
			if !p.Owner {
				err = forbidden("%s is not an owner; this needs a system-wide owner", p.Name)
			}
		case Self:
			if user := r.PathValue("user"); !p.Owner && (p.User == "" || p.User != user) {
				err = forbidden("%s may manage only its own user; this needs an owner", p.Name)
			}
		case InProject:
			err = s.requireRole(r, p, ri.project, acc.Role)
		case InOperationProject:
			err = s.authorizeOperation(r, p, acc.Role)
		default:
			err = fmt.Errorf("route %s has no access rule", r.Pattern)
		}
		if err != nil {
			s.writeError(w, r, err, "")
			return
		}
		next.ServeHTTP(w, r)
	})
}

// requireRole refuses with 403 unless p has at least role in project.
func (s *Server) requireRole(r *http.Request, p auth.Principal, project, role string) error {
	have, err := s.auth.RoleIn(r.Context(), p, project)
	if err != nil {
		return err
	}
	if auth.Allows(have, role) {
		info(r.Context()).role = have
		return nil
	}
	if have == "" {
		return forbidden("%s has no role in project %s; this needs %s", p.Name, project, role)
	}
	return forbidden("%s is %s in project %s; this needs %s", p.Name, have, project, role)
}

// authorizeOperation lets p at an operation of a project where it has at
// least role. For a caller with no role there the operation does not
// exist (404); one with a lesser role is refused (403).
func (s *Server) authorizeOperation(r *http.Request, p auth.Principal, role string) error {
	id := r.PathValue("operation")
	op, err := s.operations.GetOperation(r.Context(), id)
	if errors.Is(err, store.ErrNotFound) {
		return missing(refOf(r, "operation"))
	}
	if err != nil {
		return err
	}
	ri := info(r.Context())
	ri.project, ri.operation = op.Project, op
	have, err := s.auth.RoleIn(r.Context(), p, op.Project)
	if err != nil {
		return err
	}
	if have == "" {
		return missing(refOf(r, "operation"))
	}
	if !auth.Allows(have, role) {
		return forbidden("%s is %s in project %s; this needs %s", p.Name, have, op.Project, role)
	}
	return nil
}

func forbidden(format string, args ...any) error {
	return newError(http.StatusForbidden, v1.CodeForbidden, "", format, args...)
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
