package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	v1 "kiln.dev/kiln/api/v1"
	"kiln.dev/kiln/test/waitfor"
)

// spreadWeb is a Deployment of pause pods spread evenly over the workers
// (at most one more on any node than on another, counting only nodes that
// can take them: not the tainted control plane, not a cordoned node), so
// every worker runs some; and a DaemonSet, whose pods a drain leaves where
// they are.
const spreadWeb = `apiVersion: apps/v1
kind: Deployment
metadata: {name: web}
spec:
  replicas: REPLICAS
  selector: {matchLabels: {app: web}}
  template:
    metadata: {labels: {app: web}}
    spec:
      nodeSelector: {node-role.kubernetes.io/worker: ""}
      topologySpreadConstraints:
      - {maxSkew: 1, topologyKey: kubernetes.io/hostname, whenUnsatisfiable: DoNotSchedule, nodeTaintsPolicy: Honor,
         labelSelector: {matchLabels: {app: web}}}
      containers: [{name: pause, image: registry.k8s.io/pause:3.10}]
---
apiVersion: apps/v1
kind: DaemonSet
metadata: {name: agent}
spec:
  selector: {matchLabels: {app: agent}}
  template:
    metadata: {labels: {app: agent}}
    spec:
      containers: [{name: pause, image: registry.k8s.io/pause:3.10}]
`

// apply applies a manifest with kubectl.
func (e *env) apply(cluster, manifest string) {
	e.t.Helper()
	f := filepath.Join(e.t.TempDir(), "manifest.yaml")
	if err := os.WriteFile(f, []byte(manifest), 0o600); err != nil {
		e.t.Fatal(err)
	}
	e.mustKubectl(cluster, "apply", "-f", f)
}

// kubePod is what the tests read of a Pod.
type kubePod struct {
	Metadata struct {
		Name              string            `json:"name"`
		Labels            map[string]string `json:"labels"`
		DeletionTimestamp *string           `json:"deletionTimestamp"`
	} `json:"metadata"`
	Spec struct {
		NodeName string `json:"nodeName"`
	} `json:"spec"`
	Status struct {
		Phase string `json:"phase"`
	} `json:"status"`
}

func (e *env) pods(cluster, selector string) []kubePod {
	e.t.Helper()
	var list struct{ Items []kubePod }
	if err := json.Unmarshal([]byte(e.mustKubectl(cluster, "get", "pods", "-l", selector, "-o", "json")), &list); err != nil {
		e.t.Fatal(err)
	}
	return list.Items
}

// podsByNode counts the Running, not terminating pods of selector by node.
func (e *env) podsByNode(cluster, selector string) map[string]int {
	out := map[string]int{}
	for _, p := range e.pods(cluster, selector) {
		if p.Status.Phase == "Running" && p.Metadata.DeletionTimestamp == nil {
			out[p.Spec.NodeName]++
		}
	}
	return out
}

// waitPodsByNode waits, up to a minute, until ok holds of the Running
// pods of selector by node, and returns them; it fails the test with every
// pod and the cluster's events if it does not.
func (e *env) waitPodsByNode(cluster, selector string, ok func(map[string]int) bool) map[string]int {
	e.t.Helper()
	var got map[string]int
	done := false
	defer func() { // when the wait fails
		if !done {
			out, _ := e.kubectl(cluster, "get", "pods", "-A", "-o", "wide")
			evs, _ := e.kubectl(cluster, "get", "events", "-A", "--sort-by=.lastTimestamp")
			e.t.Logf("pods:\n%s\nevents:\n%s", out, tail(evs, 40))
		}
	}()
	waitfor.Cond(e.t, "the pods of "+selector+" by node", time.Minute, func() (bool, error) {
		got = e.podsByNode(cluster, selector)
		return ok(got), waitfor.NotYet(fmt.Errorf("by node: %v", got))
	})
	done = true
	return got
}

