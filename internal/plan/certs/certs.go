// Package certs is the step family of a cluster's certificates: making
// the cluster's CA and secrets (ensure-cluster-pki), renewing every
// node's Kubernetes certificates (renew-certificates) and rotating the
// cluster CA (trust-new-ca ... retire-old-ca; internal/trust's
// carotation.go says what each phase trusts and signs with). Installing
// the nodes again, one at a time, it asks of its run (RollNodes, which
// the install family does); the step lists stay the runner's.
package certs

import (
	"context"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"time"

	v1 "kiln.dev/kiln/api/v1"
	"kiln.dev/kiln/internal/failure"
	"kiln.dev/kiln/internal/kubeapi"
	"kiln.dev/kiln/internal/pki"
	"kiln.dev/kiln/internal/plan/step"
	"kiln.dev/kiln/internal/provider"
	"kiln.dev/kiln/internal/store"
	"kiln.dev/kiln/internal/trust"
)

// Run is what the certificate steps need of their run.
type Run interface {
	step.Context
	// UsesAgents: the cluster's nodes run Kiln's agents (and Kubernetes);
	// UsesKubeadm: their distribution is kubeadm, whose certificates are
	// its own.
	UsesAgents() bool
	UsesKubeadm() bool
	// RollNodes installs every node again, one at a time, control plane
	// first, skipping those installed since since; doing is what their
	// progress says. It returns the nodes it installed.
	RollNodes(ctx context.Context, since time.Time, doing string) ([]string, error)
	// NodeGroups are the control-plane machines and the workers.
	NodeGroups(ctx context.Context) ([][]provider.MachineSpec, error)
	// KubeClient is the cluster's API as an admin.
	KubeClient(ctx context.Context) (*kubeapi.Client, error)
	// Agentless: the provider's machines run no agent (sim), so the
	// cluster needs no CA, credential or passphrase.
	Agentless() bool
	// CAStore changes the cluster's CAs (compare-and-swap on its secrets);
	// the SecretStore reads and makes its secrets, fenced with Fence.
	CAStore() trust.CASecretStore
	trust.SecretStore
	Fence() store.Fence
	// InstructionPoll is how often a wait looks again; CancelRequested is
	// closed once the run noticed a cancel request.
	InstructionPoll() time.Duration
	CancelRequested() <-chan struct{}
}

// Steps are the certificate family's steps of one run.
type Steps struct {
	r  Run
	cl *store.Cluster
	op *store.Operation
}

// New returns the certificate steps of the run r.
func New(r Run) Steps { return Steps{r: r, cl: r.Cluster(), op: r.Operation()} }

// EnsureClusterPKI (ensure-cluster-pki) creates, once, the cluster's CA,
// the agent credential, the passphrase and the service-account key.
func (s Steps) EnsureClusterPKI(ctx context.Context) error {
	if s.r.Agentless() {
		return step.Skipped("the %s provider's machines run no agent", s.cl.Spec.Provider)
	}
	// The CA outlives every certificate it signs (node certificates last
	// spec.certificateTTLDays, at most 10 years).
	sec, err := trust.EnsureSecrets(ctx, s.r, s.cl.Key(), s.r.Fence(), pki.DefaultCAValidity)
	if err != nil {
		return fmt.Errorf("ensure cluster secrets: %w", err)
	}
	if sec.Created {
		s.r.Log().Info("created the cluster's CA, agent credential and passphrase")
	}
	return nil
}

// Renew gives every node new certificates of the cluster CA
// (RollNodes): a node renewed since the operation began is not renewed
// again.
func (s Steps) Renew(ctx context.Context) error {
	if !s.r.UsesAgents() {
		return step.Skipped("the %s provider's machines run no Kubernetes: there are no certificates to renew", s.cl.Spec.Provider)
	}
	if s.r.UsesKubeadm() {
		return failure.Terminal(v1.CodeInvalidParameter,
			"the certificates of the kubeadm distribution's nodes are kubeadm's: renew them on each control-plane node with kubeadm certs renew all")
	}
	renewed, err := s.r.RollNodes(ctx, s.op.StartTime, "renewing certificates")
	if err != nil {
		return err
	}
	if len(renewed) == 0 {
		return step.Skipped("every node's certificates were renewed by this operation already")
	}
	s.r.Event(ctx, "Normal", "CertificatesRenewed", fmt.Sprintf("certificates renewed, one node at a time: %s", strings.Join(renewed, ", ")))
	s.r.Note(fmt.Sprintf("renewed the certificates of %d node(s): %s", len(renewed), strings.Join(renewed, ", ")))
	return nil
}

// caRotationTimeout bounds the waits of a CA rotation's steps that are not
// a node's install: agents renewing their certificates, kube-system's pods
// replaced.
const caRotationTimeout = 5 * time.Minute

