package plan_test

import (
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	v1 "kiln.dev/kiln/api/v1"
	"kiln.dev/kiln/internal/plan"
	"kiln.dev/kiln/internal/provider"
	"kiln.dev/kiln/internal/store"
)

// clock is a time the test moves.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *clock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

func stepMessage(op *store.Operation, name string) string {
	for _, s := range op.Steps {
		if s.Name == name {
			return s.Message
		}
	}
	return ""
}

func (e *env) events(name string) []v1.Event {
	e.t.Helper()
	evs, _, err := e.st.ListEvents(e.t.Context(), store.Key{Project: project, Name: name}, store.Page{Limit: 1000})
	if err != nil {
		e.t.Fatal(err)
	}
	out := make([]v1.Event, len(evs))
	for i, ev := range evs {
		out[i] = ev.Event
	}
	return out
}

// TestScaleDownRemovesTheNewestNodes: a pool scaled down loses its newest
// nodes, by when their records were made, not by their numbers: a machine
// made again later (here c-default-0, lost and replaced) is the first to go.
// The sim has no Kubernetes, so nothing is drained, and the step says so.
func TestScaleDownRemovesTheNewestNodes(t *testing.T) {
	e := newEnv(t)
	clk := &clock{t: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	r := e.runner(func(o *plan.Options) { o.Now = clk.Now })
	e.begin("c", v1.KindCreate, spec(3, nil))
	e.runOnce(r)

	// c-default-0 is lost: its machine and its record go. An update an
	// hour later makes it again, the newest node of the pool.
	clk.Advance(time.Hour)
	ctx := t.Context()
	if err := e.sim.DeleteMachine(ctx, provider.Cluster{Project: project, Name: "c"}, "c-default-0"); err != nil {
		t.Fatal(err)
	}
	if err := e.st.DeleteNode(ctx, store.Key{Project: project, Name: "c"}, "c-default-0", store.Cond{}); err != nil {
		t.Fatal(err)
	}
	op := e.begin("c", v1.KindUpdate, spec(3, nil))
	e.runOnce(r)
	if got := e.op(op.ID); got.Status != v1.OpSucceeded {
		t.Fatalf("repair: %s %+v", got.Status, got.Error)
	}

	clk.Advance(time.Hour)
	op = e.begin("c", v1.KindUpdate, spec(2, nil))
	e.runOnce(r)
	got := e.op(op.ID)
	if got.Status != v1.OpSucceeded {
		t.Fatalf("scale down: %s %+v", got.Status, got.Error)
	}
	want := map[string]string{"c-cp-0": "control-plane//READY", "c-default-1": "worker/default/READY", "c-default-2": "worker/default/READY"}
	if diff := cmp.Diff(want, e.nodes("c")); diff != "" {
		t.Errorf("nodes after scale down to 2 (-want +got):\n%s", diff)
	}
	if msg := stepMessage(got, plan.StepRemoveSurplusMachines); msg != "removed c-default-0 (newest first); not drained: the sim provider's machines run no Kubernetes" {
		t.Errorf("remove-surplus-machines says %q", msg)
	}

	// Among nodes of one age, the highest number goes first.
	op = e.begin("c", v1.KindUpdate, spec(1, nil))
	e.runOnce(r)
	if got := e.op(op.ID); got.Status != v1.OpSucceeded || stepMessage(got, plan.StepRemoveSurplusMachines) !=
		"removed c-default-2 (newest first); not drained: the sim provider's machines run no Kubernetes" {
		t.Errorf("scale down to 1: %s, step says %q", got.Status, stepMessage(got, plan.StepRemoveSurplusMachines))
	}
	if diff := cmp.Diff([]string{"c-cp-0", "c-default-1"}, e.machines("c")); diff != "" {
		t.Errorf("machines after scale down to 1 (-want +got):\n%s", diff)
	}

	// Scaling up again fills the lowest free numbers.
	op = e.begin("c", v1.KindUpdate, spec(3, nil))
	e.runOnce(r)
	if diff := cmp.Diff([]string{"c-cp-0", "c-default-0", "c-default-1", "c-default-2"}, e.machines("c")); diff != "" {
		t.Errorf("machines after scale up to 3 (-want +got):\n%s", diff)
	}

	var removed []string
	for _, ev := range e.events("c") {
		if ev.Reason == "NodeDrainSkipped" {
			removed = append(removed, ev.Node)
		}
	}
	if diff := cmp.Diff([]string{"c-default-0", "c-default-2"}, removed); diff != "" {
		t.Errorf("NodeDrainSkipped events (-want +got):\n%s", diff)
	}
}

// TestAddAndRemovePools: a pool added by an update gets machines of its
// own instance type, zones and name; a pool removed loses every node; the
// other pools are untouched.
func TestAddAndRemovePools(t *testing.T) {
	e := newEnv(t)
	e.begin("c", v1.KindCreate, spec(2, nil))
	e.runOnce(e.runner())

	added := spec(2, nil)
	added.WorkerPools = append(added.WorkerPools, v1.WorkerPool{Name: "gpu", Size: 3, InstanceType: "large",
		Zones: []string{"sim-east-1", "sim-east-2"}, Labels: map[string]string{"accel": "gpu"}, Taints: []string{"gpu=true:NoSchedule"}})
	op := e.begin("c", v1.KindUpdate, added)
	e.runOnce(e.runner())
	if got := e.op(op.ID); got.Status != v1.OpSucceeded {
		t.Fatalf("add pool: %s %+v", got.Status, got.Error)
	}
	ms, err := e.sim.ListMachines(t.Context(), provider.Cluster{Project: project, Name: "c"})
	if err != nil {
		t.Fatal(err)
	}
	var gpu []provider.MachineSpec
	for _, m := range ms {
		if m.Pool == "gpu" {
			gpu = append(gpu, m.MachineSpec)
		}
	}
	wantGPU := []provider.MachineSpec{
		{Name: "c-gpu-0", Role: v1.RoleWorker, Pool: "gpu", InstanceType: "large", Zone: "sim-east-1"},
		{Name: "c-gpu-1", Role: v1.RoleWorker, Pool: "gpu", InstanceType: "large", Zone: "sim-east-2"},
		{Name: "c-gpu-2", Role: v1.RoleWorker, Pool: "gpu", InstanceType: "large", Zone: "sim-east-1"},
	}
	// Every machine carries a revision, the same for the whole pool.
	first := gpu[0].Revision
	for i := range gpu {
		if gpu[i].Revision == "" || gpu[i].Revision != first {
			t.Errorf("machine %s revision %q, the pool's first %q", gpu[i].Name, gpu[i].Revision, first)
		}
		gpu[i].Revision = ""
	}
	if diff := cmp.Diff(wantGPU, gpu); diff != "" {
		t.Errorf("machines of the new pool (-want +got):\n%s", diff)
	}

	// The default pool goes; gpu stays as it is.
	removed := added
	removed.WorkerPools = removed.WorkerPools[1:]
	op = e.begin("c", v1.KindUpdate, removed)
	e.runOnce(e.runner())
	got := e.op(op.ID)
	if got.Status != v1.OpSucceeded {
		t.Fatalf("remove pool: %s %+v", got.Status, got.Error)
	}
	want := map[string]string{
		"c-cp-0":  "control-plane//READY",
		"c-gpu-0": "worker/gpu/READY", "c-gpu-1": "worker/gpu/READY", "c-gpu-2": "worker/gpu/READY",
	}
	if diff := cmp.Diff(want, e.nodes("c")); diff != "" {
		t.Errorf("nodes after removing the default pool (-want +got):\n%s", diff)
	}
	if msg := stepMessage(got, plan.StepRemoveSurplusMachines); !strings.HasPrefix(msg, "removed c-default-1, c-default-0 ") {
		t.Errorf("remove-surplus-machines says %q", msg)
	}
	if n := e.counts("c"); n != [3]int{1, 3, 4} {
		t.Errorf("node counts = %+v", n)
	}
}
