package plan_test

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	v1 "kiln.dev/kiln/api/v1"
	"kiln.dev/kiln/internal/plan"
	"kiln.dev/kiln/internal/provider"
	"kiln.dev/kiln/internal/provider/sim"
	"kiln.dev/kiln/internal/store"
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

// stopAfterNewWorker is the sim that stops the run (its context is
// cancelled: a crash, for the plan) right after it made the first worker
// that was not there before, so that the node is made and not yet Ready.
type stopAfterNewWorker struct {
	*sim.Sim
	known  map[string]bool
	stop   context.CancelFunc
	made   string
	stopMu sync.Mutex
}

func (s *stopAfterNewWorker) EnsureMachine(ctx context.Context, c provider.Cluster, m provider.MachineSpec) (provider.Machine, error) {
	got, err := s.Sim.EnsureMachine(ctx, c, m)
	s.stopMu.Lock()
	defer s.stopMu.Unlock()
	if err == nil && m.Role == v1.RoleWorker && !s.known[m.Name] && s.made == "" {
		s.made = m.Name
		s.stop()
	}
	return got, err
}

// A rollout stopped right after it made a surge node, before that node was
// Ready, resumes: the next run brings that node up and goes on. (It once
// counted the node as one of the pool's current members, found only 3 of 4
// Ready and refused to remove an old one, with a retryable Conflict, until
// the step ran out of attempts: the soak found it.)
func TestRolloutResumesAfterASurgeNodeWasMade(t *testing.T) {
	e := newEnv(t)
	sp := spec(3, nil)
	e.begin("c", v1.KindCreate, sp)
	e.runOnce(e.runner())
	known := map[string]bool{}
	for name := range machineIDs(e) {
		known[name] = true
	}

	ctx, cancel := context.WithCancel(t.Context())
	stopper := &stopAfterNewWorker{Sim: e.sim, known: known, stop: cancel}
	e.reg["sim"] = stopper
	sp.WorkerPools[0].InstanceType = "large"
	op := e.begin("c", v1.KindUpdate, sp)
	held := e.claim("before")
	if err := e.runner().Run(ctx, held); err == nil {
		t.Fatal("the run went on after its context was cancelled")
	}
	// The crashed process's lease runs out.
	if err := e.st.ReleaseLease(t.Context(), held.Key(), held.Lease.Fence()); err != nil {
		t.Fatal(err)
	}
	if stopper.made == "" {
		t.Fatal("the rollout made no new worker")
	}
	if s := stepStates(e.op(op.ID))[plan.StepRollOutWorkers]; s != v1.StepRunning {
		t.Fatalf("the run stopped with roll-out-workers %s, want Running (the surge node made in it)", s)
	}

	e.reg["sim"] = e.sim
	e.runOnce(e.runner(func(o *plan.Options) { o.MaxAttempts = 2 }))
	got := e.op(op.ID)
	if got.Status != v1.OpSucceeded {
		t.Fatalf("the rollout resumed after %s was made: %s %+v", stopper.made, got.Status, got.Error)
	}
	ms, err := e.sim.ListMachines(t.Context(), provider.Cluster{Project: project, Name: "c"})
	if err != nil {
		t.Fatal(err)
	}
	workers := 0
	for _, m := range ms {
		if m.Role == v1.RoleWorker {
			workers++
			if m.InstanceType != "large" {
				t.Errorf("worker %s is %q after the rollout", m.Name, m.InstanceType)
			}
		}
	}
	if workers != 3 {
		t.Errorf("%d workers after the rollout, want 3", workers)
	}
}

// dyingWorker is the sim in which worker dies goes NOT_READY (as the
// gateway records a node whose agent went silent) while the rollout's first
// new worker is made.
type dyingWorker struct {
	*sim.Sim
	st    store.Store
	known map[string]bool
	dies  string
	once  sync.Once
	err   error
}

func (d *dyingWorker) EnsureMachine(ctx context.Context, c provider.Cluster, m provider.MachineSpec) (provider.Machine, error) {
	if m.Role == v1.RoleWorker && !d.known[m.Name] {
		d.once.Do(func() {
			k := store.Key{Project: c.Project, Name: c.Name}
			n, err := d.st.GetNode(ctx, k, d.dies)
			if err != nil {
				d.err = err
				return
			}
			beat := time.Now().Add(-time.Minute)
			n.State, n.LastHeartbeat = v1.NodeNotReady, &beat
			d.err = d.st.PutNode(ctx, n, store.Cond{})
		})
	}
	return d.Sim.EnsureMachine(ctx, c, m)
}

// A rollout of a pool one of whose old workers is not Ready (its machine
// died) removes that worker first: removing it leaves as many Ready nodes,
// so maxUnavailable 0 does not hold it back. (It once took the oldest
// Ready one, found that removing it would leave fewer than the pool's size
// Ready, and failed with a Conflict once the step ran out of attempts:
// TestDockerKills found it.)
func TestRolloutRemovesAnUnreadyWorkerFirst(t *testing.T) {
	e := newEnv(t)
	sp := spec(2, nil)
	e.begin("c", v1.KindCreate, sp)
	e.runOnce(e.runner())
	known := map[string]bool{}
	for name := range machineIDs(e) {
		known[name] = true
	}

	// c-default-1 is the younger: the oldest-first order alone would
	// take c-default-0.
	dying := &dyingWorker{Sim: e.sim, st: e.st, known: known, dies: "c-default-1"}
	e.reg["sim"] = dying
	sp.WorkerPools[0].InstanceType = "large"
	op := e.begin("c", v1.KindUpdate, sp)
	e.runOnce(e.runner(func(o *plan.Options) { o.MaxAttempts = 2 }))
	if dying.err != nil {
		t.Fatal(dying.err)
	}
	got := e.op(op.ID)
	if got.Status != v1.OpSucceeded {
		t.Fatalf("rollout with c-default-1 NOT_READY: %s %+v", got.Status, got.Error)
	}
	if m := stepMessage(got, plan.StepRollOutWorkers); m != "replaced, one by one: c-default-1, c-default-0" {
		t.Errorf("roll-out-workers says %q, want c-default-1 (NOT_READY) replaced first", m)
	}
	// The surge node c-default-2, then c-default-1 again in the place of c-default-0.
	want := map[string]string{"c-cp-0": "control-plane//READY", "c-default-1": "worker/default/READY",
		"c-default-2": "worker/default/READY"}
	if diff := cmp.Diff(want, e.nodes("c")); diff != "" {
		t.Errorf("nodes after the rollout (-want +got):\n%s", diff)
	}
}
