package client

import (
	"context"
	"errors"
	"net/http"
	"testing"

	v1 "kiln.dev/kiln/api/v1"
)

// TestCreateCallsAreCreateOnly: the Create calls of projects, users and
// service accounts PUT with If-None-Match: *, so that an existing record
// (a user's owner flag, a service account's role) is never replaced.
func TestCreateCallsAreCreateOnly(t *testing.T) {
	tests := []struct {
		name string
		path string
		call func(context.Context, *Client) error
	}{
		{"project", "/v1/projects/team-a", func(ctx context.Context, c *Client) error {
			_, err := c.CreateProject(ctx, &v1.Project{Name: "team-a"})
			return err
		}},
		{"user", "/v1/users/alice", func(ctx context.Context, c *Client) error {
			_, err := c.CreateUser(ctx, &v1.User{Name: "alice"})
			return err
		}},
		{"service account", "/v1/projects/team-a/serviceaccounts/ci", func(ctx context.Context, c *Client) error {
			_, err := c.CreateServiceAccount(ctx, "team-a", &v1.ServiceAccount{Name: "ci", Role: v1.RoleOperator})
			return err
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := newTestClient(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if r.Method != http.MethodPut || r.URL.Path != tt.path {
					t.Errorf("%s %s, want PUT %s", r.Method, r.URL.Path, tt.path)
				}
				if r.Header.Get("If-None-Match") != "*" || r.Header.Get("If-Match") != "" {
					t.Errorf("If-None-Match %q, If-Match %q", r.Header.Get("If-None-Match"), r.Header.Get("If-Match"))
				}
				writeJSON(w, 412, v1.ErrorResponse{Error: v1.Error{Code: v1.CodePreconditionFailed, Message: "exists", Target: "If-None-Match"}})
			}))
			err := tt.call(t.Context(), c)
			var ae *APIError
			if !errors.As(err, &ae) || ae.StatusCode != http.StatusPreconditionFailed {
				t.Fatalf("err = %v, want a 412", err)
			}
		})
	}
}
