package elastic

import (
	"context"
	"errors"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	v1 "kiln.dev/kiln/api/v1"
	"kiln.dev/kiln/internal/backend/check"
	"kiln.dev/kiln/internal/kubeapi"
	"kiln.dev/kiln/internal/store"
	"kiln.dev/kiln/internal/store/sqlite"
)

// world is a store with one project and the elastic loop over it, its
// clock and its clusters' Kubernetes in the test's hands.
type world struct {
	t         *testing.T
	st        store.Store
	c         *Controller
	now       time.Time
	state     State
	submits   []string
	submitErr error
	readErr   error // what Observe answers
}

func newWorld(t *testing.T) *world {
	st, err := sqlite.Open(t.Context(), filepath.Join(t.TempDir(), "kiln.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	if err := st.PutProject(t.Context(), &v1.Project{Name: "p"}, store.Cond{}); err != nil {
		t.Fatal(err)
	}
	w := &world{t: t, st: st, now: t0}
	w.c = NewController(Options{
		Store:   st,
		Watched: func(string) bool { return true },
		Observe: func(context.Context, *store.Cluster) (State, error) { return w.state, w.readErr },
		Submit: func(_ context.Context, _ *store.Cluster, j v1.Job) error {
			if w.submitErr != nil {
				return w.submitErr
			}
			w.submits = append(w.submits, j.Name)
			return nil
		},
		JobLog:   func(context.Context, *store.Cluster, string) ([]byte, error) { return []byte("hello\n"), nil },
		CanStop:  func(string) bool { return true },
		Cooldown: time.Minute,
		Base: check.Base{
			Steps: func(kind string) []v1.Step {
				return []v1.Step{{Name: "a-step-of-" + kind, State: v1.StepPending}}
			},
			Now: func() time.Time { return w.now },
		},
	})
	return w
}

// cluster writes a Succeeded cluster whose last change was an hour ago.
func (w *world) cluster(name string, spec v1.ClusterSpec) {
	w.t.Helper()
	cl := &store.Cluster{Project: "p", Name: name, Spec: spec,
		Status: v1.ClusterStatus{ProvisioningState: v1.StateSucceeded, Endpoint: "10.0.0.1:6443", UpdatedAt: w.now.Add(-time.Hour)}}
	op := &store.Operation{ID: "create-" + name, Project: "p", Cluster: name, Kind: v1.KindCreate, Status: v1.OpSucceeded}
	if err := w.st.BeginOperation(w.t.Context(), cl, op, store.Cond{}); err != nil {
		w.t.Fatal(err)
	}
}

func (w *world) get(name string) *store.Cluster {
	w.t.Helper()
	cl, err := w.st.GetCluster(w.t.Context(), store.Key{Project: "p", Name: name})
	if err != nil {
		w.t.Fatal(err)
	}
	return cl
}

func (w *world) pass() {
	w.t.Helper()
	if err := w.c.CheckAll(w.t.Context()); err != nil {
		w.t.Fatal(err)
	}
}

func (w *world) events(name string) []v1.Event {
	w.t.Helper()
	evs, _, err := w.st.ListEvents(w.t.Context(), store.Key{Project: "p", Name: name}, store.Page{Limit: 100})
	if err != nil {
		w.t.Fatal(err)
	}
	var out []v1.Event
	for _, e := range evs {
		out = append(out, e.Event)
	}
	return out
}

// A decision writes the pool's size and begins an autoscale operation
// with its reason; nothing more while it runs; nothing within the
// cool-down after a change.
func TestControllerAutoscales(t *testing.T) {
	w := newWorld(t)
	w.cluster("c", v1.ClusterSpec{Provider: "sim", WorkerPools: []v1.WorkerPool{autoscaled("default", 1, 1, 4)}})
	w.state = State{Nodes: []kubeapi.Node{kubeNode("c-default-0", "default", 2000, 8*gib)},
		Pods: []kubeapi.Pod{pod("web-0", "c-default-0", 1500), pending("web-1", 1500), pending("web-2", 1500)}}
	w.pass()
	cl := w.get("c")
	if cl.Status.ProvisioningState != v1.StateUpdating || cl.Spec.WorkerPools[0].Size != 3 {
		t.Fatalf("after the pass: %s, size %d; want Updating, 3", cl.Status.ProvisioningState, cl.Spec.WorkerPools[0].Size)
	}
	op, err := w.st.GetOperation(t.Context(), cl.Status.CurrentOperation)
	if err != nil || op.Kind != v1.KindAutoscale || !strings.Contains(op.Reason, "pool default grows from 1 to 3") || op.Steps[0].Name != "a-step-of-autoscale" {
		t.Fatalf("operation %+v, %v", op, err)
	}
	if want := []v1.PoolResize{{Pool: "default", From: 1, To: 3}}; !slices.Equal(op.Pools, want) {
		t.Errorf("the operation's pools %+v, want %+v (the fleet page draws them)", op.Pools, want)
	}
	evs := w.events("c")
	if last := evs[len(evs)-1]; last.Reason != "AutoscaleUp" || last.Operation != op.ID || last.Message != op.Reason {
		t.Errorf("event %+v", last)
	}
	w.pass() // Updating: left alone
	if got := w.get("c"); got.Status.CurrentOperation != op.ID {
		t.Errorf("a second pass changed the cluster: %+v", got.Status)
	}

	// Within the cool-down: nothing.
	w.cluster("d", v1.ClusterSpec{Provider: "sim", WorkerPools: []v1.WorkerPool{autoscaled("default", 1, 1, 4)}})
	d := w.get("d")
	d.Status.UpdatedAt = w.now.Add(-30 * time.Second)
	if err := w.st.PutClusterStatus(t.Context(), d, store.Cond{IfMatch: d.ETag}); err != nil {
		t.Fatal(err)
	}
	w.pass()
	if got := w.get("d"); got.Status.ProvisioningState != v1.StateSucceeded {
		t.Errorf("a change within the cool-down: %s", got.Status.ProvisioningState)
	}
	w.now = w.now.Add(time.Minute)
	w.pass()
	if got := w.get("d"); got.Status.ProvisioningState != v1.StateUpdating {
		t.Errorf("after the cool-down: %s, want Updating", got.Status.ProvisioningState)
	}
}

// A cluster with idleStop hibernates once nothing has run for that long;
// a pod running outside the system namespaces, or a job not ended, keeps
// it up and starts the clock again.
func TestControllerIdleStop(t *testing.T) {
	w := newWorld(t)
	w.cluster("c", v1.ClusterSpec{Provider: "sim", IdleStop: &v1.IdleStop{After: "10m"}})
	dns := pod("coredns-0", "n1", 100)
	dns.Namespace = "kube-system"
	w.state = State{Pods: []kubeapi.Pod{dns, pod("web-0", "n1", 100)}}
	w.pass()
	w.state.Pods = []kubeapi.Pod{dns} // idle from now
	w.now = w.now.Add(time.Minute)
	w.pass()
	w.now = w.now.Add(9 * time.Minute)
	w.pass()
	if got := w.get("c"); got.Status.ProvisioningState != v1.StateSucceeded {
		t.Fatalf("idle 9m of 10m: %s", got.Status.ProvisioningState)
	}
	w.now = w.now.Add(time.Minute)
	w.pass()
	cl := w.get("c")
	if cl.Status.ProvisioningState != v1.StateUpdating {
		t.Fatalf("idle 10m: %s, want a hibernate running", cl.Status.ProvisioningState)
	}
	op, err := w.st.GetOperation(t.Context(), cl.Status.CurrentOperation)
	if err != nil || op.Kind != v1.KindHibernate || !strings.HasPrefix(op.Reason, "idle since "+t0.Add(time.Minute).Format(time.RFC3339)) {
		t.Fatalf("operation %+v, %v", op, err)
	}
	if evs := w.events("c"); evs[len(evs)-1].Reason != "IdleStop" {
		t.Errorf("events %+v", evs)
	}
}

// A Pending job is submitted once its cluster is up and followed to its
// end, its log kept.
func TestControllerJobs(t *testing.T) {
	w := newWorld(t)
	w.cluster("c", v1.ClusterSpec{Provider: "sim"})
	j := &store.Job{Project: "p", Job: v1.Job{Name: "j1", Cluster: "c", Spec: v1.JobSpec{Image: "kiln.dev/demo:1"},
		Status: v1.JobStatus{Phase: v1.JobPending}}}
	if err := w.st.PutJob(t.Context(), j, store.Cond{}); err != nil {
		t.Fatal(err)
	}
	job := func() *store.Job {
		t.Helper()
		got, err := w.st.GetJob(t.Context(), store.Key{Project: "p", Name: "c"}, "j1")
		if err != nil {
			t.Fatal(err)
		}
		return got
	}
	w.submitErr = errors.New("the cluster's API did not answer")
	if err := w.c.CheckAll(t.Context()); err == nil {
		t.Fatal("a pass whose submission failed reported no error")
	}
	if got := job(); got.Status.Phase != v1.JobPending || !strings.Contains(got.Status.Message, "not submitted yet (tried again every 10s): the cluster's API did not answer") {
		t.Fatalf("after a failed submission: %+v", got.Status)
	}
	w.submitErr = nil
	w.pass()
	if got := job(); got.Status.Phase != v1.JobRunning || got.Status.SubmittedAt == nil || len(w.submits) != 1 {
		t.Fatalf("after a pass: %+v, submitted %v", got.Status, w.submits)
	}
	w.state.Jobs = []kubeapi.Job{{Namespace: v1.JobNamespace, Name: "j1", Labels: map[string]string{v1.LabelJob: "j1"}, Active: 1}}
	w.pass()
	if got := job(); got.Status.Phase != v1.JobRunning || len(w.submits) != 1 {
		t.Fatalf("while it runs: %+v, submitted %v", got.Status, w.submits)
	}
	w.state.Jobs[0].Active, w.state.Jobs[0].Succeeded, w.state.Jobs[0].Complete = 0, 1, true
	w.pass()
	got := job()
	if got.Status.Phase != v1.JobSucceeded || got.Status.CompletionTime == nil || got.Log != "hello\n" {
		t.Fatalf("after it completed: %+v, log %q", got.Status, got.Log)
	}
	if evs := w.events("c"); evs[len(evs)-1].Reason != "JobSucceeded" {
		t.Errorf("events %+v", evs)
	}
}
