package v1

import (
	"context"
	"net/http"
	"net/url"
)

func nodePath(project, cluster, node string) string {
	return clusterPath(project, cluster) + "/nodes/" + url.PathEscape(node)
}

// ApproveNode lets a DISCOVERED node go on; approving a node that is
// approved already changes nothing.
func (c *Client) ApproveNode(ctx context.Context, project, cluster, node string) (*Node, error) {
	var n Node
	if _, err := c.do(ctx, http.MethodPost, nodePath(project, cluster, node)+"/approve", nil, conditions{}, &n); err != nil {
		return nil, err
	}
	return &n, nil
}

// ConfigureNode gives an approved node its role, interface and devices.
func (c *Client) ConfigureNode(ctx context.Context, project, cluster, node string, cfg NodeConfig) (*Node, error) {
	var n Node
	if _, err := c.do(ctx, http.MethodPost, nodePath(project, cluster, node)+"/configure", cfg, conditions{}, &n); err != nil {
		return nil, err
	}
	return &n, nil
}

// NodeLogs reads log lines of a node's agent from position from ("" for
// the oldest kept line) and returns them with the position to read on from.
// A log grows: reading on from the returned position later gets the lines
// added since (none yet is an empty slice).
func (c *Client) NodeLogs(ctx context.Context, project, cluster, node, from string) ([]LogLine, string, error) {
	path := nodePath(project, cluster, node) + "/logs?top=1000"
	if from != "" {
		p, err := c.relative(from)
		if err != nil {
			return nil, from, err
		}
		path = p
	}
	var l List[LogLine]
	if _, err := c.do(ctx, http.MethodGet, path, nil, conditions{}, &l); err != nil {
		return nil, from, err
	}
	next := l.NextLink
	if next == "" {
		next = from
	}
	return l.Value, next, nil
}

// Kubeconfig returns an admin kubeconfig (YAML) for a cluster, verified by
// the cluster's CA. Every call issues a new client certificate.
func (c *Client) Kubeconfig(ctx context.Context, project, cluster string) ([]byte, error) {
	var b []byte
	if _, err := c.do(ctx, http.MethodGet, clusterPath(project, cluster)+"/kubeconfig", nil, conditions{}, &b); err != nil {
		return nil, err
	}
	return b, nil
}

// ReissueActivation gives a cluster a new activation credential and
// passphrase (admins only); the old ones are refused from now on. The
// answer is the only time they are shown.
func (c *Client) ReissueActivation(ctx context.Context, project, cluster string) (*Activation, error) {
	var a Activation
	if _, err := c.do(ctx, http.MethodPost, clusterPath(project, cluster)+"/activation", nil, conditions{}, &a); err != nil {
		return nil, err
	}
	return &a, nil
}

// RevokeActivation revokes a cluster's activation credential: hosts can no
// longer join with it; nodes that joined keep working.
func (c *Client) RevokeActivation(ctx context.Context, project, cluster string) error {
	return c.del(ctx, clusterPath(project, cluster)+"/activation")
}