// TrustNewCA begins the CA rotation (a new CA, the trusting phase), installs
// every node again trusting both CAs with certificates of the current one,
// and moves to the overlap phase.
func (s Steps) TrustNewCA(ctx context.Context) error {
	if err := s.refuseCARotation(); err != nil {
		return err
	}
	k := s.cl.Key()
	cas, err := trust.BeginCARotation(ctx, s.r.CAStore(), k, pki.DefaultCAValidity, time.Now())
	if err != nil {
		return err
	}
	if err := s.showCARotation(ctx, cas); err != nil {
		return err
	}
	if cas.Phase != trust.CATrusting && cas.Phase != trust.CAOverlap {
		return failure.Terminal(v1.CodeConflict, "the CA rotation of cluster %s is in phase %s: finish it (kiln cluster rotate-certs %s --ca --finish) before another begins",
			k.Name, cas.Phase, k.Name)
	}
	if cas.Phase == trust.CATrusting {
		installed, err := s.r.RollNodes(ctx, cas.Since, "installing to trust the new cluster CA too")
		if err != nil {
			return err
		}
		if cas, err = trust.SetCAPhase(ctx, s.r.CAStore(), k, trust.CATrusting, trust.CAOverlap, time.Now()); err != nil {
			return err
		}
		if err := s.showCARotation(ctx, cas); err != nil {
			return err
		}
		s.r.Event(ctx, "Normal", "CARotationOverlap", fmt.Sprintf("every node trusts the new cluster CA %q beside the old one (installed again: %s); kubeconfigs issued from now on are the new CA's",
			cas.Next.Certificate().Subject.CommonName, listOrNone(installed)))
	}
	s.r.Note(fmt.Sprintf("every node trusts the old and the new cluster CA; kubeconfigs issued before keep working until kiln cluster rotate-certs %s --ca --finish", k.Name))
	return nil
}

