package server_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/cenkalti/backoff/v5"

	"kiln.dev/kiln/api/client"
	v1 "kiln.dev/kiln/api/v1"
	"kiln.dev/kiln/internal/auth"
	"kiln.dev/kiln/internal/plan"
	"kiln.dev/kiln/internal/provider"
	"kiln.dev/kiln/internal/provider/sim"
	"kiln.dev/kiln/internal/server"
	"kiln.dev/kiln/internal/store"
	"kiln.dev/kiln/internal/worker"
	"kiln.dev/kiln/test/waitfor"
)

// withPlan gives new operations the backend's steps.
func withPlan(o *server.Options) {
	o.Steps = func(kind string, spec *v1.ClusterSpec) []string { return plan.StepsFor(kind, spec.Provider == "edge") }
}

// backend runs a worker with the real plan over h's store and the sim s
// until the test ends, as kilnd's backend does.
func (h *harness) backend(s *sim.Sim) {
	h.t.Helper()
	r := plan.NewRunner(plan.Options{
		Store: h.store, Providers: provider.Registry{"sim": s}, Logger: slog.New(slog.DiscardHandler),
		NewBackOff:  func() backoff.BackOff { return &backoff.ZeroBackOff{} },
		MaxAttempts: 3, CancelPoll: 10 * time.Millisecond, NodePoll: 10 * time.Millisecond,
		Drain: plan.Drain{Signal: worker.Draining, Err: worker.ErrDraining},
	})
	w := worker.New(worker.Options{Store: h.store, Runner: r, Poll: 10 * time.Millisecond, Logger: slog.New(slog.DiscardHandler)})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); w.Run(ctx) }()
	h.t.Cleanup(func() { cancel(); <-done })
}

// tokenFor makes user a member of project with role and returns a token
// of theirs.
func (h *harness) tokenFor(user, project, role string) string {
	h.t.Helper()
	ctx := h.t.Context()
	value, hash, err := auth.NewToken()
	if err == nil {
		err = h.store.PutUser(ctx, &v1.User{Name: user}, store.Cond{})
	}
	if err == nil {
		err = h.store.PutMember(ctx, &store.Member{Project: project, Member: v1.Member{Name: user, Role: role}}, store.Cond{})
	}
	if err == nil {
		err = h.store.CreateToken(ctx, &store.Token{ID: auth.NewTokenID(), Hash: hash, Principal: auth.UserPrincipal(user),
			ExpiresAt: time.Now().Add(time.Hour)})
	}
	if err != nil {
		h.t.Fatal(err)
	}
	return value
}

// operation reads an operation.
func (h *harness) operation(id string) v1.Operation {
	h.t.Helper()
	var op v1.Operation
	h.must(http.StatusOK, "GET", "/v1/operations/"+id, "").decode(h.t, &op)
	return op
}

// await long-polls an operation until it ends.
func (h *harness) await(id string) v1.Operation {
	h.t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) {
		var op v1.Operation
		h.must(http.StatusOK, "GET", "/v1/operations/"+id+"?wait=5s", "").decode(h.t, &op)
		if v1.Terminal(op.Status) {
			return op
		}
	}
	h.t.Fatalf("operation %s did not end", id)
	return v1.Operation{}
}

// awaitStep waits until the operation's step is Running.
func (h *harness) awaitStep(id, step string) {
	h.t.Helper()
	waitfor.Cond(h.t, "step "+step+" of operation "+id+" to be Running", 20*time.Second, func() (bool, error) {
		for _, s := range h.operation(id).Properties.Steps {
			if s.Name == step && s.State == v1.StepRunning {
				return true, nil
			}
		}
		return false, nil
	})
}

func (h *harness) cluster(project, name string) v1.Cluster {
	h.t.Helper()
	var cl v1.Cluster
	h.must(http.StatusOK, "GET", "/v1/projects/"+project+"/clusters/"+name, "").decode(h.t, &cl)
	return cl
}

func (h *harness) events(project, name string) []v1.Event {
	h.t.Helper()
	var l v1.List[v1.Event]
	h.must(http.StatusOK, "GET", "/v1/projects/"+project+"/clusters/"+name+"/events?top=1000", "").decode(h.t, &l)
	return l.Value
}

func stepState(op v1.Operation, name string) v1.Step {
	for _, s := range op.Properties.Steps {
		if s.Name == name {
			return s
		}
	}
	return v1.Step{}
}

