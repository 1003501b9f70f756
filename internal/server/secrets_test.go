package server_test

import (
	"net/http"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	v1 "kiln.dev/kiln/api/v1"
)

// A project secret's data goes in and never comes out: every answer lists
// its keys; a replace replaces all of it; conditional writes hold; the
// data is in the store as written, and in no answer or log line.
func TestProjectSecretsNeverReturned(t *testing.T) {
	h := newHarness(t, nil)
	h.project("p")
	const value = "hunter22-s3cr3t"
	const path = "/v1/projects/p/secrets/db"
	var bodies []response
	r := h.must(http.StatusCreated, "PUT", path, `{"data": {"password": "`+value+`", "user": "app"}}`, "If-None-Match: *")
	bodies = append(bodies, r)
	var s v1.Secret
	r.decode(t, &s)
	if s.Name != "db" || s.ID != path || s.ETag == "" || r.header.Get("ETag") != `"`+s.ETag+`"` ||
		!cmp.Equal(s.Keys, []string{"password", "user"}) || s.CreatedAt.IsZero() {
		t.Errorf("created secret = %+v", s)
	}
	bodies = append(bodies, h.must(http.StatusPreconditionFailed, "PUT", path, `{"data": {"password": "`+value+`"}}`, "If-None-Match: *"))
	bodies = append(bodies, h.must(http.StatusOK, "GET", path, ""))
	bodies = append(bodies, h.must(http.StatusOK, "GET", "/v1/projects/p/secrets", ""))
	bodies = append(bodies, h.must(http.StatusPreconditionFailed, "PUT", path, `{"data": {"password": "`+value+`"}}`, `If-Match: "stale"`))

	// A replace with the etag replaces the data, all of it.
	r = h.must(http.StatusOK, "PUT", path, `{"name": "db", "data": {"password": "`+value+`", "host": "db.internal"}}`, "If-Match: "+s.ETag)
	bodies = append(bodies, r)
	var s2 v1.Secret
	r.decode(t, &s2)
	if s2.ETag == s.ETag || !s2.CreatedAt.Equal(s.CreatedAt) || !cmp.Equal(s2.Keys, []string{"host", "password"}) {
		t.Errorf("replaced secret = %+v (was %+v)", s2, s)
	}
	var l v1.List[v1.Secret]
	h.must(http.StatusOK, "GET", "/v1/projects/p/secrets", "").decode(t, &l)
	if len(l.Value) != 1 || !cmp.Equal(l.Value[0].Keys, []string{"host", "password"}) || l.NextLink != "" {
		t.Errorf("secrets = %+v", l)
	}
	for i, r := range bodies {
		if strings.Contains(string(r.body), value) || strings.Contains(string(r.body), `"data"`) {
			t.Errorf("answer %d holds the data: %s", i, r.body)
		}
	}
	stored, err := h.store.GetProjectSecret(t.Context(), "p", "db")
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(map[string]string{"password": value, "host": "db.internal"}, stored.Data); diff != "" {
		t.Errorf("stored data (-want +got):\n%s", diff)
	}
	if strings.Contains(h.logs.String(), value) {
		t.Error("the log holds the value")
	}

	h.must(http.StatusNotFound, "GET", "/v1/projects/nope/secrets/db", "")
	h.must(http.StatusNotFound, "PUT", "/v1/projects/nope/secrets/db", `{"data": {"k": "v"}}`)
	h.must(http.StatusPreconditionFailed, "DELETE", path, "", `If-Match: "stale"`)
	h.must(http.StatusNoContent, "DELETE", path, "")
	h.must(http.StatusNotFound, "GET", path, "")
	h.must(http.StatusNotFound, "DELETE", path, "")
}

