package server_test

import (
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	v1 "kiln.dev/kiln/api/v1"
	"kiln.dev/kiln/internal/auth"
	"kiln.dev/kiln/internal/store"
)

// required is this test's own statement of who may call each route: the
// least role in the path's project (viewer, operator, admin), "owner"
// (system-wide owners), "self" (the path's user, or an owner), "anyone"
// (any valid token), "public" (no token), "operation" (viewer in the
// operation's project; 404 for others) or "operation-operator" (operator
// in the operation's project; 403 for its viewers, 404 for others). A route the server has and this
// table lacks fails the test: every new route must be classified here.
var required = map[string]string{
	"GET /healthz":               "public",
	"GET /readyz":                "public",
	"GET /metrics":               "anyone",
	"GET /openapi.json":          "anyone",
	"GET /v1/whoami":             "anyone",
	"GET /v1/auth/oidc":          "public",
	"POST /v1/auth/oidc":         "public",
	"GET /debug/pprof/{profile}": "owner",
	"GET /v1/projects":           "anyone",
	"GET /v1/fleet":              "anyone",
	"GET /v1/cost":               "anyone",

	"GET /v1/users":                          "owner",
	"PUT /v1/users/{user}":                   "owner",
	"GET /v1/users/{user}":                   "self",
	"DELETE /v1/users/{user}":                "owner",
	"POST /v1/users/{user}/tokens":           "self",
	"GET /v1/users/{user}/tokens":            "self",
	"DELETE /v1/users/{user}/tokens/{token}": "self",
	"GET /v1/audit":                          "owner",
	"PUT /v1/projects/{project}":             "owner",
	"GET /v1/projects/{project}":             "viewer",
	"DELETE /v1/projects/{project}":          "owner",
	"GET /v1/projects/{project}/audit":       "admin",
	"GET /v1/operations/{operation}":         "operation",
	"POST /v1/operations/{operation}/cancel": "operation-operator",
	"GET /v1/projects/{project}/clusters":    "viewer",

	"PUT /v1/projects/{project}/clusters/{cluster}":                                  "operator",
	"PATCH /v1/projects/{project}/clusters/{cluster}":                                "operator",
	"GET /v1/projects/{project}/clusters/{cluster}":                                  "viewer",
	"DELETE /v1/projects/{project}/clusters/{cluster}":                               "operator",
	"POST /v1/projects/{project}/clusters/{cluster}/validate":                        "operator",
	"GET /v1/projects/{project}/clusters/{cluster}/upgrades":                         "viewer",
	"POST /v1/projects/{project}/clusters/{cluster}/provision":                       "operator",
	"GET /v1/projects/{project}/clusters/{cluster}/installer":                        "admin",
	"POST /v1/projects/{project}/clusters/{cluster}/reset":                           "operator",
	"POST /v1/projects/{project}/clusters/{cluster}/hibernate":                       "operator",
	"POST /v1/projects/{project}/clusters/{cluster}/jobs":                            "operator",
	"GET /v1/projects/{project}/clusters/{cluster}/jobs":                             "viewer",
	"GET /v1/projects/{project}/clusters/{cluster}/jobs/{job}":                       "viewer",
	"GET /v1/projects/{project}/clusters/{cluster}/jobs/{job}/logs":                  "viewer",
	"POST /v1/projects/{project}/clusters/{cluster}/resume":                          "operator",
	"POST /v1/projects/{project}/clusters/{cluster}/reconcile":                       "operator",
	"POST /v1/projects/{project}/clusters/{cluster}/rotate-certificates":             "operator",
	"POST /v1/projects/{project}/clusters/{cluster}/diagnostics":                     "operator",
	"GET /v1/projects/{project}/clusters/{cluster}/diagnostics":                      "viewer",
	"GET /v1/projects/{project}/clusters/{cluster}/diagnostics/{diagnostics}":        "viewer",
	"GET /v1/projects/{project}/clusters/{cluster}/diagnostics/{diagnostics}/bundle": "viewer",
	"DELETE /v1/projects/{project}/clusters/{cluster}/diagnostics/{diagnostics}":     "operator",
	"POST /v1/projects/{project}/clusters/{cluster}/backups":                         "operator",
	"GET /v1/projects/{project}/clusters/{cluster}/backups":                          "viewer",
	"GET /v1/projects/{project}/clusters/{cluster}/backups/{backup}":                 "viewer",
	"DELETE /v1/projects/{project}/clusters/{cluster}/backups/{backup}":              "operator",
	"POST /v1/projects/{project}/clusters/{cluster}/restore":                         "operator",
	"POST /v1/projects/{project}/clusters/{cluster}/retry":                           "operator",
	"GET /v1/projects/{project}/clusters/{cluster}/kubeconfig":                       "viewer",
	"POST /v1/projects/{project}/clusters/{cluster}/admin-kubeconfig":                "admin",
	"POST /v1/projects/{project}/clusters/{cluster}/credential":                      "viewer",
	"GET /v1/projects/{project}/clusters/{cluster}/nodes":                            "viewer",
	"POST /v1/projects/{project}/clusters/{cluster}/activation":                      "admin",
	"DELETE /v1/projects/{project}/clusters/{cluster}/activation":                    "admin",
	"GET /v1/projects/{project}/clusters/{cluster}/nodes/{node}":                     "viewer",
	"DELETE /v1/projects/{project}/clusters/{cluster}/nodes/{node}":                  "operator",
	"POST /v1/projects/{project}/clusters/{cluster}/nodes/{node}/approve":            "operator",
	"POST /v1/projects/{project}/clusters/{cluster}/nodes/{node}/configure":          "operator",
	"GET /v1/projects/{project}/clusters/{cluster}/nodes/{node}/logs":                "viewer",
	"GET /v1/projects/{project}/clusters/{cluster}/operations":                       "viewer",
	"GET /v1/projects/{project}/clusters/{cluster}/events":                           "viewer",
	"GET /v1/projects/{project}/cloudaccounts":                                       "viewer",
	"GET /v1/projects/{project}/cloudaccounts/{cloudaccount}":                        "viewer",
	"PUT /v1/projects/{project}/cloudaccounts/{cloudaccount}":                        "admin",
	"DELETE /v1/projects/{project}/cloudaccounts/{cloudaccount}":                     "admin",
	"GET /v1/projects/{project}/secrets":                                             "viewer",
	"GET /v1/projects/{project}/secrets/{secret}":                                    "viewer",
	"PUT /v1/projects/{project}/secrets/{secret}":                                    "admin",
	"DELETE /v1/projects/{project}/secrets/{secret}":                                 "admin",
	"GET /v1/projects/{project}/profiles":                                            "viewer",
	"GET /v1/projects/{project}/profiles/{profile}":                                  "viewer",
	"PUT /v1/projects/{project}/profiles/{profile}":                                  "operator",
	"DELETE /v1/projects/{project}/profiles/{profile}":                               "operator",
	"GET /v1/projects/{project}/profiles/{profile}/versions/{version}":               "viewer",
	"POST /v1/projects/{project}/profiles/{profile}/versions/{version}/publish":      "operator",
	"DELETE /v1/projects/{project}/profiles/{profile}/versions/{version}":            "operator",
	"GET /v1/projects/{project}/members":                                             "viewer",
	"GET /v1/projects/{project}/members/{member}":                                    "viewer",
	"PUT /v1/projects/{project}/members/{member}":                                    "admin",
	"DELETE /v1/projects/{project}/members/{member}":                                 "admin",
	"GET /v1/projects/{project}/groupbindings":                                       "viewer",
	"GET /v1/projects/{project}/groupbindings/{groupbinding}":                        "viewer",
	"PUT /v1/projects/{project}/groupbindings/{groupbinding}":                        "admin",
	"DELETE /v1/projects/{project}/groupbindings/{groupbinding}":                     "admin",
	"GET /v1/projects/{project}/serviceaccounts":                                     "viewer",
	"GET /v1/projects/{project}/serviceaccounts/{serviceaccount}":                    "viewer",
	"PUT /v1/projects/{project}/serviceaccounts/{serviceaccount}":                    "admin",
	"DELETE /v1/projects/{project}/serviceaccounts/{serviceaccount}":                 "admin",
	"POST /v1/projects/{project}/serviceaccounts/{serviceaccount}/tokens":            "admin",
	"GET /v1/projects/{project}/serviceaccounts/{serviceaccount}/tokens":             "admin",
	"DELETE /v1/projects/{project}/serviceaccounts/{serviceaccount}/tokens/{token}":  "admin",
}

