package azure

import (
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strings"

	"github.com/google/uuid"
)

// Azure role-based access control, as ARM enforces it on every call: the
// caller's token names its principal (oid); the call needs one action at
// one scope (actionOf: Microsoft.Network/virtualNetworks/write at the
// network's id); the principal's role assignments at that scope or above
// (the subscription, the resource group, the resource) must grant it, or
// the call is 403 AuthorizationFailed naming the action and the scope.
//
// Microsoft.Authorization, at any scope
// (/subscriptions/S[/resourceGroups/G[/providers/NS/TYPE/NAME]]):
//
//	PUT|GET|DELETE SCOPE/providers/Microsoft.Authorization/roleAssignments/GUID
//	GET            SCOPE/providers/Microsoft.Authorization/roleAssignments  ($filter=atScope(), principalId eq '...')
//	GET            SCOPE/providers/Microsoft.Authorization/roleDefinitions[/GUID]  ($filter=roleName eq '...')
//	GET            SCOPE/providers/Microsoft.Authorization/permissions  the caller's own, at SCOPE
//
// Role assignments are kept in the state by id; one whose scope is
// deleted (its group, its resource) goes with it, as in ARM.

const (
	typeRoleAssignment = "Microsoft.Authorization/roleAssignments"
	authzProvider      = "/providers/microsoft.authorization/"
	// startRoleMarker is the description of the assignments New makes
	// for Options.Clients' roles: made again, or taken away, at each
	// start to match them.
	startRoleMarker = "kiln-azure-local: a role of its --role flags (Client.Roles)"
)

// RoleGrant is a role a client has from the start: the role's name or
// id, at Scope ("" is each subscription's).
type RoleGrant struct {
	Role  string
	Scope string
}

// ParseRoleGrant reads ROLE or ROLE@SCOPE (New checks that the role
// is a built-in or custom one).
func ParseRoleGrant(s string) (RoleGrant, error) {
	role, scope, _ := strings.Cut(s, "@")
	if role == "" {
		return RoleGrant{}, fmt.Errorf("%q names no role", s)
	}
	if scope != "" && !strings.HasPrefix(strings.ToLower(scope), "/subscriptions/") {
		return RoleGrant{}, fmt.Errorf("role %s: scope %q is no /subscriptions/... id", role, scope)
	}
	return RoleGrant{Role: role, Scope: scope}, nil
}

// grantStartRoles makes the assignments Options.Clients' roles say (Owner
// on each subscription for a client that names none) and takes away those
// an earlier start made that they no longer say.
func (s *Server) grantStartRoles() error {
	for _, r := range s.opts.CustomRoles {
		if r.Name == "" || len(r.Actions) == 0 {
			return fmt.Errorf("local azure: a custom role needs a name and actions (%+v)", r)
		}
		if b, ok := RoleByName(r.Name); ok {
			return fmt.Errorf("local azure: custom role %q: the built-in role %s has that name", r.Name, b.ID)
		}
		r.Custom = true
		if r.ID == "" {
			r.ID = uuid.NewSHA1(uuid.NameSpaceURL, []byte("kiln-azure-local:role:"+strings.ToLower(r.Name))).String()
		}
		if len(r.AssignableScopes) == 0 {
			for _, sub := range s.opts.Subscriptions {
				r.AssignableScopes = append(r.AssignableScopes, "/subscriptions/"+sub)
			}
		}
		s.st.CustomRoles[key(r.ID)] = &r
	}
	want := map[string]doc{}
	for _, c := range s.opts.Clients {
		grants := c.Roles
		if grants == nil {
			grants = []RoleGrant{{Role: "Owner"}}
		}
		for _, g := range grants {
			r, ok := s.role(g.Role)
			if !ok {
				var names []string
				for _, r := range BuiltInRoles {
					names = append(names, r.Name)
				}
				return fmt.Errorf("local azure: client %s: no role %q: one of %s, or a custom role", c.ID, g.Role, strings.Join(names, ", "))
			}
			scopes := []string{g.Scope}
			if g.Scope == "" {
				scopes = nil
				for _, sub := range s.opts.Subscriptions {
					scopes = append(scopes, "/subscriptions/"+sub)
				}
			}
			for _, scope := range scopes {
				pid := principalID(c.ID)
				name := uuid.NewSHA1(uuid.NameSpaceURL, []byte(key(scope)+"|"+r.ID+"|"+pid)).String()
				id := strings.TrimSuffix(scope, "/") + "/providers/Microsoft.Authorization/roleAssignments/" + name
				want[key(id)] = s.assignmentDoc(id, scope, r.ID, pid, "ServicePrincipal", startRoleMarker, "")
			}
		}
	}
	for k, d := range s.st.RoleAssignments {
		if str(d.props(), "description") == startRoleMarker && want[k] == nil {
			delete(s.st.RoleAssignments, k)
		}
	}
	for k, d := range want {
		if _, ok := s.st.RoleAssignments[k]; !ok {
			s.st.RoleAssignments[k] = d
		}
	}
	return s.save()
}