// scale sets a pool's size with a merge patch and returns the operation.
func (e *env) scale(cluster string, spec v1.ClusterSpec, size int) string {
	e.t.Helper()
	spec.WorkerPools[0].Size = size
	_, opID, err := e.c.PatchCluster(e.t.Context(), "default", cluster, map[string]any{"spec": map[string]any{"workerPools": spec.WorkerPools}})
	if err != nil {
		e.t.Fatalf("scale %s to %d: %v", cluster, size, err)
	}
	return opID
}

// finish waits for an operation to end, whatever its status.
func (e *env) finish(opID string) *v1.Operation {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(e.t.Context(), opWait)
	defer cancel()
	op, err := e.c.WaitOperation(ctx, opID, nil)
	if err != nil {
		e.t.Fatalf("wait for operation %s: %v", opID, err)
	}
	return op
}

// waitOperation waits, up to a minute, until ok holds of the operation.
func (e *env) waitOperation(opID, what string, ok func(*v1.Operation) bool) {
	e.t.Helper()
	waitfor.Cond(e.t, "operation "+opID+": "+what, time.Minute, func() (bool, error) {
		op, err := e.c.GetOperation(e.t.Context(), opID)
		if err == nil && ok(op) {
			return true, nil
		}
		b, _ := json.MarshalIndent(op, "", "  ")
		if op != nil && v1.Terminal(op.Status) {
			return false, fmt.Errorf("it ended: %v\n%s", err, b)
		}
		return false, waitfor.NotYet(fmt.Errorf("%v\n%s", err, b))
	})
}

func step(op *v1.Operation, name string) v1.Step {
	for _, s := range op.Properties.Steps {
		if s.Name == name {
			return s
		}
	}
	return v1.Step{}
}

func (e *env) events(cluster string) []v1.Event {
	e.t.Helper()
	evs, err := e.c.ListEvents(e.t.Context(), "default", cluster)
	if err != nil {
		e.t.Fatal(err)
	}
	return evs
}

// TestScaleDownDrains: a pool of three workers running a Deployment spread
// over all of them and a DaemonSet is scaled to two. The newest node
// (drain-default-2, added by a scale-up after the others) is cordoned and
// drained: its Deployment pods are evicted and run again on the other two,
// its DaemonSet pod is left (or the drain would never end), and then its
// machine, its Node object and its record are gone.
func TestScaleDownDrains(t *testing.T) {
	t.Parallel()
	e := start(t, "kilnd")
	cl := localCluster("drain", 1, true, 2)
	e.create(cl)
	t0 := time.Now()
	e.wait("drain", e.scale("drain", cl.Spec, 3))
	t.Logf("scale up 2 -> 3: %s", time.Since(t0).Round(time.Millisecond))
	// The scale-up installs the new node once: roll-out-workers waited for
	// it rather than install it again (which restarted its kubelet on new
	// certificates, and pods placed meanwhile missed the node).
	agentLog, err := os.ReadFile(filepath.Join(e.data, "machines", "default", "drain", "drain-default-2", "agent.log"))
	if err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(string(agentLog), `msg="starting component" component=kubelet`); n != 1 {
		t.Errorf("the scale-up started drain-default-2's kubelet %d times, want once:\n%s", n, tail(string(agentLog), 20))
	}

	e.apply("drain", strings.Replace(spreadWeb, "REPLICAS", "6", 1))
	e.mustKubectl("drain", "wait", "--for=jsonpath={.status.availableReplicas}=6", "deployment/web", "--timeout=180s")
	e.mustKubectl("drain", "rollout", "status", "daemonset/agent", "--timeout=180s")
	workers := []string{"drain-default-0", "drain-default-1", "drain-default-2"}
	e.waitPodsByNode("drain", "app=web", func(m map[string]int) bool {
		return m[workers[0]] == 2 && m[workers[1]] == 2 && m[workers[2]] == 2
	})

	t0 = time.Now()
	op := e.wait("drain", e.scale("drain", cl.Spec, 2))
	took := time.Since(t0)
	t.Logf("scale down 3 -> 2 with 6 pods (2 on the drained node): %s", took.Round(time.Millisecond))
	for _, s := range op.Properties.Steps {
		t.Logf("  %-30s %-9s attempts %d  %-8s %s", s.Name, s.State, s.Attempts, stepDuration(s), s.Message)
	}
	gone := "drain-default-2"
	if msg := step(op, "remove-surplus-machines").Message; msg != "drained and removed, newest first: drain-default-2 (2 pods evicted)" {
		t.Errorf("remove-surplus-machines says %q", msg)
	}

	// Kubernetes: the node is gone and the pods run on the other two.
	nodes := e.kubeNodes("drain")
	if _, ok := nodes[gone]; ok {
		t.Errorf("node %s is still in Kubernetes", gone)
	}
	for _, w := range workers[:2] {
		if n, ok := nodes[w]; !ok || !n.ready() {
			t.Errorf("worker %s: present %v, Ready %v", w, ok, n.ready())
		}
	}
	e.mustKubectl("drain", "wait", "--for=jsonpath={.status.availableReplicas}=6", "deployment/web", "--timeout=120s")
	after := e.podsByNode("drain", "app=web")
	if after[gone] != 0 || after[workers[0]]+after[workers[1]] != 6 {
		t.Errorf("web pods by node after the scale-down: %v; want 6 Running on %v, none on %s", after, workers[:2], gone)
	}
	for _, p := range e.pods("drain", "app=web") {
		if p.Spec.NodeName == gone {
			t.Errorf("pod %s is still bound to %s (%s)", p.Metadata.Name, gone, p.Status.Phase)
		}
	}

	// Kiln: the node record and the machine are gone.
	knodes, err := e.c.ListNodes(t.Context(), "default", "drain")
	if err != nil {
		t.Fatal(err)
	}
	if slices.ContainsFunc(knodes, func(n v1.Node) bool { return n.Name == gone }) {
		t.Errorf("Kiln still has a record of %s", gone)
	}
	if left := processesUnder(filepath.Join(e.data, "machines", "default", "drain", gone)); len(left) > 0 {
		t.Errorf("processes of %s left:\n%s", gone, strings.Join(left, "\n"))
	}
	var reasons []string
	for _, ev := range e.events("drain") {
		if ev.Node == gone && strings.HasPrefix(ev.Reason, "NodeDrain") {
			reasons = append(reasons, ev.Reason)
		}
	}
	if !slices.Equal(reasons, []string{"NodeDraining", "NodeDrained"}) {
		t.Errorf("drain events of %s: %v; want NodeDraining, NodeDrained", gone, reasons)
	}
}

