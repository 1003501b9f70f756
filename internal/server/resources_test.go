package server_test

import (
	"net/http"
	"strings"
	"testing"

	v1 "kiln.dev/kiln/api/v1"
)

func TestProjects(t *testing.T) {
	h := newHarness(t, nil)
	r := h.must(http.StatusCreated, "PUT", "/v1/projects/p", `{"displayName": "Platform"}`)
	var p v1.Project
	r.decode(t, &p)
	if p.ID != "/v1/projects/p" || p.ETag == "" || r.header.Get("ETag") != `"`+p.ETag+`"` || p.DisplayName != "Platform" {
		t.Errorf("project = %+v, ETag header %q", p, r.header.Get("ETag"))
	}
	h.must(http.StatusPreconditionFailed, "PUT", "/v1/projects/p", `{}`, "If-None-Match: *")
	h.must(http.StatusPreconditionFailed, "PUT", "/v1/projects/p", `{}`, `If-Match: "old"`)
	var p2 v1.Project
	h.must(http.StatusOK, "PUT", "/v1/projects/p", `{"displayName": "Platform team"}`, "If-Match: "+p.ETag).decode(t, &p2)
	if p2.ETag == p.ETag || !p2.CreatedAt.Equal(p.CreatedAt) {
		t.Errorf("replace: etag %q (was %q), createdAt %v (was %v)", p2.ETag, p.ETag, p2.CreatedAt, p.CreatedAt)
	}
	h.must(http.StatusBadRequest, "PUT", "/v1/projects/p", `{"name": "q"}`)
	h.must(http.StatusBadRequest, "PUT", "/v1/projects/p", `{"members": []}`)

	var l v1.List[v1.Project]
	h.must(http.StatusOK, "GET", "/v1/projects", "").decode(t, &l)
	if len(l.Value) != 1 || l.Value[0].Name != "p" || l.NextLink != "" {
		t.Errorf("projects = %+v", l)
	}

	// A project with clusters is not deleted.
	h.createCluster("p", "c", minimal)
	r = h.must(http.StatusConflict, "DELETE", "/v1/projects/p", "")
	if e := r.errorBody(t); e.Code != v1.CodeConflict || e.Target != "project" {
		t.Errorf("delete non-empty = %+v", e)
	}
	h.project("empty")
	h.must(http.StatusPreconditionFailed, "DELETE", "/v1/projects/empty", "", `If-Match: "old"`)
	h.must(http.StatusNoContent, "DELETE", "/v1/projects/empty", "")
	h.must(http.StatusNotFound, "DELETE", "/v1/projects/empty", "")
}

func TestCloudAccountCredentialsNeverReturned(t *testing.T) {
	h := newHarness(t, nil)
	h.project("p")
	const secret = "s3cr3t-key-material"
	const path = "/v1/projects/p/cloudaccounts/acct"
	var bodies []response
	bodies = append(bodies, h.must(http.StatusCreated, "PUT", path,
		`{"provider": "sim", "credentials": {"apiKey": "`+secret+`"}}`))
	bodies = append(bodies, h.must(http.StatusOK, "GET", path, ""))
	bodies = append(bodies, h.must(http.StatusOK, "GET", "/v1/projects/p/cloudaccounts", ""))
	// A replace without credentials keeps the stored ones.
	bodies = append(bodies, h.must(http.StatusOK, "PUT", path, `{"provider": "local"}`))
	bodies = append(bodies, h.must(http.StatusBadRequest, "PUT", path,
		`{"provider": "nimbus", "credentials": {"apiKey": "`+secret+`"}}`))
	bodies = append(bodies, h.must(http.StatusBadRequest, "PUT", path,
		`{"provider": "sim", "credentials": {"apiKey": "`+secret+`"}, "extra": 1}`))
	for i, r := range bodies {
		if strings.Contains(string(r.body), secret) || strings.Contains(string(r.body), "credentials") {
			t.Errorf("response %d contains the credentials: %s", i, r.body)
		}
	}
	stored, err := h.store.GetCloudAccount(t.Context(), "p", "acct")
	if err != nil {
		t.Fatal(err)
	}
	if stored.Credentials["apiKey"] != secret || stored.Provider != "local" {
		t.Errorf("stored account = %s with credentials kept %v", stored.Provider, stored.Credentials["apiKey"] == secret)
	}
	if strings.Contains(h.logs.String(), secret) {
		t.Error("the log contains the credentials")
	}
	var a v1.CloudAccount
	h.must(http.StatusOK, "GET", path, "").decode(t, &a)
	if a.ID != path || a.Provider != "local" {
		t.Errorf("account = %+v", a)
	}
	h.must(http.StatusNotFound, "GET", "/v1/projects/nope/cloudaccounts/acct", "")
	h.must(http.StatusNoContent, "DELETE", path, "")
	h.must(http.StatusNotFound, "GET", path, "")
}