func (s *Server) assignmentDoc(id, scope, roleID, principal, principalType, description, by string) doc {
	sub, _, _ := strings.Cut(strings.TrimPrefix(strings.ToLower(scope), "/subscriptions/"), "/")
	now := s.opts.Now().UTC().Format("2006-01-02T15:04:05.0000000Z")
	p := map[string]any{"roleDefinitionId": "/subscriptions/" + s.canonicalSub(sub) + "/providers/Microsoft.Authorization/roleDefinitions/" + roleID,
		"principalId": principal, "principalType": principalType, "scope": scope, "condition": nil, "conditionVersion": nil,
		"createdOn": now, "updatedOn": now, "createdBy": by, "updatedBy": by, "delegatedManagedIdentityResourceId": nil}
	if description != "" {
		p["description"] = description
	}
	return doc{"id": id, "name": id[strings.LastIndex(id, "/")+1:], "type": typeRoleAssignment, "properties": p}
}

// covers reports whether an assignment at scope applies at target: the
// same scope or one above it.
func covers(scope, target string) bool {
	s, t := strings.TrimSuffix(key(scope), "/"), strings.TrimSuffix(key(target), "/")
	return s == t || strings.HasPrefix(t, s+"/")
}

// rolesAt are the roles principal holds at scope, by assignment.
func (s *Server) rolesAt(principal, scope string) []Role {
	var out []Role
	seen := map[string]bool{}
	for _, k := range slices.Sorted(mapKeys(s.st.RoleAssignments)) {
		p := s.st.RoleAssignments[k].props()
		if !strings.EqualFold(str(p, "principalId"), principal) || !covers(str(p, "scope"), scope) {
			continue
		}
		if r, ok := s.roleOf(str(p, "roleDefinitionId")); ok && !seen[r.ID] {
			seen[r.ID] = true
			out = append(out, r)
		}
	}
	return out
}

func mapKeys[V any](m map[string]V) func(func(string) bool) {
	return func(yield func(string) bool) {
		for k := range m {
			if !yield(k) {
				return
			}
		}
	}
}

// Allowed reports whether principal (an object id) may perform action at
// scope.
func (s *Server) Allowed(principal, action, scope string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.allowed(principal, action, scope)
}

func (s *Server) allowed(principal, action, scope string) bool {
	for _, r := range s.rolesAt(principal, scope) {
		if r.allows(action) {
			return true
		}
	}
	return false
}

// authorizationFailed is ARM's refusal of a call its caller's roles do not
// allow.
func authorizationFailed(who principal, action, scope string) *armError {
	return errorf(http.StatusForbidden, "AuthorizationFailed",
		"The client '%s' with object id '%s' does not have authorization to perform action '%s' over scope '%s' or the scope is invalid. If access was recently granted, please refresh your credentials.",
		who.ClientID, who.ObjectID, action, scope)
}

// authorize checks the call's action at its scope, and for a virtual
// machine or scale set naming user-assigned identities, the linked
// action of assigning each (Microsoft.ManagedIdentity/.../assign/action),
// as ARM does. Callers hold s.mu.
func (s *Server) authorize(c *call) error {
	action, scope := actionOf(c)
	if action == "" {
		return nil
	}
	if !s.allowed(c.who.ObjectID, action, scope) {
		return authorizationFailed(c.who, action, scope)
	}
	if c.r.Method != http.MethodPut || (!strings.EqualFold(c.t.typ(), typeVM) && !strings.EqualFold(c.t.typ(), typeVMSS)) {
		return nil
	}
	var in doc
	if json.Unmarshal(c.body, &in) != nil {
		return nil // the kind says what is wrong with the body
	}
	ids, _ := userIdentities(in)
	for _, id := range ids {
		if a := typeIdentity + "/assign/action"; !s.allowed(c.who.ObjectID, a, id) {
			return errorf(http.StatusForbidden, "LinkedAuthorizationFailed",
				"The client '%s' with object id '%s' has permission to perform action '%s' on scope '%s'; however, it does not have permission to perform action(s) '%s' on the linked scope(s) '%s' (respectively) or the linked scope(s) are invalid.",
				c.who.ClientID, c.who.ObjectID, action, scope, a, id)
		}
	}
	return nil
}

