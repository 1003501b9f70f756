package server_test

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"

	v1 "kiln.dev/kiln/api/v1"
	"kiln.dev/kiln/internal/server"
	"kiln.dev/kiln/internal/store"
)

// putNode writes a node as the gateway would when an agent registers.
func (h *harness) putNode(name, state string, prechecks ...v1.PrecheckResult) {
	h.t.Helper()
	n := &store.Node{Project: "p", Node: v1.Node{Name: name, Cluster: "c", State: state, Prechecks: prechecks,
		Facts: &v1.NodeFacts{Hostname: name,
			Interfaces: []v1.Interface{{Name: "eth0", Addresses: []string{"10.0.0.5/24"}}, {Name: "eth1"}},
			Disks:      []v1.Disk{{Path: "/dev/vdb", SizeBytes: 1 << 34}}}}}
	if err := h.store.PutNode(h.t.Context(), n, store.Cond{}); err != nil {
		h.t.Fatal(err)
	}
}

func (h *harness) nodeState(name string) string {
	h.t.Helper()
	n, err := h.store.GetNode(h.t.Context(), store.Key{Project: "p", Name: "c"}, name)
	if err != nil {
		h.t.Fatal(err)
	}
	return n.State
}

const nodes = "/v1/projects/p/clusters/c/nodes/"

func TestApproveNode(t *testing.T) {
	h := newHarness(t, nil)
	h.project("p")
	h.createCluster("p", "c", minimal)
	h.putNode("n1", v1.NodeDiscovered)
	h.putNode("bad", v1.NodePrecheckFailed,
		v1.PrecheckResult{Name: "dns-port", Result: v1.PrecheckFail, Message: "port 53 is taken"},
		v1.PrecheckResult{Name: "os", Result: v1.PrecheckPass})

	var n v1.Node
	h.must(http.StatusOK, "POST", nodes+"n1/approve", "").decode(t, &n)
	if n.State != v1.NodeApproved || h.nodeState("n1") != v1.NodeApproved {
		t.Fatalf("approved node: answer %s, stored %s; want APPROVED", n.State, h.nodeState("n1"))
	}
	// Approving again is harmless.
	h.must(http.StatusOK, "POST", nodes+"n1/approve", "")

	e := h.must(http.StatusConflict, "POST", nodes+"bad/approve", "").errorBody(t)
	if e.Code != v1.CodeConflict || !strings.Contains(e.Message, "(dns-port)") {
		t.Errorf("refusal %s %q, want a Conflict naming the failed check dns-port only", e.Code, e.Message)
	}
	if h.nodeState("bad") != v1.NodePrecheckFailed {
		t.Error("a refused approval changed the node")
	}
	if e := h.must(http.StatusNotFound, "POST", nodes+"nope/approve", "").errorBody(t); e.Target != "node" {
		t.Errorf("missing node: target %q, want node", e.Target)
	}

	var events v1.List[v1.Event]
	h.must(http.StatusOK, "GET", "/v1/projects/p/clusters/c/events", "").decode(t, &events)
	approvals := 0
	for _, ev := range events.Value {
		if ev.Reason == "NodeApproved" && ev.Node == "n1" {
			approvals++
		}
	}
	if approvals != 1 {
		t.Errorf("%d NodeApproved events for n1, want 1 (the second approval changed nothing)", approvals)
	}
}