// Bad input is a 400 naming the field (data.KEY for a key), with no
// value in it, and nothing is written.
func TestProjectSecretValidation(t *testing.T) {
	h := newHarness(t, nil)
	h.project("p")
	const value = "hunter22-s3cr3t"
	big := strings.Repeat("x", 64<<10+1)
	for _, tc := range []struct {
		name, path, body, code, target string
	}{
		{"no data", "/v1/projects/p/secrets/a", `{}`, v1.CodeMissingParameter, "data"},
		{"empty data", "/v1/projects/p/secrets/a", `{"data": {}}`, v1.CodeMissingParameter, "data"},
		{"bad key", "/v1/projects/p/secrets/a", `{"data": {"ok": "` + value + `", "bad/key": "` + value + `"}}`, v1.CodeInvalidParameter, "data.bad/key"},
		{"value too big", "/v1/projects/p/secrets/a", `{"data": {"big": "` + big + `"}}`, v1.CodeInvalidParameter, "data.big"},
		{"bad name", "/v1/projects/p/secrets/Db", `{"data": {"k": "` + value + `"}}`, v1.CodeInvalidParameter, "secret"},
		{"other name", "/v1/projects/p/secrets/a", `{"name": "b", "data": {"k": "` + value + `"}}`, v1.CodeInvalidParameter, "name"},
		{"value not a string", "/v1/projects/p/secrets/a", `{"data": {"k": 12345678}}`, v1.CodeInvalidParameter, `data["k"]`},
		{"unknown field", "/v1/projects/p/secrets/a", `{"data": {"k": "` + value + `"}, "value": "x"}`, v1.CodeInvalidParameter, "value"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := h.must(http.StatusBadRequest, "PUT", tc.path, tc.body)
			if e := r.errorBody(t); e.Code != tc.code || e.Target != tc.target {
				t.Errorf("error %s %q (%s), want %s %q", e.Code, e.Target, e.Message, tc.code, tc.target)
			}
			if strings.Contains(string(r.body), value) || strings.Contains(string(r.body), "12345678") {
				t.Errorf("the answer holds a value: %s", r.body)
			}
		})
	}
	var l v1.List[v1.Secret]
	h.must(http.StatusOK, "GET", "/v1/projects/p/secrets", "").decode(t, &l)
	if len(l.Value) != 0 {
		t.Errorf("refused PUTs wrote %+v", l.Value)
	}
}

// A profile's packs name secrets as ${secret.NAME.KEY}: a malformed
// reference is refused when the profile is written, naming where it is;
// the dry run of a cluster on a profile naming a secret the project lacks
// is a 400 naming spec.profile and the secret; a secret packs name may
// be deleted.
func TestProfileSecretReferences(t *testing.T) {
	h := newHarness(t, nil)
	h.project("p")
	e := h.must(http.StatusBadRequest, "PUT", "/v1/projects/p/profiles/web",
		`{"version": 1, "kubernetesVersion": "v1.36.3", "packs": [{"name": "app", "version": "1", "values": {"db": {"url": "${secret.db}"}}}]}`).errorBody(t)
	if e.Target != "packs[0].values.db.url" || !strings.Contains(e.Message, "${secret.NAME.KEY}") {
		t.Errorf("malformed reference: %+v", e)
	}
	h.must(http.StatusCreated, "PUT", "/v1/projects/p/profiles/web",
		`{"version": 1, "kubernetesVersion": "v1.36.3", "packs": [{"name": "app", "version": "1", "values": {"password": "${secret.db.password}"}}]}`)

	const validate = "/v1/projects/p/clusters/c/validate"
	const body = `{"spec": {"provider": "sim", "profile": {"name": "web", "version": 1}}}`
	e = h.must(http.StatusBadRequest, "POST", validate, body).errorBody(t)
	if e.Code != v1.CodeInvalidParameter || e.Target != "spec.profile" || !strings.Contains(e.Message, `names secret "db" (${secret.db.password}), which does not exist in project "p"`) {
		t.Errorf("dry run with the secret missing: %+v", e)
	}
	h.must(http.StatusCreated, "PUT", "/v1/projects/p/secrets/db", `{"data": {"password": "hunter22"}}`)
	var ok v1.ClusterValidation
	h.must(http.StatusOK, "POST", validate, body).decode(t, &ok)
	if !strings.Contains(strings.Join(ok.Checks, "\n"), `the 1 secret(s) profile web:1 names are in project "p": db`) {
		t.Errorf("checks = %q", ok.Checks)
	}
	// Nothing refuses the delete of a secret a cluster's profile names.
	h.createCluster("p", "c", body)
	h.must(http.StatusNoContent, "DELETE", "/v1/projects/p/secrets/db", "")
}
