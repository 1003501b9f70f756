package policycheck_test

import (
	"context"
	"strings"
	"testing"

	v1 "kiln.dev/kiln/api/v1"
	"kiln.dev/kiln/internal/backend/check/checktest"
	"kiln.dev/kiln/internal/backend/policycheck"
	"kiln.dev/kiln/internal/store"
)

// TestNetworkPolicyNotEnforced: a cluster on the bridge pod network that
// holds NetworkPolicies says they are not enforced, naming them (five,
// then how many more), with a Warning event; once they are gone the
// condition turns False with a Normal event. A cluster whose pod network
// enforces policies (calico, and the kiln distribution's kube-router here)
// is left alone, and its API is not asked.
func TestNetworkPolicyNotEnforced(t *testing.T) {
	st := checktest.Store(t)
	cluster := func(name, dist, cni string) {
		checktest.Idle(t, st, name, v1.ClusterSpec{Provider: "docker", Distribution: dist, Network: v1.Network{CNI: cni}})
	}
	cluster("bridged", v1.DistroKiln, v1.CNIBridge)
	cluster("enforced", v1.DistroKubeadm, "calico")
	cluster("routed", v1.DistroKiln, v1.CNIKubeRouter)
	condition := func(name string) v1.Condition {
		return checktest.Condition(t, st, name, v1.ConditionNetworkPolicyNotEnforced)
	}

	policies := []string{"a/deny", "b/deny", "c/deny", "d/deny", "e/deny", "f/deny", "g/allow-web"}
	asked := map[string]int{}
	l := policycheck.New(policycheck.Options{Store: st, Policies: func(_ context.Context, cl *store.Cluster) ([]string, error) {
		asked[cl.Name]++
		return policies, nil
	}})
	pass := func() {
		t.Helper()
		if err := l.Periodic().Check.Check(t.Context(), checktest.Get(t, st, "bridged")); err != nil {
			t.Fatal(err)
		}
		for _, name := range []string{"enforced", "routed"} {
			if err := l.Periodic().Check.Check(t.Context(), checktest.Get(t, st, name)); err != nil {
				t.Fatal(err)
			}
		}
	}
	pass()
	c := condition("bridged")
	if c.Status != "True" || !strings.Contains(c.Message, "7 NetworkPolicies (a/deny, b/deny, c/deny, d/deny, e/deny and 2 more) are not enforced") ||
		!strings.Contains(c.Message, "bridge") {
		t.Errorf("condition with 7 policies: %+v", c)
	}
	for _, name := range []string{"enforced", "routed"} {
		if asked[name] != 0 || condition(name).Type != "" {
			t.Errorf("the enforcing cluster %s was looked at (%d) or given the condition", name, asked[name])
		}
	}

	policies = nil
	pass()
	if c := condition("bridged"); c.Status != "False" || c.Reason != "NoNetworkPolicy" {
		t.Errorf("condition with no policy: %+v", c)
	}
	if got := checktest.Events(t, st, "bridged"); strings.Join(got, ", ") != "Warning NetworkPolicyNotEnforcedTrue, Normal NetworkPolicyNotEnforcedFalse" {
		t.Errorf("events %v", got)
	}
}
