package e2e

import (
	"path/filepath"
	"testing"
	"time"

	v1 "kiln.dev/kiln/api/v1"
	"kiln.dev/kiln/test/waitfor"
)

// TestUnhealthyNodeIsReplaced: a worker whose agent and components are
// killed goes NOT_READY; past its pool's unhealthyTimeout the health check
// replaces it (a repair operation) and kubectl sees it Ready again. Then two
// workers of three die: more than maxUnhealthy (40%), so nothing is
// replaced and the cluster's NodesHealthy condition says why.
func TestUnhealthyNodeIsReplaced(t *testing.T) {
	e := start(t, "kilnd", "--health-interval", "2s")
	cl := localCluster("heal", 1, true, 3)
	cl.Spec.WorkerPools[0].UnhealthyTimeout = "10s"
	e.create(cl)
	machines := filepath.Join(e.data, "machines", "default", "heal")

	killProcessesUnder(t, filepath.Join(machines, "heal-default-1"))
	began := time.Now()
	var repair *v1.Operation
	waitfor.Cond(t, "a repair operation to succeed", 5*time.Minute, func() (bool, error) {
		ops, err := e.c.ListOperations(t.Context(), "default", "heal")
		if err != nil {
			return false, err
		}
		for _, op := range ops {
			if op.Properties.Kind == v1.KindRepair && op.Status == v1.OpSucceeded {
				repair = &op
				return true, nil
			}
			if op.Properties.Kind == v1.KindRepair && op.Status == v1.OpFailed {
				t.Fatalf("repair failed: %+v", op.Error)
			}
		}
		return false, nil
	})
	t.Logf("killed to repaired: %s", time.Since(began).Round(time.Second))
	for _, s := range repair.Properties.Steps {
		t.Logf("  %-30s %-9s %s", s.Name, s.State, s.Message)
	}
	if repair.Properties.Steps[0].Message != "removed unhealthy: heal-default-1" {
		t.Errorf("replace-unhealthy-nodes says %q", repair.Properties.Steps[0].Message)
	}
	nodes := e.kubeNodes("heal")
	for _, n := range []string{"heal-default-0", "heal-default-1", "heal-default-2"} {
		if !nodes[n].ready() {
			t.Errorf("after the repair, %s is not Ready in Kubernetes", n)
		}
	}
	if len(processesUnder(filepath.Join(machines, "heal-default-1"))) == 0 {
		t.Error("the replaced machine runs nothing")
	}

	// Two of three: beyond maxUnhealthy.
	for _, n := range []string{"heal-default-0", "heal-default-2"} {
		killProcessesUnder(t, filepath.Join(machines, n))
	}
	var cond v1.Condition
	waitfor.Cond(t, "NodesHealthy to turn False", 5*time.Minute, func() (bool, error) {
		c, err := e.c.GetCluster(t.Context(), "default", "heal")
		if err != nil {
			return false, err
		}
		for _, x := range c.Status.Conditions {
			if x.Type == v1.ConditionNodesHealthy && x.Status == "False" {
				cond = x
				return true, nil
			}
		}
		return false, nil
	})
	t.Logf("NodesHealthy: %s: %s", cond.Reason, cond.Message)
	if cond.Reason != "TooManyUnhealthy" {
		t.Errorf("condition reason %q", cond.Reason)
	}
	// Three more checks: still no second repair. This sleep is not a wait
	// for a condition: the test asserts that nothing happens, so it lets
	// three health-check intervals (--health-interval 2s) pass.
	time.Sleep(6 * time.Second)
	ops, err := e.c.ListOperations(t.Context(), "default", "heal")
	if err != nil {
		t.Fatal(err)
	}
	repairs := 0
	for _, op := range ops {
		if op.Properties.Kind == v1.KindRepair {
			repairs++
		}
	}
	if repairs != 1 {
		t.Errorf("%d repair operations, want the first only", repairs)
	}
	for _, n := range []string{"heal-default-0", "heal-default-2"} {
		if node, err := e.c.GetNode(t.Context(), "default", "heal", n); err != nil || node.State != v1.NodeNotReady {
			t.Errorf("node %s: %v %v, want it kept NOT_READY", n, node, err)
		}
	}
}
