package plan_test

import (
	"errors"
	"log/slog"
	"path/filepath"
	"testing"
	"time"

	"github.com/cenkalti/backoff/v5"
	"github.com/google/uuid"

	v1 "kiln.dev/kiln/api/v1"
	"kiln.dev/kiln/internal/clusterstate"
	"kiln.dev/kiln/internal/plan"
	"kiln.dev/kiln/internal/provider"
	"kiln.dev/kiln/internal/provider/sim"
	"kiln.dev/kiln/internal/store"
	"kiln.dev/kiln/internal/store/sqlite"
)

const project = "p"

type env struct {
	t   *testing.T
	st  store.Store
	sim *sim.Sim
	reg provider.Registry
}

func newEnv(t *testing.T) *env {
	t.Helper()
	st, err := sqlite.Open(t.Context(), filepath.Join(t.TempDir(), "kiln.db"))
	if err != nil {
		t.Fatalf("open store: %v", err)
	}
	return newEnvOn(t, st)
}

// newEnvOn is newEnv on an open store, closed at the test's end.
func newEnvOn(t *testing.T, st store.Store) *env {
	t.Helper()
	t.Cleanup(func() { st.Close() })
	if err := st.PutProject(t.Context(), &v1.Project{Name: project, ID: "/v1/projects/" + project}, store.Cond{}); err != nil {
		t.Fatalf("put project: %v", err)
	}
	s := sim.New()
	return &env{t: t, st: st, sim: s, reg: provider.Registry{"sim": s}}
}

func (e *env) runner(mod ...func(*plan.Options)) *plan.Runner {
	opts := plan.Options{
		Store:       e.st,
		Providers:   e.reg,
		Logger:      slog.New(slog.NewTextHandler(e.t.Output(), &slog.HandlerOptions{Level: slog.LevelDebug})),
		NewBackOff:  func() backoff.BackOff { return &backoff.ZeroBackOff{} },
		NodeTimeout: 5 * time.Second,
		NodePoll:    10 * time.Millisecond,
	}
	for _, m := range mod {
		m(&opts)
	}
	return plan.NewRunner(opts)
}

func spec(workers int, labels map[string]string) v1.ClusterSpec {
	return v1.ClusterSpec{
		Provider:     "sim",
		ControlPlane: v1.ControlPlane{Size: 1, Dedicated: true},
		WorkerPools:  []v1.WorkerPool{{Name: "default", Size: workers}},
		NodeApproval: "auto",
		Labels:       labels,
	}
}

// begin starts an operation of kind on cluster name, as the frontend does.
func (e *env) begin(name, kind string, sp v1.ClusterSpec) *store.Operation {
	e.t.Helper()
	return e.beginSteps(name, kind, sp, plan.Steps(kind))
}

// beginSteps starts an operation of kind with the given steps.
func (e *env) beginSteps(name, kind string, sp v1.ClusterSpec, steps []string) *store.Operation {
	e.t.Helper()
	return e.beginStepsOn(name, kind, sp, steps, nil)
}

// beginStepsOn is beginSteps for an operation on some nodes (its Nodes).
func (e *env) beginStepsOn(name, kind string, sp v1.ClusterSpec, steps, nodes []string) *store.Operation {
	e.t.Helper()
	ctx := e.t.Context()
	state := map[string]string{v1.KindCreate: v1.StateCreating, v1.KindUpdate: v1.StateUpdating, v1.KindDelete: v1.StateDeleting,
		v1.KindProvision: v1.StateUpdating, v1.KindReset: v1.StateUpdating, v1.KindRepair: v1.StateUpdating,
		v1.KindAutoscale: v1.StateUpdating, v1.KindHibernate: v1.StateUpdating, v1.KindResume: v1.StateUpdating,
		v1.KindRemoveNode: v1.StateUpdating}[kind]
	cl, err := e.st.GetCluster(ctx, store.Key{Project: project, Name: name})
	switch {
	case errors.Is(err, store.ErrNotFound):
		cl = &store.Cluster{Project: project, Name: name}
	case err != nil:
		e.t.Fatalf("get cluster: %v", err)
	}
	id, err := uuid.NewV7()
	if err != nil {
		e.t.Fatal(err)
	}
	op := &store.Operation{ID: id.String(), Project: project, Cluster: name, Kind: kind,
		Status: v1.OpInProgress, StartTime: time.Now().UTC(), Nodes: nodes}
	for _, s := range steps {
		op.Steps = append(op.Steps, v1.Step{Name: s, State: v1.StepPending})
	}
	cl.Spec = sp
	cl.Status.ProvisioningState = state
	cl.Status.CurrentOperation = op.ID
	if err := e.st.BeginOperation(ctx, cl, op, store.Cond{}); err != nil {
		e.t.Fatalf("begin %s operation: %v", kind, err)
	}
	return op
}

