// Package plan holds the named steps of every operation kind and the Runner
// that carries them out for a claimed cluster.
//
// A plan is an explicit list of step names, read top to bottom like a runbook.
// The names are part of what users see (operation status, events, logs, the
// CLI), so they are written out here and never derived. plan_test.go pins
// each list.
package plan

import v1 "kiln.dev/kiln/api/v1"

// Step names.
const (
	StepValidateDynamic            = "validate-dynamic"
	StepEnsureClusterPKI           = "ensure-cluster-pki"
	StepEnsureNetwork              = "ensure-network"
	StepEnsureLoadBalancer         = "ensure-load-balancer"
	StepEnsureControlPlaneMachines = "ensure-control-plane-machines"
	StepWaitNodesRegistered        = "wait-nodes-registered"
	StepApproveNodes               = "approve-nodes"
	StepInstallControlPlane        = "install-control-plane"
	StepShrinkControlPlane         = "shrink-control-plane"
	StepEnsureWorkerMachines       = "ensure-worker-machines"
	StepInstallWorkers             = "install-workers"
	StepWaitNodesReady             = "wait-nodes-ready"
	StepRemoveSurplusMachines      = "remove-surplus-machines"
	StepDeleteWorkerMachines       = "delete-worker-machines"
	StepDeleteControlPlaneMachines = "delete-control-plane-machines"
	StepDeleteLoadBalancer         = "delete-load-balancer"
	StepDeleteNetwork              = "delete-network"
	StepCheckNodeConfiguration     = "check-node-configuration"
	StepRefreshJoinMaterial        = "refresh-join-material"
	StepDrainNodes                 = "drain-nodes"
	StepResetNodes                 = "reset-nodes"
	StepRemoveNodes                = "remove-nodes"
	StepReplaceUnhealthyNodes      = "replace-unhealthy-nodes"
	StepUpgradeControlPlane        = "upgrade-control-plane"
	StepRollOutWorkers             = "roll-out-workers"
	StepRemoveWorkers              = "remove-workers"
	StepStopControlPlaneMachines   = "stop-control-plane-machines"
	StepStartControlPlaneMachines  = "start-control-plane-machines"
	StepRestartStoppedControlPlane = "restart-stopped-control-plane"
)

// createSteps builds a cluster from nothing: its network and API endpoint,
// then the control plane, then the workers, then (spec.network.cni
// kube-router) the network policy controller on every node.
var createSteps = []string{
	StepValidateDynamic,
	StepEnsureClusterPKI,
	StepEnsureNetwork,
	StepEnsureLoadBalancer,
	StepEnsureControlPlaneMachines,
	StepWaitNodesRegistered,
	StepApproveNodes,
	StepInstallControlPlane,
	StepEnsureWorkerMachines,
	StepInstallWorkers,
	StepWaitNodesReady,
	StepInstallAccess,
	StepInstallNetworkPolicy,
	StepApplyProfile,
}

// updateSteps reconciles the machines with the spec: it creates what is
// missing (scale up; new control-plane members join etcd one at a time,
// each healthy before the next), removes the control-plane nodes beyond
// its size (one at a time, highest number first: each etcd member removed
// before its node is drained and its machine deleted), upgrades the control plane in place one
// node at a time, replaces the workers made for other pool settings or
// another Kubernetes version within each pool's rollout bounds, removes the
// newest surplus machines (scale down) and waits until every node is Ready;
// the network policy controller is applied again (a new Kiln's, say).
var updateSteps = []string{
	StepValidateDynamic,
	StepEnsureControlPlaneMachines,
	StepInstallControlPlane,
	StepShrinkControlPlane,
	StepUpgradeControlPlane,
	StepEnsureWorkerMachines,
	StepInstallWorkers,
	StepRollOutWorkers,
	StepRemoveSurplusMachines,
	StepWaitNodesReady,
	StepInstallAccess,
	StepInstallNetworkPolicy,
	StepApplyProfile,
}

// repairSteps start again the control-plane machines that stopped, and
// replace the worker nodes that stayed unhealthy longer than their pool
// allows (the health check starts it): they are removed without a drain
// (they do not answer) and made again, as a scale-up makes them.
var repairSteps = []string{
	StepRestartStoppedControlPlane,
	StepReplaceUnhealthyNodes,
	StepEnsureWorkerMachines,
	StepInstallWorkers,
	StepWaitNodesReady,
}

// autoscaleSteps carry out an autoscaler's decision (the spec's pool
// sizes it wrote): machines for a pool that grew, or, for one that shrank,
// the underused nodes it chose (the operation's Nodes) drained and removed.
var autoscaleSteps = []string{
	StepEnsureWorkerMachines,
	StepInstallWorkers,
	StepRemoveSurplusMachines,
	StepWaitNodesReady,
}

// hibernateSteps leave a cluster that costs nothing on a cloud and keeps
// its data: the workers drained and removed (the pools keep their sizes),
// the control-plane machines stopped with their disks.
var hibernateSteps = []string{
	StepRemoveWorkers,
	StepStopControlPlaneMachines,
}

// resumeSteps bring a hibernated cluster back: the control plane started
// on its data and Ready, then the workers made and installed as a create
// makes them.
var resumeSteps = []string{
	StepStartControlPlaneMachines,
	StepEnsureWorkerMachines,
	StepInstallWorkers,
	StepWaitNodesReady,
}

