package server_test

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	v1 "kiln.dev/kiln/api/v1"
	"kiln.dev/kiln/internal/plan"
	"kiln.dev/kiln/internal/provider/sim"
	"kiln.dev/kiln/internal/server"
	"kiln.dev/kiln/internal/store"
)

// status.nodes and status.health are what the node records say when the
// API answers, in GET and in the list alike: a failed operation keeps the
// counts of the nodes it made, and a control plane whose agent went quiet
// makes the cluster Unhealthy before any operation or check wrote a word.
func TestClusterCountsAndHealth(t *testing.T) {
	now := time.Now()
	h := newHarness(t, func(o *server.Options) {
		withPlan(o)
		o.Silence = 10 * time.Second
		o.Started = now.Add(-time.Hour)
	})
	h.project("p")
	h.backend(sim.New())
	// A create that fails terminally after its machines and nodes exist.
	_, opID := h.createCluster("p", "c", simCluster(map[string]string{sim.LabelFailTerminal: plan.StepWaitNodesReady}))
	if op := h.await(opID); op.Status != v1.OpFailed {
		t.Fatalf("create: %s, want Failed", op.Status)
	}
	cl := h.cluster("p", "c")
	want := v1.NodeCounts{ControlPlane: 1, Workers: 2, Ready: 3, ControlPlaneWanted: 1, ControlPlaneReady: 1, WorkersWanted: 2, WorkersReady: 2,
		Pools: []v1.PoolCount{{Name: "default", Wanted: 2, Present: 2, Ready: 2}}}
	if diff := cmp.Diff(want, cl.Status.Nodes); diff != "" {
		t.Errorf("counts of a failed create's cluster (-want +got):\n%s", diff)
	}
	if hl := cl.Status.Health; hl == nil || hl.State != v1.HealthHealthy {
		t.Errorf("health of a failed create whose nodes answer: %+v, want Healthy", hl)
	}

	// The control plane's agent stops answering; a worker is NOT_READY.
	ctx := t.Context()
	nodes, _, err := h.store.ListNodes(ctx, store.Key{Project: "p", Name: "c"}, store.Page{Limit: 100})
	if err != nil {
		t.Fatal(err)
	}
	var cp, worker string
	for _, n := range nodes {
		switch {
		case n.Role == v1.RoleControlPlane:
			cp = n.Name
			old := now.Add(-time.Minute)
			n.LastHeartbeat = &old
		case worker == "":
			worker = n.Name
			n.State = v1.NodeNotReady
		default:
			continue
		}
		if err := h.store.PutNode(ctx, n, store.Cond{IfMatch: n.ETag}); err != nil {
			t.Fatal(err)
		}
	}
	cl = h.cluster("p", "c")
	if n := cl.Status.Nodes; n.Ready != 2 || n.NotReady != 1 || n.WorkersReady != 1 || n.Pools[0].Ready != 1 {
		t.Errorf("counts with a worker NOT_READY: %+v", n)
	}
	hl := cl.Status.Health
	if hl == nil || hl.State != v1.HealthUnhealthy || hl.Reason != "ControlPlaneDown" ||
		!strings.Contains(hl.Message, cp) || !strings.Contains(hl.Message, worker) {
		t.Fatalf("health with the control plane quiet and %s NOT_READY: %+v, want Unhealthy (ControlPlaneDown) naming %s and %s", worker, hl, cp, worker)
	}
	var l v1.List[v1.Cluster]
	h.must(http.StatusOK, "GET", "/v1/projects/p/clusters", "").decode(t, &l)
	if len(l.Value) != 1 || cmp.Diff(cl.Status.Nodes, l.Value[0].Status.Nodes) != "" || cmp.Diff(hl, l.Value[0].Status.Health) != "" {
		t.Errorf("the list answers other counts or health than GET: %+v", l.Value)
	}
}
