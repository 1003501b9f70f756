package health

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	v1 "kiln.dev/kiln/api/v1"
)

var now = time.Date(2026, 11, 21, 12, 0, 0, 0, time.UTC)

func worker(name, pool, state string, lastBeat time.Duration) Node {
	t := now.Add(-lastBeat)
	return Node{Node: v1.Node{Name: name, Role: v1.RoleWorker, Pool: pool, State: state, LastHeartbeat: &t}}
}

func interrupted(n Node) Node {
	n.Interruption = &v1.Interruption{Kind: v1.InterruptionSpot, Action: "terminate", At: now.Add(2 * time.Minute)}
	return n
}

func TestAssess(t *testing.T) {
	pool := func(name string, size int, timeout, max string) v1.WorkerPool {
		return v1.WorkerPool{Name: name, Size: size, UnhealthyTimeout: timeout, MaxUnhealthy: max}
	}
	kubeDown := func(n Node, since time.Duration) Node { n.KubeNotReadySince = now.Add(-since); return n }
	tests := []struct {
		name        string
		pools       []v1.WorkerPool
		nodes       []Node
		replace     []string
		waiting     []string
		blockedPool []string
	}{
		{
			// 40% of 1 is 0 nodes, but a percentage allows at least one:
			// a pool of one is repaired.
			name:    "a pool of one whose node died",
			pools:   []v1.WorkerPool{pool("a", 1, "1m", "")},
			nodes:   []Node{worker("a-0", "a", v1.NodeNotReady, 5*time.Minute)},
			replace: []string{"a-0"},
		},
		{
			name:  "all healthy",
			pools: []v1.WorkerPool{pool("a", 3, "", "")},
			nodes: []Node{worker("a-0", "a", v1.NodeReady, time.Second), worker("a-1", "a", v1.NodeReady, time.Second)},
		},
		{
			name:    "an interruption notice replaces at once, whatever maxUnhealthy",
			pools:   []v1.WorkerPool{pool("a", 2, "1m", "0")},
			nodes:   []Node{interrupted(worker("a-0", "a", v1.NodeReady, 0)), interrupted(worker("a-1", "a", v1.NodeReady, 0))},
			replace: []string{"a-0", "a-1"},
		},
		{
			name:    "missed heartbeats past the default 5m",
			pools:   []v1.WorkerPool{pool("a", 3, "", "")},
			nodes:   []Node{worker("a-0", "a", v1.NodeNotReady, 6*time.Minute), worker("a-1", "a", v1.NodeReady, 0), worker("a-2", "a", v1.NodeReady, 0)},
			replace: []string{"a-0"},
		},
		{
			name:    "not yet past the pool's timeout",
			pools:   []v1.WorkerPool{pool("a", 3, "10m", "")},
			nodes:   []Node{worker("a-0", "a", v1.NodeNotReady, 6*time.Minute), worker("a-1", "a", v1.NodeReady, 0), worker("a-2", "a", v1.NodeReady, 0)},
			waiting: []string{"a-0"},
		},
		{
			name:    "NotReady in Kubernetes although the agent beats",
			pools:   []v1.WorkerPool{pool("a", 3, "1m", "")},
			nodes:   []Node{kubeDown(worker("a-0", "a", v1.NodeReady, 0), 2*time.Minute), worker("a-1", "a", v1.NodeReady, 0), worker("a-2", "a", v1.NodeReady, 0)},
			replace: []string{"a-0"},
		},
		{
			name:        "more than 40% of the pool unhealthy: none replaced",
			pools:       []v1.WorkerPool{pool("a", 3, "1m", "")},
			nodes:       []Node{worker("a-0", "a", v1.NodeNotReady, 2*time.Minute), worker("a-1", "a", v1.NodeNotReady, 30*time.Second), worker("a-2", "a", v1.NodeReady, 0)},
			waiting:     []string{"a-1"},
			blockedPool: []string{"a"},
		},
		{
			name:    "a count allows more",
			pools:   []v1.WorkerPool{pool("a", 3, "1m", "2")},
			nodes:   []Node{worker("a-0", "a", v1.NodeNotReady, 2*time.Minute), worker("a-1", "a", v1.NodeNotReady, 3*time.Minute), worker("a-2", "a", v1.NodeReady, 0)},
			replace: []string{"a-0", "a-1"},
		},
		{
			name:  "pools judged apart; control plane and uninstalled nodes never",
			pools: []v1.WorkerPool{pool("a", 2, "1m", "100%"), pool("b", 2, "1m", "0")},
			nodes: []Node{
				worker("a-0", "a", v1.NodeNotReady, 2*time.Minute), worker("a-1", "a", v1.NodeReady, 0),
				worker("b-0", "b", v1.NodeNotReady, 2*time.Minute), worker("b-1", "b", v1.NodeReady, 0),
				{Node: v1.Node{Name: "cp-0", Role: v1.RoleControlPlane, State: v1.NodeNotReady, LastHeartbeat: &now}},
				worker("a-9", "a", v1.NodeProvisioning, time.Hour),
			},
			replace:     []string{"a-0"},
			blockedPool: []string{"b"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			v := Assess(&v1.ClusterSpec{WorkerPools: tt.pools}, tt.nodes, now)
			if diff := cmp.Diff(tt.replace, v.Replace, cmpopts.EquateEmpty()); diff != "" {
				t.Errorf("replace (-want +got):\n%s", diff)
			}
			var waiting, blocked []string
			for n := range v.Waiting {
				waiting = append(waiting, n)
			}
			for p := range v.Blocked {
				blocked = append(blocked, p)
			}
			if diff := cmp.Diff(tt.waiting, waiting, cmpopts.EquateEmpty(), cmpopts.SortSlices(func(a, b string) bool { return a < b })); diff != "" {
				t.Errorf("waiting (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tt.blockedPool, blocked, cmpopts.EquateEmpty(), cmpopts.SortSlices(func(a, b string) bool { return a < b })); diff != "" {
				t.Errorf("blocked pools (-want +got):\n%s", diff)
			}
		})
	}
}

// The blocked message says how many, which, and the limit.
func TestBlockedMessage(t *testing.T) {
	v := Assess(&v1.ClusterSpec{WorkerPools: []v1.WorkerPool{{Name: "a", Size: 3, UnhealthyTimeout: "1m"}}},
		[]Node{worker("a-0", "a", v1.NodeNotReady, 2*time.Minute), worker("a-1", "a", v1.NodeNotReady, 2*time.Minute), worker("a-2", "a", v1.NodeReady, 0)}, now)
	want := "2 of 3 nodes of pool a are unhealthy (a-0, a-1), more than maxUnhealthy 40% allows (1): none is replaced until the others recover or the pool is changed"
	if got := v.BlockedMessage(); got != want {
		t.Errorf("message:\n got %s\nwant %s", got, want)
	}
}
