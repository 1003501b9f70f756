package profile

import (
	"context"
	"fmt"
	"strings"

	v1 "kiln.dev/kiln/api/v1"
	"kiln.dev/kiln/internal/failure"
	"kiln.dev/kiln/internal/kubeapi"
	"kiln.dev/kiln/internal/pki"
	"kiln.dev/kiln/internal/plan/clusterapi"
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
//
// On an attached cluster it is applied with the kubeconfig the cluster was
// attached with, where that may: where it may not, the step is skipped and
// the cluster's AccessBindings condition is False, naming what it lacks
// (people's credentials then carry no rights but those the cluster's owner
// gives the groups).
func (s Steps) InstallAccess(ctx context.Context) error {
	cl := s.r.Cluster()
	if !s.r.RunsKubernetes() || s.r.Packs() == nil {
		return step.Skipped("the %s provider's clusters run no Kubernetes", cl.Spec.Provider)
	}
	t, _, err := s.packTarget(ctx)
	if err != nil {
		return err
	}
	if cl.Spec.Attach != nil {
		denied, err := s.accessDenied(ctx)
		if err != nil {
			return failure.Retryable(v1.CodeUnavailable, err, "ask the cluster's API what its kubeconfig may do: %v", err)
		}
		if len(denied) > 0 {
			msg := fmt.Sprintf("the kubeconfig the cluster was attached with (secret %s) may not %s: people's credentials carry no rights "+
				"but those the cluster's owner gives the groups %s, %s and %s (docs/security.md)",
				cl.Spec.Attach.Secret, joinReviews(denied), pki.GroupViewers, pki.GroupOperators, pki.GroupAdmins)
			if err := s.setAccessCondition(ctx, "False", "Forbidden", msg); err != nil {
				return err
			}
			return step.Skipped("%s", msg)
		}
	}
	s.r.Progress(ctx, "pack", "binding the project's roles to Kubernetes roles")
	pk := v1.Pack{Name: AccessPack, Version: AccessVersion, Namespace: AccessNamespace, Manifests: AccessManifests()}
	if _, err := s.r.Packs().Apply(ctx, t, pk); err != nil {
		return failure.Retryable(v1.CodePackFailed, err, "bind the project's roles in the cluster: %v", err)
	}
	if cl.Spec.Attach != nil {
		return s.setAccessCondition(ctx, "True", "Applied", "the project's roles are bound to Kubernetes roles in the cluster")
	}
	return nil
}

// accessReviews are what applying the access pack takes: making and
// changing ClusterRoles and ClusterRoleBindings, and binding ClusterRoles
// (cluster-admin among them) that the applier may not hold all of.
var accessReviews = []kubeapi.AccessReview{
	{Verb: "create", Group: "rbac.authorization.k8s.io", Resource: "clusterroles"},
	{Verb: "patch", Group: "rbac.authorization.k8s.io", Resource: "clusterroles"},
	{Verb: "create", Group: "rbac.authorization.k8s.io", Resource: "clusterrolebindings"},
	{Verb: "patch", Group: "rbac.authorization.k8s.io", Resource: "clusterrolebindings"},
	{Verb: "bind", Group: "rbac.authorization.k8s.io", Resource: "clusterroles"},
}

// accessDenied is what the cluster's kubeconfig may not do of
// accessReviews.
func (s Steps) accessDenied(ctx context.Context) ([]kubeapi.AccessReview, error) {
	cl := s.r.Cluster()
	endpoint, err := s.r.Endpoint(ctx)
	if err != nil {
		return nil, fmt.Errorf("find endpoint: %w", err)
	}
	kc, err := clusterapi.KubeClient(ctx, s.r, cl.Key(), endpoint, "kiln:access")
	if err != nil {
		return nil, err
	}
	defer kc.Close()
	return kc.CanI(ctx, accessReviews...)
}

func joinReviews(rs []kubeapi.AccessReview) string {
	out := make([]string, len(rs))
	for i, r := range rs {
		out[i] = r.String()
	}
	return strings.Join(out, ", ")
}

// setAccessCondition keeps an attached cluster's AccessBindings condition.
func (s Steps) setAccessCondition(ctx context.Context, status, reason, msg string) error {
	cl := s.r.Cluster()
	var changed bool
	cl.Status.Conditions, changed = v1.SetCondition(cl.Status.Conditions,
		v1.Condition{Type: v1.ConditionAccessBindings, Status: status, Reason: reason, Message: msg}, s.r.Now())
	if !changed {
		return nil
	}
	return s.r.SaveStatus(ctx, "conditions")
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
