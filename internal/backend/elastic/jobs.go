package elastic

import (
	"context"
	"errors"
	"fmt"
	"time"

	v1 "kiln.dev/kiln/api/v1"
	"kiln.dev/kiln/internal/kubeapi"
	"kiln.dev/kiln/internal/store"
)

// KubeJob is the Kubernetes Job Kiln makes of a job.
func KubeJob(j v1.Job) kubeapi.JobSpec {
	req := map[string]string{}
	if j.Spec.CPU != "" {
		req["cpu"] = j.Spec.CPU
	}
	if j.Spec.Memory != "" {
		req["memory"] = j.Spec.Memory
	}
	return kubeapi.JobSpec{Namespace: v1.JobNamespace, Name: j.Name, Labels: map[string]string{v1.LabelJob: j.Name},
		Image: j.Spec.Image, Command: j.Spec.Command, Args: j.Spec.Args, Requests: req, BackoffLimit: j.Spec.Retries}
}

// syncJobs brings the cluster's jobs that have not ended up to date: a
// Pending one is submitted (the cluster is up), a Running one takes the
// phase its Kubernetes Job has. Each change is written conditionally; a
// job changed meanwhile waits for the next pass.
func (c *Controller) syncJobs(ctx context.Context, cl *store.Cluster, jobs []*store.Job, kube []kubeapi.Job, now time.Time) error {
	byName := map[string]kubeapi.Job{}
	for _, k := range kube {
		if k.Namespace == v1.JobNamespace {
			byName[k.Labels[v1.LabelJob]] = k
		}
	}
	var errs []error
	for _, j := range jobs {
		next := *j
		switch j.Status.Phase {
		case v1.JobPending:
			if err := c.opts.Submit(ctx, cl, j.Job); err != nil {
				errs = append(errs, fmt.Errorf("submit job %s: %w", j.Name, err))
				// Said on the job, so that its owner sees why it waits.
				next.Status.Message = fmt.Sprintf("not submitted yet (tried again every %s): %v", c.opts.Interval, err)
				break
			}
			t := now.UTC()
			next.Status.Phase, next.Status.SubmittedAt, next.Status.Message = v1.JobRunning, &t, "submitted to Kubernetes"
		case v1.JobRunning:
			k, ok := byName[j.Name]
			switch {
			case !ok:
				next.Status.Phase, next.Status.Message = v1.JobFailed, "its Kubernetes Job is gone from the cluster (deleted by someone)"
			case k.Complete:
				next.Status.Phase, next.Status.Message = v1.JobSucceeded, fmt.Sprintf("%d pod(s) succeeded", k.Succeeded)
			case k.FailedCondition:
				next.Status.Phase, next.Status.Message = v1.JobFailed, fmt.Sprintf("%d pod(s) failed: %s", k.Failed, k.Message)
			case k.Active > 0:
				next.Status.Message = "running"
			}
			if next.Status.Ended() {
				t := now.UTC()
				if k.CompletionTime != nil {
					t = k.CompletionTime.UTC()
				}
				next.Status.CompletionTime = &t
				next.Log = c.keptLog(ctx, cl, j.Name)
			}
		}
		if next.Status == j.Status && next.Log == j.Log {
			continue
		}
		err := c.opts.Store.PutJob(ctx, &next, store.Cond{IfMatch: j.ETag})
		if errors.Is(err, store.ErrPreconditionFailed) || errors.Is(err, store.ErrNotFound) {
			continue
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("write job %s: %w", j.Name, err))
			continue
		}
		if next.Status.Phase != j.Status.Phase {
			typ := "Normal"
			if next.Status.Phase == v1.JobFailed {
				typ = "Warning"
			}
			c.acts.Event(ctx, cl, typ, "Job"+next.Status.Phase, "", fmt.Sprintf("job %s: %s", j.Name, next.Status.Message))
		}
	}
	return errors.Join(errs...)
}

// maxKeptLog is how much of the end of a job's log its record keeps.
const maxKeptLog = 64 << 10

// keptLog is the end of a job's log to keep with it ("" when it cannot be
// read: the logs route then says so).
func (c *Controller) keptLog(ctx context.Context, cl *store.Cluster, job string) string {
	if c.opts.JobLog == nil {
		return ""
	}
	b, err := c.opts.JobLog(ctx, cl, job)
	if err != nil {
		c.opts.Logger.Warn("could not keep a job's log", "cluster", cl.Key().String(), "job", job, "err", err)
		return ""
	}
	if len(b) > maxKeptLog {
		b = b[len(b)-maxKeptLog:]
	}
	return string(b)
}

// systemNamespaces hold what Kiln and Kubernetes run for the cluster
// itself: their pods do not keep a cluster from being idle.
var systemNamespaces = map[string]bool{"kube-system": true, "kube-public": true, "kube-node-lease": true, "kiln-system": true}

// busy says what keeps a cluster from being idle: a job of Kiln's that has
// not ended, or a pod outside the system namespaces that has not finished;
// "" when it is idle.
func busy(st State, jobs []*store.Job) string {
	for _, j := range jobs {
		if !j.Status.Ended() {
			return fmt.Sprintf("job %s is %s", j.Name, j.Status.Phase)
		}
	}
	for _, p := range st.Pods {
		if !systemNamespaces[p.Namespace] && !p.Finished() {
			return fmt.Sprintf("pod %s is %s", p.PodRef, p.Phase)
		}
	}
	return ""
}