// actionOf is the action a call performs and the scope it is checked at
// ("" for none: an operation's status, the list of subscriptions).
func actionOf(c *call) (action, scope string) {
	t := c.t
	scope = strings.TrimSuffix(c.r.URL.Path, "/")
	verb := map[string]string{http.MethodGet: "read", http.MethodHead: "read", http.MethodPut: "write", http.MethodPatch: "write",
		http.MethodDelete: "delete", http.MethodPost: "action"}[c.r.Method]
	switch {
	case t.opID != "" || t.sub == "":
		return "", ""
	case t.groups:
		return "Microsoft.Resources/subscriptions/resourceGroups/read", scope
	case t.resources && t.group != "":
		return "Microsoft.Resources/subscriptions/resourceGroups/resources/read", scope
	case t.resources:
		return "Microsoft.Resources/subscriptions/resources/read", scope
	case t.ns == "" && t.group != "":
		return "Microsoft.Resources/subscriptions/resourceGroups/" + verb, scope
	case t.ns == "":
		return "Microsoft.Resources/subscriptions/" + verb, scope
	}
	return t.typ() + "/" + verb, scope
}

// authorizationPath splits a Microsoft.Authorization URL into its scope
// and what it names there (roleAssignments/NAME, permissions, ...).
func authorizationPath(path string) (scope, rest string, ok bool) {
	i := strings.LastIndex(strings.ToLower(path), authzProvider)
	if i < 0 {
		return "", "", false
	}
	return path[:i], strings.Trim(path[i+len(authzProvider):], "/"), true
}

// serveAuthorization answers Microsoft.Authorization's calls at scope.
// Callers hold s.mu.
func (s *Server) serveAuthorization(c *call, scope, rest string) (reply, error) {
	if err := s.scopeExists(scope); err != nil {
		return reply{}, err
	}
	what, name, _ := strings.Cut(rest, "/")
	path := strings.TrimSuffix(c.r.URL.Path, "/")
	switch {
	case strings.EqualFold(what, "permissions") && name == "":
		if c.r.Method != http.MethodGet {
			return reply{}, methodNotAllowed(c)
		}
		// Anyone may read their own permissions.
		out := []any{}
		for _, r := range s.rolesAt(c.who.ObjectID, scope) {
			p := definitionDoc(r, "").props()["permissions"].([]any)[0]
			out = append(out, p)
		}
		return reply{status: http.StatusOK, body: map[string]any{"value": out}}, nil
	case strings.EqualFold(what, "roleDefinitions"):
		return s.serveDefinitions(c, scope, name, path)
	case strings.EqualFold(what, "roleAssignments"):
		action := typeRoleAssignment + "/" + map[string]string{http.MethodGet: "read", http.MethodPut: "write", http.MethodDelete: "delete"}[c.r.Method]
		if !strings.HasSuffix(action, "/") && !s.allowed(c.who.ObjectID, action, scope) {
			return reply{}, authorizationFailed(c.who, action, path)
		}
		if name == "" {
			if c.r.Method != http.MethodGet {
				return reply{}, methodNotAllowed(c)
			}
			return s.listAssignments(c, scope)
		}
		return s.serveAssignment(c, scope, path)
	}
	return reply{}, badRequest("InvalidResourceType", "The resource type '%s' could not be found in the namespace 'Microsoft.Authorization' for api version '%s'.", what, c.apiVersion)
}

// roleNameFilter is NAME of "roleName eq 'NAME'".
func roleNameFilter(f string) string {
	if v, ok := strings.CutPrefix(f, "roleName eq '"); ok {
		return strings.TrimSuffix(v, "'")
	}
	return ""
}

