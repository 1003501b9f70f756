package kubeapi

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"time"
)

// JobSpec is what CreateJob makes: a batch/v1 Job of one container that
// is not restarted in place, with labels on the Job and its pods.
type JobSpec struct {
	Namespace, Name string
	Labels          map[string]string
	Image           string
	Command, Args   []string
	// Requests are the container's ("cpu": "500m", "memory": "1Gi").
	Requests map[string]string
	// BackoffLimit is how many times a failed pod is made again.
	BackoffLimit int
}

// CreateJob creates the Job; one of that name already there is no error
// (a retried submission makes no second one).
func (c *Client) CreateJob(ctx context.Context, j JobSpec) error {
	container := map[string]any{"name": "job", "image": j.Image}
	if len(j.Command) > 0 {
		container["command"] = j.Command
	}
	if len(j.Args) > 0 {
		container["args"] = j.Args
	}
	if len(j.Requests) > 0 {
		container["resources"] = map[string]any{"requests": j.Requests}
	}
	body := map[string]any{
		"apiVersion": "batch/v1", "kind": "Job",
		"metadata": map[string]any{"name": j.Name, "namespace": j.Namespace, "labels": j.Labels},
		"spec": map[string]any{
			"backoffLimit": j.BackoffLimit,
			"template": map[string]any{
				"metadata": map[string]any{"labels": j.Labels},
				"spec":     map[string]any{"restartPolicy": "Never", "containers": []any{container}},
			},
		},
	}
	err := c.do(ctx, http.MethodPost, "/apis/batch/v1/namespaces/"+url.PathEscape(j.Namespace)+"/jobs", "application/json", body, nil)
	if errors.Is(err, ErrConflict) {
		return nil
	}
	return err
}

// Job is what Kiln reads of a Job's status.
type Job struct {
	Namespace, Name string
	Labels          map[string]string
	Active          int
	Succeeded       int
	Failed          int
	// Complete and FailedCondition are the Job's terminal conditions
	// (type Complete or Failed, status True); Message says why it failed.
	Complete, FailedCondition bool
	Message                   string
	CompletionTime            *time.Time
}

// ListJobs lists the Jobs of every namespace that selector (a label
// selector such as "kiln.dev/job") selects.
func (c *Client) ListJobs(ctx context.Context, selector string) ([]Job, error) {
	var list struct {
		Items []struct {
			Metadata struct {
				Name      string            `json:"name"`
				Namespace string            `json:"namespace"`
				Labels    map[string]string `json:"labels"`
			} `json:"metadata"`
			Status struct {
				Active         int         `json:"active"`
				Succeeded      int         `json:"succeeded"`
				Failed         int         `json:"failed"`
				CompletionTime *time.Time  `json:"completionTime"`
				Conditions     []Condition `json:"conditions"`
			} `json:"status"`
		} `json:"items"`
	}
	q := url.Values{"labelSelector": {selector}}
	if err := c.do(ctx, http.MethodGet, "/apis/batch/v1/jobs?"+q.Encode(), "", nil, &list); err != nil {
		return nil, err
	}
	out := make([]Job, 0, len(list.Items))
	for _, it := range list.Items {
		j := Job{Namespace: it.Metadata.Namespace, Name: it.Metadata.Name, Labels: it.Metadata.Labels,
			Active: it.Status.Active, Succeeded: it.Status.Succeeded, Failed: it.Status.Failed, CompletionTime: it.Status.CompletionTime}
		for _, cond := range it.Status.Conditions {
			switch {
			case cond.Status != "True":
			case cond.Type == "Complete":
				j.Complete = true
			case cond.Type == "Failed":
				j.FailedCondition, j.Message = true, cond.Message
			}
		}
		out = append(out, j)
	}
	return out, nil
}

// PodsOf lists the pods of a namespace that selector selects, ordered by
// namespace and name.
func (c *Client) PodsOf(ctx context.Context, namespace, selector string) ([]Pod, error) {
	all, err := c.listPods(ctx, url.Values{"labelSelector": {selector}})
	var out []Pod
	for _, p := range all {
		if p.Namespace == namespace {
			out = append(out, p)
		}
	}
	return out, err
}

// PodLogs returns the log of a pod's only container, at most limit bytes
// of its end.
func (c *Client) PodLogs(ctx context.Context, p PodRef, limit int) ([]byte, error) {
	q := url.Values{"limitBytes": {strconv.Itoa(limit)}}
	path := "/api/v1/namespaces/" + url.PathEscape(p.Namespace) + "/pods/" + url.PathEscape(p.Name) + "/log?" + q.Encode()
	var buf rawBody
	if err := c.do(ctx, http.MethodGet, path, "", nil, &buf); err != nil {
		return nil, err
	}
	return buf, nil
}

// ErrNoPod is JobLog's error for a job that has no pod yet.
var ErrNoPod = errors.New("the job has no pod yet")

// JobLog returns the end (at most limit bytes) of the log of the newest
// pod that selector selects in namespace: a Job's pods, labelled with its
// name.
func (c *Client) JobLog(ctx context.Context, namespace, selector string, limit int) ([]byte, error) {
	pods, err := c.PodsOf(ctx, namespace, selector)
	if err != nil {
		return nil, err
	}
	if len(pods) == 0 {
		return nil, ErrNoPod
	}
	newest := slices.MaxFunc(pods, func(a, b Pod) int { return a.Created.Compare(b.Created) })
	out, err := c.PodLogs(ctx, newest.PodRef, limit)
	if err != nil {
		return nil, fmt.Errorf("log of pod %s: %w", newest.PodRef, err)
	}
	return out, nil
}
