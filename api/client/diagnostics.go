package client

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"

	v1 "kiln.dev/kiln/api/v1"
)

func diagnosticsPath(project, cluster, id string) string {
	return clusterPath(project, cluster) + "/diagnostics/" + url.PathEscape(id)
}

// CreateDiagnostics gathers a diagnostics bundle of the cluster now (POST
// .../diagnostics) and returns its record.
func (c *Client) CreateDiagnostics(ctx context.Context, project, cluster string) (*v1.Diagnostics, error) {
	var d v1.Diagnostics
	if _, err := c.do(ctx, http.MethodPost, clusterPath(project, cluster)+"/diagnostics", nil, conditions{}, &d); err != nil {
		return nil, err
	}
	return &d, nil
}

// ListDiagnostics lists a cluster's diagnostics bundles, newest first.
func (c *Client) ListDiagnostics(ctx context.Context, project, cluster string) ([]v1.Diagnostics, error) {
	return listAll[v1.Diagnostics](ctx, c, clusterPath(project, cluster)+"/diagnostics")
}

// DiagnosticsBundle downloads a diagnostics bundle (a tar.gz).
func (c *Client) DiagnosticsBundle(ctx context.Context, project, cluster, id string) ([]byte, error) {
	var b []byte
	if _, err := c.do(ctx, http.MethodGet, diagnosticsPath(project, cluster, id)+"/bundle", nil, conditions{}, &b); err != nil {
		return nil, err
	}
	return b, nil
}

// DeleteDiagnostics deletes a diagnostics bundle.
func (c *Client) DeleteDiagnostics(ctx context.Context, project, cluster, id string) error {
	_, err := c.do(ctx, http.MethodDelete, diagnosticsPath(project, cluster, id), nil, conditions{}, nil)
	return err
}

// ErrNoSuchDiagnostics: FindDiagnostics found no bundle of that id.
var ErrNoSuchDiagnostics = errors.New("no such diagnostics bundle")

// FindDiagnostics finds the bundle id among the project's clusters' and
// returns its cluster's name and record.
func (c *Client) FindDiagnostics(ctx context.Context, project, id string) (string, *v1.Diagnostics, error) {
	clusters, err := c.ListClusters(ctx, project)
	if err != nil {
		return "", nil, err
	}
	for _, cl := range clusters {
		all, err := c.ListDiagnostics(ctx, project, cl.Name)
		if err != nil {
			return "", nil, err
		}
		for i := range all {
			if all[i].ID == id {
				return cl.Name, &all[i], nil
			}
		}
	}
	return "", nil, fmt.Errorf("%w: %s is not a bundle of any cluster of project %s (kiln diagnostics list CLUSTER lists a cluster's)", ErrNoSuchDiagnostics, id, project)
}
