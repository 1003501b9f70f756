package plan

import (
	"context"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"time"

	v1 "kiln.dev/kiln/api/v1"
	"kiln.dev/kiln/internal/failure"
	"kiln.dev/kiln/internal/pki"
	"kiln.dev/kiln/internal/plan/step"
	"kiln.dev/kiln/internal/store"
	"kiln.dev/kiln/internal/trust"
)

// Steps of a CA rotation (kiln cluster rotate-certs --ca, then --finish);
// internal/trust/carotation.go says what each phase trusts and signs with.
const (
	// StepTrustNewCA makes the next CA and installs every node again
	// trusting both; the cluster is then in the overlap.
	StepTrustNewCA = "trust-new-ca"
	// StepRestartSystemPods replaces kube-system's pods, so that they
	// verify the API server with both CAs.
	StepRestartSystemPods = "restart-system-pods"
	// StepSignWithNewCA has every agent renew its node certificate and
	// every node install certificates of the next CA.
	StepSignWithNewCA = "sign-with-new-ca"
	// StepTrustOnlyNewCA installs every node again trusting the next CA
	// alone.
	StepTrustOnlyNewCA = "trust-only-new-ca"
	// StepRetireOldCA makes the next CA the cluster's; the old one is
	// forgotten.
	StepRetireOldCA = "retire-old-ca"
)

var (
	rotateCASteps       = []string{StepTrustNewCA, StepRestartSystemPods}
	finishCARotateSteps = []string{StepSignWithNewCA, StepTrustOnlyNewCA, StepRetireOldCA}
)

// caRotationTimeout bounds the waits of a CA rotation's steps that are not
// a node's install: agents renewing their certificates, kube-system's pods
// replaced.
const caRotationTimeout = 5 * time.Minute

// trustNewCA begins the CA rotation (a new CA, the trusting phase), installs
// every node again trusting both CAs with certificates of the current one,
// and moves to the overlap phase.
func (x *run) trustNewCA(ctx context.Context) error {
	if err := x.refuseCARotation(); err != nil {
		return err
	}
	k := x.cl.Key()
	cas, err := trust.BeginCARotation(ctx, x.caStore(), k, pki.DefaultCAValidity, time.Now())
	if err != nil {
		return err
	}
	if err := x.showCARotation(ctx, cas); err != nil {
		return err
	}
	if cas.Phase != trust.CATrusting && cas.Phase != trust.CAOverlap {
		return failure.Terminal(v1.CodeConflict, "the CA rotation of cluster %s is in phase %s: finish it (kiln cluster rotate-certs %s --ca --finish) before another begins",
			k.Name, cas.Phase, k.Name)
	}
	if cas.Phase == trust.CATrusting {
		installed, err := x.rollNodes(ctx, cas.Since, "installing to trust the new cluster CA too")
		if err != nil {
			return err
		}
		if cas, err = trust.SetCAPhase(ctx, x.caStore(), k, trust.CATrusting, trust.CAOverlap, time.Now()); err != nil {
			return err
		}
		if err := x.showCARotation(ctx, cas); err != nil {
			return err
		}
		x.event(ctx, "Normal", "CARotationOverlap", fmt.Sprintf("every node trusts the new cluster CA %q beside the old one (installed again: %s); kubeconfigs issued from now on are the new CA's",
			cas.Next.Certificate().Subject.CommonName, listOrNone(installed)))
	}
	x.note = fmt.Sprintf("every node trusts the old and the new cluster CA; kubeconfigs issued before keep working until kiln cluster rotate-certs %s --ca --finish", k.Name)
	return nil
}

