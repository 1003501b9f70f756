// Package profilecheck is the backend's periodic look at the clusters a
// profile was applied to: each pack's workloads Ready or not (status.profile
// packs' ready and message), and whether what runs is still what the packs
// apply, as the ProfileDrift condition (True naming the objects changed or
// deleted by hand; kiln cluster reconcile puts them back).
package profilecheck

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	v1 "kiln.dev/kiln/api/v1"
	"kiln.dev/kiln/internal/backend/check"
	"kiln.dev/kiln/internal/packs"
	"kiln.dev/kiln/internal/store"
)

// DefaultInterval is how often every cluster is looked at.
const DefaultInterval = time.Minute

// Store is what the check reads and writes.
type Store interface {
	store.ClusterLister
	check.Writer
	GetProfile(ctx context.Context, project, name string) (*store.Profile, error)
	packs.SecretReader
}

// Checker compares packs.
type Checker interface {
	Check(ctx context.Context, t packs.Target, pk v1.Pack) (packs.Check, error)
}

// Options configure a Loop. Store, Packs and Target are required.
type Options struct {
	check.Base
	Store Store
	Packs Checker
	// Target is the cluster's API, or false when it has none to check
	// (sim, or no endpoint yet).
	Target func(ctx context.Context, cl *store.Cluster) (packs.Target, bool, error)
}

// Loop runs the check.
type Loop struct {
	opts Options
	acts check.Acts
}

// New returns a Loop with defaults filled in.
func New(opts Options) *Loop {
	opts.Base = opts.WithDefaults(DefaultInterval)
	return &Loop{opts: opts, acts: opts.Acts(opts.Store)}
}

// Periodic is the check's shape: what a check.Runner runs.
func (l *Loop) Periodic() check.Periodic {
	return l.opts.Periodic("profile check", l)
}

// CheckAll looks at every cluster once.
func (l *Loop) CheckAll(ctx context.Context) error {
	return check.Pass(ctx, l.opts.Store, nil, l.Periodic())
}

// Check looks at a cluster with a profile applied whose last operation
// succeeded, as read (cl).
func (l *Loop) Check(ctx context.Context, cl *store.Cluster) error {
	if cl.Status.Profile == nil || cl.Status.ProvisioningState != v1.StateSucceeded || len(cl.Status.Profile.Packs) == 0 {
		return nil // nothing applied (a profile without packs, or no Kubernetes)
	}
	t, ok, err := l.opts.Target(ctx, cl)
	if err != nil || !ok {
		return err
	}
	applied := cl.Status.Profile
	prof, err := l.opts.Store.GetProfile(ctx, cl.Project, applied.Name)
	if err != nil {
		return fmt.Errorf("profile %s: %w", applied.Name, err)
	}
	version := prof.At(applied.Version)
	if version == nil {
		return fmt.Errorf("profile %s has no version %d", applied.Name, applied.Version)
	}
	// Manifests are built with the secrets they name; what this says of
	// the packs (messages, the condition, its event) has their values
	// redacted.
	var etags map[string]string
	if t.Secrets, etags, err = packs.ReadSecrets(ctx, l.opts.Store, cl.Project, version.Packs); err != nil {
		return err
	}
	next := *applied
	next.Packs = slices.Clone(applied.Packs)
	var drift []string
	for i, st := range next.Packs {
		if st.State != v1.PackApplied {
			continue
		}
		pk := findPack(version, st.Name)
		if pk == nil {
			continue
		}
		if pk.ChartName() == "" && packs.Digest(*pk, etags) != st.Digest {
			// A secret it names changed since it was applied: its objects
			// are compared once the change is applied (an update, a
			// reconcile), not with values they never had.
			continue
		}
		c, err := l.opts.Packs.Check(ctx, t, *pk)
		if err != nil {
			return fmt.Errorf("pack %s: %s", st.Name, t.Redact(err.Error()))
		}
		for _, d := range c.Drift {
			drift = append(drift, "pack "+st.Name+": "+t.Redact(d))
		}
		next.Packs[i].Ready = len(c.NotReady) == 0
		if !next.Packs[i].Ready {
			next.Packs[i].Message = t.Redact("not Ready: " + strings.Join(c.NotReady, ", "))
		} else if strings.HasPrefix(st.Message, "not Ready: ") {
			next.Packs[i].Message = ""
		}
	}
	want := v1.Condition{Type: v1.ConditionProfileDrift, Status: "False", Reason: "AsApplied",
		Message: fmt.Sprintf("what runs is what profile %s:%d applies", applied.Name, applied.Version)}
	if len(drift) > 0 {
		want.Status, want.Reason = "True", "ChangedByHand"
		want.Message = fmt.Sprintf("changed since profile %s:%d was applied: %s; kiln cluster reconcile %s puts it back",
			applied.Name, applied.Version, strings.Join(drift, "; "), cl.Name)
	}
	conds, changed := v1.SetCondition(cl.Status.Conditions, want, l.opts.Now())
	if !changed && slices.EqualFunc(next.Packs, applied.Packs, func(a, b v1.PackStatus) bool {
		return a.Ready == b.Ready && a.Message == b.Message
	}) {
		return nil
	}
	up := *cl
	up.Status.Conditions, up.Status.Profile = conds, &next
	written, err := l.acts.SetStatus(ctx, cl, &up)
	if err != nil || !written {
		return err // not written: changed meanwhile, the next pass looks again
	}
	if changed {
		typ := "Normal"
		if want.Status == "True" {
			typ = "Warning"
		}
		l.acts.Event(ctx, cl, typ, "ProfileDrift"+want.Status, "", want.Message)
	}
	return nil
}

func findPack(p *v1.Profile, name string) *v1.Pack {
	for i := range p.Packs {
		if p.Packs[i].Name == name {
			return &p.Packs[i]
		}
	}
	return nil
}