var projectRank = map[string]int{v1.RoleViewer: 1, v1.RoleOperator: 2, v1.RoleAdmin: 3}

// world is a harness with a tenant layout: project p with a viewer, an
// operator, an admin and an operator service account; project q with its
// own admin (the outsider); the harness token is the owner's.
type world struct {
	*harness
	tokens map[string]string // caller -> token
	opID   string            // an operation of cluster p/c
}

// callers, by the name tokens are kept under, with their user (empty for
// the service account) and their role in project p.
var callers = []struct{ name, user, role string }{
	{"viewer", "val", v1.RoleViewer},
	{"operator", "otto", v1.RoleOperator},
	{"admin", "ada", v1.RoleAdmin},
	{"robot", "", v1.RoleOperator},
	{"outsider", "quinn", ""},
}

func newWorld(t *testing.T) *world {
	t.Helper()
	h := newHarness(t, nil)
	w := &world{harness: h, tokens: map[string]string{"owner": token}}
	ctx := t.Context()
	h.project("p")
	h.project("q")
	_, w.opID = h.createCluster("p", "c", minimal)
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	issue := func(name, principal string) {
		value, hash, err := auth.NewToken()
		must(err)
		must(h.store.CreateToken(ctx, &store.Token{ID: auth.NewTokenID(), Hash: hash, Principal: principal,
			ExpiresAt: time.Now().Add(time.Hour)}))
		w.tokens[name] = value
	}
	for _, c := range callers {
		if c.user == "" {
			must(h.store.PutServiceAccount(ctx, &store.ServiceAccount{Project: "p",
				ServiceAccount: v1.ServiceAccount{Name: c.name, Role: c.role}}, store.Cond{}))
			issue(c.name, auth.ServiceAccountPrincipal("p", c.name))
			continue
		}
		must(h.store.PutUser(ctx, &v1.User{Name: c.user}, store.Cond{}))
		project, role := "p", c.role
		if c.name == "outsider" {
			project, role = "q", v1.RoleAdmin
		}
		must(h.store.PutMember(ctx, &store.Member{Project: project, Member: v1.Member{Name: c.user, Role: role}}, store.Cond{}))
		issue(c.name, auth.UserPrincipal(c.user))
	}
	must(h.store.PutUser(ctx, &v1.User{Name: "target"}, store.Cond{}))
	return w
}

