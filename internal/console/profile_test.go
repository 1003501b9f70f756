package console_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	v1 "kiln.dev/kiln/api/v1"
	"kiln.dev/kiln/internal/store"
	"kiln.dev/kiln/test/waitfor"
)

// The cluster page shows the profile applied, a row per pack (version,
// chart or manifests, release revision, state, Ready, the message), and a
// ProfileDrift condition that is True as a warning naming what changed.
func TestClusterPageShowsPacks(t *testing.T) {
	e := newEnv(t, true) // the sim cluster's create runs: only then is its status written from outside
	b := e.browser()
	b.login(e.user("vera", v1.RoleViewer))
	e.createCluster("shop", v1.ClusterSpec{Provider: "sim"})
	put := func() error {
		cl, err := e.store.GetCluster(t.Context(), store.Key{Project: "default", Name: "shop"})
		if err != nil {
			return err
		}
		cl.Status.Profile = &v1.ProfileStatus{Name: "base", Version: 2, Packs: []v1.PackStatus{
			{Name: "storage", Version: "0.0.30", Chart: "local-path", Namespace: "kiln-storage", Revision: 3, State: v1.PackApplied, Ready: true},
			{Name: "config", Version: "1", Namespace: "infra", State: v1.PackApplied, Message: "not Ready: Deployment infra/keeper"},
		}}
		cl.Status.Conditions = []v1.Condition{{Type: v1.ConditionProfileDrift, Status: "True", Reason: "ChangedByHand",
			Message: "pack config: Deployment infra/keeper deleted"}}
		return e.store.PutClusterStatus(t.Context(), cl, store.Cond{IfMatch: cl.ETag})
	}
	// Written from outside once the create has ended (a worker writes it until then).
	waitfor.Cond(t, "the status written after the create", 10*time.Second, func() (bool, error) {
		err := put()
		if errors.Is(err, store.ErrPreconditionFailed) {
			return false, waitfor.NotYet(err)
		}
		return err == nil, err
	})

	p := b.get("/projects/default/clusters/shop")
	text, ok := p.byID(t, "packs")
	if !ok {
		t.Fatalf("the cluster page has no #packs table:\n%s", p.body)
	}
	for _, want := range []string{"Profile base:2", "storage 0.0.30 local-path kiln-storage 3 Applied yes",
		"config 1 manifests infra Applied no not Ready: Deployment infra/keeper"} {
		if !strings.Contains(strings.Join(strings.Fields(text), " "), want) {
			t.Errorf("#packs says %q; want %q in it", text, want)
		}
	}
	if !strings.Contains(p.body, `<span class="state warn">ProfileDrift: True</span> ChangedByHand: pack config: Deployment infra/keeper deleted`) {
		t.Errorf("the page does not show ProfileDrift True as a warning naming the object:\n%s", p.body)
	}
}