func TestProfiles(t *testing.T) {
	h := newHarness(t, nil)
	h.project("p")
	const path = "/v1/projects/p/profiles/std"
	r := h.must(http.StatusCreated, "PUT", path,
		`{"version": 1, "kubernetesVersion": "v1.36.3", "cni": "cilium", "packs": [{"name": "metrics", "version": "1.0", "values": {"replicas": 2}}]}`)
	var p v1.Profile
	r.decode(t, &p)
	etag := r.header.Get("ETag")
	if p.ID != path || p.Version != 1 || len(p.Packs) != 1 || p.Packs[0].Values["replicas"] != float64(2) {
		t.Errorf("profile = %+v", p)
	}
	r = h.must(http.StatusBadRequest, "PUT", path, `{"version": 0, "kubernetesVersion": "latest"}`)
	if e := r.errorBody(t); e.Target != "version" || len(e.Details) != 2 {
		t.Errorf("profile validation = %+v", e)
	}
	h.must(http.StatusPreconditionFailed, "PUT", path, `{"version": 2, "kubernetesVersion": "v1.36.3"}`, "If-None-Match: *")
	h.must(http.StatusOK, "PUT", path, `{"version": 2, "kubernetesVersion": "v1.36.3"}`, "If-Match: "+etag)
	var l v1.List[v1.Profile]
	h.must(http.StatusOK, "GET", "/v1/projects/p/profiles", "").decode(t, &l)
	if len(l.Value) != 1 || l.Value[0].Version != 2 {
		t.Errorf("profiles = %+v", l.Value)
	}
	h.must(http.StatusMethodNotAllowed, "PATCH", path, `{}`)
}

// Profile versions: a PUT publishes what it writes unless it says draft; a
// draft is replaced by the next PUT of its version, a published one is not
// (409, and it is unchanged; the same body again is 200); versions are read, published and deleted one at a time, and one a
// cluster uses is not deleted.
func TestProfileVersions(t *testing.T) {
	h := newHarness(t, nil)
	h.project("p")
	const path = "/v1/projects/p/profiles/web"
	const v1Draft = `{"version": 1, "draft": true, "kubernetesVersion": "v1.36.3", "packs": [{"name": "store", "chart": "local-path", "version": "0.0.30", "values": {"path": "/var/lib/x"}}]}`
	const v1Body = `{"version": 1, "kubernetesVersion": "v1.36.3", "packs": [{"name": "store", "chart": "local-path", "version": "0.0.30", "values": {"path": "/var/lib/x"}}]}`
	h.must(http.StatusCreated, "PUT", path, v1Draft)
	h.must(http.StatusOK, "PUT", path, `{"version": 1, "draft": true, "kubernetesVersion": "v1.36.3"}`) // a draft: replaced
	var got v1.Profile
	h.must(http.StatusOK, "GET", path+"/versions/1", "").decode(t, &got)
	if got.Published || len(got.Packs) != 0 || got.ID != path+"/versions/1" {
		t.Errorf("draft after a second PUT = %+v", got)
	}
	h.must(http.StatusOK, "PUT", path, v1Draft)
	h.must(http.StatusOK, "POST", path+"/versions/1/publish", "").decode(t, &got)
	if !got.Published || got.PublishedAt == nil || len(got.Packs) != 1 {
		t.Errorf("published version = %+v", got)
	}
	h.must(http.StatusOK, "POST", path+"/versions/1/publish", "") // again: as it is

	e := h.must(http.StatusConflict, "PUT", path, `{"version": 1, "kubernetesVersion": "v1.35.4"}`).errorBody(t)
	if e.Code != v1.CodeConflict || e.Target != "version" || !strings.Contains(e.Message, "put it as version 2") {
		t.Errorf("PUT of a published version: %+v", e)
	}
	h.must(http.StatusOK, "GET", path+"/versions/1", "").decode(t, &got)
	if got.KubernetesVersion != "v1.36.3" || len(got.Packs) != 1 {
		t.Errorf("published version changed by a refused PUT: %+v", got)
	}
	h.must(http.StatusOK, "PUT", path, v1Body) // the same again
	h.must(http.StatusOK, "GET", path+"/versions/1", "").decode(t, &got)
	h.must(http.StatusOK, "PUT", path, v1Draft) // the same as a draft: still published
	var after v1.Profile
	h.must(http.StatusOK, "GET", path+"/versions/1", "").decode(t, &after)
	if !after.Published || !after.PublishedAt.Equal(*got.PublishedAt) {
		t.Errorf("a published version put again as a draft: %+v, want it published as it was", after)
	}

	h.must(http.StatusOK, "PUT", path, `{"version": 2, "kubernetesVersion": "v1.36.3"}`) // published: no draft said
	h.must(http.StatusOK, "PUT", path, `{"version": 3, "draft": true, "kubernetesVersion": "v1.36.3"}`)
	h.must(http.StatusOK, "GET", path, "").decode(t, &got)
	if got.Version != 3 || got.Published || len(got.Versions) != 3 || !got.Versions[0].Published || !got.Versions[1].Published || got.Versions[2].Published {
		t.Errorf("profile = %+v", got)
	}

	h.must(http.StatusNotFound, "GET", path+"/versions/9", "")
	if e := h.must(http.StatusBadRequest, "GET", path+"/versions/x", "").errorBody(t); e.Target != "version" {
		t.Errorf("GET version x: %+v", e)
	}
	for _, bad := range []struct{ body, target string }{
		{`{"version": 4, "kubernetesVersion": "v1.36.3", "packs": [{"name": "a", "version": "1", "chart": "a", "manifests": "kind: X"}]}`, "packs[0].manifests"},
		{`{"version": 4, "kubernetesVersion": "v1.36.3", "packs": [{"name": "a", "version": "1", "manifests": "apiVersion: v1\nkind: ConfigMap\n"}]}`, "packs[0].manifests"},
		{`{"version": 4, "kubernetesVersion": "v1.36.3", "packs": [{"name": "a", "version": "1"}, {"name": "a", "version": "2"}]}`, "packs[1].name"},
		{`{"version": 4, "kubernetesVersion": "v1.36.3", "packs": [{"name": "a", "version": "1 2"}]}`, "packs[0].version"},
	} {
		if e := h.must(http.StatusBadRequest, "PUT", path, bad.body).errorBody(t); e.Target != bad.target {
			t.Errorf("PUT %s: target %q (%s), want %q", bad.body, e.Target, e.Message, bad.target)
		}
	}

	// Version 2, the latest published, is what a cluster naming version 0 uses.
	h.createCluster("p", "c1", `{"spec": {"provider": "sim", "profile": {"name": "web"}}}`)
	if e := h.must(http.StatusConflict, "DELETE", path+"/versions/2", "").errorBody(t); e.Code != v1.CodeConflict || e.Target != "version" ||
		len(e.Details) != 1 || e.Details[0].Target != "/v1/projects/p/clusters/c1" || e.Details[0].Code != v1.CodeConflict {
		t.Errorf("DELETE of a version in use: %+v, want a Conflict on the version with a detail for cluster c1", e)
	}
	h.must(http.StatusNoContent, "DELETE", path+"/versions/1", "")
	h.must(http.StatusNoContent, "DELETE", path+"/versions/3", "")
	h.must(http.StatusOK, "GET", path, "").decode(t, &got)
	if got.Version != 2 || len(got.Versions) != 1 {
		t.Errorf("after deleting versions 1 and 3: %+v", got)
	}
}

