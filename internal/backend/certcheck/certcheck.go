// Package certcheck is the backend's periodic look at the certificates of
// every cluster whose nodes Kiln installs: status.certificates (the nearest
// expiry, and whose it is), the CertificatesExpiring condition, and a
// rotate-certificates operation begun before the nodes' certificates expire
// (unless the cluster's spec.certificateRenewal is "manual", or its
// distribution is kubeadm, whose certificates kubeadm renews).
package certcheck

import (
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"slices"
	"time"

	v1 "kiln.dev/kiln/api/v1"
	"kiln.dev/kiln/internal/backend/check"
	"kiln.dev/kiln/internal/store"
)

// Defaults.
const (
	DefaultInterval = time.Hour
	// DefaultWarn is how long before an expiry the condition warns.
	DefaultWarn = 30 * 24 * time.Hour
)

// Store is what the check reads and writes.
type Store interface {
	store.ClusterLister
	check.Writer
	ListNodes(ctx context.Context, k store.Key, pg store.Page) ([]*store.Node, string, error)
	ListEvents(ctx context.Context, k store.Key, pg store.Page) ([]*store.Event, string, error)
}

// Options configure a Loop. Store, Watched, Steps, TTL and CA are
// required.
type Options struct {
	check.Base
	Store Store
	// CA is the cluster CA's certificate (trust.LoadCA); an error that
	// wraps store.ErrNotFound when the cluster has none.
	CA func(ctx context.Context, k store.Key) (*x509.Certificate, error)
	// Watched reports whether Kiln installs the nodes of a provider's
	// clusters (not sim's, which run no Kubernetes).
	Watched func(provider string) bool
	// TTL is the lifetime of the certificates a cluster's node installs
	// issue (spec.certificateTTLDays, or a test setting): renewal begins
	// when a third of it is left, or Warn, whichever is sooner.
	TTL  func(cl *store.Cluster) time.Duration
	Warn time.Duration // DefaultWarn when 0
}

// Loop runs the check.
type Loop struct {
	opts Options
	acts check.Acts
}

// New returns a Loop with defaults filled in.
func New(opts Options) *Loop {
	opts.Base = opts.WithDefaults(DefaultInterval)
	if opts.Warn <= 0 {
		opts.Warn = DefaultWarn
	}
	return &Loop{opts: opts, acts: opts.Acts(opts.Store)}
}

// Periodic is the check's shape: what a check.Runner runs.
func (l *Loop) Periodic() check.Periodic {
	return l.opts.Periodic("certificate check", l)
}

// CheckAll checks every cluster once.
func (l *Loop) CheckAll(ctx context.Context) error {
	return check.Pass(ctx, l.opts.Store, nil, l.Periodic())
}

// Check looks at one cluster as read (cl) and acts on what it finds.
func (l *Loop) Check(ctx context.Context, cl *store.Cluster) error {
	if cl.Status.ProvisioningState != v1.StateSucceeded || !l.opts.Watched(cl.Spec.Provider) {
		return nil
	}
	nearest, nodes, err := l.nearest(ctx, cl)
	if err != nil || nearest == nil {
		return err
	}
	now := l.opts.Now()
	// The kubeadm distribution's certificates are kubeadm's: tracked and
	// warned of, renewed on the nodes (kubeadm certs renew all).
	kubeadm := cl.Spec.Distribution == v1.DistroKubeadm
	if nodes != nil && cl.Spec.CertificateRenewal != v1.CertificateRenewalManual && !kubeadm {
		renewAt := nodes.NotAfter.Add(-min(l.opts.Warn, l.opts.TTL(cl)/3))
		if !now.Before(renewAt) {
			return l.renew(ctx, cl, nodes, now)
		}
	}
	return l.record(ctx, cl, nearest, now)
}

// nearest is the cluster's certificate that expires first (its nodes' or
// its CA), and the first of its nodes'; nil when none is known.
func (l *Loop) nearest(ctx context.Context, cl *store.Cluster) (all, nodes *v1.CertificatesStatus, err error) {
	err = store.Each(func(pg store.Page) ([]*store.Node, string, error) { return l.opts.Store.ListNodes(ctx, cl.Key(), pg) },
		func(n *store.Node) error {
			if t := n.CertificatesExpireAt; t != nil && (nodes == nil || t.Before(nodes.NotAfter)) {
				nodes = &v1.CertificatesStatus{NotAfter: *t, Of: "node " + n.Name}
			}
			return nil
		})
	if err != nil {
		return nil, nil, fmt.Errorf("list nodes: %w", err)
	}
	all = nodes
	ca, err := l.opts.CA(ctx, cl.Key())
	switch {
	case errors.Is(err, store.ErrNotFound):
	case err != nil:
		return nil, nil, err
	case all == nil || ca.NotAfter.Before(all.NotAfter):
		all = &v1.CertificatesStatus{NotAfter: ca.NotAfter, Of: "the cluster CA"}
	}
	return all, nodes, nil
}