func simCluster(labels map[string]string) string {
	b, _ := json.Marshal(map[string]any{"spec": map[string]any{"provider": "sim",
		"workerPools": []any{map[string]any{"name": "default", "size": 2}}, "labels": labels}})
	return string(b)
}

// Cancel through the API: who may, what it answers, the operation and the
// cluster end Canceled, and a later PATCH continues from there.
func TestCancelThroughTheAPI(t *testing.T) {
	h := newHarness(t, withPlan)
	h.project("p")
	h.backend(sim.New())
	viewer := "Authorization: Bearer " + h.tokenFor("val", "p", v1.RoleViewer)
	_, opID := h.createCluster("p", "c", simCluster(map[string]string{sim.LabelHangStep: plan.StepEnsureControlPlaneMachines}))
	h.awaitStep(opID, plan.StepEnsureControlPlaneMachines)
	cancelPath := "/v1/operations/" + opID + "/cancel"

	if e := h.must(http.StatusForbidden, "POST", cancelPath, "", viewer).errorBody(t); e.Code != v1.CodeForbidden ||
		!strings.Contains(e.Message, "this needs operator") {
		t.Errorf("a viewer's cancel: %+v", e)
	}
	h.must(http.StatusBadRequest, "POST", cancelPath, `{}`)
	h.must(http.StatusNotFound, "POST", "/v1/operations/01a1feb0-0000-7000-8000-000000000000/cancel", "")
	if op := h.operation(opID); op.Properties.CancelRequested != nil {
		t.Fatalf("refused cancels recorded a request: %+v", op.Properties.CancelRequested)
	}

	r := h.must(http.StatusAccepted, "POST", cancelPath, "")
	var op v1.Operation
	r.decode(t, &op)
	if op.Name != opID || op.Properties.CancelRequested == nil || op.Properties.CancelRequested.By != "user:admin" ||
		r.header.Get("Location") != h.srv.URL+"/v1/operations/"+opID {
		t.Fatalf("cancel answered %s (Location %q)", r.body, r.header.Get("Location"))
	}
	// Asked again: the same answer, the first request kept; or, when the
	// operation stopped meanwhile, 409.
	first := *op.Properties.CancelRequested
	switch r := h.do("POST", cancelPath, ""); r.status {
	case http.StatusAccepted:
		r.decode(t, &op)
		if *op.Properties.CancelRequested != first {
			t.Errorf("a second cancel changed the request: %+v, was %+v", op.Properties.CancelRequested, first)
		}
	case http.StatusConflict:
		if e := r.errorBody(t); e.Code != v1.CodeConflict || !strings.Contains(e.Message, "it is Canceled") {
			t.Errorf("a second cancel: %+v", e)
		}
	default:
		t.Errorf("a second cancel: %d %s", r.status, r.body)
	}

	op = h.await(opID)
	if op.Status != v1.OpCanceled || op.Error == nil || op.Error.Code != v1.CodeCanceled {
		t.Fatalf("operation %s %+v, want Canceled", op.Status, op.Error)
	}
	if s := stepState(op, plan.StepEnsureControlPlaneMachines); s.State != v1.StepCanceled ||
		!strings.Contains(s.Message, "canceled by user:admin while running") {
		t.Errorf("step %+v, want Canceled by user:admin while running", s)
	}
	if s := stepState(op, plan.StepWaitNodesRegistered); s.State != v1.StepPending {
		t.Errorf("the step after: %+v, want Pending", s)
	}
	cl := h.cluster("p", "c")
	if cl.Status.ProvisioningState != v1.StateCanceled || cl.Status.FailedProvisioningState != v1.StateCreating ||
		cl.Status.LastError == nil || cl.Status.LastError.Step != plan.StepEnsureControlPlaneMachines {
		t.Errorf("cluster status %+v, want Canceled while Creating, at %s", cl.Status, plan.StepEnsureControlPlaneMachines)
	}
	var reasons []string
	for _, ev := range h.events("p", "c") {
		switch ev.Reason {
		case "CancelRequested":
			if !strings.Contains(ev.Message, "user:admin asked to cancel the create operation at step ensure-control-plane-machines") {
				t.Errorf("CancelRequested event %q does not say who and at which step", ev.Message)
			}
			fallthrough
		case "StepCanceled", "OperationCanceled":
			reasons = append(reasons, ev.Reason)
		}
	}
	if strings.Join(reasons, ",") != "CancelRequested,StepCanceled,OperationCanceled" {
		t.Errorf("cancel events %v", reasons)
	}

	// Ended: nothing to cancel; nothing to retry either once a change succeeded.
	if e := h.must(http.StatusConflict, "POST", cancelPath, "").errorBody(t); e.Code != v1.CodeConflict ||
		!strings.Contains(e.Message, "it is Canceled") {
		t.Errorf("cancel of a canceled operation: %+v", e)
	}

	// A later change continues: the hang is gone, the create runs again.
	r = h.must(http.StatusAccepted, "PATCH", "/v1/projects/p/clusters/c",
		`{"spec": {"labels": {"`+sim.LabelHangStep+`": null}}}`)
	next := h.await(client.OperationID(r.header.Get("Location")))
	if next.Status != v1.OpSucceeded || next.Properties.Kind != v1.KindCreate {
		t.Fatalf("the PATCH after the cancel: %s %s %+v, want a create that succeeds", next.Properties.Kind, next.Status, next.Error)
	}
	if cl := h.cluster("p", "c"); cl.Status.ProvisioningState != v1.StateSucceeded || cl.Status.Nodes.Ready != 3 {
		t.Errorf("cluster after the PATCH: %s, %d nodes ready", cl.Status.ProvisioningState, cl.Status.Nodes.Ready)
	}
	if e := h.must(http.StatusConflict, "POST", "/v1/operations/"+next.Name+"/cancel", "").errorBody(t); e.Code != v1.CodeConflict ||
		!strings.Contains(e.Message, "it is Succeeded") {
		t.Errorf("cancel of a succeeded operation: %+v", e)
	}
	if e := h.must(http.StatusConflict, "POST", "/v1/projects/p/clusters/c/retry", "").errorBody(t); e.Code != v1.CodeConflict ||
		!strings.Contains(e.Message, "nothing to retry") {
		t.Errorf("retry of a succeeded cluster: %+v", e)
	}
}