func TestConfigureNode(t *testing.T) {
	h := newHarness(t, nil)
	h.project("p")
	h.createCluster("p", "c", minimal)
	h.putNode("n1", v1.NodeDiscovered)
	h.putNode("done", v1.NodeReady)

	h.must(http.StatusConflict, "POST", nodes+"n1/configure", `{"role": "worker"}`)
	h.must(http.StatusOK, "POST", nodes+"n1/approve", "")

	tests := []struct {
		name   string
		body   string
		target string
	}{
		{name: "bad role", body: `{"role": "master"}`, target: "role"},
		{name: "interface not reported", body: `{"role": "worker", "interface": "wlan0"}`, target: "interface"},
		{name: "device not reported", body: `{"role": "worker", "storageDevices": ["/dev/vdb", "/dev/sdz"]}`, target: "storageDevices[1]"},
		{name: "unknown field", body: `{"role": "worker", "pool": "gpu"}`, target: "pool"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if e := h.must(http.StatusBadRequest, "POST", nodes+"n1/configure", tt.body).errorBody(t); e.Target != tt.target {
				t.Errorf("target %q, want %q (%s)", e.Target, tt.target, e.Message)
			}
			if h.nodeState("n1") != v1.NodeApproved {
				t.Error("a refused configuration changed the node")
			}
		})
	}

	var n v1.Node
	h.must(http.StatusOK, "POST", nodes+"n1/configure", `{"role": "control-plane", "interface": "eth0", "storageDevices": ["/dev/vdb"]}`).decode(t, &n)
	if n.State != v1.NodeConfigured || n.Role != v1.RoleControlPlane || n.Interface != "eth0" || len(n.StorageDevices) != 1 {
		t.Fatalf("configured node: %+v", n)
	}
	if e := h.must(http.StatusConflict, "POST", nodes+"done/configure", `{"role": "worker"}`).errorBody(t); e.Code != v1.CodeConflict ||
		!strings.Contains(e.Message, "READY") {
		t.Errorf("configuring a READY node: %s %q", e.Code, e.Message)
	}
}

func TestNodeLogs(t *testing.T) {
	h := newHarness(t, nil)
	h.project("p")
	h.createCluster("p", "c", minimal)
	h.putNode("n1", v1.NodeReady)
	var lines []v1.LogLine
	for i := range 5 {
		lines = append(lines, v1.LogLine{Stream: "agent", Line: fmt.Sprintf("line %d", i)})
	}
	if err := h.store.AppendNodeLogs(t.Context(), store.Key{Project: "p", Name: "c"}, "n1", lines); err != nil {
		t.Fatal(err)
	}
	var got []string
	next := nodes + "n1/logs?top=2"
	for {
		var page v1.List[v1.LogLine]
		h.must(http.StatusOK, "GET", next, "").decode(t, &page)
		if len(page.Value) == 0 {
			if page.NextLink != next {
				t.Errorf("an empty page's nextLink is %q, want the same position %q", page.NextLink, next)
			}
			break
		}
		for _, l := range page.Value {
			got = append(got, l.Line)
		}
		next = page.NextLink
	}
	if strings.Join(got, ",") != "line 0,line 1,line 2,line 3,line 4" {
		t.Errorf("logs = %v", got)
	}
	h.must(http.StatusNotFound, "GET", nodes+"nope/logs", "")
}

// racedNodes is a store whose conditional node writes lose the race to
// another writer (an agent reporting right after it registered) the first
// losses times.
type racedNodes struct {
	server.Store
	mu     sync.Mutex
	losses int
}

func (s *racedNodes) PutNode(ctx context.Context, n *store.Node, c store.Cond, events ...*store.Event) error {
	s.mu.Lock()
	lose := c.IfMatch != "" && s.losses > 0
	if lose {
		s.losses--
	}
	s.mu.Unlock()
	if lose {
		return store.ErrPreconditionFailed
	}
	return s.Store.PutNode(ctx, n, c, events...)
}

// TestApproveNodeRacingTheAgent: an approval that loses several races to a
// busy writer of the node still succeeds (the CI failure of stop 50: three
// immediate tries all lost to an agent reporting right after it
// registered); one that loses every race answers 409 with "try again" and
// changes nothing.
func TestApproveNodeRacingTheAgent(t *testing.T) {
	raced := &racedNodes{}
	h := newHarness(t, func(o *server.Options) { raced.Store = o.Store; o.Store = raced })
	h.project("p")
	h.createCluster("p", "c", minimal)
	h.putNode("n1", v1.NodeDiscovered)
	h.putNode("n2", v1.NodeDiscovered)

	raced.losses = 5
	h.must(http.StatusOK, "POST", nodes+"n1/approve", "")
	if got := h.nodeState("n1"); got != v1.NodeApproved {
		t.Errorf("n1 after an approval that lost 5 races: %s, want APPROVED", got)
	}

	raced.losses = 1 << 20
	e := h.must(http.StatusConflict, "POST", nodes+"n2/approve", "").errorBody(t)
	if e.Code != v1.CodeConflict || !strings.Contains(e.Message, "try again") {
		t.Errorf("approval losing every race: %s %q, want a Conflict that says to try again", e.Code, e.Message)
	}
	if got := h.nodeState("n2"); got != v1.NodeDiscovered {
		t.Errorf("n2 after a refused approval: %s, want DISCOVERED", got)
	}
}