// scopeExists checks that scope is a subscription of the local Azure's,
// a group it has or a resource it has.
func (s *Server) scopeExists(scope string) error {
	t, ok := parseTarget(scope)
	switch {
	case !ok || t.sub == "" || t.groups || t.resources || t.opID != "":
		return badRequest("InvalidScope", "The scope '%s' is not valid for this operation.", scope)
	case !s.hasSubscription(t.sub):
		return errorf(http.StatusNotFound, "SubscriptionNotFound", "The subscription '%s' could not be found.", t.sub)
	case t.group == "" && t.ns == "":
		return nil
	}
	if _, ok := s.st.Resources[groupKey(t.sub, t.group)]; !ok && t.group != "" {
		return groupNotFound(t.group)
	}
	if t.ns == "" {
		return nil
	}
	if !t.isResource() {
		return badRequest("InvalidScope", "The scope '%s' is not valid for this operation.", scope)
	}
	if _, ok := s.st.Containers[key(scope)]; ok {
		return nil // a blob container (storage.go)
	}
	if _, ok := s.st.Resources[key(scope)]; !ok {
		return resourceNotFound(t.typ(), t.names[len(t.names)-1], t.group)
	}
	return nil
}

func (s *Server) listAssignments(c *call, scope string) (reply, error) {
	f := c.r.URL.Query().Get("$filter")
	atScope := strings.Contains(f, "atScope()")
	principal := ""
	if i := strings.Index(f, "principalId eq '"); i >= 0 {
		principal, _, _ = strings.Cut(f[i+len("principalId eq '"):], "'")
	}
	out := []doc{}
	for _, d := range s.st.RoleAssignments {
		p := d.props()
		at := str(p, "scope")
		if !covers(at, scope) && (atScope || !covers(scope, at)) {
			continue
		}
		if principal != "" && !strings.EqualFold(str(p, "principalId"), principal) {
			continue
		}
		out = append(out, clone(d))
	}
	return s.page(c, out), nil
}

// serveAssignment answers a call of one role assignment, id its URL path.
func (s *Server) serveAssignment(c *call, scope, id string) (reply, error) {
	name := id[strings.LastIndex(id, "/")+1:]
	d, exists := s.st.RoleAssignments[key(id)]
	switch c.r.Method {
	case http.MethodGet:
		if !exists {
			return reply{}, errorf(http.StatusNotFound, "RoleAssignmentNotFound", "The role assignment '%s' is not found.", name)
		}
		return reply{status: http.StatusOK, body: clone(d)}, nil
	case http.MethodDelete:
		if !exists {
			return reply{status: http.StatusNoContent}, nil
		}
		delete(s.st.RoleAssignments, key(id))
		s.dirty = true
		s.log.Info("role assignment deleted", "id", id)
		return reply{status: http.StatusOK, body: d}, nil
	case http.MethodPut:
		return s.putAssignment(c, scope, id, d)
	}
	return reply{}, methodNotAllowed(c)
}

func (s *Server) putAssignment(c *call, scope, id string, old doc) (reply, error) {
	name := id[strings.LastIndex(id, "/")+1:]
	if _, err := uuid.Parse(name); err != nil {
		return reply{}, badRequest("InvalidRoleAssignmentId", "The role assignment ID '%s' is not valid. The role assignment ID must be a GUID.", name)
	}
	var in struct {
		Properties struct {
			RoleDefinitionID string `json:"roleDefinitionId"`
			PrincipalID      string `json:"principalId"`
			PrincipalType    string `json:"principalType"`
			Description      string `json:"description"`
		} `json:"properties"`
	}
	if err := json.Unmarshal(c.body, &in); err != nil {
		return reply{}, badRequest("InvalidRequestContent", "The request content was invalid and could not be deserialized: '%v'.", err)
	}
	p := in.Properties
	r, ok := s.roleOf(p.RoleDefinitionID)
	if p.RoleDefinitionID == "" || !ok {
		return reply{}, badRequest("RoleDefinitionDoesNotExist", "The specified role definition with ID '%s' does not exist.", p.RoleDefinitionID[strings.LastIndex(p.RoleDefinitionID, "/")+1:])
	}
	if !assignableAt(r, scope) {
		return reply{}, badRequest("RoleAssignmentScopeNotAllowed", "The role '%s' may not be assigned at scope '%s': it is not within its assignable scopes %v.", r.Name, scope, r.AssignableScopes)
	}
	if !s.principalExists(p.PrincipalID) {
		return reply{}, badRequest("PrincipalNotFound",
			"Principal %s does not exist in the directory %s. Check that you have the correct principal ID. If you are creating this principal and then immediately assigning a role, this error might be related to a replication delay. In this case, set the role assignment principalType property to a value, such as ServicePrincipal, User, or Group.  See https://aka.ms/docs-principaltype",
			strings.ReplaceAll(p.PrincipalID, "-", ""), s.opts.Tenant)
	}
	if old != nil {
		op := old.props()
		if !strings.EqualFold(str(op, "principalId"), p.PrincipalID) || !strings.EqualFold(str(op, "roleDefinitionId")[strings.LastIndex(str(op, "roleDefinitionId"), "/")+1:], r.ID) {
			return reply{}, badRequest("RoleAssignmentUpdateNotPermitted", "Tenant ID, application ID, principal ID, and scope are not allowed to be updated.")
		}
	}
	for _, d := range s.st.RoleAssignments {
		dp := d.props()
		if covers(str(dp, "scope"), scope) && covers(scope, str(dp, "scope")) && strings.EqualFold(str(dp, "principalId"), p.PrincipalID) {
			if g, _ := s.roleOf(str(dp, "roleDefinitionId")); g.ID == r.ID {
				return reply{}, errorf(http.StatusConflict, "RoleAssignmentExists", "The role assignment already exists.")
			}
		}
	}
	pt := p.PrincipalType
	if pt == "" {
		pt = "ServicePrincipal"
	}
	d := s.assignmentDoc(id, scope, r.ID, p.PrincipalID, pt, p.Description, c.who.ObjectID)
	s.st.RoleAssignments[key(id)] = d
	s.dirty = true
	s.log.Info("role assignment made", "id", id, "role", r.Name, "principal", p.PrincipalID)
	return reply{status: http.StatusCreated, body: clone(d)}, nil
}