// journal counts the sim's step attempts of cluster p/c by step.
func journal(t *testing.T, path string) map[string]int {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	out := map[string]int{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		var e sim.JournalEntry
		if err := json.Unmarshal(sc.Bytes(), &e); err != nil {
			t.Fatal(err)
		}
		if e.Cluster == "p/c" {
			out[e.Step]++
		}
	}
	return out
}

// Retry through the API: it resumes at the failed step, the steps before
// are not run again, and it is refused when there is nothing to retry.
func TestRetryThroughTheAPI(t *testing.T) {
	h := newHarness(t, withPlan)
	h.project("p")
	jpath := filepath.Join(t.TempDir(), "journal")
	h.backend(sim.New(sim.WithJournal(jpath)))
	viewer := "Authorization: Bearer " + h.tokenFor("val", "p", v1.RoleViewer)
	h.must(http.StatusNotFound, "POST", "/v1/projects/p/clusters/c/retry", "")

	// ensure-worker-machines fails its 3 attempts (the backend's most).
	_, opID := h.createCluster("p", "c", simCluster(map[string]string{
		sim.LabelFailStep: plan.StepEnsureWorkerMachines, sim.LabelFailTimes: "3"}))
	failed := h.await(opID)
	if failed.Status != v1.OpFailed || stepState(failed, plan.StepEnsureWorkerMachines).State != v1.StepFailed {
		t.Fatalf("create: %s %+v", failed.Status, failed.Error)
	}
	h.must(http.StatusForbidden, "POST", "/v1/projects/p/clusters/c/retry", "", viewer)
	h.must(http.StatusBadRequest, "POST", "/v1/projects/p/clusters/c/retry", `{}`)
	before := journal(t, jpath)

	r := h.must(http.StatusAccepted, "POST", "/v1/projects/p/clusters/c/retry", "")
	var cl v1.Cluster
	r.decode(t, &cl)
	retryID := client.OperationID(r.header.Get("Azure-AsyncOperation"))
	// The accepted retry is audited once, with the operation it began.
	var audit v1.List[v1.AuditEntry]
	h.must(http.StatusOK, "GET", "/v1/audit?action=retry&result=success", "").decode(t, &audit)
	if len(audit.Value) != 1 || audit.Value[0].Status != http.StatusAccepted {
		t.Errorf("the retry's audit entries: %+v, want one with status 202", audit.Value)
	}
	if cl.Status.ProvisioningState != v1.StateCreating || cl.Status.CurrentOperation != retryID || retryID == opID {
		t.Fatalf("cluster after retry: %+v (operation %s)", cl.Status, retryID)
	}
	begun := h.operation(retryID)
	if begun.Properties.RetryOf != opID || begun.Properties.Kind != v1.KindCreate {
		t.Errorf("retry operation: kind %s retryOf %q, want a create retrying %s", begun.Properties.Kind, begun.Properties.RetryOf, opID)
	}
	if s := stepState(begun, plan.StepEnsureNetwork); s.State != v1.StepSucceeded || !strings.Contains(s.Message, "done by operation "+opID) {
		t.Errorf("kept step as begun: %+v", s)
	}
	// Retrying while the retry runs: refused, naming it.
	if r := h.do("POST", "/v1/projects/p/clusters/c/retry", ""); r.status == http.StatusConflict {
		if e := r.errorBody(t); e.Target != "/v1/operations/"+retryID && !strings.Contains(e.Message, "nothing to retry") {
			t.Errorf("retry during the retry: %+v", e)
		}
	} else if r.status != http.StatusConflict {
		t.Errorf("retry during the retry: %d %s, want 409", r.status, r.body)
	}

	done := h.await(retryID)
	if done.Status != v1.OpSucceeded || done.PercentComplete != 100 {
		t.Fatalf("retry: %s %+v", done.Status, done.Error)
	}
	after := journal(t, jpath)
	for _, s := range plan.Steps(v1.KindCreate) {
		ran := after[s] - before[s]
		want := 0
		if s == plan.StepEnsureWorkerMachines || s == plan.StepInstallWorkers || s == plan.StepWaitNodesReady || s == plan.StepInstallAccess || s == plan.StepInstallNetworkPolicy || s == plan.StepApplyProfile {
			want = 1
		}
		if ran != want {
			t.Errorf("the retry ran step %s %d times, want %d", s, ran, want)
		}
	}
	found := false
	for _, ev := range h.events("p", "c") {
		if ev.Reason == "RetryRequested" {
			found = strings.Contains(ev.Message, fmt.Sprintf("user:admin retried the Failed create operation %s as operation %s from step %s",
				opID, retryID, plan.StepEnsureWorkerMachines))
		}
	}
	if !found {
		t.Errorf("no RetryRequested event naming who, what and from where: %+v", h.events("p", "c"))
	}
	if e := h.must(http.StatusConflict, "POST", "/v1/projects/p/clusters/c/retry", "").errorBody(t); !strings.Contains(e.Message, `cluster "c" in project "p" is Succeeded`) {
		t.Errorf("retry after success: %+v", e)
	}
}