// TestDrainBlockedByPodDisruptionBudget: a budget that keeps every replica
// (minAvailable = replicas) blocks the drain of a scale-down. After the
// pool's drainTimeout the operation fails with DrainTimeout, naming the
// pod, the budget and the timeout, in its error, its step and an event; the
// node stays, cordoned. Scaling back up makes it schedulable again; with
// the budget gone, the scale-down succeeds.
func TestDrainBlockedByPodDisruptionBudget(t *testing.T) {
	t.Parallel()
	e := start(t, "kilnd")
	cl := localCluster("pdb", 1, true, 2)
	cl.Spec.WorkerPools[0].DrainTimeout = "15s"
	e.create(cl)
	e.apply("pdb", strings.Replace(spreadWeb, "REPLICAS", "2", 1)+`---
apiVersion: policy/v1
kind: PodDisruptionBudget
metadata: {name: web}
spec:
  minAvailable: 2
  selector: {matchLabels: {app: web}}
`)
	e.mustKubectl("pdb", "wait", "--for=jsonpath={.status.availableReplicas}=2", "deployment/web", "--timeout=180s")
	e.mustKubectl("pdb", "wait", "--for=jsonpath={.status.currentHealthy}=2", "pdb/web", "--timeout=60s")
	e.waitPodsByNode("pdb", "app=web", func(m map[string]int) bool { return m["pdb-default-0"] == 1 && m["pdb-default-1"] == 1 })
	onNode := map[string]string{}
	for _, p := range e.pods("pdb", "app=web") {
		onNode[p.Spec.NodeName] = p.Metadata.Name
	}

	t0 := time.Now()
	op := e.finish(e.scale("pdb", cl.Spec, 1))
	took := time.Since(t0)
	t.Logf("scale down blocked by the budget: operation %s after %s", op.Status, took.Round(time.Millisecond))
	if op.Status != v1.OpFailed || op.Error == nil || op.Error.Code != v1.CodeDrainTimeout {
		e.dump("pdb", op)
		t.Fatalf("operation %s, error %+v; want Failed with DrainTimeout", op.Status, op.Error)
	}
	if took < 15*time.Second {
		t.Errorf("the operation failed after %s, before the 15s drain timeout", took)
	}
	// The newest node goes; both were made by the create, so the one with
	// the highest number.
	victim := strings.TrimPrefix(op.Error.Target, "/v1/projects/default/clusters/pdb/nodes/")
	if victim != "pdb-default-1" {
		t.Errorf("the drained node is %q (error target %q); want pdb-default-1", victim, op.Error.Target)
	}
	blocked := onNode[victim]
	msg := op.Error.Message
	t.Logf("error: %s", msg)
	for _, want := range []string{
		"node " + victim + " of pool default was not drained within 15s (spec.workerPools[0].drainTimeout)",
		"default/" + blocked + ": eviction refused by PodDisruptionBudget web: The disruption budget web needs 2 healthy pods and has 2 currently",
		"The node stays cordoned",
	} {
		if !strings.Contains(msg, want) {
			t.Errorf("the error does not say %q", want)
		}
	}
	if len(op.Error.Details) != 1 || op.Error.Details[0].Target != "pods/default/"+blocked {
		t.Errorf("error details %+v; want the one blocked pod", op.Error.Details)
	}
	if s := step(op, "remove-surplus-machines"); s.State != v1.StepFailed || s.Message != msg {
		t.Errorf("step remove-surplus-machines: %s %q", s.State, s.Message)
	}
	var timeoutEvent, failedEvent bool
	for _, ev := range e.events("pdb") {
		timeoutEvent = timeoutEvent || (ev.Reason == "NodeDrainTimeout" && ev.Node == victim && ev.Message == msg)
		failedEvent = failedEvent || (ev.Reason == "OperationFailed" && strings.Contains(ev.Message, msg))
	}
	if !timeoutEvent || !failedEvent {
		t.Errorf("events: NodeDrainTimeout %v, OperationFailed with the message %v", timeoutEvent, failedEvent)
	}
	if c, err := e.c.GetCluster(t.Context(), "default", "pdb"); err != nil || c.Status.LastError == nil ||
		c.Status.LastError.Code != v1.CodeDrainTimeout || c.Status.LastError.Step != "remove-surplus-machines" {
		t.Errorf("cluster lastError %+v, %v", c.Status.LastError, err)
	}
	if cordoned := e.mustKubectl("pdb", "get", "node", victim, "-o", "jsonpath={.spec.unschedulable}"); cordoned != "true" {
		t.Errorf("node %s unschedulable = %q after the failed drain; want true", victim, cordoned)
	}
	if got := e.podsByNode("pdb", "app=web"); got[victim] != 1 {
		t.Errorf("web pods by node after the failed drain: %v; the budget keeps one on %s", got, victim)
	}

	// Changing the mind: the pool keeps two nodes, and the cordoned one is
	// schedulable again.
	e.wait("pdb", e.scale("pdb", cl.Spec, 2))
	if cordoned := e.mustKubectl("pdb", "get", "node", victim, "-o", "jsonpath={.spec.unschedulable}"); cordoned != "" {
		t.Errorf("node %s unschedulable = %q after the pool kept it; want it schedulable", victim, cordoned)
	}

	// A drain with a long timeout, blocked, is canceled: the operation
	// stops at once, Canceled; the node stays, cordoned.
	long := cl.Spec
	long.WorkerPools = slices.Clone(cl.Spec.WorkerPools)
	long.WorkerPools[0].DrainTimeout = "10m"
	opID := e.scale("pdb", long, 1)
	e.waitOperation(opID, "the drain refused", func(op *v1.Operation) bool {
		return strings.Contains(step(op, "remove-surplus-machines").Message, "eviction refused by a PodDisruptionBudget for default/"+blocked)
	})
	t0 = time.Now()
	if _, err := e.c.CancelOperation(t.Context(), opID); err != nil {
		t.Fatal(err)
	}
	op = e.finish(opID)
	t.Logf("cancel of a blocked drain: %s after %s; step %s: %s", op.Status, time.Since(t0).Round(time.Millisecond),
		step(op, "remove-surplus-machines").State, step(op, "remove-surplus-machines").Message)
	if op.Status != v1.OpCanceled || step(op, "remove-surplus-machines").State != v1.StepCanceled {
		t.Errorf("operation %s, step %s; want both Canceled", op.Status, step(op, "remove-surplus-machines").State)
	}
	if cordoned := e.mustKubectl("pdb", "get", "node", victim, "-o", "jsonpath={.spec.unschedulable}"); cordoned != "true" {
		t.Errorf("node %s unschedulable = %q after the canceled drain; want true", victim, cordoned)
	}

	// With the budget gone the scale-down goes through.
	e.mustKubectl("pdb", "delete", "pdb", "web")
	t0 = time.Now()
	op = e.wait("pdb", e.scale("pdb", cl.Spec, 1))
	t.Logf("scale down without the budget: %s; %s", time.Since(t0).Round(time.Millisecond), step(op, "remove-surplus-machines").Message)
	if _, ok := e.kubeNodes("pdb")[victim]; ok {
		t.Errorf("node %s is still in Kubernetes", victim)
	}
}

