// Package profile is the step family that applies a cluster's profile
// (apply-profile): the packs of its profile version, applied, removed and
// rolled back through a PackApplier (package packs).
package profile

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	v1 "kiln.dev/kiln/api/v1"
	"kiln.dev/kiln/internal/failure"
	"kiln.dev/kiln/internal/packs"
	"kiln.dev/kiln/internal/plan/clusterapi"
	"kiln.dev/kiln/internal/plan/step"
	"kiln.dev/kiln/internal/store"
	"kiln.dev/kiln/internal/trust"
)

// Run is what the profile step needs of its run.
type Run interface {
	step.Context
	// RunsKubernetes reports whether the cluster has a Kubernetes to
	// apply packs to (not the sim provider's).
	RunsKubernetes() bool
	// Packs applies packs; nil records a version as applied without
	// applying anything.
	Packs() PackApplier
	// Endpoint is the cluster's API endpoint (host:port).
	Endpoint(ctx context.Context) (string, error)
	GetProfile(ctx context.Context, project, name string) (*store.Profile, error)
	packs.SecretReader // the project's secrets the packs name
	trust.SecretReader // the cluster's CAs, for an admin certificate
}

// Steps are the profile family's steps of one run.
type Steps struct{ r Run }

// New returns the profile steps of the run r.
func New(r Run) Steps { return Steps{r: r} }

// PackApplier applies, removes and rolls back packs (package packs).
type PackApplier interface {
	Apply(ctx context.Context, t packs.Target, pk v1.Pack) (v1.PackStatus, error)
	Remove(ctx context.Context, t packs.Target, pk v1.Pack) error
	Rollback(ctx context.Context, t packs.Target, st v1.PackStatus) error
}

