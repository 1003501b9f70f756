package client

import (
	"encoding/json"
	"io"
	"net/http"
	"testing"

	"github.com/google/go-cmp/cmp"
	v1 "kiln.dev/kiln/api/v1"
)

// TestCloudAccountCalls: each call's method, path and precondition
// headers, the body a PUT sends, and the etag of the answer, taken from
// the ETag header when the body has none.
func TestCloudAccountCalls(t *testing.T) {
	in := &v1.CloudAccount{
		Name: "acme/prod", Provider: "sim",
		Credentials: map[string]string{"accessKeyId": "AK1", "secretAccessKey": "s3cret"},
		Quotas:      []v1.Quota{{Machines: new(20), VCPUs: new(64)}, {Region: "sim-west", Machines: new(100)}},
	}
	type request struct {
		Method, Path, IfMatch, IfNoneMatch string
		Body                               *v1.CloudAccount
	}
	tests := []struct {
		name     string
		call     func(*Client) (*v1.CloudAccount, error)
		want     request
		wantETag string
	}{
		{
			name: "put",
			call: func(c *Client) (*v1.CloudAccount, error) { return c.PutCloudAccount(t.Context(), "team-a", in, "") },
			want: request{Method: "PUT", Path: "/v1/projects/team-a/cloudaccounts/acme%2Fprod", Body: in},
		},
		{
			name: "put if match",
			call: func(c *Client) (*v1.CloudAccount, error) { return c.PutCloudAccount(t.Context(), "team-a", in, "7") },
			want: request{Method: "PUT", Path: "/v1/projects/team-a/cloudaccounts/acme%2Fprod", IfMatch: `"7"`, Body: in},
		},
		{
			name: "create",
			call: func(c *Client) (*v1.CloudAccount, error) { return c.CreateCloudAccount(t.Context(), "team-a", in) },
			want: request{Method: "PUT", Path: "/v1/projects/team-a/cloudaccounts/acme%2Fprod", IfNoneMatch: "*", Body: in},
		},
		{
			name: "get",
			call: func(c *Client) (*v1.CloudAccount, error) {
				return c.GetCloudAccount(t.Context(), "team-a", "acme/prod")
			},
			want: request{Method: "GET", Path: "/v1/projects/team-a/cloudaccounts/acme%2Fprod"},
		},
		{
			name: "delete",
			call: func(c *Client) (*v1.CloudAccount, error) {
				return nil, c.DeleteCloudAccount(t.Context(), "team-a", "acme/prod")
			},
			want: request{Method: "DELETE", Path: "/v1/projects/team-a/cloudaccounts/acme%2Fprod"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var got request
			c := newTestClient(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				got = request{Method: r.Method, Path: r.URL.EscapedPath(),
					IfMatch: r.Header.Get("If-Match"), IfNoneMatch: r.Header.Get("If-None-Match")}
				if data, _ := io.ReadAll(r.Body); len(data) > 0 {
					got.Body = &v1.CloudAccount{}
					if err := json.Unmarshal(data, got.Body); err != nil {
						t.Errorf("body: %v", err)
					}
				}
				if r.Method == http.MethodDelete {
					w.WriteHeader(http.StatusNoContent)
					return
				}
				// The server's answer never holds credentials; this one
				// has no etag in the body, only in the header.
				w.Header().Set("ETag", `"8"`)
				writeJSON(w, 200, v1.CloudAccount{Name: "acme/prod", Provider: "sim", Quotas: in.Quotas})
			}))
			out, err := tt.call(c)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("request (-want +got):\n%s", diff)
			}
			if out != nil && out.ETag != `"8"` {
				t.Errorf("ETag = %q, want the header's", out.ETag)
			}
		})
	}
}

func TestListCloudAccountsFollowsNextLink(t *testing.T) {
	c := newTestClient(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/v1/projects/p/cloudaccounts" {
			t.Errorf("path %s", r.URL.Path)
		}
		if r.URL.Query().Get("skipToken") == "" {
			writeJSON(w, 200, v1.List[v1.CloudAccount]{Value: []v1.CloudAccount{{Name: "a"}}, NextLink: "/v1/projects/p/cloudaccounts?skipToken=a"})
			return
		}
		writeJSON(w, 200, v1.List[v1.CloudAccount]{Value: []v1.CloudAccount{{Name: "b"}}})
	}))
	got, err := c.ListCloudAccounts(t.Context(), "p")
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]v1.CloudAccount{{Name: "a"}, {Name: "b"}}, got); diff != "" {
		t.Errorf("accounts (-want +got):\n%s", diff)
	}
}
