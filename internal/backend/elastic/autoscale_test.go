package elastic

import (
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	v1 "kiln.dev/kiln/api/v1"
	"kiln.dev/kiln/internal/kubeapi"
)

const gib = 1 << 30

var t0 = time.Date(2026, 11, 26, 12, 0, 0, 0, time.UTC)

func res(milli int64, mem int64) kubeapi.Resources {
	return kubeapi.Resources{MilliCPU: milli, Memory: mem, Pods: 110}
}

// kubeNode is a Ready node of a pool offering cpu milli and mem bytes.
func kubeNode(name, pool string, milli, mem int64, labels ...string) kubeapi.Node {
	l := map[string]string{v1.LabelPool: pool, "kubernetes.io/hostname": name, "kubernetes.io/os": "linux"}
	for _, kv := range labels {
		k, v, _ := strings.Cut(kv, "=")
		l[k] = v
	}
	return kubeapi.Node{Name: name, Labels: l, Allocatable: res(milli, mem),
		Conditions: []kubeapi.Condition{{Type: "Ready", Status: "True"}}}
}

// pod is a Deployment's pod on a node ("" and unschedulable: pending).
func pod(name, node string, milli int64) kubeapi.Pod {
	return kubeapi.Pod{PodRef: kubeapi.PodRef{Namespace: "shop", Name: name}, NodeName: node, Phase: "Running",
		OwnerKind: "ReplicaSet", OwnerName: "web-1", Labels: map[string]string{"app": "web"},
		Requests: kubeapi.Resources{MilliCPU: milli, Memory: 64 << 20, Pods: 1}}
}

func pending(name string, milli int64) kubeapi.Pod {
	p := pod(name, "", milli)
	p.Phase, p.Unschedulable, p.UnschedulableMessage = "Pending", true, "0/2 nodes are available: Insufficient cpu"
	return p
}

func autoscaled(name string, size, lo, hi int) v1.WorkerPool {
	return v1.WorkerPool{Name: name, Size: size, Autoscale: &v1.Autoscale{Min: lo, Max: hi}}
}

