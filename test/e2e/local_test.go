package e2e

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	v1 "kiln.dev/kiln/api/v1"
)

// TestLocalCluster: one dedicated control plane and two workers on this
// machine; kubectl sees three Ready nodes with their roles, a Deployment of 5
// runs on the workers, and deleting the cluster leaves no process and no
// directory behind.
func TestLocalCluster(t *testing.T) {
	t.Parallel()
	e := start(t, "kilnd")
	start := time.Now()
	op := e.create(localCluster("demo", 1, true, 2))
	t.Logf("create to Succeeded: %s", time.Since(start).Round(time.Millisecond))
	for _, s := range op.Properties.Steps {
		t.Logf("  %-30s %-9s attempts %d  %s", s.Name, s.State, s.Attempts, stepDuration(s))
	}

	nodes := e.kubeNodes("demo")
	workers := []string{"demo-default-0", "demo-default-1"}
	for _, name := range append([]string{"demo-cp-0"}, workers...) {
		n, ok := nodes[name]
		if !ok || !n.ready() {
			t.Fatalf("node %s in Kubernetes: present %v, Ready %v", name, ok, n.ready())
		}
	}
	if len(nodes) != 3 {
		t.Errorf("%d nodes in Kubernetes, want 3", len(nodes))
	}
	cp := nodes["demo-cp-0"]
	if _, ok := cp.Metadata.Labels["node-role.kubernetes.io/control-plane"]; !ok {
		t.Errorf("control-plane node labels %v", cp.Metadata.Labels)
	}
	if !slices.Contains(cp.Spec.Taints, taint{Key: "node-role.kubernetes.io/control-plane", Effect: "NoSchedule"}) {
		t.Errorf("dedicated control-plane node has taints %v, want node-role.kubernetes.io/control-plane:NoSchedule", cp.Spec.Taints)
	}
	for _, w := range workers {
		if _, ok := nodes[w].Metadata.Labels["node-role.kubernetes.io/worker"]; !ok {
			t.Errorf("worker %s labels %v", w, nodes[w].Metadata.Labels)
		}
	}
	if id := e.mustKubectl("demo", "get", "configmap", "-n", "kiln-system", "kiln-cluster", "-o", "jsonpath={.data.id}"); id != "/v1/projects/default/clusters/demo" {
		t.Errorf("kiln-system/kiln-cluster id = %q", id)
	}
	if cl, err := e.c.GetCluster(t.Context(), "default", "demo"); err != nil {
		t.Fatal(err)
	} else if uid := e.mustKubectl("demo", "get", "configmap", "-n", "kiln-system", "kiln-cluster", "-o", "jsonpath={.data.uid}"); uid != cl.UID || uid == "" {
		t.Errorf("kiln-system/kiln-cluster uid = %q, want the cluster's %q", uid, cl.UID)
	}

	// Kiln's own view agrees.
	knodes, err := e.c.ListNodes(t.Context(), "default", "demo")
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range knodes {
		if n.State != v1.NodeReady {
			t.Errorf("node %s is %s in Kiln", n.Name, n.State)
		}
		// Each node is what it is: a process here, named after its machine,
		// on its own loopback address from kilnd's pool, and says it is hollow.
		if f := n.Facts; f == nil || f.Hostname != n.Name || len(f.Interfaces) != 1 ||
			!slices.Equal(f.Interfaces[0].Addresses, []string{n.Address + "/8"}) || !strings.HasPrefix(n.Address, poolPrefix(e.pool)) {
			t.Errorf("node %s at %s reports facts %+v, want its own name and only its address", n.Name, n.Address, n.Facts)
		}
		if got := v1.PrecheckSummary(n.Prechecks); got != "5 passed, 9 n/a" {
			t.Errorf("node %s prechecks %q, want 5 passed, 9 n/a: %+v", n.Name, got, n.Prechecks)
		}
		if nodes[n.Name].Metadata.Labels["kiln.dev/hollow"] != "true" {
			t.Errorf("node %s in Kubernetes has labels %v, want kiln.dev/hollow=true", n.Name, nodes[n.Name].Metadata.Labels)
		}
	}
	if cl, err := e.c.GetCluster(t.Context(), "default", "demo"); err != nil {
		t.Error(err)
	} else if !cl.Hollow() {
		t.Errorf("status.installed %+v, want hollow", cl.Status.Installed)
	}
	if lines, _, err := e.c.NodeLogs(t.Context(), "default", "demo", "demo-cp-0", ""); err != nil || len(lines) == 0 {
		t.Errorf("node logs of demo-cp-0: %d lines, %v", len(lines), err)
	}

	// kubectl get componentstatuses tells the truth: the control plane's
	// controller-manager, scheduler and etcd answer their health checks
	// (upstream probes 127.0.0.1; kiln-kube's apiserver probes its node's
	// address, docs/kube.md).
	var cs struct {
		Items []struct {
			Metadata struct {
				Name string `json:"name"`
			} `json:"metadata"`
			Conditions []struct {
				Type    string `json:"type"`
				Status  string `json:"status"`
				Message string `json:"message"`
				Error   string `json:"error"`
			} `json:"conditions"`
		} `json:"items"`
	}
	if err := json.Unmarshal([]byte(e.mustKubectl("demo", "get", "componentstatuses", "-o", "json")), &cs); err != nil {
		t.Fatal(err)
	}
	healthy := map[string]bool{}
	for _, c := range cs.Items {
		for _, cond := range c.Conditions {
			if cond.Type == "Healthy" {
				healthy[c.Metadata.Name] = cond.Status == "True"
				if cond.Status != "True" {
					t.Errorf("componentstatus %s: Healthy=%s (%s%s)", c.Metadata.Name, cond.Status, cond.Message, cond.Error)
				}
			}
		}
	}
	for _, name := range []string{"controller-manager", "scheduler", "etcd-0"} {
		if _, ok := healthy[name]; !ok {
			t.Errorf("kubectl get componentstatuses has no %s: %v", name, healthy)
		}
	}

	e.secretsStayInside("demo")
	e.reissueActivation("demo")

	// Workloads run, on the workers.
	e.mustKubectl("demo", "create", "deployment", "web", "--image=registry.k8s.io/pause:3.10", "--replicas=5")
	// Not --for=condition=Available: a new Deployment is "Available" before it has any replica.
	e.mustKubectl("demo", "wait", "--for=jsonpath={.status.availableReplicas}=5", "deployment/web", "--timeout=180s")
	placed := strings.Fields(e.mustKubectl("demo", "get", "pods", "-l", "app=web", "-o", "jsonpath={.items[*].spec.nodeName}"))
	if len(placed) != 5 {
		t.Errorf("%d pods placed, want 5: %v", len(placed), placed)
	}
	for _, n := range placed {
		if !slices.Contains(workers, n) {
			t.Errorf("a pod runs on %s, not on a worker", n)
		}
	}

	// Delete leaves nothing behind.
	opID, err := e.c.DeleteCluster(t.Context(), "default", "demo")
	if err != nil {
		t.Fatal(err)
	}
	del := e.wait("demo", opID)
	for _, s := range del.Properties.Steps {
		t.Logf("  %-30s %-9s %s  %s", s.Name, s.State, stepDuration(s), s.Message)
	}
	// The workers were drained first: their pods evicted as on a scale-down.
	events, err := e.c.ListEvents(t.Context(), "default", "demo")
	if err != nil {
		t.Fatal(err)
	}
	drained := map[string]bool{}
	for _, ev := range events {
		if ev.Reason == "NodeDrained" && strings.Contains(ev.Message, "before the delete") {
			drained[ev.Node] = true
		}
	}
	for _, w := range workers {
		if !drained[w] {
			t.Errorf("worker %s was not drained before the delete (events: NodeDrained for %v)", w, drained)
		}
	}
	dir := filepath.Join(e.data, "machines", "default", "demo")
	if left := processesUnder(dir); len(left) > 0 {
		t.Errorf("processes left after delete:\n%s", strings.Join(left, "\n"))
	}
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		left, _ := filepath.Glob(dir + "/*")
		t.Errorf("the cluster's directory is still there after delete (%v): %v", err, left)
	}
}

func stepDuration(s v1.Step) string {
	if s.StartTime == nil || s.EndTime == nil {
		return ""
	}
	return s.EndTime.Sub(*s.StartTime).Round(time.Millisecond).String()
}