// as sends a request with the named caller's token ("" for none).
func (w *world) as(caller, method, path, body string) response {
	w.t.Helper()
	hdr := "Authorization:"
	if caller != "" {
		hdr = "Authorization: Bearer " + w.tokens[caller]
	}
	return w.do(method, path, body, hdr)
}

// fill turns a route pattern into a path in project, acting on user.
func (w *world) fill(pattern, project, user string) (method, path string) {
	method, path, _ = strings.Cut(pattern, " ")
	return method, strings.NewReplacer(
		"{project}", project, "{cluster}", "c", "{node}", "n", "{operation}", w.opID,
		"{cloudaccount}", "ca", "{diagnostics}", "d", "{backup}", "b", "{secret}", "s", "{profile}", "pr", "{member}", "target", "{serviceaccount}", "robot",
		"{token}", "tok_0000000000000000", "{user}", user,
	).Replace(path)
}

// body is a request body that passes decoding for every route; handlers
// may still refuse it (400, 404, 409): authorization is what is checked.
const body = `{}`

func TestRouteTableAuthorization(t *testing.T) {
	routes := newHarness(t, nil).s.Routes()
	seen := map[string]bool{}
	for _, rt := range routes {
		seen[rt.Pattern] = true
		need, ok := required[rt.Pattern]
		if !ok {
			t.Errorf("route %s is not in this test's table: say who may call it", rt.Pattern)
			continue
		}
		t.Run(rt.Pattern, func(t *testing.T) {
			t.Parallel()
			w := newWorld(t)
			checkRoute(t, w, rt.Pattern, need)
		})
	}
	for pattern := range required {
		if !seen[pattern] {
			t.Errorf("the table names %s, which the server does not have", pattern)
		}
	}
}

