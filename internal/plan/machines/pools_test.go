package machines

import (
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	v1 "kiln.dev/kiln/api/v1"
	"kiln.dev/kiln/internal/kubeapi"
	"kiln.dev/kiln/internal/plan/step"
	"kiln.dev/kiln/internal/provider"
)

func TestSelectWorkers(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	at := func(d time.Duration) time.Time { return t0.Add(d) }
	m := func(name, pool string, created time.Time) Member {
		return Member{Name: name, Pool: pool, Index: index(name), Created: created, Machine: true}
	}
	pool := func(name string, size int) v1.WorkerPool { return v1.WorkerPool{Name: name, Size: size} }
	tests := []struct {
		name        string
		pools       []v1.WorkerPool
		members     []Member
		leaving     []string // chosen by an autoscaler
		wantKeep    []string
		wantSurplus []string
	}{
		{
			name:     "create: numbers from 0",
			pools:    []v1.WorkerPool{pool("a", 3), pool("b", 1)},
			wantKeep: []string{"c-a-0", "c-a-1", "c-a-2", "c-b-0"},
		},
		{
			name:     "scale up: the lowest free numbers",
			pools:    []v1.WorkerPool{pool("a", 4)},
			members:  []Member{m("c-a-0", "a", at(0)), m("c-a-2", "a", at(0))},
			wantKeep: []string{"c-a-0", "c-a-1", "c-a-2", "c-a-3"},
		},
		{
			name:  "scale down: one generation, the highest numbers go first",
			pools: []v1.WorkerPool{pool("a", 1)},
			// Registered a second apart, as agents of one operation do.
			members:     []Member{m("c-a-0", "a", at(1*time.Second)), m("c-a-1", "a", at(0)), m("c-a-2", "a", at(2*time.Second))},
			wantKeep:    []string{"c-a-0"},
			wantSurplus: []string{"c-a-2", "c-a-1"},
		},
		{
			name:  "scale down: the newest generation goes first, whatever its number",
			pools: []v1.WorkerPool{pool("a", 2)},
			// c-a-0 was made again a minute after the others.
			members:     []Member{m("c-a-0", "a", at(time.Minute)), m("c-a-1", "a", at(0)), m("c-a-2", "a", at(0))},
			wantKeep:    []string{"c-a-1", "c-a-2"},
			wantSurplus: []string{"c-a-0"},
		},
		{
			name:        "scale down: a machine that never registered goes first",
			pools:       []v1.WorkerPool{pool("a", 2)},
			members:     []Member{m("c-a-0", "a", time.Time{}), m("c-a-1", "a", at(0)), m("c-a-2", "a", at(time.Hour))},
			wantKeep:    []string{"c-a-1", "c-a-2"},
			wantSurplus: []string{"c-a-0"},
		},
		{
			name:        "a removed pool is surplus, a new pool gets new machines",
			pools:       []v1.WorkerPool{pool("a", 1), pool("gpu", 2)},
			members:     []Member{m("c-a-0", "a", at(0)), m("c-old-0", "old", at(time.Hour)), m("c-old-1", "old", at(0))},
			wantKeep:    []string{"c-a-0", "c-gpu-0", "c-gpu-1"},
			wantSurplus: []string{"c-old-0", "c-old-1"},
		},
		{
			name:        "scale to zero",
			pools:       []v1.WorkerPool{pool("a", 0)},
			members:     []Member{m("c-a-0", "a", at(0)), m("c-a-1", "a", at(0))},
			wantSurplus: []string{"c-a-1", "c-a-0"},
		},
		{
			name:  "scale down: the nodes an autoscaler chose go, in its order, whatever their age",
			pools: []v1.WorkerPool{pool("a", 2)},
			members: []Member{m("c-a-0", "a", at(0)), m("c-a-1", "a", at(0)), m("c-a-2", "a", at(time.Hour)),
				m("c-a-3", "a", at(time.Hour))},
			leaving:     []string{"c-a-1", "c-a-0"},
			wantKeep:    []string{"c-a-2", "c-a-3"},
			wantSurplus: []string{"c-a-1", "c-a-0"},
		},
		{
			name:  "scale down: a node that is not Ready goes first, whatever its age",
			pools: []v1.WorkerPool{pool("a", 2)},
			members: []Member{m("c-a-0", "a", at(0)), {Name: "c-a-1", Pool: "a", Index: 1, Created: at(0), Machine: true, NotReady: true},
				m("c-a-2", "a", at(time.Hour)), m("c-a-3", "a", at(time.Hour))},
			wantKeep:    []string{"c-a-0", "c-a-2"},
			wantSurplus: []string{"c-a-1", "c-a-3"},
		},
		{
			name:     "a record left without its machine still counts",
			pools:    []v1.WorkerPool{pool("a", 2)},
			members:  []Member{m("c-a-0", "a", at(0)), {Name: "c-a-1", Pool: "a", Index: 1, Created: at(0)}},
			wantKeep: []string{"c-a-0", "c-a-1"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			keep, surplus := selectWorkers("c", "v1.36.3", tt.pools, tt.members, tt.leaving)
			var sn []string
			for _, s := range surplus {
				sn = append(sn, s.Name)
			}
			if diff := cmp.Diff(tt.wantKeep, step.Names(keep), cmpopts.EquateEmpty()); diff != "" {
				t.Errorf("kept (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tt.wantSurplus, sn); diff != "" {
				t.Errorf("surplus, in order of removal (-want +got):\n%s", diff)
			}
		})
	}
}

func TestSelectWorkersGivesPoolSettings(t *testing.T) {
	p := v1.WorkerPool{Name: "gpu", Size: 3, InstanceType: "big", Zones: []string{"z1", "z2"}}
	keep, _ := selectWorkers("c", "v1.36.3", []v1.WorkerPool{p}, nil, nil)
	rev := poolRevision("v1.36.3", p)
	want := []provider.MachineSpec{
		{Name: "c-gpu-0", Role: v1.RoleWorker, Pool: "gpu", InstanceType: "big", Zone: "z1", Revision: rev},
		{Name: "c-gpu-1", Role: v1.RoleWorker, Pool: "gpu", InstanceType: "big", Zone: "z2", Revision: rev},
		{Name: "c-gpu-2", Role: v1.RoleWorker, Pool: "gpu", InstanceType: "big", Zone: "z1", Revision: rev},
	}
	if diff := cmp.Diff(want, keep); diff != "" {
		t.Errorf("machines (-want +got):\n%s", diff)
	}
}

func TestDrainFailureNamesPodsBudgetAndTimeout(t *testing.T) {
	de := &kubeapi.DrainError{Node: "c-a-2", Timeout: 20 * time.Second, Status: kubeapi.DrainStatus{Left: []kubeapi.PodState{
		{PodRef: kubeapi.PodRef{Namespace: "default", Name: "web-1"}, Refused: "The disruption budget web needs 3 healthy pods and has 3 currently", Budgets: []string{"web"}},
		{PodRef: kubeapi.PodRef{Namespace: "batch", Name: "job-1"}, Evicted: true},
	}}}
	fe := drainFailure("/v1/projects/p/clusters/c/nodes/c-a-2", Member{Name: "c-a-2", Pool: "a"}, 20*time.Second, "spec.workerPools[0].drainTimeout", de)
	if fe.Code != v1.CodeDrainTimeout || fe.Retryable || fe.Target != "/v1/projects/p/clusters/c/nodes/c-a-2" {
		t.Errorf("failure %+v: want a terminal DrainTimeout on the node", fe)
	}
	for _, s := range []string{
		"node c-a-2 of pool a was not drained within 20s (spec.workerPools[0].drainTimeout): 2 pods left",
		"default/web-1: eviction refused by PodDisruptionBudget web: The disruption budget web needs 3 healthy pods and has 3 currently",
		"batch/job-1: evicted, still terminating",
		"The node stays cordoned and was not removed",
		"relax the PodDisruptionBudget",
	} {
		if !strings.Contains(fe.Message, s) {
			t.Errorf("message %q\ndoes not say %q", fe.Message, s)
		}
	}
	want := []v1.Error{
		{Code: v1.CodeDrainTimeout, Target: "pods/default/web-1", Message: "default/web-1: eviction refused by PodDisruptionBudget web: The disruption budget web needs 3 healthy pods and has 3 currently"},
		{Code: v1.CodeDrainTimeout, Target: "pods/batch/job-1", Message: "batch/job-1: evicted, still terminating"},
	}
	if diff := cmp.Diff(want, fe.Details); diff != "" {
		t.Errorf("details (-want +got):\n%s", diff)
	}
}

// A revision changes with what a machine is made for, and only with that.
func TestPoolRevision(t *testing.T) {
	p := v1.WorkerPool{Name: "a", Size: 3, InstanceType: "small", Zones: []string{"z1", "z2"},
		Labels: map[string]string{"team": "x"}, Taints: []string{"a=b:NoSchedule", "c=d:NoExecute"}}
	base := poolRevision("v1.35.4", p)
	same := p
	same.Size, same.DrainTimeout, same.Rollout = 7, "1m", v1.Rollout{MaxSurge: 2}
	same.Zones, same.Taints = []string{"z2", "z1"}, []string{"c=d:NoExecute", "a=b:NoSchedule"}
	if got := poolRevision("v1.35.4", same); got != base {
		t.Errorf("size, drain timeout, rollout or order changed the revision: %s -> %s", base, got)
	}
	for name, edit := range map[string]func(*v1.WorkerPool) string{
		"instance type": func(p *v1.WorkerPool) string { p.InstanceType = "large"; return "v1.35.4" },
		"label":         func(p *v1.WorkerPool) string { p.Labels = map[string]string{"team": "y"}; return "v1.35.4" },
		"taint":         func(p *v1.WorkerPool) string { p.Taints = []string{"a=b:NoSchedule"}; return "v1.35.4" },
		"version":       func(p *v1.WorkerPool) string { return "v1.36.3" },
	} {
		q := p
		if got := poolRevision(edit(&q), q); got == base {
			t.Errorf("a new %s kept the revision %s", name, base)
		}
	}
}

// A host of an edge cluster is in no pool: its drain's failure says so,
// not "of pool ".
func TestDrainFailureOfAHost(t *testing.T) {
	de := &kubeapi.DrainError{Node: "edge1-w", Timeout: time.Minute, Status: kubeapi.DrainStatus{Left: []kubeapi.PodState{
		{PodRef: kubeapi.PodRef{Namespace: "default", Name: "web-1"}, Evicted: true}}}}
	fe := drainFailure("/v1/projects/p/clusters/edge1/nodes/edge1-w", Member{Name: "edge1-w"}, time.Minute,
		"the default drain timeout: the node is in no pool (a control-plane node, or a host of an edge cluster)", de)
	if want := "node edge1-w was not drained within 1m0s (the default drain timeout: the node is in no pool (a control-plane node, or a host of an edge cluster)): 1 pod left"; !strings.Contains(fe.Message, want) {
		t.Errorf("message %q\ndoes not say %q", fe.Message, want)
	}
}
