// Package policycheck is the backend's periodic look at the NetworkPolicies
// of the clusters whose pod network enforces none (the kiln distribution's
// bridge network): a NetworkPolicy there is accepted by the API and
// changes nothing, so the cluster says so, as the NetworkPolicyNotEnforced
// condition (True naming the policies, False while there are none) and an
// event when it turns.
package policycheck

import (
	"context"
	"fmt"
	"strings"
	"time"

	v1 "kiln.dev/kiln/api/v1"
	"kiln.dev/kiln/internal/backend/check"
	"kiln.dev/kiln/internal/distro"
	"kiln.dev/kiln/internal/store"
)

// DefaultInterval is how often every cluster is looked at.
const DefaultInterval = time.Minute

// Store is what the check reads and writes.
type Store interface {
	store.ClusterLister
	check.Writer
}

// Options configure a Loop. Store and Policies are required.
type Options struct {
	check.Base
	Store Store
	// Policies names the cluster's NetworkPolicies ("namespace/name").
	Policies func(ctx context.Context, cl *store.Cluster) ([]string, error)
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
	return l.opts.Periodic("network policy check", l)
}

// shown is how many policies the condition's message names.
const shown = 5

// Check looks at an idle cluster, as read (cl).
func (l *Loop) Check(ctx context.Context, cl *store.Cluster) error {
	in := distro.Installed(&cl.Spec) // status.installed, as the API shows it
	if in.EnforcesNetworkPolicy() || cl.Status.Endpoint == "" {
		return nil
	}
	names, err := l.opts.Policies(ctx, cl)
	if err != nil {
		return fmt.Errorf("list NetworkPolicies: %w", err)
	}
	cni := in.CNI
	want := v1.Condition{Type: v1.ConditionNetworkPolicyNotEnforced, Status: "False", Reason: "NoNetworkPolicy",
		Message: fmt.Sprintf("the cluster holds no NetworkPolicy; its pod network (%s) would not enforce one", cni)}
	if len(names) > 0 {
		listed := names[:min(shown, len(names))]
		more := ""
		if len(names) > shown {
			more = fmt.Sprintf(" and %d more", len(names)-shown)
		}
		want.Status, want.Reason = "True", "PodNetworkDoesNotEnforce"
		want.Message = fmt.Sprintf("%d NetworkPolicies (%s%s) are not enforced: the %s pod network lets every pod reach every other; "+
			"pods are not isolated until the cluster runs a pod network that enforces NetworkPolicy",
			len(names), strings.Join(listed, ", "), more, cni)
	}
	_, written, err := l.acts.SetCondition(ctx, cl, want, l.opts.Now())
	if err != nil || !written {
		return err // as it was, or changed meanwhile: the next pass looks again
	}
	typ := "Normal"
	if want.Status == "True" {
		typ = "Warning"
	}
	l.acts.Event(ctx, cl, typ, v1.ConditionNetworkPolicyNotEnforced+want.Status, "", want.Message)
	return nil
}