func TestDecide(t *testing.T) {
	tests := []struct {
		name      string
		pools     []v1.WorkerPool
		state     State
		underused map[string]time.Time
		want      []Change
		reason    []string // each in the reason
		blocked   []string // each in one of the Blocked
	}{
		{
			name:  "a burst grows the pool in one step",
			pools: []v1.WorkerPool{autoscaled("a", 1, 1, 4)},
			state: State{
				Nodes: []kubeapi.Node{kubeNode("c-a-0", "a", 2000, 8*gib)},
				Pods:  []kubeapi.Pod{pod("web-0", "c-a-0", 1500), pending("web-1", 1500), pending("web-2", 1500), pending("web-3", 1500)},
			},
			want:   []Change{{Pool: "a", From: 1, To: 4}},
			reason: []string{"pool a grows from 1 to 4 (max 4): 3 pods unschedulable (shop/web-1, shop/web-2, shop/web-3) fit on 3 new nodes"},
		},
		{
			name:  "max bounds the growth, and the pod left over says why",
			pools: []v1.WorkerPool{autoscaled("a", 1, 1, 3)},
			state: State{
				Nodes: []kubeapi.Node{kubeNode("c-a-0", "a", 2000, 8*gib)},
				Pods:  []kubeapi.Pod{pod("web-0", "c-a-0", 1500), pending("web-1", 1500), pending("web-2", 1500), pending("web-3", 1500)},
			},
			want:    []Change{{Pool: "a", From: 1, To: 3}},
			blocked: []string{"pod shop/web-3 is unschedulable and no autoscaled pool can take it: pool a: its max 3 leaves no room"},
		},
		{
			name:  "small pods share new nodes",
			pools: []v1.WorkerPool{autoscaled("a", 1, 1, 10)},
			state: State{
				Nodes: []kubeapi.Node{kubeNode("c-a-0", "a", 2000, 8*gib)},
				Pods: []kubeapi.Pod{pod("web-0", "c-a-0", 1900), pending("web-1", 900), pending("web-2", 900),
					pending("web-3", 900), pending("web-4", 900)},
			},
			want: []Change{{Pool: "a", From: 1, To: 3}},
		},
		{
			name:  "a pod an existing node has room for waits for the scheduler",
			pools: []v1.WorkerPool{autoscaled("a", 2, 1, 4)},
			state: State{
				Nodes: []kubeapi.Node{kubeNode("c-a-0", "a", 2000, 8*gib), kubeNode("c-a-1", "a", 2000, 8*gib)},
				Pods:  []kubeapi.Pod{pod("web-0", "c-a-0", 1500), pending("web-1", 1500)},
			},
		},
		{
			name: "the pool whose labels and size fit is chosen, and the others say why not",
			pools: []v1.WorkerPool{autoscaled("small", 1, 1, 5), autoscaled("big", 1, 1, 5),
				{Name: "fixed", Size: 1}},
			state: State{
				Nodes: []kubeapi.Node{kubeNode("c-small-0", "small", 2000, 8*gib), kubeNode("c-big-0", "big", 8000, 32*gib, "size=big"),
					kubeNode("c-fixed-0", "fixed", 16000, 64*gib, "size=big")},
				Pods: []kubeapi.Pod{pod("db-0", "c-big-0", 7000), pod("x", "c-fixed-0", 16000),
					withSelector(pending("db-1", 6000), "size", "big")},
			},
			want:   []Change{{Pool: "big", From: 1, To: 2}},
			reason: []string{"pool big grows from 1 to 2", "Not another pool: pool small: its nodeSelector size=big does not match"},
		},
		{
			name:  "a taint the pod does not tolerate keeps the pool out",
			pools: []v1.WorkerPool{{Name: "gpu", Size: 0, Taints: []string{"gpu=true:NoSchedule"}, Autoscale: &v1.Autoscale{Max: 2}}, {Name: "base", Size: 1}},
			state: State{
				Nodes: []kubeapi.Node{kubeNode("c-base-0", "base", 2000, 8*gib)},
				Pods:  []kubeapi.Pod{pod("web-0", "c-base-0", 2000), pending("web-1", 1000)},
			},
			blocked: []string{"pod shop/web-1 is unschedulable and no autoscaled pool can take it: pool gpu: it does not tolerate the taint gpu=true:NoSchedule"},
		},
		{
			name:  "a pod larger than any node of the pool",
			pools: []v1.WorkerPool{autoscaled("a", 1, 1, 4)},
			state: State{
				Nodes: []kubeapi.Node{kubeNode("c-a-0", "a", 2000, 8*gib)},
				Pods:  []kubeapi.Pod{pending("huge", 3000)},
			},
			blocked: []string{"pool a: it requests cpu 3000m, memory 64Mi, a node offers cpu 2000m, memory 8Gi"},
		},
		{
			name:  "underused nodes go after scaleDownAfter, emptiest first, their pods moved",
			pools: []v1.WorkerPool{autoscaled("a", 3, 1, 4)},
			state: State{
				Nodes: []kubeapi.Node{kubeNode("c-a-0", "a", 2000, 8*gib), kubeNode("c-a-1", "a", 2000, 8*gib), kubeNode("c-a-2", "a", 2000, 8*gib)},
				Pods:  []kubeapi.Pod{pod("web-0", "c-a-0", 1200), pod("web-1", "c-a-2", 200)},
			},
			underused: map[string]time.Time{"c-a-1": t0.Add(-11 * time.Minute), "c-a-2": t0.Add(-10 * time.Minute)},
			want:      []Change{{Pool: "a", From: 3, To: 1, Remove: []string{"c-a-1", "c-a-2"}}},
			reason:    []string{"pool a shrinks from 3 to 1 (min 1, scaleDownAfter 10m0s): underused nodes c-a-1 (requests 0% of it, underused for 11m0s)"},
		},
		{
			name:  "a pod no pool can help does not keep underused nodes",
			pools: []v1.WorkerPool{autoscaled("a", 2, 1, 4)},
			state: State{
				Nodes: []kubeapi.Node{kubeNode("c-a-0", "a", 2000, 8*gib), kubeNode("c-a-1", "a", 2000, 8*gib)},
				Pods:  []kubeapi.Pod{pod("web-0", "c-a-0", 1500), pending("huge", 3000)},
			},
			underused: map[string]time.Time{"c-a-1": t0.Add(-time.Hour)},
			want:      []Change{{Pool: "a", From: 2, To: 1, Remove: []string{"c-a-1"}}},
			blocked:   []string{"pod shop/huge is unschedulable and no autoscaled pool can take it: pool a: it requests cpu 3000m"},
		},
		{
			name:  "not before scaleDownAfter",
			pools: []v1.WorkerPool{autoscaled("a", 2, 1, 4)},
			state: State{
				Nodes: []kubeapi.Node{kubeNode("c-a-0", "a", 2000, 8*gib), kubeNode("c-a-1", "a", 2000, 8*gib)},
			},
			underused: map[string]time.Time{"c-a-1": t0.Add(-9 * time.Minute)},
		},
		{
			name:  "never below min",
			pools: []v1.WorkerPool{autoscaled("a", 3, 2, 4)},
			state: State{
				Nodes: []kubeapi.Node{kubeNode("c-a-0", "a", 2000, 8*gib), kubeNode("c-a-1", "a", 2000, 8*gib), kubeNode("c-a-2", "a", 2000, 8*gib)},
			},
			underused: map[string]time.Time{"c-a-0": t0.Add(-time.Hour), "c-a-1": t0.Add(-time.Hour), "c-a-2": t0.Add(-time.Hour)},
			want:      []Change{{Pool: "a", From: 3, To: 2, Remove: []string{"c-a-0"}}},
		},
		{
			name:  "a PodDisruptionBudget that allows no disruption keeps its node",
			pools: []v1.WorkerPool{autoscaled("a", 3, 1, 4)},
			state: State{
				Nodes: []kubeapi.Node{kubeNode("c-a-0", "a", 2000, 8*gib), kubeNode("c-a-1", "a", 2000, 8*gib), kubeNode("c-a-2", "a", 2000, 8*gib)},
				Pods:  []kubeapi.Pod{pod("web-0", "c-a-0", 1200), pod("web-1", "c-a-2", 200)},
				Budgets: []kubeapi.PodDisruptionBudget{{Namespace: "shop", Name: "web", DisruptionsAllowed: 0, CurrentHealthy: 2, DesiredHealthy: 2,
					Selector: &kubeapi.LabelSelector{MatchLabels: map[string]string{"app": "web"}}}},
			},
			underused: map[string]time.Time{"c-a-1": t0.Add(-time.Hour), "c-a-2": t0.Add(-time.Hour)},
			want:      []Change{{Pool: "a", From: 3, To: 2, Remove: []string{"c-a-1"}}},
			blocked:   []string{"node c-a-2 of pool a is underused since", "PodDisruptionBudget shop/web allows no more disruptions (2 of 2 desired pods healthy) and selects pod shop/web-1"},
		},
		{
			name:  "a pod without a controller keeps its node",
			pools: []v1.WorkerPool{autoscaled("a", 2, 1, 4)},
			state: State{
				Nodes: []kubeapi.Node{kubeNode("c-a-0", "a", 2000, 8*gib), kubeNode("c-a-1", "a", 2000, 8*gib)},
				Pods:  []kubeapi.Pod{bare(pod("debug", "c-a-1", 100)), pod("web-0", "c-a-0", 1500)},
			},
			underused: map[string]time.Time{"c-a-1": t0.Add(-time.Hour)},
			blocked:   []string{"pod shop/debug has no controller"},
		},
		{
			name:  "pods that would fit on no other node keep theirs",
			pools: []v1.WorkerPool{autoscaled("a", 2, 1, 4)},
			state: State{
				Nodes: []kubeapi.Node{kubeNode("c-a-0", "a", 2000, 8*gib), kubeNode("c-a-1", "a", 2000, 8*gib)},
				Pods:  []kubeapi.Pod{pod("web-0", "c-a-0", 1500), pod("web-1", "c-a-1", 900)},
			},
			underused: map[string]time.Time{"c-a-1": t0.Add(-time.Hour)},
			blocked:   []string{"pod shop/web-1 (requests cpu 900m, memory 64Mi) would fit on no other node"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d := Decide(Input{Spec: &v1.ClusterSpec{WorkerPools: tt.pools}, State: tt.state, Underused: tt.underused, Now: t0})
			if diff := cmp.Diff(tt.want, d.Changes, cmpopts.EquateEmpty()); diff != "" {
				t.Errorf("changes (-want +got):\n%s\nreason: %s\nblocked: %q", diff, d.Reason, d.Blocked)
			}
			for _, r := range tt.reason {
				if !strings.Contains(d.Reason, r) {
					t.Errorf("reason %q does not say %q", d.Reason, r)
				}
			}
			all := strings.Join(d.Blocked, "\n")
			for _, b := range tt.blocked {
				if !strings.Contains(all, b) {
					t.Errorf("blocked %q does not say %q", d.Blocked, b)
				}
			}
			if len(tt.blocked) == 0 && len(d.Blocked) > 0 {
				t.Errorf("blocked %q, want nothing", d.Blocked)
			}
		})
	}
}

