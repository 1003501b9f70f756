package azure

import (
	"net/http"
	"slices"
	"strings"

	"github.com/google/uuid"
)

// User-assigned managed identities (Microsoft.ManagedIdentity,
// armmsi's UserAssignedIdentitiesClient): create or update and delete at
// once (no long-running operation, as ARM answers them), get, list. Each
// is a service principal of the tenant: its principalId (object id),
// clientId and tenantId are made with it and kept while it lives, and
// role assignments may name it. A virtual machine or scale set carries
// identities in "identity": {"type": "UserAssigned",
// "userAssignedIdentities": {"ID": {}}}, each of which must exist (and
// which the caller must be allowed to assign: rbac.go); ARM answers each
// with its principalId and clientId.

const typeIdentity = "Microsoft.ManagedIdentity/userAssignedIdentities"

func identityKinds() []*kind {
	return []*kind{{typ: typeIdentity, sync: true, fill: fillIdentity}}
}

// fillIdentity gives a new identity its principal; an update keeps it.
func fillIdentity(s *Server, d, old doc) {
	p := d.props()
	if old != nil {
		op := old.props()
		p["principalId"], p["clientId"], p["tenantId"] = op["principalId"], op["clientId"], op["tenantId"]
		return
	}
	p["principalId"], p["clientId"], p["tenantId"] = uuid.NewString(), uuid.NewString(), s.opts.Tenant
}

// userIdentities are the ids of the user-assigned identities a virtual
// machine's or scale set's document names, and its identity type.
func userIdentities(d doc) ([]string, string) {
	id, _ := d["identity"].(map[string]any)
	if id == nil {
		return nil, ""
	}
	m, _ := id["userAssignedIdentities"].(map[string]any)
	var out []string
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out, str(id, "type")
}

// checkIdentities refuses a document naming user-assigned identities
// without the type that says so, or identities that do not exist.
func (s *Server) checkIdentities(d doc) error {
	ids, typ := userIdentities(d)
	if _, ok := d["identity"]; !ok {
		return nil
	}
	userAssigned := strings.Contains(strings.ToLower(typ), "userassigned")
	switch {
	case len(ids) > 0 && !userAssigned:
		return invalidParameter("identity.type", "The identity type '%s' of resource '%s' does not allow user assigned identities; use 'UserAssigned'.", typ, d.name())
	case len(ids) == 0 && userAssigned:
		return invalidParameter("identity.userAssignedIdentities", "The user assigned identities of resource '%s' are missing: identity type 'UserAssigned' needs at least one.", d.name())
	case !userAssigned && !strings.EqualFold(typ, "None") && typ != "":
		return invalidParameter("identity.type", "The local Azure has user-assigned identities only (identity type '%s').", typ)
	}
	for _, id := range ids {
		if i, ok := s.st.Resources[key(id)]; !ok || !strings.EqualFold(i.typ(), typeIdentity) {
			return badRequest("FailedIdentityOperation",
				"Identity operation for resource '%s' failed with error 'Failed to perform resource identity operation. Status: 'NotFound'. Response: 'The Resource '%s' was not found.''.", d.id(), id)
		}
	}
	return nil
}

// renderIdentities answers each user-assigned identity a document names
// with its principal and client ids.
func (s *Server) renderIdentities(d doc) {
	id, _ := d["identity"].(map[string]any)
	m, _ := id["userAssignedIdentities"].(map[string]any)
	for k := range m {
		v := map[string]any{}
		if i, ok := s.st.Resources[key(k)]; ok {
			v["principalId"], v["clientId"] = i.props()["principalId"], i.props()["clientId"]
		}
		m[k] = v
	}
}

// putSync answers a PUT of a kind ARM writes at once (an identity): 201
// or 200 with the document, no operation.
func (s *Server) putSync(k *kind, d, old doc) reply {
	status := http.StatusCreated
	if old != nil {
		status = http.StatusOK
	}
	s.store(k, d, old, statusSucceeded)
	delete(d.props(), "provisioningState")
	s.log.Info("resource written", "resource", d.id())
	return reply{status: status, body: s.render(d)}
}
