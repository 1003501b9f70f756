package server_test

import (
	"net/http"
	"slices"
	"strings"
	"testing"

	v1 "kiln.dev/kiln/api/v1"
	"kiln.dev/kiln/internal/provider/sim"
	"kiln.dev/kiln/internal/store"
)

// A sim cluster hibernates and resumes through the API; a Hibernated one
// refuses changes; a job submitted to it resumes it, and the same job
// again is the same job.
func TestHibernateResumeAndJobs(t *testing.T) {
	h := newHarness(t, withPlan)
	h.backend(sim.New())
	h.project("p")
	_, opID := h.createCluster("p", "c", simBody)
	h.await(opID)
	const base = "/v1/projects/p/clusters/c"

	r := h.must(http.StatusConflict, "POST", base+"/resume", "")
	if e := r.errorBody(t); !strings.Contains(e.Message, "is Succeeded, not Hibernated") {
		t.Errorf("resume of a running cluster: %+v", e)
	}
	r = h.must(http.StatusAccepted, "POST", base+"/hibernate", "")
	var cl v1.Cluster
	r.decode(t, &cl)
	if op := h.await(cl.Status.CurrentOperation); op.Status != v1.OpSucceeded || op.Properties.Kind != v1.KindHibernate {
		t.Fatalf("hibernate: %s %s %+v", op.Properties.Kind, op.Status, op.Error)
	}
	if got := h.cluster("p", "c"); got.Status.ProvisioningState != v1.StateHibernated {
		t.Fatalf("after the hibernate: %s", got.Status.ProvisioningState)
	}
	if e := h.must(http.StatusConflict, "POST", base+"/hibernate", "").errorBody(t); !strings.Contains(e.Message, "is Hibernated already") {
		t.Errorf("hibernate again: %+v", e)
	}
	if e := h.must(http.StatusConflict, "PATCH", base, `{"spec": {"labels": {"a": "b"}}}`).errorBody(t); !strings.Contains(e.Message, "is Hibernated") {
		t.Errorf("a change of a hibernated cluster: %+v", e)
	}

	if e := h.must(http.StatusConflict, "POST", base+"/jobs", `{"name": "j1", "spec": {"image": "kiln.dev/demo:1"}}`).errorBody(t); !strings.Contains(e.Message, "runs no Kubernetes") {
		t.Errorf("a job for a sim cluster: %+v", e)
	}
	r = h.must(http.StatusAccepted, "POST", base+"/resume", "")
	r.decode(t, &cl)
	if op := h.await(cl.Status.CurrentOperation); op.Status != v1.OpSucceeded || op.Properties.Kind != v1.KindResume {
		t.Fatalf("resume: %s %s %+v", op.Properties.Kind, op.Status, op.Error)
	}
	if got := h.cluster("p", "c"); got.Status.ProvisioningState != v1.StateSucceeded {
		t.Errorf("after the resume: %s", got.Status.ProvisioningState)
	}
}