// principalExists reports whether id is the object id of a client's
// service principal or of a managed identity.
func (s *Server) principalExists(id string) bool {
	if id == "" {
		return false
	}
	for _, c := range s.opts.Clients {
		if strings.EqualFold(principalID(c.ID), id) {
			return true
		}
	}
	for _, d := range s.ofType(typeIdentity) {
		if strings.EqualFold(str(d.props(), "principalId"), id) {
			return true
		}
	}
	return false
}

// dropAssignmentsUnder takes away the role assignments at id or below it:
// their scope is gone.
func (s *Server) dropAssignmentsUnder(id string) {
	for k, d := range s.st.RoleAssignments {
		if covers(id, str(d.props(), "scope")) {
			delete(s.st.RoleAssignments, k)
			s.dirty = true
		}
	}
}

// RoleAssignments are the role assignments the local Azure has, as ARM
// answers them (tests look at them).
func (s *Server) RoleAssignments() []map[string]any {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []map[string]any
	for _, k := range slices.Sorted(mapKeys(s.st.RoleAssignments)) {
		out = append(out, clone(s.st.RoleAssignments[k]))
	}
	return out
}

// PrincipalID is the object id of a client's service principal.
func PrincipalID(clientID string) string { return principalID(clientID) }

// serveDefinitions answers role definitions at scope: the built-in ones
// and the custom ones, read; custom ones written and deleted.
func (s *Server) serveDefinitions(c *call, scope, name, path string) (reply, error) {
	action := "Microsoft.Authorization/roleDefinitions/" + map[string]string{http.MethodGet: "read", http.MethodPut: "write", http.MethodDelete: "delete"}[c.r.Method]
	if strings.HasSuffix(action, "/") || (name == "" && c.r.Method != http.MethodGet) {
		return reply{}, methodNotAllowed(c)
	}
	if !s.allowed(c.who.ObjectID, action, scope) {
		return reply{}, authorizationFailed(c.who, action, path)
	}
	sub := s.canonicalSub(c.t.sub)
	if name == "" {
		filter := roleNameFilter(c.r.URL.Query().Get("$filter"))
		var out []doc
		for _, r := range BuiltInRoles {
			if filter == "" || strings.EqualFold(r.Name, filter) {
				out = append(out, definitionDoc(r, sub))
			}
		}
		for _, k := range slices.Sorted(mapKeys(s.st.CustomRoles)) {
			r := s.st.CustomRoles[k]
			if (filter == "" || strings.EqualFold(r.Name, filter)) && assignableAt(*r, scope) {
				out = append(out, definitionDoc(*r, sub))
			}
		}
		return s.page(c, out), nil
	}
	if _, err := uuid.Parse(name); err != nil {
		return reply{}, badRequest("InvalidRoleDefinitionId", "The role definition ID '%s' is not valid. The role definition ID must be a GUID.", name)
	}
	r, exists := s.role(name)
	if exists && !strings.EqualFold(r.ID, name) {
		exists = false // a custom role's name that happens to be a GUID
	}
	switch c.r.Method {
	case http.MethodGet:
		if !exists {
			return reply{}, errorf(http.StatusNotFound, "RoleDefinitionDoesNotExist", "The specified role definition with ID '%s' does not exist.", name)
		}
		return reply{status: http.StatusOK, body: definitionDoc(r, sub)}, nil
	case http.MethodDelete:
		if !exists {
			return reply{status: http.StatusNoContent}, nil
		}
		if !r.Custom {
			return reply{}, errorf(http.StatusForbidden, "AuthorizationFailed", "The built-in role '%s' cannot be deleted.", r.Name)
		}
		for _, d := range s.st.RoleAssignments {
			if g, ok := s.roleOf(str(d.props(), "roleDefinitionId")); ok && g.ID == r.ID {
				return reply{}, errorf(http.StatusConflict, "RoleDefinitionHasAssignments",
					"There are existing role assignments referencing role (code: RoleDefinitionHasAssignments). Remove the role assignments of role '%s' first.", r.Name)
			}
		}
		delete(s.st.CustomRoles, key(r.ID))
		s.dirty = true
		return reply{status: http.StatusOK, body: definitionDoc(r, sub)}, nil
	}
	return s.putDefinition(c, scope, name, r, exists)
}