// A failed update is retried or superseded by another change.
func TestFailedUpdateSuperseded(t *testing.T) {
	h := newHarness(t, withPlan)
	h.project("p")
	h.backend(sim.New())
	_, opID := h.createCluster("p", "c", simCluster(nil))
	h.await(opID)
	r := h.must(http.StatusAccepted, "PATCH", "/v1/projects/p/clusters/c",
		`{"spec": {"labels": {"`+sim.LabelFailTerminal+`": "ensure-worker-machines"}, "workerPools": [{"name": "default", "size": 3}]}}`)
	if op := h.await(client.OperationID(r.header.Get("Location"))); op.Status != v1.OpFailed || op.Properties.Kind != v1.KindUpdate {
		t.Fatalf("update: %s %s", op.Properties.Kind, op.Status)
	}
	r = h.must(http.StatusAccepted, "PATCH", "/v1/projects/p/clusters/c", `{"spec": {"labels": null}}`)
	if op := h.await(client.OperationID(r.header.Get("Location"))); op.Status != v1.OpSucceeded || op.Properties.Kind != v1.KindUpdate {
		t.Fatalf("the superseding update: %s %s %+v", op.Properties.Kind, op.Status, op.Error)
	}
	if cl := h.cluster("p", "c"); cl.Status.ProvisioningState != v1.StateSucceeded || cl.Status.Nodes.Workers != 3 {
		t.Errorf("cluster %s with %d workers, want Succeeded with 3", cl.Status.ProvisioningState, cl.Status.Nodes.Workers)
	}
}

