package e2e

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	v1 "kiln.dev/kiln/api/v1"
	"kiln.dev/kiln/test/waitfor"
)

// burst is a Deployment of n pods that each ask for 60% of the CPU the node
// offers: one fits on a node of its size.
func (e *env) burst(cluster, node string, n int) string {
	e.t.Helper()
	var kn struct {
		Status struct {
			Allocatable map[string]string `json:"allocatable"`
		} `json:"status"`
	}
	if err := json.Unmarshal([]byte(e.mustKubectl(cluster, "get", "node", node, "-o", "json")), &kn); err != nil {
		e.t.Fatal(err)
	}
	var cores int
	if _, err := fmt.Sscan(kn.Status.Allocatable["cpu"], &cores); err != nil || cores < 1 {
		e.t.Fatalf("allocatable cpu %q of %s: want whole cores (%v)", kn.Status.Allocatable["cpu"], node, err)
	}
	return strings.NewReplacer("REPLICAS", fmt.Sprint(n), "CPU", fmt.Sprint(cores*600)).Replace(burstDoc)
}

const burstDoc = `apiVersion: apps/v1
kind: Deployment
metadata: {name: burst}
spec:
  replicas: REPLICAS
  selector: {matchLabels: {app: burst}}
  template:
    metadata: {labels: {app: burst}}
    spec:
      containers:
      - name: pause
        image: kiln.dev/pause:1
        resources: {requests: {cpu: CPUm}}
`

// guarded is one small pod kept off node NODE, whose budget allows no
// disruption.
const guarded = `apiVersion: apps/v1
kind: Deployment
metadata: {name: guarded}
spec:
  replicas: 1
  selector: {matchLabels: {app: guarded}}
  template:
    metadata: {labels: {app: guarded}}
    spec:
      affinity:
        nodeAffinity:
          requiredDuringSchedulingIgnoredDuringExecution:
            nodeSelectorTerms:
            - matchExpressions: [{key: kubernetes.io/hostname, operator: NotIn, values: [NODE]}]
      containers:
      - name: pause
        image: kiln.dev/pause:1
        resources: {requests: {cpu: 10m}}
---
apiVersion: policy/v1
kind: PodDisruptionBudget
metadata: {name: guarded}
spec:
  minAvailable: 1
  selector: {matchLabels: {app: guarded}}
`

