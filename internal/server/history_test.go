package server_test

import (
	"net/http"
	"slices"
	"strings"
	"testing"

	"kiln.dev/kiln/api/client"
	v1 "kiln.dev/kiln/api/v1"
	"kiln.dev/kiln/internal/plan"
	"kiln.dev/kiln/internal/provider/sim"
	"kiln.dev/kiln/internal/store"
)

// A cluster created under the name of a deleted one is a new cluster: its
// operations, events, nodes and node logs are its own, none of the old
// one's; the old one's operations stay readable by id.
func TestSameNameIsANewCluster(t *testing.T) {
	h := newHarness(t, withPlan)
	h.project("p")
	h.backend(sim.New())
	const c = "/v1/projects/p/clusters/demo"
	list := func(path string, v any) {
		t.Helper()
		h.must(http.StatusOK, "GET", path+"?top=1000", "").decode(t, v)
	}
	opIDs := func() []string {
		t.Helper()
		var l v1.List[v1.Operation]
		list(c+"/operations", &l)
		var ids []string
		for _, op := range l.Value {
			ids = append(ids, op.Name)
		}
		return ids
	}

	// The first demo: two workers, its create canceled once they exist
	// (with a log line from one of them), then deleted.
	first, create := h.createCluster("p", "demo", `{"spec": {"provider": "sim", "labels": {"`+sim.LabelHangStep+`": "`+plan.StepInstallWorkers+`"},
		"workerPools": [{"name": "default", "size": 2}]}}`)
	h.awaitStep(create, plan.StepInstallWorkers)
	if err := h.store.AppendNodeLogs(t.Context(), store.Key{Project: "p", Name: "demo"}, "demo-default-0",
		[]v1.LogLine{{Stream: "agent", Line: "a line of the first demo"}}); err != nil {
		t.Fatal(err)
	}
	h.must(http.StatusAccepted, "POST", "/v1/operations/"+create+"/cancel", "")
	if op := h.await(create); op.Status != v1.OpCanceled {
		t.Fatalf("the first create: %s", op.Status)
	}
	r := h.must(http.StatusAccepted, "DELETE", c, "")
	del := client.OperationID(r.header.Get("Location"))
	if op := h.await(del); op.Status != v1.OpSucceeded {
		t.Fatalf("delete: %s %+v", op.Status, op.Error)
	}
	// Until the name is used again, the deleted cluster's history is the
	// name's.
	if got := opIDs(); !slices.Equal(got, []string{create, del}) {
		t.Errorf("operations of the deleted demo: %v, want %v", got, []string{create, del})
	}

	// The second demo: one worker.
	second, create2 := h.createCluster("p", "demo", `{"spec": {"provider": "sim", "workerPools": [{"name": "default", "size": 1}]}}`)
	if op := h.await(create2); op.Status != v1.OpSucceeded {
		t.Fatalf("the second create: %s %+v", op.Status, op.Error)
	}
	if got := opIDs(); !slices.Equal(got, []string{create2}) {
		t.Errorf("operations of the second demo: %v, want only its create %s", got, create2)
	}
	events := h.events("p", "demo")
	for _, ev := range events {
		if op := client.OperationID(ev.Operation); op != create2 || ev.Node == "demo-default-1" {
			t.Errorf("the second demo's events include %s %q of operation %s", ev.Reason, ev.Message, op)
		}
	}
	if len(events) == 0 || events[len(events)-1].Reason != "OperationSucceeded" {
		t.Errorf("the second demo's events do not end with its create's success: %+v", events)
	}
	var nodes v1.List[v1.Node]
	list(c+"/nodes", &nodes)
	var names []string
	for _, n := range nodes.Value {
		names = append(names, n.Name)
	}
	if !slices.Equal(names, []string{"demo-cp-0", "demo-default-0"}) {
		t.Errorf("nodes of the second demo: %v", names)
	}
	var logs v1.List[v1.LogLine]
	list(c+"/nodes/demo-default-0/logs", &logs)
	if len(logs.Value) != 0 {
		t.Errorf("the second demo's demo-default-0 has the first's log: %+v", logs.Value)
	}

	// Each is its own cluster, and its operations say which.
	now := h.cluster("p", "demo")
	if first.UID == "" || first.UID == now.UID || second.UID != now.UID {
		t.Errorf("uid of the first demo %q, of the second %q (as created) and %q (now)", first.UID, second.UID, now.UID)
	}
	for _, tc := range []struct{ op, status, uid string }{
		{create, v1.OpCanceled, first.UID}, {del, v1.OpSucceeded, first.UID}, {create2, v1.OpSucceeded, now.UID},
	} {
		op := h.operation(tc.op)
		if op.Status != tc.status || op.Properties.Target != c || op.Properties.TargetUID != tc.uid {
			t.Errorf("operation %s: %s on %s (uid %q), want %s on uid %q", tc.op, op.Status,
				op.Properties.Target, op.Properties.TargetUID, tc.status, tc.uid)
		}
	}
	if !strings.HasPrefix(now.ID, c) {
		t.Errorf("id %q", now.ID)
	}
}
