package profile

import (
	"context"
	"fmt"

	v1 "kiln.dev/kiln/api/v1"
	"kiln.dev/kiln/internal/failure"
	"kiln.dev/kiln/internal/pki"
	"kiln.dev/kiln/internal/plan/step"
)

// The access pack: the RBAC Kiln keeps in every cluster it makes, which
// gives people the rights of their role in the cluster's project. A
// person's credential (POST .../credential) carries pki.GroupPeople and
// their role's group.
const (
	AccessPack      = "kiln-access"
	AccessVersion   = "1"
	AccessNamespace = "kube-system"
)

// InstallAccess (install-access) applies the access pack: viewers are bound
// to Kubernetes' view role, operators to edit (which has exec, attach and
// port-forward; view has none of them), admins to cluster-admin, and every
// person may read the cluster-scoped objects kubectl shows (nodes, storage
// classes, ...), which view and edit leave out. Applied again by updates and
// reconciles, which puts back a binding deleted by hand.
func (s Steps) InstallAccess(ctx context.Context) error {
	cl := s.r.Cluster()
	if !s.r.RunsKubernetes() || s.r.Packs() == nil {
		return step.Skipped("the %s provider's clusters run no Kubernetes", cl.Spec.Provider)
	}
	if cl.Spec.Attach != nil {
		return step.Skipped("an attached cluster's RBAC is its owner's: Kiln issues no credentials for it")
	}
	t, _, err := s.packTarget(ctx)
	if err != nil {
		return err
	}
	s.r.Progress(ctx, "pack", "binding the project's roles to Kubernetes roles")
	pk := v1.Pack{Name: AccessPack, Version: AccessVersion, Namespace: AccessNamespace, Manifests: AccessManifests()}
	if _, err := s.r.Packs().Apply(ctx, t, pk); err != nil {
		return failure.Retryable(v1.CodePackFailed, err, "bind the project's roles in the cluster: %v", err)
	}
	return nil
}

// accessBindings are the roles' groups and the ClusterRoles they are bound
// to.
var accessBindings = []struct{ group, role string }{
	{pki.GroupViewers, "view"},
	{pki.GroupOperators, "edit"},
	{pki.GroupAdmins, "cluster-admin"},
	{pki.GroupPeople, "kiln:cluster-reader"},
}

// AccessManifests are the access pack's objects.
func AccessManifests() string {
	out := `apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata:
  name: kiln:cluster-reader
rules:
- apiGroups: [""]
  resources: [nodes, persistentvolumes]
  verbs: [get, list, watch]
- apiGroups: [storage.k8s.io]
  resources: [storageclasses, csidrivers, csinodes]
  verbs: [get, list, watch]
- apiGroups: [networking.k8s.io]
  resources: [ingressclasses]
  verbs: [get, list, watch]
- apiGroups: [apiextensions.k8s.io]
  resources: [customresourcedefinitions]
  verbs: [get, list, watch]
- apiGroups: [scheduling.k8s.io]
  resources: [priorityclasses]
  verbs: [get, list, watch]
`
	for _, b := range accessBindings {
		out += fmt.Sprintf(`---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata:
  name: %[1]s
roleRef:
  apiGroup: rbac.authorization.k8s.io
  kind: ClusterRole
  name: %[2]s
subjects:
- apiGroup: rbac.authorization.k8s.io
  kind: Group
  name: %[1]s
`, b.group, b.role)
	}
	return out
}