// TestPoolAddAndRemove, through the CLI: a pool added to a running cluster
// gets Ready nodes with its labels and taints in Kubernetes (the other
// pool's nodes get neither); removing it drains and deletes its nodes.
func TestPoolAddAndRemove(t *testing.T) {
	t.Parallel()
	e := start(t, "kilnd")
	e.create(localCluster("pools", 1, true, 1))

	t0 := time.Now()
	e.kiln("pool", "add", "pools", "gpu", "--size", "1", "--label", "accel=gpu", "--taint", "gpu=true:NoSchedule", "--wait")
	t.Logf("pool add (1 node): %s", time.Since(t0).Round(time.Millisecond))
	if out := e.kiln("pool", "list", "pools"); !regexp.MustCompile(`(?m)^gpu +1 +- +1 +1 +- +- +accel=gpu +gpu=true:NoSchedule +5m$`).MatchString(out) {
		t.Errorf("pool list:\n%s", out)
	}
	nodes := e.kubeNodes("pools")
	gpu, ok := nodes["pools-gpu-0"]
	if !ok || !gpu.ready() || gpu.Metadata.Labels["accel"] != "gpu" {
		t.Fatalf("node pools-gpu-0 in Kubernetes: present %v, Ready %v, labels %v", ok, gpu.ready(), gpu.Metadata.Labels)
	}
	jp := `jsonpath={.spec.taints[?(@.key=="gpu")].value}:{.spec.taints[?(@.key=="gpu")].effect}`
	if got := e.mustKubectl("pools", "get", "node", "pools-gpu-0", "-o", jp); got != "true:NoSchedule" {
		t.Errorf("taint gpu of pools-gpu-0 = %q, want true:NoSchedule", got)
	}
	if got := e.mustKubectl("pools", "get", "node", "pools-default-0", "-o", jp); got != ":" {
		t.Errorf("taint gpu of pools-default-0 = %q, want none", got)
	}
	if _, ok := nodes["pools-default-0"].Metadata.Labels["accel"]; ok {
		t.Errorf("pools-default-0 has the gpu pool's label: %v", nodes["pools-default-0"].Metadata.Labels)
	}

	t0 = time.Now()
	e.kiln("pool", "remove", "pools", "gpu", "--yes", "--wait")
	t.Logf("pool remove (1 node): %s", time.Since(t0).Round(time.Millisecond))
	nodes = e.kubeNodes("pools")
	if _, ok := nodes["pools-gpu-0"]; ok || len(nodes) != 2 {
		t.Errorf("nodes in Kubernetes after the pool's removal: %v", slices.Sorted(maps.Keys(nodes)))
	}
	if out := e.kiln("pool", "list", "pools"); strings.Contains(out, "gpu") {
		t.Errorf("pool list after remove:\n%s", out)
	}
}
