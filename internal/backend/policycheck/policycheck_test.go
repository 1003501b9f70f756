package policycheck_test

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	v1 "kiln.dev/kiln/api/v1"
	"kiln.dev/kiln/internal/backend/policycheck"
	"kiln.dev/kiln/internal/store"
	"kiln.dev/kiln/internal/store/sqlite"
)

// cluster writes an idle cluster named name of distribution dist and pod
// network cni, in a real SQLite store.
func cluster(t *testing.T, st store.Store, name, dist, cni string) {
	t.Helper()
	ctx := t.Context()
	cl := &store.Cluster{Project: "p", Name: name, Spec: v1.ClusterSpec{Provider: "docker", Distribution: dist, Network: v1.Network{CNI: cni}}}
	cl.Status.ProvisioningState = v1.StateCreating
	op := &store.Operation{ID: "op-" + name, Project: "p", Cluster: name, Kind: v1.KindCreate, Status: v1.OpInProgress, StartTime: time.Now()}
	if err := st.BeginOperation(ctx, cl, op, store.Cond{}); err != nil {
		t.Fatal(err)
	}
	claimed, err := st.ClaimCluster(ctx, "test", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	fence := claimed.Lease.Fence()
	claimed.Status.ProvisioningState, claimed.Status.Endpoint = v1.StateSucceeded, "10.0.0.1:6443"
	if err := st.PutClusterStatus(ctx, claimed, store.Cond{Fence: &fence}); err != nil {
		t.Fatal(err)
	}
	if err := st.ReleaseLease(ctx, claimed.Key(), fence); err != nil {
		t.Fatal(err)
	}
}

// TestNetworkPolicyNotEnforced: a cluster on the bridge pod network that
// holds NetworkPolicies says they are not enforced, naming them (five,
// then how many more), with a Warning event; once they are gone the
// condition turns False with a Normal event. A cluster whose pod network
// enforces policies (calico here) is left alone, and its API is not asked.
func TestNetworkPolicyNotEnforced(t *testing.T) {
	st, err := sqlite.Open(t.Context(), filepath.Join(t.TempDir(), "kiln.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	if err := st.PutProject(t.Context(), &v1.Project{Name: "p", ID: "/v1/projects/p"}, store.Cond{}); err != nil {
		t.Fatal(err)
	}
	cluster(t, st, "bridged", v1.DistroKiln, v1.CNIBridge)
	cluster(t, st, "enforced", v1.DistroKubeadm, "calico")

	policies := []string{"a/deny", "b/deny", "c/deny", "d/deny", "e/deny", "f/deny", "g/allow-web"}
	asked := map[string]int{}
	l := policycheck.New(policycheck.Options{Store: st, Policies: func(_ context.Context, cl *store.Cluster) ([]string, error) {
		asked[cl.Name]++
		return policies, nil
	}})
	pass := func() {
		t.Helper()
		if err := l.Periodic().Check.Check(t.Context(), mustGet(t, st, "bridged")); err != nil {
			t.Fatal(err)
		}
		if err := l.Periodic().Check.Check(t.Context(), mustGet(t, st, "enforced")); err != nil {
			t.Fatal(err)
		}
	}
	pass()
	c := condition(t, st, "bridged")
	if c.Status != "True" || !strings.Contains(c.Message, "7 NetworkPolicies (a/deny, b/deny, c/deny, d/deny, e/deny and 2 more) are not enforced") ||
		!strings.Contains(c.Message, "bridge") {
		t.Errorf("condition with 7 policies: %+v", c)
	}
	if asked["enforced"] != 0 || condition(t, st, "enforced").Type != "" {
		t.Errorf("the calico cluster was looked at (%d) or given the condition", asked["enforced"])
	}

	policies = nil
	pass()
	if c := condition(t, st, "bridged"); c.Status != "False" || c.Reason != "NoNetworkPolicy" {
		t.Errorf("condition with no policy: %+v", c)
	}
	evs, _, err := st.ListEvents(t.Context(), store.Key{Project: "p", Name: "bridged"}, store.Page{})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, e := range evs {
		got = append(got, e.Type+" "+e.Reason)
	}
	if strings.Join(got, ", ") != "Warning NetworkPolicyNotEnforcedTrue, Normal NetworkPolicyNotEnforcedFalse" {
		t.Errorf("events %v", got)
	}
}

func mustGet(t *testing.T, st store.Store, name string) *store.Cluster {
	t.Helper()
	cl, err := st.GetCluster(t.Context(), store.Key{Project: "p", Name: name})
	if err != nil {
		t.Fatal(err)
	}
	return cl
}

func condition(t *testing.T, st store.Store, name string) v1.Condition {
	t.Helper()
	for _, c := range mustGet(t, st, name).Status.Conditions {
		if c.Type == v1.ConditionNetworkPolicyNotEnforced {
			return c
		}
	}
	return v1.Condition{}
}
