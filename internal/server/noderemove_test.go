package server_test

import (
	"net/http"
	"slices"
	"testing"

	v1 "kiln.dev/kiln/api/v1"
	"kiln.dev/kiln/internal/plan"
	"kiln.dev/kiln/internal/store"
)

// DELETE .../nodes/{node} takes one host out of an edge cluster: a
// remove-node operation with the node, or a refusal naming the field, the
// cluster unchanged.
func TestRemoveNode(t *testing.T) {
	h := newHarness(t, nil)
	h.project("p")
	const base = "/v1/projects/p/clusters/e"
	h.createCluster("p", "e", edgeCluster)
	h.runBackend()
	h.host("host-a", v1.NodeReady, v1.RoleControlPlane)
	h.host("host-b", v1.NodeReady, v1.RoleWorker)

	var before v1.Cluster
	h.must(http.StatusOK, "GET", base, "").decode(t, &before)
	refusals := []struct {
		name, node   string
		status       int
		code, target string
	}{
		{"the only control-plane node", "host-a", http.StatusConflict, v1.CodeNodeCountMismatch, "nodes/host-a.role"},
		{"the last worker of a dedicated control plane", "host-b", http.StatusConflict, v1.CodeNodeCountMismatch, "nodes/host-b"},
		{"a node that is not there", "host-z", http.StatusNotFound, v1.CodeNotFound, ""},
	}
	for _, tt := range refusals {
		r := h.must(tt.status, "DELETE", base+"/nodes/"+tt.node, "")
		if e := r.errorBody(t); e.Code != tt.code || (tt.target != "" && e.Target != tt.target) {
			t.Errorf("%s: %s, want %s on %s", tt.name, r.body, tt.code, tt.target)
		}
		var now v1.Cluster
		h.must(http.StatusOK, "GET", base, "").decode(t, &now)
		if now.ETag != before.ETag {
			t.Errorf("%s changed the cluster", tt.name)
		}
	}

	// With a second worker, one of them goes.
	h.host("host-c", v1.NodeReady, v1.RoleWorker)
	r := h.must(http.StatusAccepted, "DELETE", base+"/nodes/host-c", "")
	var cl v1.Cluster
	r.decode(t, &cl)
	if r.header.Get("Azure-AsyncOperation") == "" || cl.Status.CurrentOperation == "" {
		t.Fatalf("no operation to poll: %s", r.body)
	}
	op, err := h.store.GetOperation(t.Context(), cl.Status.CurrentOperation)
	if err != nil {
		t.Fatal(err)
	}
	var steps []string
	for _, s := range op.Steps {
		steps = append(steps, s.Name)
	}
	if op.Kind != v1.KindRemoveNode || !slices.Equal(op.Nodes, []string{"host-c"}) ||
		!slices.Equal(steps, plan.StepsFor(v1.KindRemoveNode, true)) {
		t.Errorf("operation %s nodes %v steps %v", op.Kind, op.Nodes, steps)
	}
	// Another removal while it runs: refused, naming it.
	r = h.must(http.StatusConflict, "DELETE", base+"/nodes/host-b", "")
	if e := r.errorBody(t); e.Target != "/v1/operations/"+op.ID {
		t.Errorf("removal during a removal: %s", r.body)
	}

	// Not for clusters whose provider makes the machines.
	h.createCluster("p", "s", `{"spec": {"provider": "sim"}}`)
	n := &store.Node{Project: "p", Node: v1.Node{Name: "s-w-0", Cluster: "s", State: v1.NodeReady, Role: v1.RoleWorker}}
	if err := h.store.PutNode(t.Context(), n, store.Cond{}); err != nil {
		t.Fatal(err)
	}
	h.must(http.StatusConflict, "DELETE", "/v1/projects/p/clusters/s/nodes/s-w-0", "")
	h.must(http.StatusNotFound, "DELETE", "/v1/projects/p/clusters/nope/nodes/x", "")
}
