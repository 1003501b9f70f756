package e2e

import (
	"strings"
	"testing"
	"time"

	v1 "kiln.dev/kiln/api/v1"
	"kiln.dev/kiln/internal/distro"
)

// TestUpgrade: a local cluster of one control-plane node and a pool of two
// workers (maxSurge 1, maxUnavailable 0) at the older version is upgraded to
// the newer one with a PATCH: the control plane in place, the workers
// replaced one by one. kubectl, sampled all along, never sees more than
// three workers nor fewer than two Ready; at the end every node's kubelet
// and the API server report the new version.
func TestUpgrade(t *testing.T) {
	t.Parallel()
	versions := distro.LocalVersions()
	if len(versions) < 2 {
		t.Fatalf("the local distribution offers %v; an upgrade needs two versions", versions)
	}
	from, to := versions[len(versions)-2], versions[len(versions)-1]
	e := start(t, "kilnd", "--kube-binary", kubeDir(t, from, to))
	cl := localCluster("up", 1, true, 2)
	cl.Spec.KubernetesVersion = from
	e.create(cl)
	e.mustKubectl("up", "create", "deployment", "web", "--image=registry.k8s.io/pause:3.10", "--replicas=4")

	// Sample the workers as kubectl sees them while the upgrade runs.
	stop := e.sampleWorkers("up", "default")
	began := time.Now()
	_, opID, err := e.c.PatchCluster(t.Context(), "default", "up", map[string]any{"spec": map[string]any{"kubernetesVersion": to}})
	if err != nil {
		t.Fatal(err)
	}
	op := e.wait("up", opID)
	ws := stop()
	t.Logf("upgrade %s -> %s: %s; %d samples, workers at most %d, Ready schedulable workers at least %d",
		from, to, time.Since(began).Round(time.Second), ws.samples, ws.maxWorkers, ws.minReady)
	for _, s := range op.Properties.Steps {
		t.Logf("  %-30s %-9s %s  %s", s.Name, s.State, stepDuration(s), s.Message)
	}
	if ws.samples == 0 {
		t.Fatal("kubectl never answered during the upgrade")
	}
	if ws.maxWorkers > 3 {
		t.Errorf("kubectl saw %d workers during the upgrade; maxSurge 1 allows 3", ws.maxWorkers)
	}
	if ws.minReady < 2 {
		t.Errorf("kubectl saw %d Ready schedulable workers during the upgrade; maxUnavailable 0 keeps 2", ws.minReady)
	}
	steps := map[string]v1.Step{}
	for _, s := range op.Properties.Steps {
		steps[s.Name] = s
	}
	if s := steps["upgrade-control-plane"]; s.State != v1.StepSucceeded || !strings.Contains(s.Message, "up-cp-0") {
		t.Errorf("upgrade-control-plane: %s %q", s.State, s.Message)
	}
	if s := steps["roll-out-workers"]; s.State != v1.StepSucceeded || !strings.Contains(s.Message, "up-default-") {
		t.Errorf("roll-out-workers: %s %q", s.State, s.Message)
	}

	nodes := e.kubeNodes("up")
	if len(nodes) != 3 {
		t.Errorf("%d nodes after the upgrade, want 3", len(nodes))
	}
	for name, n := range nodes {
		if !n.ready() || n.Status.NodeInfo.KubeletVersion != to {
			t.Errorf("node %s: Ready %v, kubelet %s; want Ready at %s", name, n.ready(), n.Status.NodeInfo.KubeletVersion, to)
		}
	}
	if v := e.serverVersion("up"); v != to {
		t.Errorf("the API server reports %s, want %s", v, to)
	}
	e.mustKubectl("up", "wait", "--for=jsonpath={.status.availableReplicas}=4", "deployment/web", "--timeout=120s")
}
