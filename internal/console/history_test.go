package console_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"kiln.dev/kiln/api/client"
	v1 "kiln.dev/kiln/api/v1"
	"kiln.dev/kiln/internal/provider/sim"
	"kiln.dev/kiln/test/waitfor"
)

// A cluster created under the name of a deleted one is a new cluster: its
// page (past operations, events), its nodes tab and node pages show nothing of the old
// one's canceled create, its delete or its nodes.
func TestSameNameIsANewCluster(t *testing.T) {
	e := newEnv(t, true)
	b := e.browser()
	b.login(ownerToken)
	ctx := t.Context()
	const page = "/projects/default/clusters/demo"

	// The first demo: two workers, its create canceled once they exist,
	// then deleted.
	e.createCluster("demo", v1.ClusterSpec{Provider: "sim", Labels: map[string]string{sim.LabelHangStep: "install-workers"},
		WorkerPools: []v1.WorkerPool{{Name: "default", Size: 2}}})
	create := e.cluster("demo").Status.CurrentOperation
	e.stepRunning(create, "install-workers")
	if _, err := e.api.CancelOperation(ctx, create); err != nil {
		t.Fatal(err)
	}
	if op := e.wait("demo"); op.Status != v1.OpCanceled {
		t.Fatalf("the first create: %s", op.Status)
	}
	if nodes := b.get(page + "/nodes"); !strings.Contains(nodes.body, "demo-default-1") {
		t.Fatalf("the first demo's nodes tab lacks demo-default-1:\n%s", nodes.body)
	}
	del, err := e.api.DeleteCluster(ctx, "default", "demo")
	if err != nil {
		t.Fatal(err)
	}
	waitCtx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	if op, err := e.api.WaitOperation(waitCtx, del, nil); err != nil || op.Status != v1.OpSucceeded {
		t.Fatalf("delete: %+v %v", op, err)
	}

	// The second demo: one worker.
	e.createCluster("demo", v1.ClusterSpec{Provider: "sim", WorkerPools: []v1.WorkerPool{{Name: "default", Size: 1}}})
	if op := e.wait("demo"); op.Status != v1.OpSucceeded {
		t.Fatalf("the second create: %s %+v", op.Status, op.Error)
	}
	waitfor.Cond(t, "the second demo's nodes", time.Minute, func() (bool, error) {
		nodes, err := e.api.ListNodes(ctx, "default", "demo")
		return len(nodes) == 2, err
	})
	overview := b.get(page)
	past, _ := overview.byID(t, "past-h")
	if past == "" || !strings.Contains(overview.body, "<p>None.</p>") {
		t.Errorf("the second demo has past operations:\n%s", overview.body)
	}
	for _, old := range []string{client.OperationID(create), client.OperationID(del), "OperationCanceled", "CancelRequested", "demo-default-1"} {
		if strings.Contains(overview.body, old) {
			t.Errorf("the second demo's page shows %s, the first demo's", old)
		}
	}
	if !strings.Contains(overview.body, "OperationSucceeded") {
		t.Errorf("the second demo's page lacks its own events:\n%s", overview.body)
	}
	if uid := e.cluster("demo").UID; uid == "" || !strings.Contains(overview.body, "<code>"+uid+"</code>") {
		t.Errorf("the second demo's page does not show its uid %q", uid)
	}
	nodes := b.get(page + "/nodes")
	if strings.Contains(nodes.body, "demo-default-1") || !strings.Contains(nodes.body, "demo-default-0") {
		t.Errorf("the second demo's nodes tab:\n%s", nodes.body)
	}
	for _, old := range []string{"OperationCanceled", client.OperationID(create)} {
		if strings.Contains(nodes.body, old) {
			t.Errorf("the second demo's nodes tab shows %s, the first demo's", old)
		}
	}
	// A node of the same name is the second demo's: its page shows none of
	// the first's node events (its removal by the delete).
	node := b.get(page + "/nodes/demo-default-0")
	if strings.Contains(node.body, "NodeRemoved") || !strings.Contains(node.body, "NodeStateChanged") {
		t.Errorf("the second demo's node demo-default-0 page:\n%s", node.body)
	}
}
