package client

import (
	"context"
	"net/http"
	"net/url"

	v1 "kiln.dev/kiln/api/v1"
)

// ProvisionCluster installs Kubernetes on the configured hosts of an edge
// cluster and returns the cluster and the provision operation's id. Hosts
// that do not make the spec's configuration are a 409 NodeCountMismatch
// saying what is missing.
func (c *Client) ProvisionCluster(ctx context.Context, project, name string) (*v1.Cluster, string, error) {
	return c.clusterAction(ctx, project, name, "provision")
}

// ResetCluster tears Kubernetes down on every host of an edge cluster and
// removes the hosts from it; the cluster, its settings and its activation
// material stay. It returns the cluster and the reset operation's id.
func (c *Client) ResetCluster(ctx context.Context, project, name string) (*v1.Cluster, string, error) {
	return c.clusterAction(ctx, project, name, "reset")
}

// RemoveNode takes one host out of an edge cluster that stays (DELETE
// .../nodes/{node}): drained, Kubernetes torn down on it, its records
// removed. It returns the cluster and the remove-node operation's id.
func (c *Client) RemoveNode(ctx context.Context, project, cluster, node string) (*v1.Cluster, string, error) {
	var out v1.Cluster
	h, err := c.do(ctx, http.MethodDelete, nodePath(project, cluster, node), nil, conditions{}, &out)
	if err != nil {
		return nil, "", err
	}
	fillETag(&out, h)
	return &out, clusterOperation(&out, h), nil
}

func (c *Client) clusterAction(ctx context.Context, project, name, action string) (*v1.Cluster, string, error) {
	var out v1.Cluster
	h, err := c.do(ctx, http.MethodPost, clusterPath(project, name)+"/"+action, nil, conditions{}, &out)
	if err != nil {
		return nil, "", err
	}
	fillETag(&out, h)
	return &out, clusterOperation(&out, h), nil
}

// Installer downloads an edge cluster's installer for linux/arch (admins
// only): a gzipped tar of the agent, the activation credential and
// passphrase, and install.sh; and the command that joins a host, run as root
// where the tar was unpacked.
func (c *Client) Installer(ctx context.Context, project, cluster, arch string) (bundle []byte, command string, err error) {
	path := clusterPath(project, cluster) + "/installer?arch=" + url.QueryEscape(arch)
	h, err := c.do(ctx, http.MethodGet, path, nil, conditions{}, &bundle)
	if err != nil {
		return nil, "", err
	}
	return bundle, h.Get("X-Kiln-Install-Command"), nil
}

// HibernateCluster drains and removes a cluster's workers and stops its
// control plane, keeping its data; the cluster ends Hibernated. It returns
// the cluster and the hibernate operation's id.
func (c *Client) HibernateCluster(ctx context.Context, project, name string) (*v1.Cluster, string, error) {
	return c.clusterAction(ctx, project, name, "hibernate")
}

// ResumeCluster starts a Hibernated cluster's control plane on its data
// and makes its workers again. It returns the cluster and the resume
// operation's id.
func (c *Client) ResumeCluster(ctx context.Context, project, name string) (*v1.Cluster, string, error) {
	return c.clusterAction(ctx, project, name, "resume")
}

// ReconcileCluster begins a reconcile (POST .../reconcile): every pack of
// the cluster's profile applied again, putting back what was changed or
// deleted by hand. It returns the cluster and the operation's id.
func (c *Client) ReconcileCluster(ctx context.Context, project, name string) (*v1.Cluster, string, error) {
	return c.clusterAction(ctx, project, name, "reconcile")
}

// RotateCertificates begins a rotate-certificates operation (POST
// .../rotate-certificates): every node gets new Kubernetes certificates of
// the cluster CA, one node at a time. It returns the cluster and the
// operation's id.
func (c *Client) RotateCertificates(ctx context.Context, project, name string) (*v1.Cluster, string, error) {
	return c.clusterAction(ctx, project, name, "rotate-certificates")
}

// RotateCA begins (v1.CARotationBegin) or finishes (v1.CARotationFinish) the
// replacement of a cluster's CA: a rotate-ca or finish-ca-rotation
// operation. It returns the cluster and the operation's id.
func (c *Client) RotateCA(ctx context.Context, project, name, step string) (*v1.Cluster, string, error) {
	var out v1.Cluster
	h, err := c.do(ctx, http.MethodPost, clusterPath(project, name)+"/rotate-certificates", v1.RotateCertificatesRequest{CA: step}, conditions{}, &out)
	if err != nil {
		return nil, "", err
	}
	fillETag(&out, h)
	return &out, clusterOperation(&out, h), nil
}
