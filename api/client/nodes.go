package client

import (
	"context"
	"net/http"
	"net/url"
	"strconv"
	"time"

	v1 "kiln.dev/kiln/api/v1"
)

func nodePath(project, cluster, node string) string {
	return clusterPath(project, cluster) + "/nodes/" + url.PathEscape(node)
}

// ApproveNode lets a DISCOVERED node go on; approving a node that is
// approved already changes nothing.
func (c *Client) ApproveNode(ctx context.Context, project, cluster, node string) (*v1.Node, error) {
	var n v1.Node
	if _, err := c.do(ctx, http.MethodPost, nodePath(project, cluster, node)+"/approve", nil, conditions{}, &n); err != nil {
		return nil, err
	}
	return &n, nil
}

// ConfigureNode gives an approved node its role, interface and devices.
func (c *Client) ConfigureNode(ctx context.Context, project, cluster, node string, cfg v1.NodeConfig) (*v1.Node, error) {
	var n v1.Node
	if _, err := c.do(ctx, http.MethodPost, nodePath(project, cluster, node)+"/configure", cfg, conditions{}, &n); err != nil {
		return nil, err
	}
	return &n, nil
}

// NodeLogs reads log lines of a node's agent from position from ("" for
// the oldest kept line) and returns them with the position to read on from.
// A log grows: reading on from the returned position later gets the lines
// added since (none yet is an empty slice).
func (c *Client) NodeLogs(ctx context.Context, project, cluster, node, from string) ([]v1.LogLine, string, error) {
	return c.ReadNodeLogs(ctx, project, cluster, node, NodeLogQuery{From: from})
}

// NodeLogQuery says which lines of a node's log ReadNodeLogs reads. The
// server filters them.
type NodeLogQuery struct {
	// From is a position ReadNodeLogs returned: the filters of the read
	// that returned it go on; "" starts a read.
	From string
	// Components keeps the lines of these streams: agent, etcd,
	// apiserver, controller-manager, scheduler, kubelet.
	Components []string
	// Since keeps the lines at or after it.
	Since time.Time
	// Tail starts the read at the newest Tail lines that match.
	Tail int
	// Wait, when no line that matches is new, waits up to this long (at
	// most a minute) for one before answering none.
	Wait time.Duration
}

// ReadNodeLogs reads a page of the log lines of a node's agent that q asks
// for and returns them with the position to read on from (q.From when
// there was nothing to read).
func (c *Client) ReadNodeLogs(ctx context.Context, project, cluster, node string, q NodeLogQuery) ([]v1.LogLine, string, error) {
	path := nodePath(project, cluster, node) + "/logs"
	v := url.Values{"top": {"1000"}}
	if q.From != "" {
		p, err := c.relative(q.From)
		if err != nil {
			return nil, q.From, err
		}
		u, err := url.Parse(p)
		if err != nil {
			return nil, q.From, err
		}
		path, v = u.Path, u.Query()
		v.Del("wait")
	} else {
		for _, comp := range q.Components {
			v.Add("component", comp)
		}
		if !q.Since.IsZero() {
			v.Set("since", q.Since.UTC().Format(time.RFC3339Nano))
		}
		if q.Tail > 0 {
			v.Set("tail", strconv.Itoa(q.Tail))
		}
	}
	if q.Wait > 0 {
		v.Set("wait", q.Wait.String())
	}
	var l v1.List[v1.LogLine]
	if _, err := c.do(ctx, http.MethodGet, path+"?"+v.Encode(), nil, conditions{}, &l); err != nil {
		return nil, q.From, err
	}
	next := l.NextLink
	if next == "" {
		next = q.From
	}
	return l.Value, next, nil
}

// Kubeconfig returns the caller's kubeconfig (YAML) for a cluster: its
// endpoint, verified by the cluster's CA, and a user whose credential comes
// from kiln credential at each use. It holds no secret.
func (c *Client) Kubeconfig(ctx context.Context, project, cluster string) ([]byte, error) {
	return c.KubeconfigFor(ctx, project, cluster, "")
}

// KubeconfigFor is Kubeconfig whose exec plugin runs command (the kiln
// CLI's path); "" for kiln on the PATH.
func (c *Client) KubeconfigFor(ctx context.Context, project, cluster, command string) ([]byte, error) {
	path := clusterPath(project, cluster) + "/kubeconfig"
	if command != "" {
		path += "?" + url.Values{"command": {command}}.Encode()
	}
	var b []byte
	if _, err := c.do(ctx, http.MethodGet, path, nil, conditions{}, &b); err != nil {
		return nil, err
	}
	return b, nil
}

// AdminKubeconfig returns a break-glass kubeconfig (YAML) for a cluster
// (admins): a system:masters client certificate for ttl ("" for an hour, at
// most 24h). Each is a Warning event on the cluster.
func (c *Client) AdminKubeconfig(ctx context.Context, project, cluster, ttl string) ([]byte, error) {
	var b []byte
	in := v1.AdminKubeconfigRequest{TTL: ttl}
	if _, err := c.do(ctx, http.MethodPost, clusterPath(project, cluster)+"/admin-kubeconfig", in, conditions{}, &b); err != nil {
		return nil, err
	}
	return b, nil
}

// Credential returns the caller's own credential for a cluster's
// Kubernetes API, as kubectl's exec plugin wants it: a client certificate
// naming them, with the group of their role in the project, and its key.
func (c *Client) Credential(ctx context.Context, project, cluster string) (*v1.ExecCredential, error) {
	var ec v1.ExecCredential
	if _, err := c.do(ctx, http.MethodPost, clusterPath(project, cluster)+"/credential", nil, conditions{}, &ec); err != nil {
		return nil, err
	}
	return &ec, nil
}

// ReissueActivation gives a cluster a new activation credential and
// passphrase (admins only); the old ones are refused from now on. The
// answer is the only time they are shown.
func (c *Client) ReissueActivation(ctx context.Context, project, cluster string) (*v1.Activation, error) {
	var a v1.Activation
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
