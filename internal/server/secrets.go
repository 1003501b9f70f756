package server

import (
	"maps"
	"net/http"
	"slices"

	v1 "kiln.dev/kiln/api/v1"
	"kiln.dev/kiln/internal/store"
	"kiln.dev/kiln/internal/validate"
)

// projectSecrets: a PUT's data is stored sealed and never returned; the
// answers list its keys. A PUT replaces the data, all of it. Nothing
// refuses a delete: a pack that names a deleted secret fails when it is
// applied, naming it, and dynamic validation names it before a cluster's
// operation starts.
func projectSecrets(s *Server) syncResource[*store.ProjectSecret, v1.Secret] {
	return syncResource[*store.ProjectSecret, v1.Secret]{
		what: "secret", plural: "secrets",
		read: v1.RoleViewer, write: v1.RoleAdmin,
		get: s.projectSecrets.GetProjectSecret, list: s.projectSecrets.ListProjectSecrets,
		put: s.projectSecrets.PutProjectSecret, del: s.projectSecrets.DeleteProjectSecret,
		build: func(r *http.Request, project, name string, body []byte, existing *store.ProjectSecret, exists bool) (*store.ProjectSecret, error) {
			var in v1.Secret
			if err := decodeStrict(body, &in); err != nil {
				return nil, err
			}
			if err := checkName(in.Name, name); err != nil {
				return nil, err
			}
			if failures := validate.Secret(name, &in); len(failures) > 0 {
				return nil, validationError("secret", failures)
			}
			ps := &store.ProjectSecret{Project: project, Secret: v1.Secret{Name: name, Data: in.Data, CreatedAt: s.now().UTC()}}
			if exists {
				ps.CreatedAt = existing.CreatedAt
			}
			return ps, nil
		},
		out:  secretOut,
		etag: func(ps *store.ProjectSecret) string { return ps.ETag },
	}
}

// secretOut is a secret's wire form: its keys, never its data.
func secretOut(ps *store.ProjectSecret) v1.Secret {
	out := ps.Secret
	out.ID = childPath(ps.Project, "secrets", ps.Name)
	out.Keys = slices.Sorted(maps.Keys(ps.Data))
	out.Data = nil
	return out
}