// TestUnderusedClock: a node's clock starts when it is first seen
// underused, runs on while it stays so, and stops when it is busy again.
func TestUnderusedClock(t *testing.T) {
	spec := &v1.ClusterSpec{WorkerPools: []v1.WorkerPool{autoscaled("a", 2, 1, 4)}}
	nodes := []kubeapi.Node{kubeNode("c-a-0", "a", 2000, 8*gib), kubeNode("c-a-1", "a", 2000, 8*gib)}
	busy := State{Nodes: nodes, Pods: []kubeapi.Pod{pod("web-0", "c-a-0", 1500), pod("web-1", "c-a-1", 1500)}}
	idle := State{Nodes: nodes, Pods: []kubeapi.Pod{pod("web-0", "c-a-0", 1500)}}

	d := Decide(Input{Spec: spec, State: idle, Now: t0})
	if diff := cmp.Diff(map[string]time.Time{"c-a-1": t0}, d.Underused); diff != "" {
		t.Fatalf("first look (-want +got):\n%s", diff)
	}
	d = Decide(Input{Spec: spec, State: idle, Underused: d.Underused, Now: t0.Add(5 * time.Minute)})
	if !d.Underused["c-a-1"].Equal(t0) || len(d.Changes) > 0 {
		t.Fatalf("after 5m: underused %v changes %v, want since t0 and no change", d.Underused, d.Changes)
	}
	d = Decide(Input{Spec: spec, State: busy, Underused: d.Underused, Now: t0.Add(6 * time.Minute)})
	if len(d.Underused) != 0 {
		t.Fatalf("busy again: underused %v", d.Underused)
	}
	d = Decide(Input{Spec: spec, State: idle, Underused: d.Underused, Now: t0.Add(11 * time.Minute)})
	if len(d.Changes) > 0 || !d.Underused["c-a-1"].Equal(t0.Add(11*time.Minute)) {
		t.Fatalf("idle again: changes %v underused %v, want the clock started again", d.Changes, d.Underused)
	}
}