// A forced delete is refused until a delete failed with a terminal
// provider error; then it removes the records and lists what may be left.
func TestForceDeleteThroughTheAPI(t *testing.T) {
	h := newHarness(t, withPlan)
	h.project("p")
	h.backend(sim.New())
	const c = "/v1/projects/p/clusters/c"
	h.must(http.StatusNotFound, "DELETE", c+"?force=true", "")
	_, opID := h.createCluster("p", "c", simCluster(map[string]string{sim.LabelFailTerminal: plan.StepDeleteNetwork}))
	h.await(opID)

	if e := h.must(http.StatusBadRequest, "DELETE", c+"?force=yes", "").errorBody(t); e.Target != "force" {
		t.Errorf("force=yes: %+v", e)
	}
	e := h.must(http.StatusConflict, "DELETE", c+"?force=true", "").errorBody(t)
	if e.Code != v1.CodeConflict || e.Target != "force" || !strings.Contains(e.Message, "force is only for") ||
		!strings.Contains(e.Message, `cluster "c" in project "p" is not to be deleted with force`) || !strings.Contains(e.Message, "it is Succeeded") {
		t.Errorf("force on a Succeeded cluster: %+v", e)
	}

	r := h.must(http.StatusAccepted, "DELETE", c, "")
	del := h.await(client.OperationID(r.header.Get("Location")))
	if del.Status != v1.OpFailed || del.Error.Code != v1.CodeProviderError {
		t.Fatalf("delete: %s %+v", del.Status, del.Error)
	}
	r = h.must(http.StatusAccepted, "DELETE", c+"?force=true", "")
	id := client.OperationID(r.header.Get("Location"))
	if op := h.operation(id); !op.Properties.Force || op.Properties.Kind != v1.KindDelete {
		t.Errorf("forced delete operation: %+v", op.Properties)
	}
	forced := h.await(id)
	if forced.Status != v1.OpSucceeded {
		t.Fatalf("forced delete: %s %+v", forced.Status, forced.Error)
	}
	if s := stepState(forced, plan.StepDeleteNetwork); s.State != v1.StepFailed || !strings.Contains(s.Message, "error ignored") {
		t.Errorf("delete-network in the forced delete: %+v", s)
	}
	if len(forced.Properties.Leftovers) != 1 || forced.Properties.Leftovers[0].Kind != v1.LeftoverNetwork {
		t.Errorf("leftovers %+v, want the network", forced.Properties.Leftovers)
	}
	h.must(http.StatusNotFound, "GET", c, "")
	h.must(http.StatusNotFound, "GET", c+"/nodes", "")
}

// A delete that failed with an error that may pass is retried, not forced.
func TestForceDeleteRefusedAfterARetryableError(t *testing.T) {
	h := newHarness(t, withPlan)
	h.project("p")
	h.backend(sim.New())
	const c = "/v1/projects/p/clusters/c"
	_, opID := h.createCluster("p", "c", simCluster(map[string]string{
		sim.LabelFailStep: plan.StepDeleteNetwork, sim.LabelFailTimes: "100"}))
	h.await(opID)
	r := h.must(http.StatusAccepted, "DELETE", c, "")
	if del := h.await(client.OperationID(r.header.Get("Location"))); del.Status != v1.OpFailed {
		t.Fatalf("delete: %s", del.Status)
	}
	e := h.must(http.StatusConflict, "DELETE", c+"?force=true", "").errorBody(t)
	if !strings.Contains(e.Message, "force is only for") || !strings.Contains(e.Message, "retry it") {
		t.Errorf("force after a retryable failure: %+v", e)
	}
	if cl := h.cluster("p", "c"); cl.Status.ProvisioningState != v1.StateFailed {
		t.Errorf("a refused force changed the cluster: %s", cl.Status.ProvisioningState)
	}
}

