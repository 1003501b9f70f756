package client

import (
	"context"
	"net/http"
	"net/url"
	"strconv"

	v1 "kiln.dev/kiln/api/v1"
)

func cloudAccountPath(project, name string) string {
	return projectPath(project) + "/cloudaccounts/" + url.PathEscape(name)
}

// ListCloudAccounts returns every cloud account of a project, following
// nextLink. Credentials are never in a response.
func (c *Client) ListCloudAccounts(ctx context.Context, project string) ([]v1.CloudAccount, error) {
	return listAll[v1.CloudAccount](ctx, c, projectPath(project)+"/cloudaccounts")
}

// GetCloudAccount returns one cloud account, without its credentials, with
// the etag to give PutCloudAccount for a conditional write.
func (c *Client) GetCloudAccount(ctx context.Context, project, name string) (*v1.CloudAccount, error) {
	var a v1.CloudAccount
	h, err := c.do(ctx, http.MethodGet, cloudAccountPath(project, name), nil, conditions{}, &a)
	if err != nil {
		return nil, err
	}
	a.ETag = etagOf(a.ETag, h)
	return &a, nil
}

// PutCloudAccount creates or replaces a cloud account (admins only). A nil
// a.Credentials keeps the stored credentials; a.Quotas replace the stored
// ones (nil clears them). A non-empty ifMatch makes the write conditional on
// the account's current etag ("*": it must exist); a stale one fails with
// 412 Precondition Failed and changes nothing.
func (c *Client) PutCloudAccount(ctx context.Context, project string, a *v1.CloudAccount, ifMatch string) (*v1.CloudAccount, error) {
	return c.putCloudAccount(ctx, project, a, conditions{ifMatch: ifMatch})
}

// CreateCloudAccount creates a cloud account that must not exist yet
// (If-None-Match: *, admins only); an existing one fails with 412 and is
// left as it is.
func (c *Client) CreateCloudAccount(ctx context.Context, project string, a *v1.CloudAccount) (*v1.CloudAccount, error) {
	return c.putCloudAccount(ctx, project, a, conditions{ifNoneMatch: true})
}

func (c *Client) putCloudAccount(ctx context.Context, project string, a *v1.CloudAccount, cond conditions) (*v1.CloudAccount, error) {
	var out v1.CloudAccount
	h, err := c.do(ctx, http.MethodPut, cloudAccountPath(project, a.Name), a, cond, &out)
	if err != nil {
		return nil, err
	}
	out.ETag = etagOf(out.ETag, h)
	return &out, nil
}

// DeleteCloudAccount deletes a cloud account (admins only).
func (c *Client) DeleteCloudAccount(ctx context.Context, project, name string) error {
	return c.del(ctx, cloudAccountPath(project, name))
}

// etagOf is a body's etag, else the ETag header's.
func etagOf(body string, h http.Header) string {
	if body != "" {
		return body
	}
	return h.Get("ETag")
}

// ClusterUpgrades returns the Kubernetes versions a cluster can be
// upgraded to.
func (c *Client) ClusterUpgrades(ctx context.Context, project, name string) (*v1.ClusterUpgrades, error) {
	var out v1.ClusterUpgrades
	if _, err := c.do(ctx, http.MethodGet, clusterPath(project, name)+"/upgrades", nil, conditions{}, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// Fleet reads the fleet at a glance (GET /v1/fleet) over the projects the
// token has a role in.
func (c *Client) Fleet(ctx context.Context) (*v1.Fleet, error) {
	return get[v1.Fleet](ctx, c, "/v1/fleet")
}

// CostHistory reads what each cluster of the projects the token has a role
// in cost over the last days (GET /v1/cost; 0: the server's 30).
func (c *Client) CostHistory(ctx context.Context, days int) (*v1.CostHistory, error) {
	path := "/v1/cost"
	if days > 0 {
		path += "?days=" + strconv.Itoa(days)
	}
	return get[v1.CostHistory](ctx, c, path)
}