// restartSystemPods waits until kube-system's kube-root-ca.crt (what pods
// verify the API server with) holds the next CA, then replaces every pod of
// kube-system's Deployments and DaemonSets and waits for them: they then
// keep working when the API server's certificate is the next CA's.
func (x *run) restartSystemPods(ctx context.Context) error {
	cas, err := trust.LoadCAs(ctx, x.secrets, x.cl.Key())
	if err != nil {
		return err
	}
	if cas.Phase != trust.CAOverlap {
		return step.Skipped("the CA rotation is in phase %q, not overlap", cas.Phase)
	}
	kc, err := x.kubeClient(ctx)
	if err != nil {
		return err
	}
	defer kc.Close()
	next := string(cas.Next.CertPEM())
	err = x.waitCA(ctx, "kube-system's ConfigMap kube-root-ca.crt to hold the new cluster CA (the controller manager publishes it)", func() (bool, error) {
		data, err := kc.GetConfigMap(ctx, "kube-system", "kube-root-ca.crt")
		return err == nil && strings.Contains(data["ca.crt"], next), nil
	})
	if err != nil {
		return err
	}
	restarted, err := kc.Restart(ctx, "kube-system", cas.Since)
	if err != nil {
		return fmt.Errorf("restart kube-system's pods: %w", err)
	}
	var waiting []string
	err = x.waitCA(ctx, "kube-system's pods to be replaced", func() (bool, error) {
		rs, err := kc.Rollouts(ctx, "kube-system")
		if err != nil {
			waiting = []string{err.Error()}
			return false, nil
		}
		waiting = waiting[:0]
		for _, r := range rs {
			if !r.Done {
				waiting = append(waiting, fmt.Sprintf("%s %s: %s", r.Kind, r.Name, r.Waiting))
			}
		}
		x.showProgress(ctx, "kube-system", fmt.Sprintf("%d of %d rollout(s) done", len(rs)-len(waiting), len(rs)))
		return len(waiting) == 0, nil
	}, func() string { return strings.Join(waiting, "; ") })
	if err != nil {
		return err
	}
	x.note = "replaced the pods of " + listOrNone(restarted) + "; restart your own pods that talk to the API server before the finish"
	return nil
}

// signWithNewCA moves the rotation to the signing phase, has every agent
// renew its node certificate with the next CA, and installs every node
// again with certificates of the next CA (still trusting both).
func (x *run) signWithNewCA(ctx context.Context) error {
	if err := x.refuseCARotation(); err != nil {
		return err
	}
	k := x.cl.Key()
	cas, err := trust.SetCAPhase(ctx, x.caStore(), k, trust.CAOverlap, trust.CASigning, time.Now())
	if err != nil {
		return x.noRotation(ctx, err)
	}
	if err := x.showCARotation(ctx, cas); err != nil {
		return err
	}
	if cas.Phase != trust.CASigning {
		return step.Skipped("the CA rotation is past the signing phase (%s)", cas.Phase)
	}
	nodes, err := x.clusterNodeNames(ctx)
	if err != nil {
		return err
	}
	for _, n := range nodes {
		if err := trust.RequestRenewal(ctx, x.caStore(), k, n); err != nil {
			return err
		}
	}
	var pending []string
	err = x.waitCA(ctx, "agents to renew their node certificates with the new cluster CA", func() (bool, error) {
		pending = pending[:0]
		for _, n := range nodes {
			p, err := trust.RenewalPending(ctx, x.secrets, k, n)
			if err != nil {
				return false, err
			}
			if p {
				pending = append(pending, n)
			}
		}
		x.showProgress(ctx, "agents", fmt.Sprintf("%d of %d renewed their node certificate", len(nodes)-len(pending), len(nodes)))
		return len(pending) == 0, nil
	}, func() string {
		return "not renewed yet: " + strings.Join(pending, ", ") + " (is each agent connected?)"
	})
	if err != nil {
		return err
	}
	installed, err := x.rollNodes(ctx, cas.Since, "installing certificates of the new cluster CA")
	if err != nil {
		return err
	}
	x.note = fmt.Sprintf("every agent and node holds certificates of the new cluster CA (installed again: %s)", listOrNone(installed))
	return nil
}

// trustOnlyNewCA moves the rotation to the narrowing phase and installs
// every node again trusting the next CA alone: certificates of the old CA
// are refused from here on.
func (x *run) trustOnlyNewCA(ctx context.Context) error {
	if err := x.refuseCARotation(); err != nil {
		return err
	}
	cas, err := trust.SetCAPhase(ctx, x.caStore(), x.cl.Key(), trust.CASigning, trust.CANarrowing, time.Now())
	if err != nil {
		return x.noRotation(ctx, err)
	}
	if err := x.showCARotation(ctx, cas); err != nil {
		return err
	}
	installed, err := x.rollNodes(ctx, cas.Since, "installing to trust only the new cluster CA")
	if err != nil {
		return err
	}
	x.note = "every node trusts only the new cluster CA (installed again: " + listOrNone(installed) + ")"
	return nil
}

// retireOldCA makes the next CA the cluster's CA and ends the rotation.
func (x *run) retireOldCA(ctx context.Context) error {
	k := x.cl.Key()
	cas, err := trust.LoadCAs(ctx, x.secrets, k)
	if err != nil {
		return err
	}
	if !cas.Rotating() {
		if err := x.showCARotation(ctx, nil); err != nil {
			return err
		}
		return step.Skipped("the rotation was finished already")
	}
	old := cas.Current.Certificate().Subject.CommonName
	if err := trust.FinishCARotation(ctx, x.caStore(), k); err != nil {
		return err
	}
	if err := x.showCARotation(ctx, nil); err != nil {
		return err
	}
	x.event(ctx, "Normal", "CARotated", fmt.Sprintf("the cluster CA is now %q; the old CA %q and every certificate it signed (kubeconfigs issued before the overlap included) are refused",
		cas.Next.Certificate().Subject.CommonName, old))
	x.note = "the new cluster CA is the cluster's; the old one is forgotten"
	return nil
}