// record keeps status.certificates and the CertificatesExpiring condition,
// writing only a change.
func (l *Loop) record(ctx context.Context, cl *store.Cluster, nearest *v1.CertificatesStatus, now time.Time) error {
	nearest.NotAfter = nearest.NotAfter.UTC().Truncate(time.Second)
	want := v1.Condition{Type: v1.ConditionCertificatesExpiring, Status: "False", Reason: "Valid",
		Message: fmt.Sprintf("the first certificate to expire is %s's, at %s", nearest.Of, nearest.NotAfter.Format(time.RFC3339))}
	if left := nearest.NotAfter.Sub(now); left < l.opts.Warn {
		want.Status, want.Reason = "True", "ExpiresSoon"
		want.Message = fmt.Sprintf("%s's certificates expire at %s, in %s: ", nearest.Of, nearest.NotAfter.Format(time.RFC3339), left.Round(time.Minute))
		switch {
		case cl.Spec.Distribution == v1.DistroKubeadm:
			want.Message += "renew them on each control-plane node with kubeadm certs renew all"
		case nearest.Of == "the cluster CA":
			want.Message += "replace it with kiln cluster rotate-certs " + cl.Name + " --ca, then --ca --finish"
		default:
			want.Message += "renew them with kiln cluster rotate-certs " + cl.Name
		}
	}
	conds, changed := v1.SetCondition(cl.Status.Conditions, want, now)
	long, err := l.longLived(ctx, cl)
	if err != nil {
		return err
	}
	if long != nil {
		var c bool
		conds, c = v1.SetCondition(conds, *long, now)
		changed = changed || c
	}
	if !changed && cl.Status.Certificates != nil && *cl.Status.Certificates == *nearest {
		return nil
	}
	next := *cl
	next.Status.Conditions, next.Status.Certificates = conds, nearest
	written, err := l.acts.SetStatus(ctx, cl, &next)
	if err != nil {
		return fmt.Errorf("write status.certificates: %w", err)
	}
	if written && changed && want.Status == "True" {
		l.acts.Event(ctx, cl, "Warning", "CertificatesExpiring", "", want.Message)
	}
	return nil
}

// renew begins a rotate-certificates operation, conditional on the cluster
// being as read: a user's change wins over it.
func (l *Loop) renew(ctx context.Context, cl *store.Cluster, nodes *v1.CertificatesStatus, now time.Time) error {
	next := *cl
	op := &store.Operation{Kind: v1.KindRotateCertificates}
	_, err := l.acts.Begin(ctx, &next, cl.ETag, op, now, func() {
		msg := fmt.Sprintf("%s's certificates expire at %s: renewing every node's (operation %s)",
			nodes.Of, nodes.NotAfter.UTC().Format(time.RFC3339), op.ID)
		l.opts.Logger.Info("certificate check: renewing", "cluster", cl.Key().String(), "operation", op.ID, "first", nodes.Of)
		l.acts.Event(ctx, cl, "Normal", "CertificatesRenewing", op.ID, msg)
	})
	return err
}

// longLived is the LongLivedKubeconfigs condition the cluster should have:
// True while kubeconfigs of the kind Kiln no longer issues (the
// KubeconfigIssued events: a year-long system:masters certificate each)
// were issued with the cluster's CA as it is now; False once a CA rotation
// replaced it, for a cluster that had the condition; nil (none) for a
// cluster that never had such a kubeconfig.
func (l *Loop) longLived(ctx context.Context, cl *store.Cluster) (*v1.Condition, error) {
	ca, err := l.opts.CA(ctx, cl.Key())
	if errors.Is(err, store.ErrNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var n int
	var last *store.Event
	err = store.Each(func(pg store.Page) ([]*store.Event, string, error) { return l.opts.Store.ListEvents(ctx, cl.Key(), pg) },
		func(e *store.Event) error {
			if e.Reason == "KubeconfigIssued" && !e.Time.Before(ca.NotBefore) {
				n++
				if last == nil || e.Time.After(last.Time) {
					last = e
				}
			}
			return nil
		})
	if err != nil {
		return nil, fmt.Errorf("list events: %w", err)
	}
	if n == 0 {
		if !slices.ContainsFunc(cl.Status.Conditions, func(c v1.Condition) bool { return c.Type == v1.ConditionLongLivedKubeconfigs }) {
			return nil, nil
		}
		return &v1.Condition{Type: v1.ConditionLongLivedKubeconfigs, Status: "False", Reason: "Retired",
			Message: "no kubeconfig issued before people's own credentials is signed by the cluster's CA"}, nil
	}
	return &v1.Condition{Type: v1.ConditionLongLivedKubeconfigs, Status: "True", Reason: "IssuedWithThisCA",
		Message: fmt.Sprintf("%d year-long system:masters kubeconfig(s) were issued with the cluster's CA, the last at %s (%s); "+
			"they work until the CA is replaced: kiln cluster rotate-certs %s --ca, then --ca --finish",
			n, last.Time.UTC().Format(time.RFC3339), last.Message, cl.Name)}, nil
}
