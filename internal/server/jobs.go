package server

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"time"

	v1 "kiln.dev/kiln/api/v1"
	"kiln.dev/kiln/internal/distro"
	"kiln.dev/kiln/internal/kubeapi"
	"kiln.dev/kiln/internal/plan/clusterapi"
	"kiln.dev/kiln/internal/store"
	"kiln.dev/kiln/internal/validate"
)

// JobStore is what the job handlers need: all of store.Jobs.
type JobStore interface {
	store.Jobs
}

// maxJobLog is how much of the end of a job's pod log the logs route
// answers with.
const maxJobLog = 1 << 20

func jobPath(p, c, j string) string { return clusterPath(p, c) + "/jobs/" + j }

func jobOut(j *store.Job) v1.Job {
	out := j.Job
	out.ID = jobPath(j.Project, j.Cluster, j.Name)
	return out
}

// createJob records a job for a cluster (POST .../clusters/{c}/jobs): 201
// with the job, Pending until the backend submits it to the cluster's
// Kubernetes. A Hibernated cluster is resumed for it (the job's
// status.operation names the resume). The same job again (same name and
// spec) answers 200 with the job as it is, so a retried request makes no
// second one; another spec under its name is 409.
func (s *Server) createJob(w http.ResponseWriter, r *http.Request) error {
	body, err := readBody(r)
	if err != nil {
		return err
	}
	var in v1.Job
	if err := decodeStrict(body, &in); err != nil {
		return err
	}
	if failures := validate.Job(in.Name, &in.Spec); len(failures) > 0 {
		return validationError("job", failures)
	}
	if err := s.requireProject(r); err != nil {
		return err
	}
	key := clusterKey(r)
	o := ref{kind: "job", name: in.Name, project: key.Project, cluster: key.Name}
	for range attempts(r.Context()) {
		cl, err := s.clusters.GetCluster(r.Context(), key)
		if err != nil {
			return toAPIError(err, clusterRef(r))
		}
		if old, err := s.jobs.GetJob(r.Context(), key, in.Name); err == nil {
			if !sameJobSpec(old.Spec, in.Spec) {
				return conflict(o, "name", "exists with another spec; give the new one another name")
			}
			writeJob(w, http.StatusOK, old)
			return nil
		} else if !errors.Is(err, store.ErrNotFound) {
			return err
		}
		st := cl.Status
		switch {
		case distro.Installed(&cl.Spec).Kubelet == v1.KubeletNone:
			return conflict(clusterRef(r), "cluster", "runs no Kubernetes (its %s machines are simulated): it cannot run jobs", cl.Spec.Provider)
		case st.ProvisioningState == v1.StateDeleting:
			return conflict(clusterRef(r), "cluster", "is being deleted")
		case createUnfinished(st):
			return conflict(clusterRef(r), "cluster", "did not finish its create (%s): retry it or delete it", st.ProvisioningState)
		case st.ProvisioningState == v1.StateFailed || st.ProvisioningState == v1.StateCanceled:
			return conflict(clusterRef(r), "cluster", "is %s: retry its last operation (kiln cluster retry %s) before it runs jobs", st.ProvisioningState, key.Name)
		}
		j := &store.Job{Project: key.Project, Job: v1.Job{Name: in.Name, Cluster: key.Name, Spec: in.Spec,
			Status: v1.JobStatus{Phase: v1.JobPending, Message: "waiting to be submitted to the cluster"}, CreatedAt: s.now().UTC()}}
		if st.ProvisioningState == v1.StateHibernated {
			j.Status.Message = "waiting for the cluster to resume"
		}
		err = s.jobs.PutJob(r.Context(), j, store.Cond{IfNoneMatch: "*"})
		if errors.Is(err, store.ErrExists) {
			continue // made meanwhile: the next look answers it
		}
		if err != nil {
			return toAPIError(err, clusterRef(r))
		}
		if st.ProvisioningState == v1.StateHibernated {
			if err := s.resumeFor(r, cl, j); err != nil {
				return err
			}
		}
		s.log.InfoContext(r.Context(), "job recorded", "requestId", requestID(r.Context()), "cluster", key.String(), "job", j.Name)
		w.Header().Set("Location", s.baseURL(r)+jobPath(key.Project, key.Name, j.Name))
		writeJob(w, http.StatusCreated, j)
		return nil
	}
	return errBusy(o)
}

