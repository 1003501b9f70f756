package plan

import (
	"context"
	"fmt"

	"kiln.dev/kiln/internal/failure"
	"kiln.dev/kiln/internal/plan/attached"
	"kiln.dev/kiln/internal/plan/backup"
	"kiln.dev/kiln/internal/plan/certs"
	"kiln.dev/kiln/internal/plan/hibernate"
	"kiln.dev/kiln/internal/plan/install"
	"kiln.dev/kiln/internal/plan/machines"
	"kiln.dev/kiln/internal/plan/profile"
	"kiln.dev/kiln/internal/plan/step"
	"kiln.dev/kiln/internal/provider"
	"kiln.dev/kiln/internal/store"
)

// stepFunc returns the code of a named step, or nil. Every step is
// idempotent: running it again after it succeeded (or after a worker died in
// the middle of it) changes nothing more.
func (x *run) stepFunc(name string) func(context.Context) error {
	v := view{x}
	att, prof, bak := attached.New(attachedRun{v}), profile.New(profileRun{v}), backup.New(backupRun{v})
	crt, hib := certs.New(certsRun{v}), hibernate.New(hibernateRun{v})
	mach, inst := machines.New(machinesRun{v}), install.New(installRun{v})
	return map[string]func(context.Context) error{
		StepValidateDynamic:             x.validateDynamic,
		StepEnsureClusterPKI:            crt.EnsureClusterPKI,
		StepEnsureNetwork:               x.ensureNetwork,
		StepEnsureLoadBalancer:          x.ensureLoadBalancer,
		StepEnsureControlPlaneMachines:  mach.EnsureControlPlaneMachines,
		StepWaitNodesRegistered:         mach.WaitNodesRegistered,
		StepApproveNodes:                mach.ApproveNodes,
		StepInstallControlPlane:         inst.InstallControlPlane,
		StepShrinkControlPlane:          mach.ShrinkControlPlane,
		StepEnsureWorkerMachines:        mach.EnsureWorkerMachines,
		StepInstallWorkers:              inst.InstallWorkers,
		StepWaitNodesReady:              inst.WaitNodesReady,
		StepRemoveSurplusMachines:       mach.RemoveSurplusMachines,
		StepDeleteWorkerMachines:        mach.DeleteWorkerMachines,
		StepDeleteControlPlaneMachines:  mach.DeleteControlPlaneMachines,
		StepDeleteLoadBalancer:          x.deleteLoadBalancer,
		StepDeleteNetwork:               x.deleteNetwork,
		StepCheckNodeConfiguration:      mach.CheckNodeConfiguration,
		StepRefreshJoinMaterial:         inst.RefreshJoinMaterial,
		StepDrainNodes:                  mach.DrainNodes,
		StepResetNodes:                  mach.ResetNodes,
		StepRemoveNodes:                 mach.RemoveNodes,
		StepReplaceUnhealthyNodes:       mach.ReplaceUnhealthyNodes,
		StepRestartStoppedControlPlane:  mach.RestartStoppedControlPlane,
		StepUpgradeControlPlane:         mach.UpgradeControlPlane,
		StepRollOutWorkers:              mach.RollOutWorkers,
		StepRemoveWorkers:               hib.RemoveWorkers,
		StepStopControlPlaneMachines:    hib.StopControlPlaneMachines,
		StepStartControlPlaneMachines:   hib.StartControlPlaneMachines,
		StepApplyProfile:                prof.Apply,
		StepInstallServiceLoadBalancers: prof.InstallServiceLoadBalancers,
		StepInstallNetworkPolicy:        prof.InstallNetworkPolicy,
		StepInstallAccess:               prof.InstallAccess,
		StepRenewCertificates:           crt.Renew,
		StepTrustNewCA:                  crt.TrustNewCA,
		StepRestartSystemPods:           crt.RestartSystemPods,
		StepSignWithNewCA:               crt.SignWithNewCA,
		StepTrustOnlyNewCA:              crt.TrustOnlyNewCA,
		StepRetireOldCA:                 crt.RetireOldCA,
		StepConnectCluster:              att.Connect,
		StepDetachCluster:               att.Detach,
		StepTakeSnapshot:                bak.TakeSnapshot,
		StepCheckBackup:                 bak.Check,
		StepPruneBackups:                bak.Prune,
		StepStageSnapshot:               bak.StageSnapshot,
		StepStopControlPlane:            bak.StopControlPlane,
		StepRestoreEtcd:                 bak.RestoreEtcd,
		StepStartControlPlane:           bak.StartControlPlane,
		StepRemoveForeignNodes:          bak.RemoveForeignNodes,
	}[name]
}

// validateDynamic checks the cluster against the world (package dynamic's
// Checker, as the dry run does): a finding fails the operation with every
// finding in its details; a check that could not be made is retried.
func (x *run) validateDynamic(ctx context.Context) error {
	rep, err := x.r.checker.Cluster(ctx, x.cl.Project, x.cl.Name, &x.cl.Spec)
	if err != nil {
		return err
	}
	for _, c := range rep.Checks {
		x.log.Info("checked: " + c)
	}
	if len(rep.Findings) > 0 {
		return failure.Findings("the cluster", rep.Findings)
	}
	return machines.CheckPoolNames(x.cl)
}

func (x *run) ensureNetwork(ctx context.Context) error {
	x.log.Info("ensuring network")
	n, err := x.p.EnsureNetwork(ctx, x.pc)
	if err != nil {
		return fmt.Errorf("ensure network: %w", err)
	}
	x.log.Info("network ready", "network", n.ID, "cidr", n.CIDR)
	return nil
}

// ensureLoadBalancer creates the API load balancer and records its address
// as the cluster's endpoint at once, so users see it while the rest runs.
func (x *run) ensureLoadBalancer(ctx context.Context) error {
	lbs, ok := x.p.(provider.LoadBalancers)
	if !ok {
		return step.Skipped("provider %q has no load balancers; the endpoint is the first control-plane machine", x.cl.Spec.Provider)
	}
	x.log.Info("ensuring load balancer")
	lb, err := lbs.EnsureLoadBalancer(ctx, x.pc)
	if err != nil {
		return fmt.Errorf("ensure load balancer: %w", err)
	}
	if x.cl.Status.Endpoint == lb.Address {
		return nil
	}
	x.log.Info("recording endpoint", "endpoint", lb.Address)
	x.cl.Status.Endpoint = lb.Address
	x.cl.Status.UpdatedAt = x.r.opts.Now().UTC()
	if err := x.ops.PutClusterStatus(ctx, x.cl, store.Cond{Fence: &x.fence}); err != nil {
		return fmt.Errorf("record endpoint: %w", err)
	}
	return nil
}

func (x *run) deleteLoadBalancer(ctx context.Context) error {
	lbs, ok := x.p.(provider.LoadBalancers)
	if !ok {
		return step.Skipped("provider %q has no load balancers", x.cl.Spec.Provider)
	}
	x.log.Info("deleting load balancer")
	if err := lbs.DeleteLoadBalancer(ctx, x.pc); err != nil {
		return fmt.Errorf("delete load balancer: %w", err)
	}
	return nil
}

func (x *run) deleteNetwork(ctx context.Context) error {
	x.log.Info("deleting network")
	if err := x.p.DeleteNetwork(ctx, x.pc); err != nil {
		return fmt.Errorf("delete network: %w", err)
	}
	return nil
}
