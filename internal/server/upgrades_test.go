package server_test

import (
	"net/http"
	"testing"

	"github.com/google/go-cmp/cmp"

	v1 "kiln.dev/kiln/api/v1"
	"kiln.dev/kiln/internal/store"
)

// GET .../upgrades lists the versions the provider offers and those a
// change of spec.kubernetesVersion is accepted for; a PUT to each is
// accepted.
func TestClusterUpgrades(t *testing.T) {
	h := newHarness(t, nil)
	h.project("p")
	const path = "/v1/projects/p/clusters/c"
	_, opID := h.createCluster("p", "c", `{"spec": {"provider": "sim", "kubernetesVersion": "v1.34.8"}}`)
	h.finish(h.claim(), opID, v1.OpSucceeded, nil)

	var got v1.ClusterUpgrades
	h.must(http.StatusOK, "GET", path+"/upgrades", "").decode(t, &got)
	want := v1.ClusterUpgrades{KubernetesVersion: "v1.34.8", OfferedBy: "the sim provider",
		Offered: []string{"v1.34.8", "v1.35.5", "v1.36.3"}, Upgrades: []string{"v1.35.5"}}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("upgrades (-want +got):\n%s", diff)
	}
	// What it offers is accepted; what it leaves out is refused.
	r := h.must(http.StatusBadRequest, "PATCH", path, `{"spec": {"kubernetesVersion": "v1.36.3"}}`,
		"Content-Type: application/merge-patch+json")
	if e := r.errorBody(t); e.Target != "spec.kubernetesVersion" {
		t.Errorf("two minors up: %+v", e)
	}
	h.must(http.StatusAccepted, "PATCH", path, `{"spec": {"kubernetesVersion": "v1.35.5"}}`,
		"Content-Type: application/merge-patch+json")

	// The newest version offered: nothing to go to, and why.
	h.createCluster("p", "new", `{"spec": {"provider": "sim", "kubernetesVersion": "v1.36.3"}}`)
	h.must(http.StatusOK, "GET", "/v1/projects/p/clusters/new/upgrades", "").decode(t, &got)
	if len(got.Upgrades) != 0 || got.Upgrades == nil ||
		got.Message != "the sim provider offers no Kubernetes version newer than v1.36.3" {
		t.Errorf("newest: %+v", got)
	}

	// Edge hosts with Kubernetes installed are not upgraded in place.
	h.createCluster("p", "e", `{"spec": {"provider": "edge", "kubernetesVersion": "v1.35.4"}}`)
	if err := h.store.PutNode(t.Context(), &store.Node{Project: "p", Node: v1.Node{Name: "host-a", Cluster: "e", State: v1.NodeReady}}, store.Cond{}); err != nil {
		t.Fatal(err)
	}
	h.must(http.StatusOK, "GET", "/v1/projects/p/clusters/e/upgrades", "").decode(t, &got)
	if len(got.Upgrades) != 0 || len(got.Offered) == 0 || got.Message == "" {
		t.Errorf("edge: %+v", got)
	}

	for _, tt := range []struct{ name, path, target string }{
		{"cluster", "/v1/projects/p/clusters/nope/upgrades", "cluster"},
		{"project", "/v1/projects/nope/clusters/c/upgrades", "project"},
	} {
		if e := h.must(http.StatusNotFound, "GET", tt.path, "").errorBody(t); e.Target != tt.target {
			t.Errorf("missing %s: target %q", tt.name, e.Target)
		}
	}
}