// resumeFor begins the resume of Hibernated cluster cl for job j and
// records the operation in the job. A cluster that changed meanwhile (a
// resume begun by another request) leaves the job waiting for it.
func (s *Server) resumeFor(r *http.Request, cl *store.Cluster, j *store.Job) error {
	next, op := s.nextOperation(cl.Key(), cl, false)
	op.Kind = v1.KindResume
	op.Steps = s.pendingSteps(v1.KindResume, &next.Spec)
	op.Reason = fmt.Sprintf("job %s was submitted to the Hibernated cluster", j.Name)
	err := s.clusters.BeginOperation(r.Context(), next, op, writeCond(cl.ETag))
	if raced(err) {
		return nil
	}
	if err != nil {
		return err
	}
	s.log.InfoContext(r.Context(), "operation started", "requestId", requestID(r.Context()),
		"cluster", cl.Key().String(), "operation", op.ID, "kind", op.Kind)
	j.Status.Operation = op.ID
	j.Status.Message = fmt.Sprintf("waiting for the cluster to resume (operation %s)", op.ID)
	if err := s.jobs.PutJob(r.Context(), j, store.Cond{IfMatch: j.ETag}); err != nil && !errors.Is(err, store.ErrPreconditionFailed) {
		return err
	}
	return nil
}

// sameJobSpec reports whether two job specs ask for the same (an empty
// list is no list).
func sameJobSpec(a, b v1.JobSpec) bool {
	return a.Image == b.Image && slices.Equal(a.Command, b.Command) && slices.Equal(a.Args, b.Args) &&
		a.CPU == b.CPU && a.Memory == b.Memory && a.Retries == b.Retries
}

func writeJob(w http.ResponseWriter, status int, j *store.Job) {
	w.Header().Set("ETag", quoteETag(j.ETag))
	writeJSON(w, status, jobOut(j))
}

func (s *Server) listJobs(w http.ResponseWriter, r *http.Request) error {
	pg, err := page(r)
	if err != nil {
		return err
	}
	if err := s.requireCluster(r); err != nil {
		return err
	}
	items, next, err := s.jobs.ListJobs(r.Context(), clusterKey(r), pg)
	if err != nil {
		return err
	}
	list(w, r, pg, items, next, jobOut)
	return nil
}

func (s *Server) getJob(w http.ResponseWriter, r *http.Request) error {
	if err := s.requireCluster(r); err != nil {
		return err
	}
	j, err := s.jobs.GetJob(r.Context(), clusterKey(r), r.PathValue("job"))
	if err != nil {
		return toAPIError(err, refOf(r, "job"))
	}
	writeJob(w, http.StatusOK, j)
	return nil
}

// jobLogs answers with the log of a job's pod, text/plain: the log kept
// when it ended, or, while it runs, its newest pod's log as the cluster's
// Kubernetes has it (the last MiB). 409 before it has a pod.
func (s *Server) jobLogs(w http.ResponseWriter, r *http.Request) error {
	if err := s.requireCluster(r); err != nil {
		return err
	}
	key := clusterKey(r)
	j, err := s.jobs.GetJob(r.Context(), key, r.PathValue("job"))
	if err != nil {
		return toAPIError(err, refOf(r, "job"))
	}
	o := refOf(r, "job")
	var out []byte
	switch {
	case j.Status.Phase == v1.JobPending:
		return conflict(o, "job", "has not started yet: %s", j.Status.Message)
	case j.Status.Ended() && j.Log != "":
		out = []byte(j.Log)
	default:
		cl, err := s.clusters.GetCluster(r.Context(), key)
		if err != nil {
			return toAPIError(err, clusterRef(r))
		}
		if cl.Status.ProvisioningState == v1.StateHibernated {
			return conflict(o, "job", "has no log kept and its cluster is Hibernated: its pods went with the workers")
		}
		if out, err = s.liveJobLog(r.Context(), cl, j.Name); err != nil {
			return err
		}
	}
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(out)
	return nil
}

// liveJobLog reads the log of the newest pod of job name from the
// cluster's Kubernetes.
func (s *Server) liveJobLog(ctx context.Context, cl *store.Cluster, name string) ([]byte, error) {
	ctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	if cl.Status.Endpoint == "" {
		return nil, conflict(keyRef(cl.Key()), "cluster", "has no endpoint yet")
	}
	kc, err := clusterapi.KubeClient(ctx, s.secrets, cl.Key(), cl.Status.Endpoint, "kiln:jobs")
	if err != nil {
		return nil, unavailable("the cluster's Kubernetes API").because(err)
	}
	defer kc.Close()
	out, err := kc.JobLog(ctx, v1.JobNamespace, v1.LabelJob+"="+name, maxJobLog)
	switch {
	case errors.Is(err, kubeapi.ErrNoPod):
		return nil, conflict(ref{kind: "job", name: name, project: cl.Project, cluster: cl.Name}, "job", "has no pod yet")
	case err != nil:
		return nil, unavailable("the cluster's Kubernetes API").because(err)
	}
	return out, nil
}
