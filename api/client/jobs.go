package client

import (
	"context"
	"net/http"
	"net/url"

	v1 "kiln.dev/kiln/api/v1"
)

func jobsPath(project, cluster string) string { return clusterPath(project, cluster) + "/jobs" }

// CreateJob submits a job to a cluster (resuming it if it is Hibernated)
// and returns it. The same job again (same name and spec) returns the job
// as it is: a retried call makes no second one.
func (c *Client) CreateJob(ctx context.Context, project, cluster string, j *v1.Job) (*v1.Job, error) {
	var out v1.Job
	if _, err := c.do(ctx, http.MethodPost, jobsPath(project, cluster), j, conditions{}, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// ListJobs returns a cluster's jobs by name.
func (c *Client) ListJobs(ctx context.Context, project, cluster string) ([]v1.Job, error) {
	return listAll[v1.Job](ctx, c, jobsPath(project, cluster))
}

// GetJob returns one job of a cluster.
func (c *Client) GetJob(ctx context.Context, project, cluster, name string) (*v1.Job, error) {
	var out v1.Job
	if _, err := c.do(ctx, http.MethodGet, jobsPath(project, cluster)+"/"+url.PathEscape(name), nil, conditions{}, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// JobLogs returns the log of a job's pod: the end kept when it ended, or
// the live log while it runs.
func (c *Client) JobLogs(ctx context.Context, project, cluster, name string) ([]byte, error) {
	var b []byte
	if _, err := c.do(ctx, http.MethodGet, jobsPath(project, cluster)+"/"+url.PathEscape(name)+"/logs", nil, conditions{}, &b); err != nil {
		return nil, err
	}
	return b, nil
}