// A cloud account or profile that a cluster names is not deleted: 409,
// naming the clusters, and it is still there. One nothing names is.
func TestDeleteInUse(t *testing.T) {
	h := newHarness(t, nil)
	h.project("p")
	h.must(http.StatusCreated, "PUT", "/v1/projects/p/cloudaccounts/used",
		`{"provider": "sim", "credentials": {"accessKeyId": "k", "secretAccessKey": "s"}}`)
	h.must(http.StatusCreated, "PUT", "/v1/projects/p/cloudaccounts/spare", `{"provider": "sim"}`)
	h.must(http.StatusCreated, "PUT", "/v1/projects/p/profiles/base", `{"version": 1, "kubernetesVersion": "v1.36.3"}`)
	h.must(http.StatusCreated, "PUT", "/v1/projects/p/profiles/spare", `{"version": 1, "kubernetesVersion": "v1.36.3"}`)
	h.createCluster("p", "c1", `{"spec": {"provider": "sim", "cloudAccount": "used", "profile": {"name": "base", "version": 1}}}`)
	h.createCluster("p", "c2", `{"spec": {"provider": "sim", "cloudAccount": "used"}}`)

	for _, tc := range []struct{ path, target, want string }{
		{"/v1/projects/p/cloudaccounts/used", "cloudaccount", "used by 2 cluster(s): c1, c2"},
		{"/v1/projects/p/profiles/base", "profile", "used by 1 cluster(s): c1"},
	} {
		e := h.must(http.StatusConflict, "DELETE", tc.path, "").errorBody(t)
		if e.Code != v1.CodeConflict || e.Target != tc.target || !strings.Contains(e.Message, tc.want) {
			t.Errorf("DELETE %s: %+v, want a Conflict saying %q", tc.path, e, tc.want)
		}
		h.must(http.StatusOK, "GET", tc.path, "")
	}
	// A stale If-Match is a 412 whether or not the record is in use.
	if e := h.must(http.StatusPreconditionFailed, "DELETE", "/v1/projects/p/profiles/base", "", `If-Match: "stale"`).errorBody(t); e.Code != v1.CodePreconditionFailed {
		t.Errorf("stale If-Match on a profile in use: %+v", e)
	}
	h.must(http.StatusNoContent, "DELETE", "/v1/projects/p/cloudaccounts/spare", "")
	h.must(http.StatusNoContent, "DELETE", "/v1/projects/p/profiles/spare", "")
}