// A job submitted to a Hibernated cluster resumes it; the same job again is
// the same job, another spec under its name is refused, and bad jobs change
// nothing.
func TestJobs(t *testing.T) {
	h := newHarness(t, withPlan)
	h.project("p")
	_, opID := h.createCluster("p", "c", `{"spec": {"provider": "local", "controlPlane": {"size": 1}, "workerPools": [{"name": "default", "size": 1}]}}`)
	h.finish(h.claim(), opID, v1.OpSucceeded, func(cl *store.Cluster) { cl.Status.ProvisioningState = v1.StateHibernated })
	const base = "/v1/projects/p/clusters/c"

	for _, tc := range []struct{ body, target string }{
		{`{"name": "j1", "spec": {}}`, "spec.image"},
		{`{"name": "J_1", "spec": {"image": "kiln.dev/demo:1"}}`, "name"},
		{`{"name": "j1", "spec": {"image": "kiln.dev/demo:1", "cpu": "lots"}}`, "spec.cpu"},
		{`{"name": "j1", "spec": {"image": "kiln.dev/demo:1", "retries": 11}}`, "spec.retries"},
	} {
		e := h.must(http.StatusBadRequest, "POST", base+"/jobs", tc.body).errorBody(t)
		if !slices.ContainsFunc(e.Details, func(d v1.Error) bool { return d.Target == tc.target }) && e.Target != tc.target {
			t.Errorf("%s: error %+v, want one about %s", tc.body, e, tc.target)
		}
	}
	if got := h.cluster("p", "c"); got.Status.ProvisioningState != v1.StateHibernated {
		t.Fatalf("bad jobs changed the cluster: %s", got.Status.ProvisioningState)
	}

	const job = `{"name": "j1", "spec": {"image": "kiln.dev/demo:1", "args": ["whoami"], "cpu": "100m"}}`
	r := h.must(http.StatusCreated, "POST", base+"/jobs", job)
	var j v1.Job
	r.decode(t, &j)
	if j.ID != base+"/jobs/j1" || j.Status.Phase != v1.JobPending || j.Status.Operation == "" || r.header.Get("Location") == "" {
		t.Fatalf("job %+v, Location %q: want Pending with the resume operation", j, r.header.Get("Location"))
	}
	if op := h.operation(j.Status.Operation); op.Properties.Kind != v1.KindResume || !strings.Contains(op.Properties.Reason, "job j1") {
		t.Errorf("the job's operation: %s, reason %q", op.Properties.Kind, op.Properties.Reason)
	}
	if got := h.cluster("p", "c"); got.Status.ProvisioningState != v1.StateUpdating || got.Status.CurrentOperation != j.Status.Operation {
		t.Errorf("the cluster after the job: %s, operation %s", got.Status.ProvisioningState, got.Status.CurrentOperation)
	}
	var again v1.Job
	h.must(http.StatusOK, "POST", base+"/jobs", strings.Replace(job, `"cpu"`, `"command": [], "cpu"`, 1)).decode(t, &again)
	if !again.CreatedAt.Equal(j.CreatedAt) || again.Status.Operation != j.Status.Operation {
		t.Errorf("the same job again: %+v; want the first (%+v)", again, j)
	}
	if e := h.must(http.StatusConflict, "POST", base+"/jobs", strings.Replace(job, "demo:1", "demo:2", 1)).errorBody(t); !strings.Contains(e.Message, "exists with another spec") {
		t.Errorf("another spec under the name: %+v", e)
	}
	// A second job waits for the same resume.
	var j2 v1.Job
	h.must(http.StatusCreated, "POST", base+"/jobs", `{"name": "j2", "spec": {"image": "kiln.dev/demo:1"}}`).decode(t, &j2)
	if j2.Status.Phase != v1.JobPending || j2.Status.Operation != "" {
		t.Errorf("a job while the cluster resumes: %+v; want Pending, beginning no operation", j2.Status)
	}
	var jobs v1.List[v1.Job]
	h.must(http.StatusOK, "GET", base+"/jobs", "").decode(t, &jobs)
	if len(jobs.Value) != 2 || jobs.Value[0].Name != "j1" || jobs.Value[1].Name != "j2" {
		t.Errorf("jobs %+v", jobs.Value)
	}
	h.must(http.StatusNotFound, "GET", base+"/jobs/nope", "")
	if e := h.must(http.StatusConflict, "GET", base+"/jobs/j1/logs", "").errorBody(t); !strings.Contains(e.Message, "has not started yet") {
		t.Errorf("logs of a pending job: %+v", e)
	}
}

// A sim cluster's certificates are not rotated, nor its CA: it runs no
// Kubernetes; the refusal names why and begins nothing. A ca that is
// neither begin nor finish is a 400 naming it.
func TestRotateCertificatesRefusesSim(t *testing.T) {
	h := newHarness(t, withPlan)
	h.backend(sim.New())
	h.project("p")
	_, opID := h.createCluster("p", "c", simBody)
	h.await(opID)
	e := h.must(http.StatusConflict, "POST", "/v1/projects/p/clusters/c/rotate-certificates", "").errorBody(t)
	if !strings.Contains(e.Message, "run no Kubernetes") {
		t.Errorf("rotate-certificates of a sim cluster: %+v", e)
	}
	if got := h.cluster("p", "c"); got.Status.CurrentOperation != opID {
		t.Errorf("an operation began: %s", got.Status.CurrentOperation)
	}
	h.must(http.StatusBadRequest, "POST", "/v1/projects/p/clusters/c/rotate-certificates", `{"ca": true}`)
	if e := h.must(http.StatusBadRequest, "POST", "/v1/projects/p/clusters/c/rotate-certificates", `{"ca": "sideways"}`).errorBody(t); e.Target != "ca" {
		t.Errorf("ca sideways: %+v", e)
	}
	if e := h.must(http.StatusConflict, "POST", "/v1/projects/p/clusters/c/rotate-certificates", `{"ca": "begin"}`).errorBody(t); !strings.Contains(e.Message, "run no Kubernetes") {
		t.Errorf("a CA rotation of a sim cluster: %+v", e)
	}
	if got := h.cluster("p", "c"); got.Status.CurrentOperation != opID {
		t.Errorf("an operation began: %s", got.Status.CurrentOperation)
	}
}