// checkRoute sends the route a request as every kind of caller: refusals
// first, then callers allowed (whose requests may change things), the
// owner last.
func checkRoute(t *testing.T, w *world, pattern, need string) {
	denied := func(caller, path, method string) {
		t.Helper()
		r := w.as(caller, method, path, body)
		if r.status != http.StatusForbidden {
			t.Errorf("%s as %s: status %d, want 403; body %s", pattern, caller, r.status, r.body)
		} else if e := r.errorBody(t); e.Code != v1.CodeForbidden {
			t.Errorf("%s as %s: code %s, want Forbidden", pattern, caller, e.Code)
		}
	}
	allowed := func(caller, path, method string) {
		t.Helper()
		r := w.as(caller, method, path, body)
		if r.status == http.StatusUnauthorized || r.status == http.StatusForbidden || r.status >= 500 {
			t.Errorf("%s as %s: status %d, want it let through; body %s", pattern, caller, r.status, r.body)
		}
	}

	method, path := w.fill(pattern, "p", "target")
	if need == "public" {
		allowed("", path, method)
		return
	}
	if r := w.as("", method, path, body); r.status != http.StatusUnauthorized {
		t.Errorf("%s without a token: status %d, want 401", pattern, r.status)
	}
	if r := w.do(method, path, body, "Authorization: Bearer kiln_not-a-token"); r.status != http.StatusUnauthorized {
		t.Errorf("%s with an unknown token: status %d, want 401", pattern, r.status)
	}

	switch need {
	case "anyone":
		for _, c := range callers {
			allowed(c.name, path, method)
		}
	case "owner":
		for _, c := range callers {
			denied(c.name, path, method)
		}
	case "self":
		for _, c := range callers {
			if c.user != "" {
				denied(c.name, path, method) // another user's
			}
		}
		denied("robot", path, method) // a service account is no user
		for _, c := range callers {
			if c.user != "" {
				_, own := w.fill(pattern, "p", c.user)
				allowed(c.name, own, method)
			}
		}
	case "operation", "operation-operator":
		if r := w.as("outsider", method, path, body); r.status != http.StatusNotFound {
			t.Errorf("%s as outsider: status %d, want 404 (the operation is another project's)", pattern, r.status)
		}
		_, missing := w.fill(strings.Replace(pattern, "{operation}", "no-such-operation", 1), "p", "target")
		other, none := w.as("outsider", method, path, body), w.as("outsider", method, missing, body)
		if other.status != none.status || other.errorBody(t).Code != none.errorBody(t).Code {
			t.Errorf("outsider tells another project's operation (%d) from a missing one (%d)", other.status, none.status)
		}
		for _, c := range callers[:4] {
			if need == "operation-operator" && projectRank[c.role] < projectRank[v1.RoleOperator] {
				denied(c.name, path, method) // it may see the operation: told why, not 404
				continue
			}
			allowed(c.name, path, method)
		}
	default: // a project role
		// Another tenant is refused alike for a project that exists and one
		// that does not: the answer does not say which.
		denied("outsider", path, method)
		_, nowhere := w.fill(pattern, "nowhere", "target")
		exists, missing := w.as("outsider", method, path, body), w.as("outsider", method, nowhere, body)
		if exists.status != missing.status || exists.errorBody(t).Code != missing.errorBody(t).Code {
			t.Errorf("%s: outsider gets %d for an existing project and %d for a missing one", pattern, exists.status, missing.status)
		}
		var let []string
		for _, c := range callers[:4] {
			if projectRank[c.role] < projectRank[need] {
				denied(c.name, path, method)
			} else {
				let = append(let, c.name)
			}
		}
		for _, name := range let {
			allowed(name, path, method)
		}
	}
	allowed("owner", path, method)
}