// Apply (apply-profile) brings the cluster's packs to its profile version
// (spec.profile; version 0 is the latest published): each pack in install
// order applied unless status.profile says it is applied as it is (so a
// retry resumes at the pack that failed), then the packs the version no
// longer has removed, in reverse order. status.profile is saved after each
// pack. When a pack fails on a move from another version, the packs this
// run moved are put back as they were (rolled back, or removed when new)
// and the operation fails naming the pack; on a first apply the packs
// already applied stay. The values of the project's secrets the packs
// name never reach status.profile, events or the operation's error:
// each is redacted (packs.Target.Redact) before it is stored.
func (s Steps) Apply(ctx context.Context) error {
	cl := s.r.Cluster()
	ref, applied := cl.Spec.Profile, cl.Status.Profile
	if ref.Name == "" && applied == nil {
		return step.Skipped("the cluster has no profile")
	}
	var want *v1.Profile
	if ref.Name != "" {
		var err error
		if want, err = s.version(ctx, ref.Name, ref.Version); err != nil {
			return err
		}
	}
	if !s.r.RunsKubernetes() || s.r.Packs() == nil {
		// No Kubernetes to apply to (sim): the version is recorded as applied.
		if want == nil {
			cl.Status.Profile = nil
		} else {
			cl.Status.Profile = &v1.ProfileStatus{Name: want.Name, Version: want.Version, Packs: []v1.PackStatus{}}
		}
		if err := s.r.SaveStatus(ctx, "profile"); err != nil {
			return err
		}
		return step.Skipped("the %s provider's clusters run no Kubernetes: nothing is applied, profile version recorded", cl.Spec.Provider)
	}
	var before *v1.Profile // the version applied before, when another
	if applied != nil && (want == nil || applied.Name != want.Name || applied.Version != want.Version) {
		var err error
		before, err = s.version(ctx, applied.Name, applied.Version)
		if err != nil && !errors.Is(err, store.ErrNotFound) {
			return err
		}
	}
	t, etags, err := s.packTarget(ctx, want, before)
	if err != nil {
		return err
	}
	next := &v1.ProfileStatus{Packs: []v1.PackStatus{}}
	var order []v1.Pack
	if want != nil {
		next.Name, next.Version = want.Name, want.Version
		order = installOrder(want.Packs)
	}
	var moved []movedPack // the packs this run changed
	for i, pk := range order {
		digest := packs.Digest(pk, etags)
		was := packStatus(applied, pk.Name)
		if was != nil && was.Digest == digest && was.State == v1.PackApplied && s.r.Operation().Kind != v1.KindReconcile {
			next.Packs = append(next.Packs, *was)
			continue
		}
		s.r.Progress(ctx, "pack", fmt.Sprintf("%d/%d %s: applying %s", i+1, len(order), pk.Name, packWhat(pk)))
		st, err := s.r.Packs().Apply(ctx, t, pk)
		st.Digest, st.Message = digest, t.Redact(st.Message)
		if err != nil {
			msg := t.Redact(err.Error())
			if before != nil || applied != nil && applied.Name == next.Name && applied.Version != next.Version {
				undo := t.Redact(s.undoPacks(ctx, t, moved, before))
				cl.Status.Profile = applied // what runs again
				if serr := s.r.SaveStatus(ctx, "profile"); serr != nil {
					return serr
				}
				s.r.Event(ctx, "Warning", "PackFailed", msg+"; "+undo)
				return failure.Terminal(v1.CodePackFailed, "%s; %s", msg, undo)
			}
			next.Packs = append(next.Packs, st)
			cl.Status.Profile = next
			if serr := s.r.SaveStatus(ctx, "profile"); serr != nil {
				return serr
			}
			s.r.Event(ctx, "Warning", "PackFailed", msg)
			return failure.Terminal(v1.CodePackFailed, "%s", msg)
		}
		moved = append(moved, movedPack{was: was, now: pk})
		next.Packs = append(next.Packs, st)
		s.r.Event(ctx, "Normal", "PackApplied", fmt.Sprintf("pack %s (%s) applied%s", pk.Name, packWhat(pk), revisionNote(st)))
		// Saved as it goes: a worker that dies resumes after this pack.
		partial := *next
		partial.Packs = append(slices.Clone(next.Packs), remainingApplied(applied, order[i+1:])...)
		cl.Status.Profile = &partial
		if err := s.r.SaveStatus(ctx, "profile"); err != nil {
			return err
		}
	}
	// Packs no longer in the profile go, in reverse install order.
	if applied != nil {
		for _, st := range slices.Backward(applied.Packs) {
			if packStatus(next, st.Name) != nil {
				continue
			}
			pk := removedPack(before, st)
			s.r.Progress(ctx, "pack", "removing "+st.Name)
			if err := s.r.Packs().Remove(ctx, t, pk); err != nil {
				msg := t.Redact(err.Error())
				return failure.Retryable(v1.CodePackFailed, errors.New(msg), "remove pack %s: %s", st.Name, msg)
			}
			s.r.Event(ctx, "Normal", "PackRemoved", fmt.Sprintf("pack %s removed (not in profile %s:%d)", st.Name, next.Name, next.Version))
		}
	}
	if want == nil {
		next = nil
	}
	cl.Status.Profile = next
	if err := s.r.SaveStatus(ctx, "profile"); err != nil {
		return err
	}
	if next == nil {
		s.r.Note("profile removed")
		return nil
	}
	s.r.Note(fmt.Sprintf("profile %s:%d applied: %d pack(s)", next.Name, next.Version, len(next.Packs)))
	return nil
}

// movedPack is a pack a run changed: was is its status before (nil: new).
type movedPack struct {
	was *v1.PackStatus
	now v1.Pack
}

// undoPacks puts back the packs a failed move changed, last first (a chart
// rolled back to its revision before, a manifests pack applied as the
// version before had it, a new pack removed) and says what it did.
func (s Steps) undoPacks(ctx context.Context, t packs.Target, moved []movedPack, before *v1.Profile) string {
	if len(moved) == 0 {
		return "no other pack had changed"
	}
	var done, failed []string
	for _, m := range slices.Backward(moved) {
		var err error
		switch {
		case m.was == nil:
			err = s.r.Packs().Remove(ctx, t, m.now)
		case m.was.Revision > 0:
			err = s.r.Packs().Rollback(ctx, t, *m.was)
		default:
			if pk := findPack(before, m.now.Name); pk != nil {
				_, err = s.r.Packs().Apply(ctx, t, *pk)
			}
		}
		if err != nil {
			failed = append(failed, fmt.Sprintf("%s (%v)", m.now.Name, err))
		} else {
			done = append(done, m.now.Name)
		}
	}
	msg := fmt.Sprintf("the packs it had changed are as they were: %s", strings.Join(done, ", "))
	if len(failed) > 0 {
		msg += "; could not put back: " + strings.Join(failed, "; ")
	}
	return msg
}

