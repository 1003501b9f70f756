package clusterstate

import (
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	v1 "kiln.dev/kiln/api/v1"
)

var now = time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)

// node is a node record; beat is how long ago its last heartbeat was (a
// negative beat: none, as the sim's nodes).
func node(name, role, pool, state string, beat time.Duration) v1.Node {
	n := v1.Node{Name: name, Role: role, Pool: pool, State: state}
	if beat >= 0 {
		t := now.Add(-beat)
		n.LastHeartbeat = &t
	}
	return n
}

func spec(cp int, pools ...v1.WorkerPool) *v1.ClusterSpec {
	return &v1.ClusterSpec{ControlPlane: v1.ControlPlane{Size: cp}, WorkerPools: pools}
}

func pool(name string, size int) v1.WorkerPool { return v1.WorkerPool{Name: name, Size: size} }

func TestCounts(t *testing.T) {
	// A failed create's cluster: 2 READY nodes (the "0 + 0, 0 ready" the
	// stored counts showed), one worker still provisioning, one deleting,
	// one NOT_READY.
	nodes := []v1.Node{
		node("cp-1", v1.RoleControlPlane, "", v1.NodeReady, time.Second),
		node("a-1", v1.RoleWorker, "a", v1.NodeReady, time.Second),
		node("a-2", v1.RoleWorker, "a", v1.NodeProvisioning, -1),
		node("a-3", v1.RoleWorker, "a", v1.NodeDeleting, time.Second),
		node("b-1", v1.RoleWorker, "b", v1.NodeNotReady, time.Minute),
	}
	got := Counts(spec(1, pool("a", 3), pool("b", 1)), nodes)
	want := v1.NodeCounts{
		ControlPlane: 1, Workers: 3, Ready: 2,
		ControlPlaneWanted: 1, ControlPlaneReady: 1,
		WorkersWanted: 4, WorkersReady: 1, NotReady: 1,
		Pools: []v1.PoolCount{{Name: "a", Wanted: 3, Present: 2, Ready: 1}, {Name: "b", Wanted: 1, Present: 1, Ready: 0}},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("Counts (-want +got):\n%s", diff)
	}
}

