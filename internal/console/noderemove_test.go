package console_test

import (
	"net/http"
	"net/url"
	"slices"
	"strings"
	"testing"

	v1 "kiln.dev/kiln/api/v1"
)

// An edge cluster's node page offers to remove the host, once its name is
// typed: the API's remove-node operation, run to its end (a host with
// nothing installed is only removed). Clusters whose provider makes the
// machines offer no such form.
func TestRemoveHost(t *testing.T) {
	e := newEnv(t, true)
	b := e.browser()
	csrf := b.login(ownerToken)
	const nodes = "/projects/default/clusters/edge1/nodes"
	e.createCluster("edge1", v1.ClusterSpec{Provider: "edge", NodeApproval: "manual", ControlPlane: v1.ControlPlane{Size: 1}})
	if op := e.wait("edge1"); op.Status != v1.OpSucceeded {
		t.Fatalf("edge create: %s", op.Status)
	}
	e.putNode("edge1", "edge1-zulu", v1.NodeDiscovered)
	if forms := b.get(nodes + "/edge1-zulu").postForms(t); !slices.Contains(forms, nodes+"/edge1-zulu/remove") {
		t.Fatalf("the node page has no remove form among %v", forms)
	}

	p := b.post(nodes+"/edge1-zulu/remove", url.Values{"csrf": {csrf}, "confirm": {"edge1-other"}})
	if msg, _ := p.byID(t, "error"); p.status != http.StatusBadRequest || !strings.Contains(msg, "Type the node's name") {
		t.Errorf("remove without the name typed: %d %q", p.status, msg)
	}
	if _, err := e.api.GetNode(t.Context(), "default", "edge1", "edge1-zulu"); err != nil {
		t.Fatalf("the node is gone after a refused remove: %v", err)
	}

	p = b.post(nodes+"/edge1-zulu/remove", url.Values{"csrf": {csrf}, "confirm": {"edge1-zulu"}})
	if p.status != http.StatusSeeOther || p.header.Get("Location") != nodes {
		t.Fatalf("remove: %d to %q: %s", p.status, p.header.Get("Location"), p.body)
	}
	op := e.wait("edge1")
	if op.Properties.Kind != v1.KindRemoveNode || op.Status != v1.OpSucceeded {
		t.Errorf("after remove: a %s operation, %s", op.Properties.Kind, op.Status)
	}
	if _, err := e.api.GetNode(t.Context(), "default", "edge1", "edge1-zulu"); err == nil {
		t.Error("the node is still there after its removal")
	}

	e.createCluster("sim1", v1.ClusterSpec{Provider: "sim"})
	e.wait("sim1")
	e.putNode("sim1", "sim1-w", v1.NodeReady)
	if forms := b.get("/projects/default/clusters/sim1/nodes/sim1-w").postForms(t); slices.ContainsFunc(forms, func(f string) bool {
		return strings.HasSuffix(f, "/remove")
	}) {
		t.Errorf("a sim cluster's node page offers to remove it: %v", forms)
	}
}
