package machines

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	v1 "kiln.dev/kiln/api/v1"
	"kiln.dev/kiln/internal/failure"
	"kiln.dev/kiln/internal/kubeapi"
	"kiln.dev/kiln/internal/plan/step"
	"kiln.dev/kiln/internal/provider"
)

// A machine's revision is a fingerprint of what it was made for: its pool's
// instance type, zones, labels and taints and the Kubernetes version (the
// control plane's: its instance type and the version). It is the machine's
// tag at the provider (provider.MachineSpec.Revision). A rollout replaces
// the workers whose revision is not their pool's; the control plane is
// upgraded in place.

// poolRevision is the revision of pool p's machines at Kubernetes version.
func poolRevision(version string, p v1.WorkerPool) string {
	taints := slices.Clone(p.Taints)
	slices.Sort(taints)
	zones := slices.Clone(p.Zones)
	slices.Sort(zones)
	return revision(struct {
		Version      string            `json:"version"`
		InstanceType string            `json:"instanceType"`
		Zones        []string          `json:"zones"`
		Labels       map[string]string `json:"labels"` // json sorts map keys
		Taints       []string          `json:"taints"`
	}{version, p.InstanceType, zones, p.Labels, taints})
}

// controlPlaneRevision is the revision of the control plane's machines.
func controlPlaneRevision(version string, cp v1.ControlPlane) string {
	return revision(struct {
		Version      string `json:"version"`
		InstanceType string `json:"instanceType"`
	}{version, cp.InstanceType})
}

func revision(v any) string {
	b, _ := json.Marshal(v) // plain strings, slices and maps: cannot fail
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:6])
}

// outdated reports whether a machine of revision have is to be replaced
// for want. A machine made before revisions were kept ("") is not.
func outdated(have, want string) bool { return have != "" && have != want }

// UpgradeControlPlane brings every control-plane node to the spec's
// Kubernetes version in place, one node at a time, by name: the node
// installs again at the new version (its components restart on the new
// kiln-kube; etcd keeps its data and its membership) and the next starts
// only once Kubernetes reports this one Ready at that version.
func (s Steps) UpgradeControlPlane(ctx context.Context) error {
	if !s.r.UsesAgents() {
		return step.Skipped("the %s provider's machines run no Kubernetes to upgrade", s.cl.Spec.Provider)
	}
	want := s.cl.Spec.KubernetesVersion
	cps, err := s.w.ControlPlaneTargets(ctx)
	if err != nil {
		return err
	}
	if err := s.w.controlPlaneUp(ctx); err != nil {
		return err
	}
	kc, err := s.r.KubeClient(ctx)
	if err != nil {
		return err
	}
	defer kc.Close()
	install, err := s.r.Installer(ctx)
	if err != nil {
		return err
	}
	var done []string
	for i, m := range cps {
		if s.r.Canceling() {
			return step.ErrCancelRequested
		}
		kn, err := kc.GetNode(ctx, m.Name)
		if err != nil {
			return failure.Retryable(v1.CodeInternal, err, "read node %s in Kubernetes: %v", m.Name, err)
		}
		if kn.KubeletVersion == want {
			continue
		}
		s.r.EventOn(ctx, "Normal", "NodeUpgrading", m.Name, fmt.Sprintf("upgrading control-plane node %s from %s to %s", m.Name, kn.KubeletVersion, want))
		if err := s.r.SetNodeState(ctx, m.Name, v1.NodeProvisioning, "upgrading to "+want); err != nil {
			return err
		}
		if err := install(ctx, i, m); err != nil {
			return err
		}
		if err := s.awaitVersion(ctx, kc, m.Name, want); err != nil {
			return err
		}
		if err := s.r.KubernetesReady(ctx, []provider.MachineSpec{m}); err != nil {
			return err
		}
		s.r.Progress(ctx, m.Name, "upgraded to "+want)
		done = append(done, m.Name)
	}
	if len(done) == 0 {
		return step.Skipped("every control-plane node runs %s", want)
	}
	s.r.Note(fmt.Sprintf("upgraded to %s, one at a time: %s", want, strings.Join(done, ", ")))
	return nil
}