// TestAutoscale (issue 24): a docker cluster's pool autoscales between 1
// and 4. A Deployment of four pods that each need a node of their own grows
// the pool from 1 to 4 in one decision, whose operation says which pods and
// why; kilnd is killed while that operation runs and the one started again
// finishes it without a machine too many. With the Deployment gone, the
// nodes underused for scaleDownAfter are drained and removed, except a busy
// one and the one whose pod a PodDisruptionBudget keeps: an event names the
// budget. With those pods gone too, the pool shrinks to its min.
func TestAutoscale(t *testing.T) {
	t.Parallel()
	flags := append(samePorts(t), "--autoscale-interval", "2s", "--autoscale-cooldown", "5s")
	e := startDocker(t, flags...)
	cl := dockerCluster("auto", "", 1, true, 1)
	cl.Spec.WorkerPools[0].Autoscale = &v1.Autoscale{Min: 1, Max: 4, ScaleDownAfter: "20s"}
	e.create(cl)
	first := "auto-default-0"

	t0 := time.Now()
	e.apply("auto", e.burst("auto", first, 4))

	// One decision: 1 → 4.
	var up v1.Operation
	waitfor.Cond(t, "an autoscale operation", 2*time.Minute, func() (bool, error) {
		ops, err := e.c.ListOperations(t.Context(), "default", "auto")
		if err != nil {
			return false, err
		}
		i := slices.IndexFunc(ops, func(o v1.Operation) bool { return o.Properties.Kind == v1.KindAutoscale })
		if i >= 0 {
			up = ops[i]
		}
		return i >= 0, nil
	})
	t.Logf("autoscale operation %s begun %s after the Deployment: %s", up.Name, time.Since(t0).Round(time.Millisecond), up.Properties.Reason)
	for _, want := range []string{"pool default grows from 1 to 4 (max 4): 3 pods unschedulable (default/burst-", "fit on 3 new nodes"} {
		if !strings.Contains(up.Properties.Reason, want) {
			t.Errorf("the operation's reason %q does not say %q", up.Properties.Reason, want)
		}
	}

	// kilnd dies while the operation runs; the next one finishes it.
	e.k.Kill(syscall.SIGKILL)
	<-e.k.Done()
	e.startKilnd("kilnd-again", append([]string{"--system-images", systemImages}, flags...)...)
	op := e.wait("auto", up.Name)
	e.mustKubectl("auto", "wait", "--for=jsonpath={.status.availableReplicas}=4", "deployment/burst", "--timeout=180s")
	t.Logf("4 burst pods Running %s after the Deployment (the operation took %s)", time.Since(t0).Round(time.Millisecond),
		op.EndTime.Sub(op.StartTime).Round(time.Millisecond))
	workers := e.readyWorkers("auto", 5, 4)
	containers := 0
	for _, o := range e.dockerObjects("default", "auto") {
		if strings.HasPrefix(o, "container ") {
			containers++
		}
	}
	if containers != 5 {
		t.Errorf("containers after the scale-up: %v; want 5 (1 control plane, 4 workers)", e.dockerObjects("default", "auto"))
	}
	ops, err := e.c.ListOperations(t.Context(), "default", "auto")
	if err != nil {
		t.Fatal(err)
	}
	var autoscales []string
	for _, o := range ops {
		if o.Properties.Kind == v1.KindAutoscale {
			autoscales = append(autoscales, o.Name)
		}
	}
	if len(autoscales) != 1 {
		t.Errorf("autoscale operations %v; want one decision for the burst", autoscales)
	}
	got, err := e.c.GetCluster(t.Context(), "default", "auto")
	if err != nil {
		t.Fatal(err)
	}
	if size := got.Spec.WorkerPools[0].Size; size != 4 {
		t.Errorf("pool default's size is %d, want 4", size)
	}

	// Down: the burst goes. The first node stays busy (a pod of 60% pinned
	// to it) and a small pod kept off it has a budget that allows no
	// disruption: the underused nodes but the budget's go, and the shrink
	// stops at 2 with an event naming the budget.
	e.apply("auto", strings.Replace(guarded, "NODE", first, 1))
	e.mustKubectl("auto", "wait", "--for=jsonpath={.status.currentHealthy}=1", "pdb/guarded", "--timeout=120s")
	var keeper string
	for _, p := range e.pods("auto", "app=guarded") {
		keeper = p.Spec.NodeName
	}
	e.mustKubectl("auto", "delete", "deployment", "burst", "--wait=true", "--timeout=120s")
	t1 := time.Now()
	steady := strings.Replace(strings.Replace(e.burst("auto", first, 1), "name: burst", "name: steady", 1),
		"      containers:", "      nodeSelector: {kubernetes.io/hostname: "+first+"}\n      containers:", 1)
	e.apply("auto", strings.ReplaceAll(steady, "app: burst", "app: steady"))
	budget := "PodDisruptionBudget default/guarded allows no more disruptions"
	waitfor.Cond(t, "the pool to shrink to 2, the budget's node kept", 4*time.Minute, func() (bool, error) {
		cl, err := e.c.GetCluster(t.Context(), "default", "auto")
		if err != nil {
			return false, err
		}
		said := slices.ContainsFunc(e.events("auto"), func(ev v1.Event) bool {
			return ev.Reason == "AutoscaleBlocked" && strings.Contains(ev.Message, "node "+keeper) && strings.Contains(ev.Message, budget)
		})
		return cl.Spec.WorkerPools[0].Size == 2 && cl.Status.ProvisioningState == v1.StateSucceeded && said,
			waitfor.NotYet(fmt.Errorf("size %d, %s, the budget named: %t", cl.Spec.WorkerPools[0].Size, cl.Status.ProvisioningState, said))
	})
	t.Logf("pool shrank to 2 %s after the burst was deleted (scaleDownAfter 20s), %s kept for its budget", time.Since(t1).Round(time.Millisecond), keeper)
	if left := e.readyWorkers("auto", 3, 2); !slices.Equal(left, slices.Sorted(slices.Values([]string{first, keeper}))) {
		t.Errorf("workers left %v; want %s and %s", left, first, keeper)
	}

	// With the budget's pod and the pinned one gone, the pool shrinks to its
	// min, every node that left drained first.
	e.mustKubectl("auto", "delete", "deployment", "guarded", "steady", "--wait=true", "--timeout=120s")
	waitfor.Cond(t, "the pool to shrink to 1", 4*time.Minute, func() (bool, error) {
		cl, err := e.c.GetCluster(t.Context(), "default", "auto")
		if err != nil {
			return false, err
		}
		return cl.Spec.WorkerPools[0].Size == 1 && cl.Status.ProvisioningState == v1.StateSucceeded,
			waitfor.NotYet(fmt.Errorf("size %d, %s", cl.Spec.WorkerPools[0].Size, cl.Status.ProvisioningState))
	})
	left := e.readyWorkers("auto", 2, 1)
	var drained []string
	for _, ev := range e.events("auto") {
		if ev.Reason == "NodeDrained" {
			drained = append(drained, ev.Node)
		}
	}
	slices.Sort(drained)
	want := slices.DeleteFunc(slices.Clone(workers), func(w string) bool { return w == left[0] })
	if !slices.Equal(drained, want) {
		t.Errorf("nodes drained %v; want %v (all but %s)", drained, want, left[0])
	}
}

// samePorts are kilnd's flags for listening on ports that stay the same
// when it is started again, as a production kilnd's do: the nodes made
// before it is killed reach the next one there (agents at the agent port,
// containerd at the registry's).
func samePorts(t testing.TB) []string {
	return []string{"--listen", fmt.Sprintf("127.0.0.1:%d", freePort(t)), "--agent-listen", fmt.Sprintf("127.0.0.1:%d", freePort(t))}
}
