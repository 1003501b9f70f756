package registry

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestParsePath(t *testing.T) {
	for _, tc := range []struct {
		path string
		want requestPath
	}{
		{"/v2/", requestPath{kind: pathBase}},
		{"/v2", requestPath{kind: pathBase}},
		{"/v2/_catalog", requestPath{kind: pathCatalog}},
		{"/v2/p/library/nginx/manifests/1.27", requestPath{pathRepo, "p/library/nginx", "manifests/1.27"}},
		{"/v2/library/nginx/manifests/sha256:abc", requestPath{pathRepo, "library/nginx", "manifests/sha256:abc"}},
		{"/v2/nginx/blobs/sha256:abc", requestPath{pathRepo, "nginx", "blobs/sha256:abc"}},
		{"/v2/p/app/blobs/uploads/", requestPath{pathRepo, "p/app", "blobs/uploads/"}},
		{"/v2/p/app/blobs/uploads", requestPath{pathRepo, "p/app", "blobs/uploads"}},
		{"/v2/p/app/blobs/uploads/0f-uuid", requestPath{pathRepo, "p/app", "blobs/uploads/0f-uuid"}},
		{"/v2/p/a/b/c/tags/list", requestPath{pathRepo, "p/a/b/c", "tags/list"}},
		{"/v2/p/app/referrers/sha256:abc", requestPath{pathRepo, "p/app", "referrers/sha256:abc"}},
		{"/v2/manifests/1", requestPath{}},
		{"/v2/p//app/manifests/1", requestPath{}},
		{"/v2/p/../q/app/manifests/1", requestPath{}},
		{"/v2/./app/blobs/sha256:abc", requestPath{}},
		{"/v2/p/app/nothing", requestPath{}},
		{"/v1/projects", requestPath{}},
	} {
		if diff := cmp.Diff(tc.want, parsePath(tc.path), cmp.AllowUnexported(requestPath{})); diff != "" {
			t.Errorf("parsePath(%q) (-want +got):\n%s", tc.path, diff)
		}
	}
}

func TestResolve(t *testing.T) {
	user := Principal{Name: "user:a"}
	node := Principal{Name: "node:p/c/n", Project: "p"}
	for _, tc := range []struct {
		p             Principal
		name          string
		project, repo string
		bad           bool
	}{
		{p: user, name: "p/nginx", project: "p", repo: "library/nginx"},
		{p: user, name: "p/library/nginx", project: "p", repo: "library/nginx"},
		{p: user, name: "p/team/app", project: "p", repo: "team/app"},
		{p: user, name: "nginx", bad: true},
		{p: user, name: "kiln.system/pause", project: System, repo: "library/pause"},
		{p: user, name: "other.dots/pause", bad: true},
		{p: user, name: "Bad_Project/app", bad: true},
		{p: node, name: "nginx", project: "p", repo: "library/nginx"},
		{p: node, name: "library/nginx", project: "p", repo: "library/nginx"},
		// A node names no project: p/app is the image p/app of its own.
		{p: node, name: "p/app", project: "p", repo: "p/app"},
	} {
		project, repo, err := resolve(tc.p, tc.name)
		if (err != nil) != tc.bad || project != tc.project || repo != tc.repo {
			t.Errorf("resolve(%s, %q) = %q, %q, %v; want %q, %q, bad %v", tc.p.Name, tc.name, project, repo, err, tc.project, tc.repo, tc.bad)
		}
	}
}

// FuzzParsePath: whatever the path, a name it yields has no empty, . or ..
// component, and the path rebuilt for the registry names the same project
// that was authorized.
func FuzzParsePath(f *testing.F) {
	for _, s := range []string{"/v2/p/library/nginx/manifests/1.27", "/v2/p/app/blobs/uploads/", "/v2/_catalog", "/v2/a/../b/tags/list", "/v2/x/blobs/uploads/blobs/uploads/y"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, path string) {
		rp := parsePath(path)
		if rp.kind != pathRepo {
			return
		}
		for _, c := range strings.Split(rp.name, "/") {
			if c == "" || c == "." || c == ".." {
				t.Fatalf("parsePath(%q) yields name %q", path, rp.name)
			}
		}
		project, repo, err := resolve(Principal{Name: "user:u"}, rp.name)
		if err != nil {
			return
		}
		again := parsePath("/v2/" + project + "/" + repo + "/" + rp.suffix)
		if got, _, _ := strings.Cut(again.name, "/"); again.kind != pathRepo || got != project {
			t.Fatalf("parsePath(%q): the rebuilt path names %q, authorized %q", path, again.name, project)
		}
	})
}