// awaitVersion waits, within NodeTimeout, until Kubernetes reports node
// name Ready with its kubelet at version and the node takes pods again
// (kubeapi.Node.NotReadyYet), watching its machine as KubernetesReady does.
func (s Steps) awaitVersion(ctx context.Context, kc *kubeapi.Client, name, version string) error {
	machine, err := s.w.WatchMachines(ctx, []string{name})
	if err != nil {
		return err
	}
	deadline := time.Now().Add(s.r.Timing().NodeTimeout)
	tick := time.NewTicker(s.r.Timing().InstructionPoll)
	defer tick.Stop()
	for {
		kn, err := kc.GetNode(ctx, name)
		if err == nil && kn.NotReadyYet() == "" && kn.KubeletVersion == version {
			return nil
		}
		if err := machine.Check(ctx); err != nil {
			return err
		}
		if time.Now().After(deadline) {
			got := kn.KubeletVersion
			if why := kn.NotReadyYet(); why != "" {
				got += ", " + why
			}
			if err != nil {
				got = err.Error()
			}
			return failure.Retryable(v1.CodeTimeout, err, "after %s, node %s does not report Ready at %s (it reports %s)",
				s.r.Timing().NodeTimeout, name, version, got)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-s.r.CancelRequested():
			return step.ErrCancelRequested
		case <-tick.C:
		}
	}
}

// RollOutWorkers replaces, pool by pool, the workers whose revision is not
// their pool's (a new instance type, labels, taints or Kubernetes version)
// within the pool's rollout bounds: at most maxSurge nodes above its size
// and at most maxUnavailable Ready nodes below it, at any time. New nodes
// are made and Ready before old ones are drained and removed (drainAndRemove):
// those not Ready first (removing one leaves as many Ready), then the
// oldest. Each round is recomputed from what the pool has, so a rollout
// interrupted by a crash resumes where it was.
func (s Steps) RollOutWorkers(ctx context.Context) error {
	var rolled []string
	for _, p := range s.cl.Spec.WorkerPools {
		want := poolRevision(s.cl.Spec.KubernetesVersion, p)
		surge, unavailable := p.Rollout.MaxSurge, p.Rollout.MaxUnavailable
		if surge <= 0 && unavailable <= 0 {
			surge = 1 // the default; validation refuses 0 and 0
		}
		for {
			if s.r.Canceling() {
				return step.ErrCancelRequested
			}
			members, err := s.poolMembers(ctx, p.Name)
			if err != nil {
				return err
			}
			var old, current []Member
			for _, m := range members {
				if outdated(m.Revision, want) {
					old = append(old, m)
				} else {
					current = append(current, m)
				}
			}
			// New nodes made before an interruption (a crash, a lost
			// lease) and not yet Ready are brought up first: counted
			// as members, they would hold every removal back.
			// Nodes this operation installed a moment ago (install-workers
			// of a scale-up) are not READY until Kubernetes says so: they
			// are waited for, not installed again (an install issues new
			// certificates, and their kubelet restarted on them).
			if unready := notReady(current); len(unready) > 0 {
				var specs, installed []provider.MachineSpec
				for _, m := range unready {
					spec := workerSpec(m.Name, m.Index, p, want)
					done, err := s.installedHere(ctx, m.Name)
					if err != nil {
						return err
					}
					if done {
						installed = append(installed, spec)
					} else {
						specs = append(specs, spec)
					}
				}
				if len(installed) > 0 {
					if err := s.r.KubernetesReady(ctx, installed); err != nil {
						return err
					}
				}
				if len(specs) > 0 {
					s.r.Log().Info("rollout: bringing up nodes made before an interruption", "pool", p.Name, "nodes", step.Names(specs))
					if err := s.bringUp(ctx, specs); err != nil {
						return err
					}
				}
				continue
			}
			add := min(p.Size+surge-len(members), p.Size-len(current))
			if len(old) == 0 && add <= 0 {
				break
			}
			if add > 0 { // new nodes first; with maxSurge 0, the last removal's replacement
				specs, err := s.newWorkers(ctx, p, want, add)
				if err != nil {
					return err
				}
				s.r.Log().Info("rollout: adding nodes", "pool", p.Name, "nodes", step.Names(specs), "outdated", len(old))
				if err := s.bringUp(ctx, specs); err != nil {
					return err
				}
				continue
			}
			// An old node that is not Ready (its machine died, say) goes
			// first: removing it leaves as many Ready nodes as before, so
			// maxUnavailable does not hold it back.
			candidates := notReady(old)
			if len(candidates) == 0 {
				if ready := len(members) - len(notReady(members)); ready-1 < p.Size-unavailable {
					return failure.Retryable(v1.CodeConflict, nil,
						"rollout of pool %s: %d of its nodes are Ready; removing one more would leave fewer than size %d - maxUnavailable %d",
						p.Name, ready, p.Size, unavailable)
				}
				candidates = old
			}
			slices.SortFunc(candidates, func(a, b Member) int { return a.Created.Compare(b.Created) })
			victim := candidates[0]
			s.r.EventOn(ctx, "Normal", "NodeReplacing", victim.Name, fmt.Sprintf("rollout of pool %s: replacing %s (revision %s, the pool's is %s)",
				p.Name, victim.Name, victim.Revision, want))
			if err := s.w.drainAndRemove(ctx, []Member{victim}); err != nil {
				return err
			}
			rolled = append(rolled, victim.Name)
		}
	}
	if len(rolled) == 0 {
		return step.Skipped("every worker is of its pool's revision")
	}
	s.r.Note("replaced, one by one: " + strings.Join(rolled, ", "))
	return nil
}