// TestPoolWithoutNodes: a pool at 0 is shaped by its instance type, or
// else by another worker node, with its own labels and taints.
func TestPoolWithoutNodes(t *testing.T) {
	spec := &v1.ClusterSpec{WorkerPools: []v1.WorkerPool{{Name: "base", Size: 1},
		{Name: "batch", Size: 0, InstanceType: "large", Labels: map[string]string{"work": "batch"}, Autoscale: &v1.Autoscale{Max: 3}}}}
	st := State{
		Nodes: []kubeapi.Node{kubeNode("c-base-0", "base", 2000, 8*gib)},
		Pods:  []kubeapi.Pod{withSelector(pending("job-1", 3000), "work", "batch")},
	}
	d := Decide(Input{Spec: spec, State: st, Now: t0})
	if len(d.Changes) != 0 || !strings.Contains(strings.Join(d.Blocked, ""), "a node offers cpu 2000m") {
		t.Errorf("shaped as c-base-0: changes %v blocked %q, want none and too large", d.Changes, d.Blocked)
	}
	large := func(it string) (kubeapi.Resources, bool) { return res(4000, 16*gib), it == "large" }
	d = Decide(Input{Spec: spec, State: st, Shape: large, Now: t0})
	if diff := cmp.Diff([]Change{{Pool: "batch", From: 0, To: 1}}, d.Changes); diff != "" {
		t.Errorf("shaped by its instance type (-want +got):\n%s\n%s %q", diff, d.Reason, d.Blocked)
	}
}

func withSelector(p kubeapi.Pod, k, v string) kubeapi.Pod {
	p.NodeSelector = map[string]string{k: v}
	return p
}

func bare(p kubeapi.Pod) kubeapi.Pod {
	p.OwnerKind, p.OwnerName = "", ""
	return p
}