// Cancel an update and a delete through the API; a later change continues.
func TestCancelUpdateAndDeleteThroughTheAPI(t *testing.T) {
	h := newHarness(t, withPlan)
	h.project("p")
	h.backend(sim.New())
	const c = "/v1/projects/p/clusters/c"
	_, opID := h.createCluster("p", "c", simCluster(nil))
	h.await(opID)

	// An update (a scale to 4 workers) canceled while it makes workers.
	r := h.must(http.StatusAccepted, "PATCH", c, `{"spec": {"labels": {"`+sim.LabelHangStep+`": "ensure-worker-machines"},
		"workerPools": [{"name": "default", "size": 4}]}}`)
	update := client.OperationID(r.header.Get("Location"))
	h.awaitStep(update, plan.StepEnsureWorkerMachines)
	h.must(http.StatusAccepted, "POST", "/v1/operations/"+update+"/cancel", "")
	if op := h.await(update); op.Status != v1.OpCanceled || stepState(op, plan.StepEnsureWorkerMachines).State != v1.StepCanceled {
		t.Fatalf("update: %s, steps %+v", op.Status, op.Properties.Steps)
	}
	if cl := h.cluster("p", "c"); cl.Status.ProvisioningState != v1.StateCanceled || cl.Status.FailedProvisioningState != v1.StateUpdating {
		t.Errorf("after the canceled update: %s (was %s)", cl.Status.ProvisioningState, cl.Status.FailedProvisioningState)
	}
	// The next change continues: it is an update, and it makes the workers.
	r = h.must(http.StatusAccepted, "PATCH", c, `{"spec": {"labels": {"`+sim.LabelHangStep+`": "delete-network"}}}`)
	if op := h.await(client.OperationID(r.header.Get("Location"))); op.Status != v1.OpSucceeded || op.Properties.Kind != v1.KindUpdate {
		t.Fatalf("the PATCH after the canceled update: %s %s %+v", op.Properties.Kind, op.Status, op.Error)
	}
	if cl := h.cluster("p", "c"); cl.Status.Nodes.Workers != 4 {
		t.Errorf("workers after the update: %d, want 4", cl.Status.Nodes.Workers)
	}

	// A delete canceled at its last step; the cluster stays, Canceled.
	r = h.must(http.StatusAccepted, "DELETE", c, "")
	del := client.OperationID(r.header.Get("Location"))
	h.awaitStep(del, plan.StepDeleteNetwork)
	h.must(http.StatusAccepted, "POST", "/v1/operations/"+del+"/cancel", "")
	if op := h.await(del); op.Status != v1.OpCanceled {
		t.Fatalf("delete: %s", op.Status)
	}
	cl := h.cluster("p", "c")
	if cl.Status.ProvisioningState != v1.StateCanceled || cl.Status.FailedProvisioningState != v1.StateDeleting || cl.Status.Nodes.Workers != 0 {
		t.Errorf("after the canceled delete: %s (was %s), %d workers", cl.Status.ProvisioningState, cl.Status.FailedProvisioningState, cl.Status.Nodes.Workers)
	}
	// Retry would hang at the same step again; a PATCH dropping the hang
	// makes the machines again, and the delete then ends the cluster.
	r = h.must(http.StatusAccepted, "PATCH", c, `{"spec": {"labels": null}}`)
	if op := h.await(client.OperationID(r.header.Get("Location"))); op.Status != v1.OpSucceeded {
		t.Fatalf("the PATCH after the canceled delete: %s %+v", op.Status, op.Error)
	}
	r = h.must(http.StatusAccepted, "DELETE", c, "")
	if op := h.await(client.OperationID(r.header.Get("Location"))); op.Status != v1.OpSucceeded {
		t.Fatalf("delete: %s %+v", op.Status, op.Error)
	}
	h.must(http.StatusNotFound, "GET", c, "")
}

// Events are paged like every list, oldest first, and outlive the cluster.
func TestEventsArePaged(t *testing.T) {
	h := newHarness(t, nil)
	h.project("p")
	for i := range 5 {
		ev := &store.Event{Project: "p", Cluster: "gone", Event: v1.Event{Type: "Normal", Reason: "Test", Message: fmt.Sprint(i)}}
		if err := h.store.AppendEvent(t.Context(), ev); err != nil {
			t.Fatal(err)
		}
	}
	var got []string
	path, pages := "/v1/projects/p/clusters/gone/events?top=2", 0
	for path != "" {
		var l v1.List[v1.Event]
		h.must(http.StatusOK, "GET", path, "").decode(t, &l)
		for _, ev := range l.Value {
			got = append(got, ev.Message)
		}
		path = l.NextLink
		pages++
	}
	if strings.Join(got, ",") != "0,1,2,3,4" || pages != 3 {
		t.Errorf("events %v in %d pages, want 0..4, oldest first, in 3", got, pages)
	}
}