// poolMembers are the pool's worker machines.
func (s Steps) poolMembers(ctx context.Context, pool string) ([]Member, error) {
	all, err := s.w.WorkerMembers(ctx)
	if err != nil {
		return nil, err
	}
	var out []Member
	for _, m := range all {
		if m.Pool == pool && m.Machine {
			out = append(out, m)
		}
	}
	return out, nil
}

// newWorkers names n new machines of pool p at revision rev, with the
// lowest numbers no machine of the cluster uses.
func (s Steps) newWorkers(ctx context.Context, p v1.WorkerPool, rev string, n int) ([]provider.MachineSpec, error) {
	ms, err := s.r.Provider().ListMachines(ctx, s.r.ProviderCluster())
	if err != nil {
		return nil, fmt.Errorf("list machines: %w", err)
	}
	records, err := s.r.Nodes(ctx)
	if err != nil {
		return nil, err
	}
	used := map[string]bool{}
	for _, m := range ms {
		used[m.Name] = true
	}
	for name := range maps.Keys(records) {
		used[name] = true
	}
	var out []provider.MachineSpec
	for i := 0; len(out) < n; i++ {
		name := fmt.Sprintf("%s-%s-%d", s.cl.Name, p.Name, i)
		if !used[name] {
			out = append(out, workerSpec(name, i, p, rev))
		}
	}
	return out, nil
}

// bringUp makes machines, installs them and waits until they are Ready.
func (s Steps) bringUp(ctx context.Context, specs []provider.MachineSpec) error {
	specs, err := s.w.EnsureMachines(ctx, specs)
	if err != nil {
		return err
	}
	if err := s.r.InstallNodes(ctx, specs, false); err != nil {
		return err
	}
	if !s.r.UsesAgents() {
		return nil // InstallNodes waited until they were READY
	}
	return s.r.KubernetesReady(ctx, specs)
}

// installedHere reports whether this operation has installed node name
// already: an install instruction it issued to the node succeeded. Only
// nodes with agents have instructions.
func (s Steps) installedHere(ctx context.Context, name string) (bool, error) {
	if !s.r.UsesAgents() {
		return false, nil
	}
	ins, err := s.r.Instructions(ctx, name)
	if err != nil {
		return false, fmt.Errorf("instructions of node %s: %w", name, err)
	}
	for _, in := range ins {
		if in.Kind == v1.InstructionInstall && strings.HasPrefix(in.ID, s.op.ID+".") &&
			in.Result != nil && in.Result.State == v1.StepSucceeded {
			return true, nil
		}
	}
	return false, nil
}

// notReady are the members without a READY node.
func notReady(members []Member) []Member {
	var out []Member
	for _, m := range members {
		if m.NotReady {
			out = append(out, m)
		}
	}
	return out
}