// showCARotation records where the CA rotation is in status.caRotation
// (nil once it is over).
func (x *run) showCARotation(ctx context.Context, cas *trust.ClusterCAs) error {
	var st *v1.CARotationStatus
	if cas != nil && cas.Rotating() {
		st = &v1.CARotationStatus{Phase: string(cas.Phase), Since: cas.Since, NewCA: cas.Next.Certificate().Subject.CommonName}
	}
	if reflect.DeepEqual(st, x.cl.Status.CARotation) {
		return nil
	}
	x.cl.Status.CARotation = st
	if err := x.ops.PutClusterStatus(ctx, x.cl, store.Cond{Fence: &x.fence}); err != nil {
		return fmt.Errorf("save status.caRotation: %w", err)
	}
	return nil
}

// refuseCARotation refuses a CA rotation of a cluster whose certificates
// are not Kiln's.
func (x *run) refuseCARotation() error {
	switch {
	case !x.usesAgents():
		return failure.Terminal(v1.CodeInvalidParameter, "the %s provider's machines run no Kubernetes: there is no CA to rotate", x.cl.Spec.Provider)
	case x.usesKubeadm():
		return failure.Terminal(v1.CodeInvalidParameter, "the kubeadm distribution's CA is kubeadm's: Kiln does not rotate it")
	}
	return nil
}

// noRotation turns SetCAPhase's error for a cluster with no rotation under
// way into a terminal one that says what to do.
func (x *run) noRotation(ctx context.Context, err error) error {
	cas, lerr := trust.LoadCAs(ctx, x.secrets, x.cl.Key())
	if lerr == nil && !cas.Rotating() {
		return failure.Terminal(v1.CodeConflict, "cluster %s has no CA rotation under way: begin one with kiln cluster rotate-certs %s --ca", x.cl.Name, x.cl.Name)
	}
	return err
}

// caStore is the store as changing a CA rotation needs it: it updates
// cluster secrets by compare-and-swap (store.ClusterSecretUpdater, which
// the SQL store has and store.Store does not declare). Without it, every
// step of a rotation fails saying so.
func (x *run) caStore() trust.CASecretStore {
	if u, ok := x.r.opts.Store.(store.ClusterSecretUpdater); ok {
		return struct {
			trust.SecretReader
			store.ClusterSecretUpdater
		}{x.r.opts.Store, u}
	}
	return noSecretUpdates{x.r.opts.Store}
}

// noSecretUpdates is a store that cannot update cluster secrets.
type noSecretUpdates struct{ trust.SecretReader }

func (noSecretUpdates) UpdateClusterSecrets(context.Context, store.Key, ...store.SecretWrite) error {
	return failure.Terminal(v1.CodeInternal, "this store does not update cluster secrets by compare-and-swap: a CA rotation needs it")
}

// clusterNodeNames are the names of the cluster's nodes, control plane
// first.
func (x *run) clusterNodeNames(ctx context.Context) ([]string, error) {
	groups, err := x.nodeGroups(ctx)
	if err != nil {
		return nil, err
	}
	var out []string
	for _, m := range slices.Concat(groups...) {
		out = append(out, m.Name)
	}
	return out, nil
}

// waitCA polls done until it reports true, for at most caRotationTimeout;
// the timeout's error names what, with why's answer when given.
func (x *run) waitCA(ctx context.Context, what string, done func() (bool, error), why ...func() string) error {
	deadline := time.Now().Add(caRotationTimeout)
	tick := time.NewTicker(x.r.opts.InstructionPoll)
	defer tick.Stop()
	for {
		ok, err := done()
		if err != nil || ok {
			return err
		}
		if time.Now().After(deadline) {
			msg := ""
			if len(why) > 0 {
				msg = ": " + why[0]()
			}
			return failure.Retryable(v1.CodeTimeout, nil, "after %s, still waiting for %s%s", caRotationTimeout, what, msg)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-x.cancelRequested():
			return step.ErrCancelRequested
		case <-tick.C:
		}
	}
}

func listOrNone(s []string) string {
	if len(s) == 0 {
		return "none"
	}
	return strings.Join(s, ", ")
}
