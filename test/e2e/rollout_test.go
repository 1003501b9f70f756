package e2e

import (
	"strings"
	"testing"
)

// TestPoolReconfigureRollsOut: a pool's new labels roll through it: every
// worker is replaced by one with the new labels, new before old (maxSurge 1,
// maxUnavailable 0, sampled with kubectl), and the Deployment on it ends
// available again.
func TestPoolReconfigureRollsOut(t *testing.T) {
	t.Parallel()
	e := start(t, "kilnd")
	cl := localCluster("roll", 1, true, 2)
	cl.Spec.WorkerPools[0].Labels = map[string]string{"tier": "a"}
	e.create(cl)
	e.mustKubectl("roll", "create", "deployment", "web", "--image=registry.k8s.io/pause:3.10", "--replicas=4")
	e.mustKubectl("roll", "wait", "--for=jsonpath={.status.availableReplicas}=4", "deployment/web", "--timeout=120s")
	before := e.kubeNodes("roll")

	stop := e.sampleWorkers("roll", "default")
	_, opID, err := e.c.PatchCluster(t.Context(), "default", "roll", map[string]any{"spec": map[string]any{
		"workerPools": []any{map[string]any{"name": "default", "size": 2, "labels": map[string]any{"tier": "b"}}}}})
	if err != nil {
		t.Fatal(err)
	}
	op := e.wait("roll", opID)
	ws := stop()
	for _, s := range op.Properties.Steps {
		t.Logf("  %-30s %-9s %s  %s", s.Name, s.State, stepDuration(s), s.Message)
	}
	t.Logf("%d samples: workers at most %d, Ready schedulable workers at least %d", ws.samples, ws.maxWorkers, ws.minReady)
	if ws.samples == 0 || ws.maxWorkers > 3 || ws.minReady < 2 {
		t.Errorf("kubectl (%d samples) saw up to %d workers and down to %d Ready; maxSurge 1 and maxUnavailable 0 allow 3 and 2",
			ws.samples, ws.maxWorkers, ws.minReady)
	}
	after := e.kubeNodes("roll")
	workers := 0
	for name, n := range after {
		if !strings.HasPrefix(name, "roll-default-") {
			continue
		}
		workers++
		if n.Metadata.Labels["tier"] != "b" || !n.ready() {
			t.Errorf("worker %s: tier=%q Ready %v; want tier=b, Ready", name, n.Metadata.Labels["tier"], n.ready())
		}
		if old, ok := before[name]; ok && old.Metadata.Labels["tier"] == "a" && n.Metadata.Labels["tier"] == "a" {
			t.Errorf("worker %s was kept with the old labels", name)
		}
	}
	if workers != 2 {
		t.Errorf("%d workers after the rollout, want 2", workers)
	}
	e.mustKubectl("roll", "wait", "--for=jsonpath={.status.availableReplicas}=4", "deployment/web", "--timeout=120s")
}