// putDefinition creates or updates a custom role definition.
func (s *Server) putDefinition(c *call, scope, name string, old Role, exists bool) (reply, error) {
	if exists && !old.Custom {
		return reply{}, errorf(http.StatusForbidden, "AuthorizationFailed", "The built-in role '%s' cannot be changed.", old.Name)
	}
	var in struct {
		Properties struct {
			RoleName         string   `json:"roleName"`
			Description      string   `json:"description"`
			Type             string   `json:"type"`
			AssignableScopes []string `json:"assignableScopes"`
			Permissions      []struct {
				Actions, NotActions, DataActions, NotDataActions []string
			} `json:"permissions"`
		} `json:"properties"`
	}
	if err := json.Unmarshal(c.body, &in); err != nil {
		return reply{}, badRequest("InvalidRequestContent", "The request content was invalid and could not be deserialized: '%v'.", err)
	}
	p := in.Properties
	switch {
	case p.RoleName == "":
		return reply{}, badRequest("InvalidRoleDefinition", "The role definition must have a roleName.")
	case len(p.AssignableScopes) == 0:
		return reply{}, badRequest("InvalidRoleDefinition", "The role definition must have at least one assignable scope.")
	case len(p.Permissions) != 1:
		return reply{}, badRequest("InvalidRoleDefinition", "The role definition must have one permissions entry (it has %d).", len(p.Permissions))
	}
	if !slices.ContainsFunc(p.AssignableScopes, func(a string) bool { return covers(scope, a) }) {
		return reply{}, badRequest("InvalidRoleDefinition", "The role definition's assignable scopes must be at or below the scope it is written at, '%s'.", scope)
	}
	for _, a := range p.AssignableScopes {
		if err := s.scopeExists(a); err != nil {
			return reply{}, err
		}
		if !s.allowed(c.who.ObjectID, "Microsoft.Authorization/roleDefinitions/write", a) {
			return reply{}, authorizationFailed(c.who, "Microsoft.Authorization/roleDefinitions/write", a)
		}
	}
	if other, ok := s.role(p.RoleName); ok && !strings.EqualFold(other.ID, name) {
		return reply{}, errorf(http.StatusConflict, "RoleDefinitionWithSameNameExists", "A custom role with the same name already exists in this directory. Use a different name.")
	}
	perm := p.Permissions[0]
	r := Role{ID: strings.ToLower(name), Name: p.RoleName, Description: p.Description, Actions: perm.Actions, NotActions: perm.NotActions,
		DataActions: perm.DataActions, NotDataActions: perm.NotDataActions, AssignableScopes: p.AssignableScopes, Custom: true}
	s.st.CustomRoles[key(r.ID)] = &r
	s.dirty = true
	s.log.Info("custom role written", "id", r.ID, "name", r.Name)
	return reply{status: http.StatusCreated, body: definitionDoc(r, s.canonicalSub(c.t.sub))}, nil
}

// assignableAt reports whether role r may be assigned at scope.
func assignableAt(r Role, scope string) bool {
	if !r.Custom {
		return true
	}
	return slices.ContainsFunc(r.AssignableScopes, func(a string) bool { return covers(a, scope) })
}
