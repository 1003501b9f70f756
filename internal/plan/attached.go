package plan

import (
	"slices"

	v1 "kiln.dev/kiln/api/v1"
)

// An attached cluster (provider "attached", kiln cluster attach) is one
// Kiln did not make: it reaches its API with the kubeconfig its
// spec.attach names, observes its nodes and version, binds people's roles
// where that kubeconfig may, and applies its profile; it makes, changes
// and deletes none of its machines.

// Steps of attached clusters.
const (
	// StepConnectCluster reads the cluster through its kubeconfig: its
	// version and nodes become the cluster's status and node records.
	StepConnectCluster = "connect-cluster"
	// StepDetachCluster ends Kiln's part: the cluster runs on.
	StepDetachCluster = "detach-cluster"
)

var (
	attachedApplySteps  = []string{StepValidateDynamic, StepConnectCluster, StepInstallAccess, StepApplyProfile}
	attachedDeleteSteps = []string{StepDetachCluster}
)

// AttachedSteps are the steps of an operation kind on an attached cluster;
// nil for a kind it has none of (anything that makes, stops or installs
// machines).
func AttachedSteps(kind string) []string {
	switch kind {
	case v1.KindCreate, v1.KindUpdate:
		return slices.Clone(attachedApplySteps)
	case v1.KindDelete:
		return slices.Clone(attachedDeleteSteps)
	case v1.KindReconcile:
		return slices.Clone(reconcileSteps)
	}
	return nil
}

// attached reports whether the run's cluster is an attached one.
func (x *run) attached() bool { return x.r.opts.Providers.Attached(x.cl.Spec.Provider) }
