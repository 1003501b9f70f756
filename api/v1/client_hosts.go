package v1

import (
	"context"
	"net/http"
)

// ProvisionCluster installs Kubernetes on the configured hosts of an edge
// cluster and returns the cluster and the provision operation's id. Hosts
// that do not make the spec's configuration are a 409 NodeCountMismatch
// saying what is missing.
func (c *Client) ProvisionCluster(ctx context.Context, project, name string) (*Cluster, string, error) {
	return c.clusterAction(ctx, project, name, "provision")
}

// ResetCluster tears Kubernetes down on every host of an edge cluster and
// removes the hosts from it; the cluster, its settings and its activation
// material stay. It returns the cluster and the reset operation's id.
func (c *Client) ResetCluster(ctx context.Context, project, name string) (*Cluster, string, error) {
	return c.clusterAction(ctx, project, name, "reset")
}

func (c *Client) clusterAction(ctx context.Context, project, name, action string) (*Cluster, string, error) {
	var out Cluster
	h, err := c.do(ctx, http.MethodPost, clusterPath(project, name)+"/"+action, nil, conditions{}, &out)
	if err != nil {
		return nil, "", err
	}
	fillETag(&out, h)
	return &out, clusterOperation(&out, h), nil
}
