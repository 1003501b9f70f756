package health_test

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
	"kiln.dev/kiln/internal/backend/health"
	"kiln.dev/kiln/internal/clusterstate"
	"kiln.dev/kiln/internal/plan"
	"kiln.dev/kiln/internal/store"
	"kiln.dev/kiln/internal/store/sqlite"
)

type env struct {
	t   *testing.T
	st  store.Store
	now time.Time
	c   *health.Checker
	k   store.Key
}

// newEnv is an idle (Succeeded) local cluster with a pool of 3 workers, all
// beating, in a real SQLite store, and a Checker over it.
func newEnv(t *testing.T) *env {
	st, err := sqlite.Open(t.Context(), filepath.Join(t.TempDir(), "kiln.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	e := &env{t: t, st: st, now: time.Date(2026, 11, 21, 12, 0, 0, 0, time.UTC), k: store.Key{Project: "p", Name: "c"}}
	if err := st.PutProject(t.Context(), &v1.Project{Name: "p", ID: "/v1/projects/p"}, store.Cond{}); err != nil {
		t.Fatal(err)
	}
	cl := &store.Cluster{Project: "p", Name: "c", Spec: v1.ClusterSpec{Provider: "local",
		WorkerPools: []v1.WorkerPool{{Name: "default", Size: 3, UnhealthyTimeout: "1m", MaxUnhealthy: "40%"}}}}
	cl.Status.ProvisioningState = v1.StateSucceeded
	op := &store.Operation{ID: "op-create", Project: "p", Cluster: "c", Kind: v1.KindCreate, Status: v1.OpSucceeded, StartTime: e.now}
	if err := st.BeginOperation(t.Context(), cl, op, store.Cond{}); err != nil {
		t.Fatal(err)
	}
	for _, n := range []string{"c-default-0", "c-default-1", "c-default-2"} {
		e.node(n, v1.NodeReady, 0)
	}
	e.c = health.NewChecker(health.Options{
		Store:   st,
		Watched: func(p string) bool { return p == "local" },
		Base:    check.Base{Steps: plan.PendingSteps, Now: func() time.Time { return e.now }},
		Started: e.now.Add(-time.Hour),
	})
	return e
}

// node writes a worker whose last heartbeat was ago.
func (e *env) node(name, state string, ago time.Duration) {
	e.t.Helper()
	beat := e.now.Add(-ago)
	n := &store.Node{Project: "p", Node: v1.Node{Name: name, Cluster: "c", Role: v1.RoleWorker, Pool: "default", State: state, LastHeartbeat: &beat}}
	if err := e.st.PutNode(e.t.Context(), n, store.Cond{}); err != nil {
		e.t.Fatal(err)
	}
}

func (e *env) cluster() *store.Cluster {
	e.t.Helper()
	cl, err := e.st.GetCluster(e.t.Context(), e.k)
	if err != nil {
		e.t.Fatal(err)
	}
	return cl
}

func (e *env) check() {
	e.t.Helper()
	if err := e.c.CheckAll(e.t.Context()); err != nil {
		e.t.Fatal(err)
	}
}

func (e *env) condition() *v1.Condition {
	for _, c := range e.cluster().Status.Conditions {
		if c.Type == v1.ConditionNodesHealthy {
			return &c
		}
	}
	return nil
}

// A node unhealthy past its pool's timeout starts one repair operation with
// the repair plan's steps; the cluster is Updating, so the next check
// starts nothing more.
func TestCheckerStartsARepair(t *testing.T) {
	e := newEnv(t)
	e.node("c-default-1", v1.NodeNotReady, 30*time.Second)
	e.check()
	if cl := e.cluster(); cl.Status.ProvisioningState != v1.StateSucceeded {
		t.Fatalf("within the timeout the cluster became %s", cl.Status.ProvisioningState)
	}

	e.now = e.now.Add(time.Minute)
	e.check()
	cl := e.cluster()
	if cl.Status.ProvisioningState != v1.StateUpdating || cl.Status.CurrentOperation == "" {
		t.Fatalf("cluster %s, operation %q: want a repair under way", cl.Status.ProvisioningState, cl.Status.CurrentOperation)
	}
	op, err := e.st.GetOperation(t.Context(), cl.Status.CurrentOperation)
	if err != nil {
		t.Fatal(err)
	}
	if op.Kind != v1.KindRepair || !slices.ContainsFunc(op.Steps, func(s v1.Step) bool { return s.Name == plan.StepReplaceUnhealthyNodes }) {
		t.Errorf("operation kind %s steps %+v", op.Kind, op.Steps)
	}
	e.check()
	if again := e.cluster(); again.Status.CurrentOperation != cl.Status.CurrentOperation {
		t.Errorf("a second check started operation %s", again.Status.CurrentOperation)
	}
	events, _, err := e.st.ListEvents(t.Context(), e.k, store.Page{Limit: 100})
	if err != nil {
		t.Fatal(err)
	}
	if len(events) == 0 || events[len(events)-1].Reason != "NodesUnhealthy" || !strings.Contains(events[len(events)-1].Message, "c-default-1") {
		t.Errorf("events %+v, want NodesUnhealthy naming c-default-1", events)
	}
}

// Beyond maxUnhealthy nothing is replaced and NodesHealthy says why; once
// the nodes recover it says so.
func TestCheckerGuardsMaxUnhealthy(t *testing.T) {
	e := newEnv(t)
	if e.check(); e.condition() != nil {
		t.Fatalf("a healthy cluster got condition %+v", e.condition())
	}
	e.node("c-default-0", v1.NodeNotReady, 2*time.Minute)
	e.node("c-default-1", v1.NodeNotReady, 2*time.Minute)
	e.check()
	cl := e.cluster()
	if cl.Status.ProvisioningState != v1.StateSucceeded {
		t.Fatalf("cluster %s: something was started beyond maxUnhealthy", cl.Status.ProvisioningState)
	}
	c := e.condition()
	if c == nil || c.Status != "False" || c.Reason != "TooManyUnhealthy" || !strings.Contains(c.Message, "2 of 3 nodes of pool default") {
		t.Fatalf("condition %+v, want NodesHealthy False saying 2 of 3", c)
	}
	etag := cl.ETag
	e.check()
	if e.cluster().ETag != etag {
		t.Error("an unchanged verdict was written again")
	}

	e.node("c-default-0", v1.NodeReady, 0)
	e.node("c-default-1", v1.NodeReady, 0)
	e.check()
	if c := e.condition(); c == nil || c.Status != "True" {
		t.Errorf("after recovery, condition %+v, want True", c)
	}
}

// Two nodes that die together turn NOT_READY a liveness sweep apart: while
// the first is NOT_READY past its timeout and the second, silent for two
// heartbeat intervals, is still READY, nothing is replaced (two of three is
// beyond maxUnhealthy) and NodesHealthy names both. Without Silence the
// first alone would be replaced.
func TestCheckerCountsSilentNodes(t *testing.T) {
	for _, silence := range []time.Duration{0, 10 * time.Second} {
		e := newEnv(t)
		e.c = health.NewChecker(health.Options{
			Store:   e.st,
			Watched: func(p string) bool { return p == "local" },
			Silence: silence,
			Started: e.now.Add(-time.Hour),
			Base:    check.Base{Steps: plan.PendingSteps, Now: func() time.Time { return e.now }},
		})
		e.node("c-default-0", v1.NodeNotReady, 2*time.Minute)
		e.node("c-default-2", v1.NodeReady, 12*time.Second)
		e.check()
		state := e.cluster().Status.ProvisioningState
		if silence == 0 {
			if state != v1.StateUpdating {
				t.Errorf("without Silence the cluster is %s, want a repair of the one NOT_READY node (what Silence is for)", state)
			}
			continue
		}
		if state != v1.StateSucceeded {
			t.Fatalf("with a silent node beside a NOT_READY one the cluster became %s: a repair began", state)
		}
		if c := e.condition(); c == nil || c.Status != "False" || !strings.Contains(c.Message, "2 of 3 nodes of pool default are unhealthy (c-default-0, c-default-2)") {
			t.Errorf("condition %+v, want NodesHealthy False naming both", c)
		}
		// The silent node heard from again: the NOT_READY one alone is replaced.
		e.node("c-default-2", v1.NodeReady, time.Second)
		e.check()
		if state := e.cluster().Status.ProvisioningState; state != v1.StateUpdating {
			t.Errorf("after the silent node beat again the cluster is %s, want a repair", state)
		}
	}
}

// Clusters of providers the checker does not watch, and clusters with an
// operation running, are left alone.
func TestCheckerLeavesOthersAlone(t *testing.T) {
	e := newEnv(t)
	e.node("c-default-1", v1.NodeNotReady, time.Hour)
	e.c = health.NewChecker(health.Options{
		Store:   e.st,
		Watched: func(string) bool { return false },
		Base:    check.Base{Steps: plan.PendingSteps, Now: func() time.Time { return e.now }},
	})
	e.check()
	if cl := e.cluster(); cl.Status.ProvisioningState != v1.StateSucceeded || len(cl.Status.Conditions) != 0 {
		t.Errorf("an unwatched provider's cluster was touched: %+v", cl.Status)
	}
}

// A control-plane node NOT_READY whose machine the provider reports stopped
// starts a repair (the control plane is started again, never replaced),
// with a ControlPlaneStopped event; the provider is not asked while every
// control-plane node is READY, and a NOT_READY one whose machine runs (a
// partition) starts nothing.
func TestCheckerRestartsAStoppedControlPlane(t *testing.T) {
	e := newEnv(t)
	beat := e.now.Add(-20 * time.Second)
	cp := &store.Node{Project: "p", Node: v1.Node{Name: "c-cp-0", Cluster: "c", Role: v1.RoleControlPlane, State: v1.NodeReady, LastHeartbeat: &beat}}
	if err := e.st.PutNode(t.Context(), cp, store.Cond{}); err != nil {
		t.Fatal(err)
	}
	asked := 0
	var stopped []string
	e.c = health.NewChecker(health.Options{
		Store:   e.st,
		Watched: func(p string) bool { return p == "local" },
		Stopped: func(ctx context.Context, cl *store.Cluster) ([]string, error) {
			asked++
			return stopped, nil
		},
		Base: check.Base{Steps: plan.PendingSteps, Now: func() time.Time { return e.now }},
	})
	stopped = []string{"c-cp-0", "c-default-2"}
	e.check()
	if asked != 0 {
		t.Errorf("the provider was asked %d times while the control plane was READY", asked)
	}

	cp.State = v1.NodeNotReady
	if err := e.st.PutNode(t.Context(), cp, store.Cond{}); err != nil {
		t.Fatal(err)
	}
	stopped = []string{"c-default-2"} // the control plane runs: a partition
	e.check()
	if cl := e.cluster(); cl.Status.ProvisioningState != v1.StateSucceeded {
		t.Fatalf("a control plane whose machine runs: the cluster became %s", cl.Status.ProvisioningState)
	}

	stopped = []string{"c-cp-0"}
	e.check()
	cl := e.cluster()
	if cl.Status.ProvisioningState != v1.StateUpdating || asked != 2 {
		t.Fatalf("cluster %s after %d questions: want a repair under way", cl.Status.ProvisioningState, asked)
	}
	op, err := e.st.GetOperation(t.Context(), cl.Status.CurrentOperation)
	if err != nil {
		t.Fatal(err)
	}
	if op.Kind != v1.KindRepair || op.Steps[0].Name != plan.StepRestartStoppedControlPlane {
		t.Errorf("operation kind %s steps %+v, want a repair that first restarts the control plane", op.Kind, op.Steps)
	}
	events, _, err := e.st.ListEvents(t.Context(), e.k, store.Page{Limit: 100})
	if err != nil {
		t.Fatal(err)
	}
	last := events[len(events)-1]
	if last.Reason != "ControlPlaneStopped" || !strings.Contains(last.Message, "c-cp-0") || last.Operation != op.ID {
		t.Errorf("last event %+v, want ControlPlaneStopped naming c-cp-0 and the repair", last)
	}
}

// The check records status.health when it changes, with an event, and
// NodesHealthy counts the control plane: a control-plane node whose agent
// stopped makes the cluster Unhealthy (ControlPlaneDown) at the next pass,
// once, and its return makes it Healthy again.
func TestHealthRecorded(t *testing.T) {
	e := newEnv(t)
	cp := func(state string) {
		t.Helper()
		beat := e.now
		n := &store.Node{Project: "p", Node: v1.Node{Name: "c-cp-0", Cluster: "c", Role: v1.RoleControlPlane, State: state, LastHeartbeat: &beat}}
		if old, err := e.st.GetNode(t.Context(), e.k, n.Name); err == nil {
			n.ETag = old.ETag
		}
		if err := e.st.PutNode(t.Context(), n, store.Cond{}); err != nil {
			t.Fatal(err)
		}
	}
	healthEvents := func() []v1.Event {
		events, _, err := e.st.ListEvents(t.Context(), e.k, store.Page{Limit: 100})
		if err != nil {
			t.Fatal(err)
		}
		var out []v1.Event
		for _, ev := range events {
			if ev.Reason == "HealthChanged" {
				out = append(out, ev.Event)
			}
		}
		return out
	}
	cp(v1.NodeReady)
	e.check()
	if h := e.cluster().Status.Health; h != nil || len(healthEvents()) != 0 {
		t.Fatalf("a healthy cluster's first pass recorded %+v, events %+v: nothing was said before", h, healthEvents())
	}

	cp(v1.NodeNotReady)
	e.check()
	e.check()
	h := e.cluster().Status.Health
	if h == nil || h.State != v1.HealthUnhealthy || h.Reason != "ControlPlaneDown" || h.Since == nil || !h.Since.Equal(e.now) {
		t.Fatalf("health with the control plane NOT_READY: %+v, want Unhealthy (ControlPlaneDown) since now", h)
	}
	if evs := healthEvents(); len(evs) != 1 || evs[0].Type != "Warning" || !strings.Contains(evs[0].Message, "c-cp-0") {
		t.Errorf("events %+v, want one Warning HealthChanged naming c-cp-0", evs)
	}
	if c := e.condition(); c == nil || c.Status != "False" || c.Reason != "ControlPlaneDown" {
		t.Errorf("NodesHealthy %+v, want False (ControlPlaneDown)", c)
	}

	cp(v1.NodeReady)
	e.check()
	if h := e.cluster().Status.Health; h == nil || h.State != v1.HealthHealthy {
		t.Errorf("health after the control plane came back: %+v", h)
	}
	if evs := healthEvents(); len(evs) != 2 || evs[1].Type != "Normal" {
		t.Errorf("events %+v, want a Normal HealthChanged after the Warning", evs)
	}
	if c := e.condition(); c == nil || c.Status != "True" {
		t.Errorf("NodesHealthy %+v, want True", c)
	}
}

// A cluster whose agents all answer and whose Kubernetes API does not
// answer Kiln is Unhealthy (APIUnreachable) once it has not answered for
// Options.Unreachable (not at the first failure), with an event; Healthy
// again, with another, when it answers.
func TestAPIUnreachable(t *testing.T) {
	e := newEnv(t)
	var kubeErr error
	e.c = health.NewChecker(health.Options{
		Store:   e.st,
		Watched: func(p string) bool { return p == "local" },
		Base:    check.Base{Steps: plan.PendingSteps, Now: func() time.Time { return e.now }, Interval: 15 * time.Second},
		Started: e.now.Add(-time.Hour),
		KubeNotReady: func(context.Context, *store.Cluster) (map[string]time.Time, error) {
			return map[string]time.Time{}, kubeErr
		},
	})
	beat := e.now
	if err := e.st.PutNode(t.Context(), &store.Node{Project: "p", Node: v1.Node{Name: "c-cp-0", Cluster: "c", Role: v1.RoleControlPlane,
		State: v1.NodeReady, LastHeartbeat: &beat}}, store.Cond{}); err != nil {
		t.Fatal(err)
	}
	kubeErr = errors.New("dial tcp 10.0.0.2:6443: connect: connection refused")
	e.check()
	e.now = e.now.Add(15 * time.Second)
	e.check()
	if h := e.cluster().Status.Health; h != nil {
		t.Fatalf("health after 15 s without an answer: %+v, want nothing recorded yet (Unreachable is 30 s)", h)
	}
	e.now = e.now.Add(15 * time.Second)
	e.check()
	h := e.cluster().Status.Health
	if h == nil || h.State != v1.HealthUnhealthy || h.Reason != clusterstate.ReasonAPIUnreachable ||
		!strings.Contains(h.Message, "has not answered Kiln for 30s") || !strings.Contains(h.Message, "connection refused") {
		t.Fatalf("health after 30 s without an answer: %+v, want Unhealthy (APIUnreachable) for 30s, with the error", h)
	}
	// The API answers it the same way between passes (clusterstate.WithRecorded).
	if got := clusterstate.WithRecorded(v1.Health{State: v1.HealthHealthy, Reason: "AsExpected"}, v1.StateSucceeded, h); got.Reason != clusterstate.ReasonAPIUnreachable {
		t.Errorf("WithRecorded kept %+v over the recorded APIUnreachable", got)
	}
	// Not once the cluster is no longer Succeeded (the checker judges
	// only those): a hibernated cluster says so.
	if got := clusterstate.WithRecorded(v1.Health{State: v1.HealthUnknown, Reason: "Hibernated"}, v1.StateHibernated, h); got.Reason != "Hibernated" {
		t.Errorf("WithRecorded of a hibernated cluster: %+v, want Hibernated", got)
	}

	kubeErr = nil
	e.now = e.now.Add(15 * time.Second)
	e.check()
	if h := e.cluster().Status.Health; h == nil || h.State != v1.HealthHealthy {
		t.Errorf("health once the API answers: %+v, want Healthy", h)
	}
	events, _, err := e.st.ListEvents(t.Context(), e.k, store.Page{Limit: 100})
	if err != nil {
		t.Fatal(err)
	}
	var said []string
	for _, ev := range events {
		if ev.Reason == "HealthChanged" {
			said = append(said, ev.Type+" "+ev.Message[:strings.Index(ev.Message, ",")])
		}
	}
	if want := []string{"Warning health Unhealthy (APIUnreachable)", "Normal health Healthy (AsExpected)"}; !slices.Equal(said, want) {
		t.Errorf("events %q, want %q", said, want)
	}

	// A failure that stops is forgotten: the next one counts from its start.
	kubeErr = errors.New("timeout")
	e.now = e.now.Add(15 * time.Second)
	e.check()
	if h := e.cluster().Status.Health; h.State != v1.HealthHealthy {
		t.Errorf("health at a new failure's first pass: %+v, want Healthy", h)
	}
}
