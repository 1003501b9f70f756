package plan_test

import (
	"context"
	"strings"
	"sync"
	"testing"

	v1 "kiln.dev/kiln/api/v1"
	"kiln.dev/kiln/internal/plan"
	"kiln.dev/kiln/internal/provider"
	"kiln.dev/kiln/internal/provider/sim"
)

// watchedSim is the sim that samples, after every machine it makes or
// deletes, how many workers the cluster has.
type watchedSim struct {
	*sim.Sim
	mu       sync.Mutex
	min, max int
}

func (w *watchedSim) sample(ctx context.Context, c provider.Cluster) {
	ms, _ := w.Sim.ListMachines(ctx, c)
	n := 0
	for _, m := range ms {
		if m.Role == v1.RoleWorker {
			n++
		}
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	w.min, w.max = min(w.min, n), max(w.max, n)
}

func (w *watchedSim) EnsureMachine(ctx context.Context, c provider.Cluster, m provider.MachineSpec) (provider.Machine, error) {
	got, err := w.Sim.EnsureMachine(ctx, c, m)
	w.sample(ctx, c)
	return got, err
}

func (w *watchedSim) DeleteMachine(ctx context.Context, c provider.Cluster, name string) error {
	err := w.Sim.DeleteMachine(ctx, c, name)
	w.sample(ctx, c)
	return err
}

// A pool's new instance type rolls through it: every worker is replaced by
// one of the new type, never more than maxSurge above the pool's size and
// never below it (maxUnavailable 0); the control plane stays.
func TestRolloutReplacesThePool(t *testing.T) {
	for _, ro := range []v1.Rollout{{MaxSurge: 1}, {MaxSurge: 2}, {MaxSurge: 0, MaxUnavailable: 1}} {
		t.Run("", func(t *testing.T) {
			e := newEnv(t)
			sp := spec(3, nil)
			sp.WorkerPools[0].Rollout = ro
			e.begin("c", v1.KindCreate, sp)
			e.runOnce(e.runner())
			cp := machineIDs(e)["c-cp-0"]

			w := &watchedSim{Sim: e.sim, min: 1 << 30}
			e.reg["sim"] = w
			sp.WorkerPools[0].InstanceType = "large"
			op := e.begin("c", v1.KindUpdate, sp)
			e.runOnce(e.runner())
			got := e.op(op.ID)
			if got.Status != v1.OpSucceeded {
				t.Fatalf("rollout %s %+v", got.Status, got.Error)
			}
			if m := stepMessage(got, plan.StepRollOutWorkers); !strings.HasPrefix(m, "replaced, one by one: ") {
				t.Errorf("roll-out-workers says %q", m)
			}
			ms, err := e.sim.ListMachines(t.Context(), provider.Cluster{Project: project, Name: "c"})
			if err != nil {
				t.Fatal(err)
			}
			workers := 0
			for _, m := range ms {
				switch {
				case m.Role == v1.RoleControlPlane && m.ID != cp:
					t.Errorf("the control plane was replaced")
				case m.Role == v1.RoleWorker:
					workers++
					if m.InstanceType != "large" {
						t.Errorf("worker %s is %q after the rollout", m.Name, m.InstanceType)
					}
				}
			}
			if workers != 3 {
				t.Errorf("%d workers after the rollout, want 3", workers)
			}
			if w.max > 3+ro.MaxSurge || w.min < 3-ro.MaxUnavailable {
				t.Errorf("workers ranged %d..%d during the rollout; maxSurge %d, maxUnavailable %d allow %d..%d",
					w.min, w.max, ro.MaxSurge, ro.MaxUnavailable, 3-ro.MaxUnavailable, 3+ro.MaxSurge)
			}

			// Nothing changed: the next update rolls nothing.
			op = e.begin("c", v1.KindUpdate, sp)
			e.runOnce(e.runner())
			if s := stepStates(e.op(op.ID))[plan.StepRollOutWorkers]; s != v1.StepSkipped {
				t.Errorf("an update without changes: roll-out-workers %s", s)
			}
		})
	}
}
