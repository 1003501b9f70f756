package client

import (
	"encoding/json"
	"io"
	"net/http"
	"testing"

	"github.com/google/go-cmp/cmp"

	v1 "kiln.dev/kiln/api/v1"
)

// TestSecretCalls: each call's method, path and precondition headers, the
// data a PUT sends, and the etag of the answer, taken from the ETag header
// when the body has none.
func TestSecretCalls(t *testing.T) {
	in := &v1.Secret{Name: "db", Data: map[string]string{"password": "hunter22", "user": "app"}}
	type request struct {
		Method, Path, IfMatch, IfNoneMatch string
		Data                               map[string]string
	}
	tests := []struct {
		name string
		call func(*Client) (*v1.Secret, error)
		want request
	}{
		{"put", func(c *Client) (*v1.Secret, error) { return c.PutSecret(t.Context(), "team-a", in, "") },
			request{Method: "PUT", Path: "/v1/projects/team-a/secrets/db", Data: in.Data}},
		{"put if match", func(c *Client) (*v1.Secret, error) { return c.PutSecret(t.Context(), "team-a", in, "7") },
			request{Method: "PUT", Path: "/v1/projects/team-a/secrets/db", IfMatch: `"7"`, Data: in.Data}},
		{"create", func(c *Client) (*v1.Secret, error) { return c.CreateSecret(t.Context(), "team-a", in) },
			request{Method: "PUT", Path: "/v1/projects/team-a/secrets/db", IfNoneMatch: "*", Data: in.Data}},
		{"get", func(c *Client) (*v1.Secret, error) { return c.GetSecret(t.Context(), "team-a", "db") },
			request{Method: "GET", Path: "/v1/projects/team-a/secrets/db"}},
		{"delete", func(c *Client) (*v1.Secret, error) { return nil, c.DeleteSecret(t.Context(), "team-a", "db") },
			request{Method: "DELETE", Path: "/v1/projects/team-a/secrets/db"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var got request
			c := newTestClient(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				got = request{Method: r.Method, Path: r.URL.EscapedPath(),
					IfMatch: r.Header.Get("If-Match"), IfNoneMatch: r.Header.Get("If-None-Match")}
				if data, _ := io.ReadAll(r.Body); len(data) > 0 {
					var body v1.Secret
					if err := json.Unmarshal(data, &body); err != nil {
						t.Errorf("body: %v", err)
					}
					got.Data = body.Data
				}
				if r.Method == http.MethodDelete {
					w.WriteHeader(http.StatusNoContent)
					return
				}
				w.Header().Set("ETag", `"8"`)
				writeJSON(w, 200, v1.Secret{Name: "db", Keys: []string{"password", "user"}})
			}))
			out, err := tt.call(c)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("request (-want +got):\n%s", diff)
			}
			if out != nil && (out.ETag != `"8"` || !cmp.Equal(out.Keys, []string{"password", "user"})) {
				t.Errorf("answer = %+v, want the keys and the header's etag", out)
			}
		})
	}
}
