package client

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strconv"

	v1 "kiln.dev/kiln/api/v1"
)

func profilePath(project, name string) string {
	return projectPath(project) + "/profiles/" + url.PathEscape(name)
}

func profileVersionPath(project, name string, version int) string {
	return profilePath(project, name) + "/versions/" + strconv.Itoa(version)
}

// ListProfiles returns every profile of a project (each its newest
// version), following nextLink.
func (c *Client) ListProfiles(ctx context.Context, project string) ([]v1.Profile, error) {
	return listAll[v1.Profile](ctx, c, projectPath(project)+"/profiles")
}

// GetProfile returns a profile's newest version, with Versions listing
// them all.
func (c *Client) GetProfile(ctx context.Context, project, name string) (*v1.Profile, error) {
	var p v1.Profile
	h, err := c.do(ctx, http.MethodGet, profilePath(project, name), nil, conditions{}, &p)
	if err != nil {
		return nil, err
	}
	p.ETag = etagOf(p.ETag, h)
	return &p, nil
}

// GetProfileVersion returns one version of a profile.
func (c *Client) GetProfileVersion(ctx context.Context, project, name string, version int) (*v1.Profile, error) {
	var p v1.Profile
	if _, err := c.do(ctx, http.MethodGet, profileVersionPath(project, name, version), nil, conditions{}, &p); err != nil {
		return nil, err
	}
	return &p, nil
}

// PutProfile writes version p.Version of profile p.Name: a draft, replaced
// by the next PutProfile of that version until it is published (409 once
// it is, unless p says the same).
func (c *Client) PutProfile(ctx context.Context, project string, p *v1.Profile) (*v1.Profile, error) {
	var out v1.Profile
	h, err := c.do(ctx, http.MethodPut, profilePath(project, p.Name), p, conditions{}, &out)
	if err != nil {
		return nil, err
	}
	out.ETag = etagOf(out.ETag, h)
	return &out, nil
}

// PublishProfileVersion publishes a version: immutable from then on, and
// usable by clusters.
func (c *Client) PublishProfileVersion(ctx context.Context, project, name string, version int) (*v1.Profile, error) {
	var out v1.Profile
	if _, err := c.do(ctx, http.MethodPost, profileVersionPath(project, name, version)+"/publish", nil, conditions{}, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// DeleteProfileVersion deletes a version no cluster uses.
func (c *Client) DeleteProfileVersion(ctx context.Context, project, name string, version int) error {
	return c.del(ctx, profileVersionPath(project, name, version))
}

// DeleteProfile deletes a profile, every version, when no cluster uses it.
func (c *Client) DeleteProfile(ctx context.Context, project, name string) error {
	return c.del(ctx, profilePath(project, name))
}

// PublishedProfileVersion reads the version of a profile a cluster may
// use: version, which must be published (a draft is an error saying to
// publish it), or for 0 the newest published one (none is an error).
func (c *Client) PublishedProfileVersion(ctx context.Context, project, name string, version int) (*v1.Profile, error) {
	if version == 0 {
		p, err := c.GetProfile(ctx, project, name)
		if err != nil {
			return nil, err
		}
		for _, pv := range slices.Backward(p.Versions) {
			if pv.Published {
				version = pv.Version
				break
			}
		}
		if version == 0 {
			return nil, fmt.Errorf("profile %q has no published version; publish one first (kiln profile publish %s:VERSION)", name, name)
		}
	}
	v, err := c.GetProfileVersion(ctx, project, name, version)
	if err != nil {
		return nil, err
	}
	if !v.Published {
		return nil, fmt.Errorf("profile %s:%d is a draft; publish it first (kiln profile publish %s:%d)", name, version, name, version)
	}
	return v, nil
}
