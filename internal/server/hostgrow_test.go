package server_test

import (
	"net/http"
	"strings"
	"testing"

	v1 "kiln.dev/kiln/api/v1"
	"kiln.dev/kiln/internal/plan"
	"kiln.dev/kiln/internal/store"
)

// setPrechecks gives host name of cluster e the precheck results checks.
func (h *harness) setPrechecks(name string, checks ...v1.PrecheckResult) {
	h.t.Helper()
	n, err := h.store.GetNode(h.t.Context(), store.Key{Project: "p", Name: "e"}, name)
	if err != nil {
		h.t.Fatal(err)
	}
	n.Prechecks = checks
	if err := h.store.PutNode(h.t.Context(), n, store.Cond{}); err != nil {
		h.t.Fatal(err)
	}
}

// A provisioned edge cluster grows: a provision joins the hosts configured
// since. Refused, the cluster unchanged: nothing added, an added host whose
// prechecks failed, control-plane hosts added that would leave an even
// number of etcd members.
func TestProvisionGrow(t *testing.T) {
	h := newHarness(t, nil)
	h.project("p")
	const base = "/v1/projects/p/clusters/e"
	h.createCluster("p", "e", edgeCluster)
	h.runBackend()
	h.host("host-a", v1.NodeReady, v1.RoleControlPlane)
	h.host("host-b", v1.NodeReady, v1.RoleWorker)

	var before v1.Cluster
	h.must(http.StatusOK, "GET", base, "").decode(t, &before)
	unchanged := func(what string) {
		t.Helper()
		var now v1.Cluster
		h.must(http.StatusOK, "GET", base, "").decode(t, &now)
		if now.ETag != before.ETag || now.Status.CurrentOperation != before.Status.CurrentOperation {
			t.Errorf("%s changed the cluster: etag %s -> %s, operation %q -> %q", what, before.ETag, now.ETag,
				before.Status.CurrentOperation, now.Status.CurrentOperation)
		}
	}

	r := h.must(http.StatusConflict, "POST", base+"/provision", "")
	if e := r.errorBody(t); e.Code != v1.CodeConflict || e.Target != "nodes" || !strings.Contains(e.Message, "no host was configured since") {
		t.Errorf("provision with nothing added: %s", r.body)
	}
	unchanged("provision with nothing added")

	h.host("host-c", v1.NodeConfigured, v1.RoleWorker)
	h.setPrechecks("host-c", v1.PrecheckResult{Name: "swap", Result: v1.PrecheckPass},
		v1.PrecheckResult{Name: "ports", Result: v1.PrecheckFail, Message: "6443 in use"})
	r = h.must(http.StatusConflict, "POST", base+"/provision", "")
	if e := r.errorBody(t); e.Code != v1.CodeConflict || e.Target != "nodes/host-c.prechecks" || !strings.Contains(e.Message, "(ports)") {
		t.Errorf("provision of a host whose prechecks failed: %s", r.body)
	}
	unchanged("provision of a host whose prechecks failed")
	h.setPrechecks("host-c", v1.PrecheckResult{Name: "ports", Result: v1.PrecheckPass})

	// One control-plane host more: 2 etcd members.
	h.host("host-d", v1.NodeConfigured, v1.RoleControlPlane)
	r = h.must(http.StatusConflict, "POST", base+"/provision", "")
	if e := r.errorBody(t); e.Code != v1.CodeNodeCountMismatch || e.Target != "nodes/host-d.role" ||
		!strings.Contains(e.Message, "2 etcd members") {
		t.Errorf("provision of a second control-plane host: %s", r.body)
	}
	unchanged("provision of a second control-plane host")

	// As a worker it joins, with host-c.
	h.host("host-d", v1.NodeConfigured, v1.RoleWorker)
	r = h.must(http.StatusAccepted, "POST", base+"/provision", "")
	var cl v1.Cluster
	r.decode(t, &cl)
	var op v1.Operation
	h.must(http.StatusOK, "GET", "/v1/operations/"+cl.Status.CurrentOperation, "").decode(t, &op)
	var steps []string
	for _, s := range op.Properties.Steps {
		steps = append(steps, s.Name)
	}
	if op.Properties.Kind != v1.KindProvision || !strings.Contains(strings.Join(steps, " "), plan.StepRefreshJoinMaterial+" "+plan.StepInstallControlPlane) {
		t.Errorf("provision that grows the cluster: kind %q, steps %v", op.Properties.Kind, steps)
	}
}