// TestOwnerSeesMissingProjects: the owner, who may see every project, is
// told a project does not exist; members of other projects never are.
func TestOwnerSeesMissingProjects(t *testing.T) {
	w := newWorld(t)
	if r := w.as("owner", "GET", "/v1/projects/nowhere/clusters", ""); r.status != http.StatusNotFound {
		t.Errorf("owner: status %d, want 404", r.status)
	}
	if r := w.as("viewer", "GET", "/v1/projects/nowhere/clusters", ""); r.status != http.StatusForbidden {
		t.Errorf("viewer of another project: status %d, want 403", r.status)
	}
}

func TestProjectListShowsOnlyOwnProjects(t *testing.T) {
	w := newWorld(t)
	names := func(caller string) string {
		var l v1.List[v1.Project]
		w.as(caller, "GET", "/v1/projects", "").decode(t, &l)
		var out []string
		for _, p := range l.Value {
			out = append(out, p.Name)
		}
		return strings.Join(out, ",")
	}
	for caller, want := range map[string]string{"owner": "default,p,q", "viewer": "p", "robot": "p", "outsider": "q"} {
		if caller == "owner" {
			want = "p,q"
		}
		if got := names(caller); got != want {
			t.Errorf("projects seen by %s = %q, want %q", caller, got, want)
		}
	}
}

func TestWhoami(t *testing.T) {
	w := newWorld(t)
	for caller, want := range map[string]string{
		"owner":    "user:admin owner=true map[p:owner q:owner]",
		"operator": "user:otto owner=false map[p:operator]",
		"robot":    "serviceaccount:p/robot owner=false map[p:operator]",
	} {
		var who v1.Whoami
		w.as(caller, "GET", "/v1/whoami", "").decode(t, &who)
		if got := fmt.Sprintf("%s owner=%t %v", who.Principal, who.Owner, who.Projects); got != want {
			t.Errorf("whoami as %s = %q, want %q", caller, got, want)
		}
		if who.TokenID == "" {
			t.Errorf("whoami as %s has no token id", caller)
		}
	}
}

// TestTokenLifecycle: a token is shown once, listed without its value,
// and refused on the very next request after revocation; expired tokens
// and tokens of deleted users are refused too.
func TestTokenLifecycle(t *testing.T) {
	w := newWorld(t)
	r := w.as("operator", "POST", "/v1/users/otto/tokens", `{"description": "ci", "expiresInDays": 7}`)
	if r.status != http.StatusCreated {
		t.Fatalf("create token: %d %s", r.status, r.body)
	}
	var tok v1.Token
	r.decode(t, &tok)
	if !strings.HasPrefix(tok.Value, auth.TokenPrefix) || tok.Principal != "user:otto" {
		t.Fatalf("created token = %+v, want a kiln_ value for user:otto", tok)
	}
	if d := time.Until(tok.ExpiresAt); d < 6*24*time.Hour || d > 7*24*time.Hour {
		t.Errorf("expiresAt %v is not 7 days away", tok.ExpiresAt)
	}
	w.tokens["new"] = tok.Value
	if r := w.as("new", "GET", "/v1/projects/p/clusters", ""); r.status != http.StatusOK {
		t.Fatalf("the new token: status %d", r.status)
	}

	r = w.as("operator", "GET", "/v1/users/otto/tokens", "")
	if strings.Contains(string(r.body), tok.Value) || strings.Contains(string(r.body), auth.Hash(tok.Value)) {
		t.Errorf("the token list shows the token's value or hash: %s", r.body)
	}
	var l v1.List[v1.Token]
	r.decode(t, &l)
	if len(l.Value) != 2 || l.Value[0].Value != "" {
		t.Errorf("listed tokens = %+v, want 2 without values", l.Value)
	}

	if r := w.as("viewer", "DELETE", "/v1/users/otto/tokens/"+tok.ID, ""); r.status != http.StatusForbidden {
		t.Errorf("another user revoking: status %d, want 403", r.status)
	}
	if r := w.as("operator", "DELETE", "/v1/users/otto/tokens/"+tok.ID, ""); r.status != http.StatusNoContent {
		t.Fatalf("revoke: status %d %s", r.status, r.body)
	}
	r = w.as("new", "GET", "/v1/projects/p/clusters", "")
	if e := r.errorBody(t); r.status != http.StatusUnauthorized || e.Code != v1.CodeUnauthorized || !strings.Contains(e.Message, "revoked") {
		t.Errorf("revoked token on the next request: %d %s, want 401 saying it was revoked", r.status, r.body)
	}

	// Expired: written straight to the store with a past expiry.
	value, hash, _ := auth.NewToken()
	if err := w.store.CreateToken(t.Context(), &store.Token{ID: "tok_old", Hash: hash, Principal: "user:otto",
		ExpiresAt: time.Now().Add(-time.Minute)}); err != nil {
		t.Fatal(err)
	}
	w.tokens["old"] = value
	if r := w.as("old", "GET", "/v1/whoami", ""); r.status != http.StatusUnauthorized || r.errorBody(t).Code != v1.CodeUnauthorized ||
		!strings.Contains(r.errorBody(t).Message, "expired") {
		t.Errorf("expired token: %d %s, want 401 saying it expired", r.status, r.body)
	}

	// A deleted user's tokens stop working.
	if r := w.as("owner", "DELETE", "/v1/users/otto", ""); r.status != http.StatusNoContent {
		t.Fatalf("delete user: %d %s", r.status, r.body)
	}
	if r := w.as("operator", "GET", "/v1/whoami", ""); r.status != http.StatusUnauthorized {
		t.Errorf("token of a deleted user: status %d, want 401", r.status)
	}
}

