package client

import (
	"context"
	"net/http"
	"net/url"

	v1 "kiln.dev/kiln/api/v1"
)

func secretPath(project, name string) string {
	return projectPath(project) + "/secrets/" + url.PathEscape(name)
}

// ListSecrets returns every secret of a project, following nextLink: each
// with its keys, never its data.
func (c *Client) ListSecrets(ctx context.Context, project string) ([]v1.Secret, error) {
	return listAll[v1.Secret](ctx, c, projectPath(project)+"/secrets")
}

// GetSecret returns one secret's keys (never its data), with the etag to
// give PutSecret for a conditional write.
func (c *Client) GetSecret(ctx context.Context, project, name string) (*v1.Secret, error) {
	var s v1.Secret
	h, err := c.do(ctx, http.MethodGet, secretPath(project, name), nil, conditions{}, &s)
	if err != nil {
		return nil, err
	}
	s.ETag = etagOf(s.ETag, h)
	return &s, nil
}

// PutSecret creates or replaces a secret (admins only): s.Data replaces
// all of its data. A non-empty ifMatch makes the write conditional on the
// secret's current etag ("*": it must exist); a stale one fails with 412
// Precondition Failed and changes nothing. The answer lists the keys.
func (c *Client) PutSecret(ctx context.Context, project string, s *v1.Secret, ifMatch string) (*v1.Secret, error) {
	return c.putSecret(ctx, project, s, conditions{ifMatch: ifMatch})
}

// CreateSecret creates a secret that must not exist yet (If-None-Match: *,
// admins only); an existing one fails with 412 and is left as it is.
func (c *Client) CreateSecret(ctx context.Context, project string, s *v1.Secret) (*v1.Secret, error) {
	return c.putSecret(ctx, project, s, conditions{ifNoneMatch: true})
}

func (c *Client) putSecret(ctx context.Context, project string, s *v1.Secret, cond conditions) (*v1.Secret, error) {
	var out v1.Secret
	h, err := c.do(ctx, http.MethodPut, secretPath(project, s.Name), s, cond, &out)
	if err != nil {
		return nil, err
	}
	out.ETag = etagOf(out.ETag, h)
	return &out, nil
}

// DeleteSecret deletes a secret (admins only). A pack that names it fails
// when it is next applied, naming it.
func (c *Client) DeleteSecret(ctx context.Context, project, name string) error {
	return c.del(ctx, secretPath(project, name))
}