// RestartSystemPods waits until kube-system's kube-root-ca.crt (what pods
// verify the API server with) holds the next CA, then replaces every pod of
// kube-system's Deployments and DaemonSets and waits for them: they then
// keep working when the API server's certificate is the next CA's.
func (s Steps) RestartSystemPods(ctx context.Context) error {
	cas, err := trust.LoadCAs(ctx, s.r, s.cl.Key())
	if err != nil {
		return err
	}
	if cas.Phase != trust.CAOverlap {
		return step.Skipped("the CA rotation is in phase %q, not overlap", cas.Phase)
	}
	kc, err := s.r.KubeClient(ctx)
	if err != nil {
		return err
	}
	defer kc.Close()
	next := string(cas.Next.CertPEM())
	err = s.waitCA(ctx, "kube-system's ConfigMap kube-root-ca.crt to hold the new cluster CA (the controller manager publishes it)", func() (bool, error) {
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
	err = s.waitCA(ctx, "kube-system's pods to be replaced", func() (bool, error) {
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
		s.r.Progress(ctx, "kube-system", fmt.Sprintf("%d of %d rollout(s) done", len(rs)-len(waiting), len(rs)))
		return len(waiting) == 0, nil
	}, func() string { return strings.Join(waiting, "; ") })
	if err != nil {
		return err
	}
	s.r.Note("replaced the pods of " + listOrNone(restarted) + "; restart your own pods that talk to the API server before the finish")
	return nil
}

// SignWithNewCA moves the rotation to the signing phase, has every agent
// renew its node certificate with the next CA, and installs every node
// again with certificates of the next CA (still trusting both).
func (s Steps) SignWithNewCA(ctx context.Context) error {
	if err := s.refuseCARotation(); err != nil {
		return err
	}
	k := s.cl.Key()
	cas, err := trust.SetCAPhase(ctx, s.r.CAStore(), k, trust.CAOverlap, trust.CASigning, time.Now())
	if err != nil {
		return s.noRotation(ctx, err)
	}
	if err := s.showCARotation(ctx, cas); err != nil {
		return err
	}
	if cas.Phase != trust.CASigning {
		return step.Skipped("the CA rotation is past the signing phase (%s)", cas.Phase)
	}
	nodes, err := s.clusterNodeNames(ctx)
	if err != nil {
		return err
	}
	for _, n := range nodes {
		if err := trust.RequestRenewal(ctx, s.r.CAStore(), k, n); err != nil {
			return err
		}
	}
	var pending []string
	err = s.waitCA(ctx, "agents to renew their node certificates with the new cluster CA", func() (bool, error) {
		pending = pending[:0]
		for _, n := range nodes {
			p, err := trust.RenewalPending(ctx, s.r, k, n)
			if err != nil {
				return false, err
			}
			if p {
				pending = append(pending, n)
			}
		}
		s.r.Progress(ctx, "agents", fmt.Sprintf("%d of %d renewed their node certificate", len(nodes)-len(pending), len(nodes)))
		return len(pending) == 0, nil
	}, func() string {
		return "not renewed yet: " + strings.Join(pending, ", ") + " (is each agent connected?)"
	})
	if err != nil {
		return err
	}
	installed, err := s.r.RollNodes(ctx, cas.Since, "installing certificates of the new cluster CA")
	if err != nil {
		return err
	}
	s.r.Note(fmt.Sprintf("every agent and node holds certificates of the new cluster CA (installed again: %s)", listOrNone(installed)))
	return nil
}

// TrustOnlyNewCA moves the rotation to the narrowing phase and installs
// every node again trusting the next CA alone: certificates of the old CA
// are refused from here on.
func (s Steps) TrustOnlyNewCA(ctx context.Context) error {
	if err := s.refuseCARotation(); err != nil {
		return err
	}
	cas, err := trust.SetCAPhase(ctx, s.r.CAStore(), s.cl.Key(), trust.CASigning, trust.CANarrowing, time.Now())
	if err != nil {
		return s.noRotation(ctx, err)
	}
	if err := s.showCARotation(ctx, cas); err != nil {
		return err
	}
	installed, err := s.r.RollNodes(ctx, cas.Since, "installing to trust only the new cluster CA")
	if err != nil {
		return err
	}
	s.r.Note("every node trusts only the new cluster CA (installed again: " + listOrNone(installed) + ")")
	return nil
}

// RetireOldCA makes the next CA the cluster's CA and ends the rotation.
func (s Steps) RetireOldCA(ctx context.Context) error {
	k := s.cl.Key()
	cas, err := trust.LoadCAs(ctx, s.r, k)
	if err != nil {
		return err
	}
	if !cas.Rotating() {
		if err := s.showCARotation(ctx, nil); err != nil {
			return err
		}
		return step.Skipped("the rotation was finished already")
	}
	old := cas.Current.Certificate().Subject.CommonName
	if err := trust.FinishCARotation(ctx, s.r.CAStore(), k); err != nil {
		return err
	}
	if err := s.showCARotation(ctx, nil); err != nil {
		return err
	}
	s.r.Event(ctx, "Normal", "CARotated", fmt.Sprintf("the cluster CA is now %q; the old CA %q and every certificate it signed (kubeconfigs issued before the overlap included) are refused",
		cas.Next.Certificate().Subject.CommonName, old))
	s.r.Note("the new cluster CA is the cluster's; the old one is forgotten")
	return nil
}

// showCARotation records where the CA rotation is in status.caRotation
// (nil once it is over).
func (s Steps) showCARotation(ctx context.Context, cas *trust.ClusterCAs) error {
	var st *v1.CARotationStatus
	if cas != nil && cas.Rotating() {
		st = &v1.CARotationStatus{Phase: string(cas.Phase), Since: cas.Since, NewCA: cas.Next.Certificate().Subject.CommonName}
	}
	if reflect.DeepEqual(st, s.cl.Status.CARotation) {
		return nil
	}
	s.cl.Status.CARotation = st
	return s.r.SaveStatus(ctx, "caRotation")
}

// refuseCARotation refuses a CA rotation of a cluster whose certificates
// are not Kiln's.
func (s Steps) refuseCARotation() error {
	switch {
	case !s.r.UsesAgents():
		return failure.Terminal(v1.CodeInvalidParameter, "the %s provider's machines run no Kubernetes: there is no CA to rotate", s.cl.Spec.Provider)
	case s.r.UsesKubeadm():
		return failure.Terminal(v1.CodeInvalidParameter, "the kubeadm distribution's CA is kubeadm's: Kiln does not rotate it")
	}
	return nil
}

// noRotation turns SetCAPhase's error for a cluster with no rotation under
// way into a terminal one that says what to do.
func (s Steps) noRotation(ctx context.Context, err error) error {
	cas, lerr := trust.LoadCAs(ctx, s.r, s.cl.Key())
	if lerr == nil && !cas.Rotating() {
		return failure.Terminal(v1.CodeConflict, "cluster %s has no CA rotation under way: begin one with kiln cluster rotate-certs %s --ca", s.cl.Name, s.cl.Name)
	}
	return err
}

// clusterNodeNames are the names of the cluster's nodes, control plane
// first.
func (s Steps) clusterNodeNames(ctx context.Context) ([]string, error) {
	groups, err := s.r.NodeGroups(ctx)
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
func (s Steps) waitCA(ctx context.Context, what string, done func() (bool, error), why ...func() string) error {
	deadline := time.Now().Add(caRotationTimeout)
	tick := time.NewTicker(s.r.InstructionPoll())
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
		case <-s.r.CancelRequested():
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