func TestServiceAccountTokens(t *testing.T) {
	w := newWorld(t)
	w.must(http.StatusCreated, "PUT", "/v1/projects/p/serviceaccounts/deployer", `{"role": "viewer"}`)
	r := w.as("admin", "POST", "/v1/projects/p/serviceaccounts/deployer/tokens", `{}`)
	if r.status != http.StatusCreated {
		t.Fatalf("create: %d %s", r.status, r.body)
	}
	var tok v1.Token
	r.decode(t, &tok)
	w.tokens["deployer"] = tok.Value
	if r := w.as("deployer", "GET", "/v1/projects/p/clusters/c", ""); r.status != http.StatusOK {
		t.Errorf("viewer service account reading: %d", r.status)
	}
	if r := w.as("deployer", "DELETE", "/v1/projects/p/clusters/c", ""); r.status != http.StatusForbidden {
		t.Errorf("viewer service account deleting: %d, want 403", r.status)
	}
	if r := w.as("deployer", "GET", "/v1/projects/q/clusters", ""); r.status != http.StatusForbidden {
		t.Errorf("service account in another project: %d, want 403", r.status)
	}
	w.must(http.StatusNoContent, "DELETE", "/v1/projects/p/serviceaccounts/deployer", "")
	if r := w.as("deployer", "GET", "/v1/projects/p/clusters/c", ""); r.status != http.StatusUnauthorized {
		t.Errorf("token of a deleted service account: %d, want 401", r.status)
	}
}

func TestRoleValidation(t *testing.T) {
	w := newWorld(t)
	for _, tc := range []struct{ body, code, target string }{
		{`{}`, v1.CodeMissingParameter, "role"},
		{`{"role": "owner"}`, v1.CodeInvalidParameter, "role"},
		{`{"role": "god"}`, v1.CodeInvalidParameter, "role"},
	} {
		r := w.as("admin", "PUT", "/v1/projects/p/members/target", tc.body)
		if e := r.errorBody(t); r.status != http.StatusBadRequest || e.Code != tc.code || e.Target != tc.target {
			t.Errorf("member %s: %d %s %s, want 400 %s %s", tc.body, r.status, e.Code, e.Target, tc.code, tc.target)
		}
	}
	r := w.as("admin", "PUT", "/v1/projects/p/members/nobody", `{"role": "viewer"}`)
	if e := r.errorBody(t); r.status != http.StatusNotFound || e.Code != v1.CodeNotFound || !strings.Contains(e.Message, "kiln user create") {
		t.Errorf("member for a missing user: %d %s, want 404 saying how to create users", r.status, r.body)
	}
	if r := w.as("owner", "PUT", "/v1/users/admin", `{"owner": false}`); r.status != http.StatusBadRequest {
		t.Errorf("an owner dropping its own owner flag: %d, want 400", r.status)
	}
}