func (e *env) claim(owner string) *store.Cluster {
	e.t.Helper()
	cl, err := e.st.ClaimCluster(e.t.Context(), owner, time.Minute)
	if err != nil {
		e.t.Fatalf("claim: %v", err)
	}
	return cl
}

// runOnce claims the cluster and runs its operation to the end.
func (e *env) runOnce(r *plan.Runner) {
	e.t.Helper()
	cl := e.claim("test")
	if err := r.Run(e.t.Context(), cl); err != nil {
		e.t.Fatalf("run: %v", err)
	}
}

func (e *env) op(id string) *store.Operation {
	e.t.Helper()
	op, err := e.st.GetOperation(e.t.Context(), id)
	if err != nil {
		e.t.Fatalf("get operation: %v", err)
	}
	return op
}

func (e *env) cluster(name string) *store.Cluster {
	e.t.Helper()
	cl, err := e.st.GetCluster(e.t.Context(), store.Key{Project: project, Name: name})
	if err != nil {
		e.t.Fatalf("get cluster: %v", err)
	}
	return cl
}

// nodes returns the cluster's nodes as name -> "role/pool/state".
func (e *env) nodes(name string) map[string]string {
	e.t.Helper()
	ns, _, err := e.st.ListNodes(e.t.Context(), store.Key{Project: project, Name: name}, store.Page{Limit: 1000})
	if err != nil && !errors.Is(err, store.ErrNotFound) {
		e.t.Fatalf("list nodes: %v", err)
	}
	out := map[string]string{}
	for _, n := range ns {
		out[n.Name] = n.Role + "/" + n.Pool + "/" + n.State
	}
	return out
}

// counts are the cluster's nodes as the API counts them (clusterstate):
// control plane present, workers present, ready.
func (e *env) counts(name string) [3]int {
	e.t.Helper()
	var nodes []v1.Node
	ns, _, err := e.st.ListNodes(e.t.Context(), store.Key{Project: project, Name: name}, store.Page{Limit: 1000})
	if err != nil {
		e.t.Fatalf("list nodes: %v", err)
	}
	for _, n := range ns {
		nodes = append(nodes, n.Node)
	}
	c := clusterstate.Counts(&e.cluster(name).Spec, nodes)
	return [3]int{c.ControlPlane, c.Workers, c.Ready}
}

func (e *env) machines(name string) []string {
	e.t.Helper()
	ms, err := e.sim.ListMachines(e.t.Context(), provider.Cluster{Project: project, Name: name})
	if err != nil {
		e.t.Fatal(err)
	}
	var out []string
	for _, m := range ms {
		out = append(out, m.Name)
	}
	return out
}

func stepStates(op *store.Operation) map[string]string {
	out := map[string]string{}
	for _, s := range op.Steps {
		out[s.Name] = s.State
	}
	return out
}

func attempts(op *store.Operation) map[string]int {
	out := map[string]int{}
	for _, s := range op.Steps {
		out[s.Name] = s.Attempts
	}
	return out
}

func all[T any](names []string, v T) map[string]T {
	out := map[string]T{}
	for _, n := range names {
		out[n] = v
	}
	return out
}