func TestHealth(t *testing.T) {
	quiet := now.Add(-10 * time.Second)
	ready := func(name, role, pool string) v1.Node { return node(name, role, pool, v1.NodeReady, time.Second) }
	silent := func(name, role, pool string) v1.Node { return node(name, role, pool, v1.NodeReady, 12*time.Second) }
	notReady := func(name, role, pool string) v1.Node { return node(name, role, pool, v1.NodeNotReady, time.Minute) }
	cp, w := v1.RoleControlPlane, v1.RoleWorker
	tests := []struct {
		name   string
		spec   *v1.ClusterSpec
		state  string
		nodes  []v1.Node
		health string
		reason string
		says   []string
	}{
		{"all answer", spec(1, pool("a", 2)), v1.StateSucceeded,
			[]v1.Node{ready("cp-1", cp, ""), ready("a-1", w, "a"), ready("a-2", w, "a")}, v1.HealthHealthy, "AsExpected", nil},
		{"sim nodes have no heartbeats and are trusted", spec(1, pool("a", 1)), v1.StateSucceeded,
			[]v1.Node{node("cp-1", cp, "", v1.NodeReady, -1), node("a-1", w, "a", v1.NodeReady, -1)}, v1.HealthHealthy, "AsExpected", nil},
		{"every node's container removed: silent before NOT_READY", spec(1, pool("a", 1)), v1.StateSucceeded,
			[]v1.Node{silent("cp-1", cp, ""), silent("a-1", w, "a")}, v1.HealthUnhealthy, "ControlPlaneDown",
			[]string{"no control-plane node answers (cp-1)", "no worker node answers (a-1)"}},
		{"the control plane down, workers fine", spec(1, pool("a", 2)), v1.StateSucceeded,
			[]v1.Node{notReady("cp-1", cp, ""), ready("a-1", w, "a"), ready("a-2", w, "a")}, v1.HealthUnhealthy, "ControlPlaneDown", []string{"cp-1"}},
		{"two of three control-plane nodes down: no quorum", spec(3), v1.StateSucceeded,
			[]v1.Node{notReady("cp-1", cp, ""), notReady("cp-2", cp, ""), ready("cp-3", cp, "")}, v1.HealthUnhealthy, "ControlPlaneQuorumLost",
			[]string{"1 of 3 control-plane nodes answer", "quorum of 2", "cp-1, cp-2"}},
		{"a control plane growing from 1 to 3: the new ones are not members yet", spec(3), v1.StateUpdating,
			[]v1.Node{ready("cp-1", cp, ""), node("cp-2", cp, "", v1.NodeProvisioning, -1)}, v1.HealthHealthy, "AsExpected", nil},
		{"one of three control-plane nodes down", spec(3), v1.StateSucceeded,
			[]v1.Node{ready("cp-1", cp, ""), notReady("cp-2", cp, ""), ready("cp-3", cp, "")}, v1.HealthDegraded, "ControlPlaneDegraded", []string{"cp-2"}},
		{"a worker down within maxUnhealthy", spec(1, pool("a", 3)), v1.StateSucceeded,
			[]v1.Node{ready("cp-1", cp, ""), notReady("a-1", w, "a"), ready("a-2", w, "a"), ready("a-3", w, "a")}, v1.HealthDegraded, "WorkersNotReady",
			[]string{"pool a: 1 of 3 down (a-1)"}},
		{"workers down beyond maxUnhealthy", spec(1, pool("a", 3)), v1.StateSucceeded,
			[]v1.Node{ready("cp-1", cp, ""), notReady("a-1", w, "a"), silent("a-2", w, "a"), ready("a-3", w, "a")}, v1.HealthDegraded, "TooManyUnhealthy",
			[]string{"pool a: 2 of 3 down (a-1, a-2), more than its maxUnhealthy allows (1)"}},
		{"a failed operation on a cluster whose nodes answer", spec(1, pool("a", 1)), v1.StateFailed,
			[]v1.Node{ready("cp-1", cp, ""), ready("a-1", w, "a")}, v1.HealthHealthy, "AsExpected", nil},
		{"a node missing after the last operation", spec(1, pool("a", 2)), v1.StateSucceeded,
			[]v1.Node{ready("cp-1", cp, ""), ready("a-1", w, "a")}, v1.HealthDegraded, "NodesMissing", []string{"pool a: 1 of 2 nodes present"}},
		{"a scale-up under way is not missing nodes", spec(1, pool("a", 2)), v1.StateUpdating,
			[]v1.Node{ready("cp-1", cp, ""), ready("a-1", w, "a")}, v1.HealthHealthy, "AsExpected", nil},
		{"being created", spec(1, pool("a", 2)), v1.StateCreating,
			[]v1.Node{node("cp-1", cp, "", v1.NodeProvisioning, -1)}, v1.HealthUnknown, "Creating", nil},
		{"hibernated", spec(1, pool("a", 2)), v1.StateHibernated,
			[]v1.Node{notReady("cp-1", cp, "")}, v1.HealthUnknown, "Hibernated", nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			h := Health(tc.spec, tc.state, tc.nodes, quiet)
			if h.State != tc.health || h.Reason != tc.reason {
				t.Errorf("health %s (%s), want %s (%s): %s", h.State, h.Reason, tc.health, tc.reason, h.Message)
			}
			for _, s := range tc.says {
				if !strings.Contains(h.Message, s) {
					t.Errorf("message %q does not say %q", h.Message, s)
				}
			}
		})
	}
}

// A process started less than the silence ago trusts READY: the agents
// reconnect to a kilnd started again before their old heartbeats count.
func TestQuiet(t *testing.T) {
	if q := Quiet(now, now.Add(-5*time.Second), 10*time.Second); !q.IsZero() {
		t.Errorf("5 s after the start, quiet %s: want none", q)
	}
	if q := Quiet(now, now.Add(-time.Minute), 10*time.Second); !q.Equal(now.Add(-10 * time.Second)) {
		t.Errorf("a minute after the start, quiet %s: want 10 s ago", q)
	}
	if q := Quiet(now, now.Add(-time.Hour), 0); !q.IsZero() {
		t.Errorf("without a silence, quiet %s", q)
	}
}
