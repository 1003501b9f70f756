package gcp

import (
	"encoding/json"
	"maps"
	"net/http"
	"slices"
	"strings"
)

// IAM, as Compute checks it: every call needs one permission
// (compute.COLLECTION.VERB: compute.networks.create, compute.subnetworks.get,
// compute.globalOperations.get) on the project, and the caller's roles in
// that project must grant it; refused, 403 forbidden "Required
// 'compute.networks.create' permission for 'projects/P/global/networks/N'".
// A service account's roles are granted in its own project only, so a key
// of another project's account is refused everything here.

// roles are the predefined roles the local Compute Engine knows, as
// permission patterns: a "*" segment matches any one segment, and a last
// "*" anything after it. They keep what matters of Google's (a network
// admin may not make firewall rules: that is the security admin's).
var roles = map[string][]string{
	"roles/owner":         {"compute.*", "resourcemanager.projects.*"},
	"roles/editor":        {"compute.*", "resourcemanager.projects.get"},
	"roles/viewer":        {"compute.*.get", "compute.*.list", "resourcemanager.projects.get"},
	"roles/compute.admin": {"compute.*", "resourcemanager.projects.get"},
	"roles/compute.networkAdmin": {
		"compute.networks.*", "compute.subnetworks.*", "compute.routers.*", "compute.addresses.*",
		"compute.firewalls.get", "compute.firewalls.list",
		"compute.globalOperations.*", "compute.regionOperations.*", "compute.zoneOperations.*",
		"compute.projects.get", "compute.regions.*", "compute.zones.*", "compute.machineTypes.*",
		"resourcemanager.projects.get",
	},
	"roles/compute.securityAdmin": {
		"compute.firewalls.*", "compute.networks.get", "compute.networks.list", "compute.networks.updatePolicy",
		"compute.globalOperations.*", "compute.projects.get", "resourcemanager.projects.get",
	},
	"roles/compute.instanceAdmin.v1": {
		"compute.instances.*", "compute.instanceTemplates.*", "compute.instanceGroupManagers.*", "compute.instanceGroups.*",
		"compute.images.get", "compute.images.list", "compute.images.useReadOnly",
		"compute.subnetworks.get", "compute.subnetworks.list", "compute.subnetworks.use", "compute.networks.get", "compute.networks.list",
		"compute.globalOperations.*", "compute.regionOperations.*", "compute.zoneOperations.*",
		"compute.projects.get", "compute.regions.*", "compute.zones.*", "compute.machineTypes.*", "resourcemanager.projects.get",
	},
	"roles/compute.viewer": {"compute.*.get", "compute.*.list"},
}

func roleNames() []string { return slices.Sorted(maps.Keys(roles)) }

// granted reports whether pattern grants permission.
func granted(pattern, permission string) bool {
	ps, qs := strings.Split(pattern, "."), strings.Split(permission, ".")
	for i, p := range ps {
		if i >= len(qs) {
			return false
		}
		if p == "*" && i == len(ps)-1 {
			return true
		}
		if p != "*" && p != qs[i] {
			return false
		}
	}
	return len(ps) == len(qs)
}

// allowed reports whether a may use permission in project.
func allowed(a ServiceAccount, project, permission string) bool {
	if a.Project() != project {
		return false
	}
	rs := a.Roles
	if rs == nil {
		rs = []string{"roles/owner"}
	}
	for _, r := range rs {
		for _, p := range roles[r] {
			if granted(p, permission) {
				return true
			}
		}
	}
	return false
}

// crmPrefix is Cloud Resource Manager's v1 projects, where
// testIamPermissions is (POST /v1/projects/P:testIamPermissions).
const crmPrefix = "/v1/projects/"

// serveCRM answers testIamPermissions on a project: which of the
// permissions asked the caller has there (Google answers those it has,
// and nothing for a project it may not see).
func (s *Server) serveCRM(w http.ResponseWriter, r *http.Request) {
	project, ok := strings.CutSuffix(strings.TrimPrefix(r.URL.Path, crmPrefix), ":testIamPermissions")
	if !ok || r.Method != http.MethodPost {
		writeError(w, errorf(http.StatusNotFound, "notFound", "The local Compute Engine has no %s %s", r.Method, r.URL.Path))
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	a, err := s.authenticate(r)
	if err != nil {
		writeError(w, err)
		return
	}
	var req struct {
		Permissions []string `json:"permissions"`
	}
	if err := json.NewDecoder(http.MaxBytesReader(w, r.Body, maxBody)).Decode(&req); err != nil {
		writeError(w, invalid("Invalid JSON payload received. %v", err))
		return
	}
	if !s.projects[project] {
		writeError(w, errorf(http.StatusForbidden, "forbidden", "The caller does not have permission"))
		return
	}
	have := []string{}
	for _, p := range req.Permissions {
		if allowed(a, project, p) {
			have = append(have, p)
		}
	}
	writeJSON(w, http.StatusOK, map[string]any{"permissions": have})
}