// reconcileSteps put the cluster's packs back as its profile has them:
// each applied again, whatever status.profile says; and the RBAC of
// people's roles first (how a cluster made before it gets it).
var reconcileSteps = []string{StepInstallAccess, StepApplyProfile}

// deleteSteps tears a cluster down in the reverse order of create.
var deleteSteps = []string{
	StepDeleteWorkerMachines,
	StepDeleteControlPlaneMachines,
	StepDeleteLoadBalancer,
	StepDeleteNetwork,
}

// Bring-your-own-host clusters (the edge provider) have no machines to
// make: hosts join with the cluster's installer and are given their roles
// by a person, and a separate operation installs Kubernetes on them.
var (
	// hostCreateSteps makes the cluster's activation material.
	hostCreateSteps = []string{StepValidateDynamic, StepEnsureClusterPKI}
	// hostUpdateSteps checks a changed spec; nothing else follows a spec.
	hostUpdateSteps = []string{StepValidateDynamic}
	// hostProvisionSteps installs Kubernetes on the configured hosts, then
	// kube-router's policy controller when the spec names that pod
	// network, then MetalLB when the spec names a load balancer pool, then
	// the cluster's profile. On a cluster provisioned already it joins the
	// hosts configured since (the installed ones are left as they are):
	// refresh-join-material makes them a fresh bootstrap token and, for
	// control-plane hosts, has an installed control-plane node upload the
	// shared certificates again; they then join one at a time (control
	// plane: each etcd member added by kubeadm) or all at once (workers).
	hostProvisionSteps = []string{
		StepValidateDynamic,
		StepCheckNodeConfiguration,
		StepRefreshJoinMaterial,
		StepInstallControlPlane,
		StepInstallWorkers,
		StepWaitNodesReady,
		StepInstallAccess,
		StepInstallNetworkPolicy,
		StepInstallServiceLoadBalancers,
		StepApplyProfile,
	}
	// hostResetSteps tears Kubernetes down on every host and removes the
	// hosts from the cluster; the cluster, its settings and its activation
	// material stay, so hosts can join again.
	hostResetSteps = []string{StepResetNodes, StepRemoveNodes}
	// hostRemoveNodeSteps take some hosts (the operation's Nodes) out of
	// a cluster that stays: drained through the cluster's API, Kubernetes
	// torn down on them (kubeadm reset: a control-plane host's etcd
	// member goes with it), their Node objects and records removed, so
	// that each host can join a cluster again.
	hostRemoveNodeSteps = []string{StepDrainNodes, StepResetNodes, StepRemoveNodes}
	// hostDeleteSteps leaves the hosts as a reset does; the cluster record
	// and its secrets go with the operation's end.
	hostDeleteSteps = []string{StepResetNodes, StepRemoveNodes}
)

// StepsFor returns the step names of an operation kind for a cluster whose
// provider makes machines (hosts false) or takes the hosts users bring
// (hosts true); nil for a kind that provider has no plan for.
func StepsFor(kind string, hosts bool) []string {
	if !hosts {
		return Steps(kind)
	}
	var s []string
	switch kind {
	case v1.KindCreate:
		s = hostCreateSteps
	case v1.KindUpdate:
		s = hostUpdateSteps
	case v1.KindProvision:
		s = hostProvisionSteps
	case v1.KindReset:
		s = hostResetSteps
	case v1.KindRemoveNode:
		s = hostRemoveNodeSteps
	case v1.KindDelete:
		s = hostDeleteSteps
	case v1.KindReconcile, v1.KindRotateCertificates, v1.KindRotateCA, v1.KindFinishCARotation, v1.KindBackup, v1.KindRestore:
		return Steps(kind) // as for machines Kiln makes
	default:
		return nil
	}
	return append([]string(nil), s...)
}

// Steps returns the step names of an operation kind (v1.KindCreate,
// v1.KindUpdate, v1.KindDelete), or nil for an unknown kind. The caller owns
// the returned slice.
func Steps(kind string) []string {
	var s []string
	switch kind {
	case v1.KindCreate:
		s = createSteps
	case v1.KindUpdate:
		s = updateSteps
	case v1.KindDelete:
		s = deleteSteps
	case v1.KindRepair:
		s = repairSteps
	case v1.KindAutoscale:
		s = autoscaleSteps
	case v1.KindHibernate:
		s = hibernateSteps
	case v1.KindResume:
		s = resumeSteps
	case v1.KindReconcile:
		s = reconcileSteps
	case v1.KindRotateCertificates:
		s = rotateCertificatesSteps
	case v1.KindRotateCA:
		s = rotateCASteps
	case v1.KindFinishCARotation:
		s = finishCARotateSteps
	case v1.KindBackup:
		s = backupSteps
	case v1.KindRestore:
		s = restoreSteps
	default:
		return nil
	}
	return append([]string(nil), s...)
}

// PendingSteps returns the steps of an operation kind, each Pending, as an
// operation is created with them.
func PendingSteps(kind string) []v1.Step {
	names := Steps(kind)
	if names == nil {
		return nil
	}
	steps := make([]v1.Step, len(names))
	for i, n := range names {
		steps[i] = v1.Step{Name: n, State: v1.StepPending}
	}
	return steps
}
