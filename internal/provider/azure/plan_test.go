package azure_test

import (
	"log/slog"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cenkalti/backoff/v5"

	v1 "kiln.dev/kiln/api/v1"
	"kiln.dev/kiln/internal/plan"
	"kiln.dev/kiln/internal/provider"
	"kiln.dev/kiln/internal/provider/azure"
	"kiln.dev/kiln/internal/store"
	"kiln.dev/kiln/internal/store/sqlite"
	azurelocal "kiln.dev/kiln/test/cloud/azure"
)

// Issue 49's "every 5th call throttled: the create still converges and
// the step says how many calls were retried", through the plan's runner:
// the network's, a control-plane machine's and the API load balancer's
// steps against a local Azure that throttles every 5th ARM call succeed at
// their first attempt, and each step's message says how many calls the
// SDK retried; together, every throttled call. Virtual machines are
// records here (no Docker).
func TestThrottledStepsSayRetries(t *testing.T) {
	t.Parallel()
	l := newLocal(t, azurelocal.Options{Images: []string{version}})
	ctx := t.Context()
	st, err := sqlite.Open(ctx, filepath.Join(t.TempDir(), "kiln.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	if err := st.PutProject(ctx, &v1.Project{Name: "p", ID: "/v1/projects/p"}, store.Cond{}); err != nil {
		t.Fatal(err)
	}
	if err := st.PutCloudAccount(ctx, &store.CloudAccount{Project: "p", CloudAccount: v1.CloudAccount{
		Name: l.account.Name, Provider: azure.Name, Credentials: l.account.Credentials}}, store.Cond{}); err != nil {
		t.Fatal(err)
	}
	spec := cluster(l, "c1").Spec
	spec.CloudAccount = l.account.Name
	steps := []string{plan.StepEnsureNetwork, plan.StepEnsureControlPlaneMachines, plan.StepEnsureLoadBalancer}
	op := &store.Operation{ID: "0190a000-0000-7000-8000-000000000049", Project: "p", Cluster: "c1", Kind: v1.KindCreate,
		Status: v1.OpInProgress, StartTime: time.Now().UTC()}
	for _, s := range steps {
		op.Steps = append(op.Steps, v1.Step{Name: s, State: v1.StepPending})
	}
	cl := &store.Cluster{Project: "p", Name: "c1", Spec: spec}
	cl.Status.ProvisioningState, cl.Status.CurrentOperation = v1.StateCreating, op.ID
	if err := st.BeginOperation(ctx, cl, op, store.Cond{}); err != nil {
		t.Fatal(err)
	}

	l.SetFaults(azurelocal.Faults{ThrottleEvery: 5})
	r := plan.NewRunner(plan.Options{Store: st, Providers: provider.Registry{azure.Name: newNetwork()},
		Logger:     slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelInfo})),
		NewBackOff: func() backoff.BackOff { return &backoff.ZeroBackOff{} }})
	claimed, err := st.ClaimCluster(ctx, "test", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Run(ctx, claimed); err != nil {
		t.Fatal(err)
	}
	calls, throttled := l.Calls()
	got, err := st.GetOperation(ctx, op.ID)
	if err != nil {
		t.Fatal(err)
	}
	if got.Status != v1.OpSucceeded {
		t.Fatalf("the create under throttling: %s %+v; want Succeeded", got.Status, got.Error)
	}
	said := 0
	for _, s := range got.Steps {
		t.Logf("step %s: %d attempts, %q", s.Name, s.Attempts, s.Message)
		if m := retriedRE.FindStringSubmatch(s.Message); m != nil {
			k, _ := strconv.Atoi(m[1])
			said += k
		}
		if s.Attempts != 1 || s.State != v1.StepSucceeded {
			t.Errorf("step %s: %s after %d attempts; want Succeeded at the first: the SDK absorbs the throttling", s.Name, s.State, s.Attempts)
		}
	}
	t.Logf("%d ARM calls, %d throttled; the steps' messages say %d retried", calls, throttled, said)
	if throttled == 0 || said != throttled {
		t.Errorf("%d calls throttled, the steps say %d retried; want some, each said by the step that made it", throttled, said)
	}
	if !strings.Contains(stepMessage(got, plan.StepEnsureNetwork), "provider calls retried after throttling") {
		t.Errorf("ensure-network's message %q does not say how many calls were retried", stepMessage(got, plan.StepEnsureNetwork))
	}
}

var retriedRE = regexp.MustCompile(`(\d+) provider calls retried after throttling or transient errors`)

func stepMessage(op *store.Operation, name string) string {
	for _, s := range op.Steps {
		if s.Name == name {
			return s.Message
		}
	}
	return ""
}