// removedPack is the definition of an applied pack the wanted version does
// not have: the version before's, or what its status says (a chart's
// release is uninstalled by name).
func removedPack(before *v1.Profile, st v1.PackStatus) v1.Pack {
	if pk := findPack(before, st.Name); pk != nil {
		return *pk
	}
	return v1.Pack{Name: st.Name, Version: st.Version, Chart: st.Chart, Namespace: st.Namespace}
}

// version reads version n of a profile (0: the latest published).
func (s Steps) version(ctx context.Context, name string, n int) (*v1.Profile, error) {
	project := s.r.Cluster().Project
	p, err := s.r.GetProfile(ctx, project, name)
	if errors.Is(err, store.ErrNotFound) {
		return nil, failure.Terminal(v1.CodeInvalidParameter, "profile %q does not exist in project %q", name, project)
	}
	if err != nil {
		return nil, err
	}
	v := p.LatestPublished()
	if n != 0 {
		v = p.At(n)
	}
	if v == nil || !v.Published {
		return nil, failure.Terminal(v1.CodeInvalidParameter, "profile %s:%d is not a published version", name, n)
	}
	return v, nil
}

// packTarget is the cluster's API as an admin whose certificate lasts an
// hour, the fields pack values may name, and the project's secrets that
// the packs of versions name (only those: the version to apply, and the
// one applied before, whose packs may be put back or removed), with each
// secret's etag by name for packs.Digest.
func (s Steps) packTarget(ctx context.Context, versions ...*v1.Profile) (packs.Target, map[string]string, error) {
	cl := s.r.Cluster()
	endpoint, err := s.r.Endpoint(ctx)
	if err != nil {
		return packs.Target{}, nil, fmt.Errorf("find endpoint: %w", err)
	}
	cfg, err := clusterapi.RESTConfig(ctx, s.r, cl.Key(), endpoint, "kiln:packs")
	if err != nil {
		return packs.Target{}, nil, err
	}
	var pks []v1.Pack
	for _, v := range versions {
		if v != nil {
			pks = append(pks, v.Packs...)
		}
	}
	secrets, etags, err := packs.ReadSecrets(ctx, s.r, cl.Project, pks)
	if err != nil {
		return packs.Target{}, nil, err
	}
	return packs.Target{Config: cfg, Project: cl.Project, Fields: packs.ClusterFields(cl.Name, &cl.Spec), Secrets: secrets}, etags, nil
}

// installOrder is packs by Order, ties in list order.
func installOrder(ps []v1.Pack) []v1.Pack {
	out := slices.Clone(ps)
	slices.SortStableFunc(out, func(a, b v1.Pack) int { return cmp.Compare(a.Order, b.Order) })
	return out
}

func packWhat(pk v1.Pack) string {
	if c := pk.ChartName(); c != "" {
		return "chart " + c + " " + pk.Version
	}
	return "manifests " + pk.Version
}

func revisionNote(st v1.PackStatus) string {
	if st.Revision > 0 {
		return fmt.Sprintf(", release revision %d", st.Revision)
	}
	return ""
}

func packStatus(ps *v1.ProfileStatus, name string) *v1.PackStatus {
	if ps == nil {
		return nil
	}
	for i := range ps.Packs {
		if ps.Packs[i].Name == name {
			return &ps.Packs[i]
		}
	}
	return nil
}

func findPack(p *v1.Profile, name string) *v1.Pack {
	if p == nil {
		return nil
	}
	for i := range p.Packs {
		if p.Packs[i].Name == name {
			return &p.Packs[i]
		}
	}
	return nil
}

// remainingApplied are the packs of applied among rest (not yet reached in
// this run), as status.profile had them.
func remainingApplied(applied *v1.ProfileStatus, rest []v1.Pack) []v1.PackStatus {
	var out []v1.PackStatus
	for _, pk := range rest {
		if st := packStatus(applied, pk.Name); st != nil {
			out = append(out, *st)
		}
	}
	return out
}
