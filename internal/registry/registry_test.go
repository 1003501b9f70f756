package registry_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	ggcrv1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/random"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/remote/transport"
	"github.com/google/go-containerregistry/pkg/v1/validate"

	v1 "kiln.dev/kiln/api/v1"
	"kiln.dev/kiln/internal/auth"
	"kiln.dev/kiln/internal/registry"
	"kiln.dev/kiln/internal/store"
	"kiln.dev/kiln/test/testlog"
	"kiln.dev/kiln/test/waitfor"
)

// creds is a fake Credentials: bearer tokens named after principals.
type creds map[string]registry.Principal

func (c creds) Authenticate(r *http.Request) (registry.Principal, error) {
	tok, _ := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	p, ok := c[tok]
	if !ok {
		return registry.Principal{}, fmt.Errorf("%w: the token is not valid", auth.ErrUnauthenticated)
	}
	return p, nil
}

// member is a principal with a role per project.
func member(name string, roles map[string]string) registry.Principal {
	return registry.Principal{Name: "user:" + name, RoleIn: func(_ context.Context, p string) (string, error) {
		return roles[p], nil
	}}
}

// node is a principal bound to project p, pulling only.
func node(p string) registry.Principal {
	return registry.Principal{Name: "node:" + p + "/c/n", Project: p, RoleIn: func(_ context.Context, q string) (string, error) {
		if q == p {
			return v1.RoleViewer, nil
		}
		return "", nil
	}}
}

type env struct {
	t    *testing.T
	dir  string
	reg  *registry.Registry
	srv  *httptest.Server
	host string
}

var people = creds{
	"alice": member("alice", map[string]string{"p": v1.RoleOperator}),
	"val":   member("val", map[string]string{"p": v1.RoleViewer}),
	"bob":   member("bob", map[string]string{"q": v1.RoleOwner}),
	"root":  member("root", map[string]string{registry.System: v1.RoleOwner, "p": v1.RoleOwner, "q": v1.RoleOwner}),
	"nodep": node("p"),
	"nodeq": node("q"),
}

func newEnv(t *testing.T, opts registry.Options) *env {
	t.Helper()
	if opts.Dir == "" {
		opts.Dir = t.TempDir()
	}
	if opts.Grace == 0 {
		opts.Grace = -1
	}
	if opts.Interval == 0 {
		opts.Interval = -1
	}
	reg, err := registry.New(t.Context(), opts)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(reg.Handler(people))
	e := &env{t: t, dir: opts.Dir, reg: reg, srv: srv, host: strings.TrimPrefix(srv.URL, "http://")}
	t.Cleanup(func() { srv.Close(); reg.Close() })
	return e
}

func (e *env) ref(s string) name.Reference {
	e.t.Helper()
	r, err := name.ParseReference(e.host+"/"+s, name.Insecure)
	if err != nil {
		e.t.Fatal(err)
	}
	return r
}

func as(token string) remote.Option { return remote.WithAuth(&authn.Bearer{Token: token}) }

func (e *env) push(token, ref string, img ggcrv1.Image) error {
	return remote.Write(e.ref(ref), img, as(token), remote.WithContext(e.t.Context()))
}

func (e *env) mustPush(token, ref string, img ggcrv1.Image) {
	e.t.Helper()
	if err := e.push(token, ref, img); err != nil {
		e.t.Fatalf("push %s as %s: %v", ref, token, err)
	}
}

func (e *env) pull(token, ref string) (ggcrv1.Image, error) {
	img, err := remote.Image(e.ref(ref), as(token), remote.WithContext(e.t.Context()))
	if err != nil {
		return nil, err
	}
	return img, validate.Image(img) // every blob read and checked
}

func digestOf(t *testing.T, img ggcrv1.Image) string {
	t.Helper()
	d, err := img.Digest()
	if err != nil {
		t.Fatal(err)
	}
	return d.String()
}

// code is the registry error code of err (DENIED, ...), or "".
func code(err error) string {
	var te *transport.Error
	if errors.As(err, &te) && len(te.Errors) > 0 {
		return string(te.Errors[0].Code)
	}
	return ""
}

// wantDenied fails unless err is a DENIED answer (403) whose message says
// want. The text is the product: the registry protocol's errors have a
// code and a message, no field, and the message is the one place the user
// reads why (which role the action needs).
func wantDenied(t *testing.T, what string, err error, want string) {
	t.Helper()
	if code(err) != "DENIED" || status(err) != http.StatusForbidden || !strings.Contains(err.Error(), want) {
		t.Errorf("%s: %v, want DENIED saying %q", what, err, want)
	}
}

// status is the HTTP status of a registry error (HEAD answers have no body).
func status(err error) int {
	var te *transport.Error
	if errors.As(err, &te) {
		return te.StatusCode
	}
	return 0
}

func randomImage(t *testing.T) ggcrv1.Image {
	t.Helper()
	img, err := random.Image(512, 2)
	if err != nil {
		t.Fatal(err)
	}
	return img
}

func TestPushPullAcrossProjects(t *testing.T) {
	e := newEnv(t, registry.Options{})
	img := randomImage(t)
	e.mustPush("alice", "p/nginx:1.27", img)

	// The name of one component is Docker Hub's library/NAME.
	for _, ref := range []string{"p/nginx:1.27", "p/library/nginx:1.27"} {
		got, err := e.pull("alice", ref)
		if err != nil {
			t.Fatalf("alice pulls %s: %v", ref, err)
		}
		if digestOf(t, got) != digestOf(t, img) {
			t.Errorf("%s: digest %s, want %s", ref, digestOf(t, got), digestOf(t, img))
		}
	}
	// A viewer pulls and does not push.
	if _, err := e.pull("val", "p/nginx:1.27"); err != nil {
		t.Errorf("viewer pulls: %v", err)
	}
	err := e.push("val", "p/other:1", randomImage(t))
	wantDenied(t, "viewer pushes", err, "user:val is viewer in project p; to push its images needs operator")
	// A member of another project (an owner there) neither pulls nor pushes.
	_, err = e.pull("bob", "p/nginx:1.27")
	wantDenied(t, "bob pulls p's image", err, "user:bob has no role in project p")
	if err := e.push("bob", "p/nginx:1.27", randomImage(t)); status(err) != http.StatusForbidden {
		t.Errorf("bob pushes into p: %v, want DENIED", err)
	}
	// bob's own project has its own nginx.
	other := randomImage(t)
	e.mustPush("bob", "q/nginx:1.27", other)
	got, err := e.pull("bob", "q/nginx:1.27")
	if err != nil || digestOf(t, got) != digestOf(t, other) {
		t.Errorf("bob pulls q/nginx: %v", err)
	}
	got, err = e.pull("alice", "p/nginx:1.27")
	if err != nil || digestOf(t, got) != digestOf(t, img) {
		t.Errorf("p/nginx changed by q's push: %v", err)
	}
	// A token's name must start with a project.
	if err := e.push("alice", "nginx:1.27", img); status(err) != http.StatusBadRequest {
		t.Errorf("push without a project: %v, want 400", err)
	}
	resp := e.get("alice", "/v2/nginx/manifests/1.27", "")
	if body, _ := io.ReadAll(resp.Body); !strings.Contains(string(body), `"code":"NAME_INVALID"`) ||
		!strings.Contains(string(body), "names no project") {
		t.Errorf("GET without a project: %d %s", resp.StatusCode, body)
	}
}

func TestNodesPullByTheNameContainerdAsks(t *testing.T) {
	e := newEnv(t, registry.Options{})
	img := randomImage(t)
	e.mustPush("alice", "p/nginx:1.27", img)
	want := digestOf(t, img)

	// containerd's mirror request for nginx:1.27 or docker.io/library/nginx:1.27.
	for _, path := range []string{"/v2/library/nginx/manifests/1.27?ns=docker.io", "/v2/nginx/manifests/1.27"} {
		resp := e.get("nodep", path, "application/vnd.docker.distribution.manifest.v2+json, application/vnd.oci.image.manifest.v1+json")
		if resp.StatusCode != http.StatusOK || resp.Header.Get("Docker-Content-Digest") != want {
			t.Errorf("node of p GET %s: %d, digest %q; want 200 and %s", path, resp.StatusCode, resp.Header.Get("Docker-Content-Digest"), want)
		}
	}
	// Through go-containerregistry too (every blob).
	if _, err := e.pull("nodep", "library/nginx:1.27"); err != nil {
		t.Errorf("node of p pulls library/nginx:1.27: %v", err)
	}
	// A node of another project reads its own project: p's image is not there.
	resp := e.get("nodeq", "/v2/library/nginx/manifests/1.27", "")
	if resp.StatusCode != http.StatusNotFound {
		t.Errorf("node of q GET p's image: %d, want 404", resp.StatusCode)
	}
	// Nodes only pull.
	wantDenied(t, "node pushes", e.push("nodep", "library/evil:1", randomImage(t)), "node:p/c/n may only pull the images of project p")
}

func (e *env) get(token, path, accept string) *http.Response {
	e.t.Helper()
	req, _ := http.NewRequestWithContext(e.t.Context(), http.MethodGet, e.srv.URL+path, nil)
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	if accept != "" {
		req.Header.Set("Accept", accept)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(func() { resp.Body.Close() })
	return resp
}

func TestBadCredentialsAreRefusedInTheRegistryFormat(t *testing.T) {
	e := newEnv(t, registry.Options{})
	for _, tok := range []string{"", "kiln_forged"} {
		resp := e.get(tok, "/v2/", "")
		var body struct {
			Errors []struct{ Code, Message string } `json:"errors"`
		}
		json.NewDecoder(resp.Body).Decode(&body)
		if resp.StatusCode != http.StatusUnauthorized || resp.Header.Get("WWW-Authenticate") != registry.Challenge ||
			len(body.Errors) != 1 || body.Errors[0].Code != "UNAUTHORIZED" {
			t.Errorf("token %q: %d %q %+v; want 401, the challenge and UNAUTHORIZED", tok, resp.StatusCode, resp.Header.Get("WWW-Authenticate"), body)
		}
	}
	if _, err := e.pull("kiln_forged", "p/nginx:1"); code(err) != "UNAUTHORIZED" {
		t.Errorf("pull with a bad token: %v, want UNAUTHORIZED", err)
	}
	if resp := e.get("alice", "/v2/", ""); resp.StatusCode != http.StatusOK {
		t.Errorf("GET /v2/ with a token: %d", resp.StatusCode)
	}
	if resp := e.get("alice", "/v2/p/x/nothing/here", ""); resp.StatusCode != http.StatusNotFound {
		t.Errorf("an unknown route: %d, want 404", resp.StatusCode)
	}
}

func TestCatalogShowsOnlyWhatThePrincipalMayPull(t *testing.T) {
	e := newEnv(t, registry.Options{})
	e.mustPush("alice", "p/nginx:1", randomImage(t))
	e.mustPush("alice", "p/team/app:1", randomImage(t))
	e.mustPush("bob", "q/redis:1", randomImage(t))
	for _, tc := range []struct {
		token string
		want  []string
	}{
		{"alice", []string{"p/library/nginx", "p/team/app"}},
		{"val", []string{"p/library/nginx", "p/team/app"}},
		{"bob", []string{"q/library/redis"}},
		{"nodep", []string{"library/nginx", "team/app"}},
	} {
		got, err := remote.Catalog(t.Context(), e.ref("x").Context().Registry, as(tc.token))
		if err != nil {
			t.Fatalf("%s: catalog: %v", tc.token, err)
		}
		if diff := cmp.Diff(tc.want, got); diff != "" {
			t.Errorf("%s: catalog (-want +got):\n%s", tc.token, diff)
		}
	}
	// Paginated.
	resp := e.get("alice", "/v2/_catalog?n=1", "")
	if link := resp.Header.Get("Link"); !strings.Contains(link, "last=p%2Flibrary%2Fnginx") {
		t.Errorf("page of 1: Link %q", link)
	}
}

// blobFiles counts the blobs on disk.
func blobFiles(t *testing.T, dir string) int {
	t.Helper()
	n := 0
	root := filepath.Join(dir, "docker/registry/v2/blobs")
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err == nil && d.Name() == "data" {
			n++
		}
		return err
	})
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		t.Fatal(err)
	}
	return n
}

func (e *env) deleteTag(token, ref string) error {
	return remote.Delete(e.ref(ref), as(token), remote.WithContext(e.t.Context()))
}

func TestDeleteCollectsWhatNoManifestReferences(t *testing.T) {
	e := newEnv(t, registry.Options{})
	base := randomImage(t)
	layer, err := random.Layer(256, "application/vnd.oci.image.layer.v1.tar+gzip")
	if err != nil {
		t.Fatal(err)
	}
	child, err := mutate.AppendLayers(base, layer) // shares base's layers
	if err != nil {
		t.Fatal(err)
	}
	e.mustPush("alice", "p/base:1", base)
	e.mustPush("alice", "p/base:same", base) // a second tag of the same image
	e.mustPush("alice", "p/child:1", child)
	full := blobFiles(t, e.dir)
	// base: 2 layers + config + manifest; child: its own layer, config and manifest.
	if full != 4+3 {
		t.Fatalf("%d blobs after the pushes, want 7", full)
	}

	// A viewer may not delete.
	if err := e.deleteTag("val", "p/base:1"); code(err) != "DENIED" {
		t.Errorf("viewer deletes: %v, want DENIED", err)
	}
	// Deleting one of two tags frees nothing.
	if err := e.deleteTag("alice", "p/base:1"); err != nil {
		t.Fatalf("delete p/base:1: %v", err)
	}
	if _, err := e.reg.Collect(t.Context()); err != nil {
		t.Fatal(err)
	}
	if n := blobFiles(t, e.dir); n != full {
		t.Errorf("%d blobs after deleting one of two tags, want %d", n, full)
	}
	if _, err := e.pull("alice", "p/base:1"); code(err) != "MANIFEST_UNKNOWN" {
		t.Errorf("pull the deleted tag: %v, want MANIFEST_UNKNOWN", err)
	}

	// Deleting the child frees its own layer, config and manifest, and the
	// base's layers stay for base:same. The delete starts the collection.
	if err := e.deleteTag("alice", "p/child:1"); err != nil {
		t.Fatalf("delete p/child:1: %v", err)
	}
	waitfor.Cond(t, "the child's 3 blobs collected", 30*time.Second, func() (bool, error) { return blobFiles(t, e.dir) == full-3, nil })
	if _, err := e.pull("alice", "p/base:same"); err != nil {
		t.Errorf("pull base after the child's collection: %v", err)
	}
	// The repository left without a manifest is gone from the catalog.
	got, err := remote.Catalog(t.Context(), e.ref("x").Context().Registry, as("alice"))
	if err != nil || !cmp.Equal(got, []string{"p/library/base"}) {
		t.Errorf("catalog after the collection: %v %v, want [p/library/base]", got, err)
	}

	// The last tag: everything goes.
	if err := e.deleteTag("alice", "p/base:same"); err != nil {
		t.Fatal(err)
	}
	if _, err := e.reg.Collect(t.Context()); err != nil {
		t.Fatal(err)
	}
	if n := blobFiles(t, e.dir); n != 0 {
		t.Errorf("%d blobs left after deleting every tag, want 0", n)
	}
}

func TestGraceKeepsWhatIsYoung(t *testing.T) {
	var mu sync.Mutex
	now := time.Now()
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	e := newEnv(t, registry.Options{Grace: time.Hour, Now: clock})
	e.mustPush("alice", "p/app:1", randomImage(t))
	if err := e.deleteTag("alice", "p/app:1"); err != nil {
		t.Fatal(err)
	}
	if c, err := e.reg.Collect(t.Context()); err != nil || c.Blobs != 0 {
		t.Fatalf("collection within the grace: %+v %v, want nothing removed", c, err)
	}
	mu.Lock()
	now = now.Add(2 * time.Hour)
	mu.Unlock()
	c, err := e.reg.Collect(t.Context())
	if err != nil || c.Blobs != 4 || c.Repositories != 1 {
		t.Errorf("collection after the grace: %+v %v, want 4 blobs and 1 repository", c, err)
	}
}

func TestImagesSurviveARestart(t *testing.T) {
	dir := t.TempDir()
	e := newEnv(t, registry.Options{Dir: dir})
	img := randomImage(t)
	e.mustPush("alice", "p/app:1", img)
	e.srv.Close()
	e.reg.Close()

	e2 := newEnv(t, registry.Options{Dir: dir})
	got, err := e2.pull("alice", "p/app:1")
	if err != nil || digestOf(t, got) != digestOf(t, img) {
		t.Fatalf("pull after a restart: %v", err)
	}
	tags, err := remote.List(e2.ref("p/app").Context(), as("alice"))
	if err != nil || !cmp.Equal(tags, []string{"1"}) {
		t.Errorf("tags after a restart: %v %v", tags, err)
	}
	if _, err := os.Stat(filepath.Join(dir, "upload.secret")); err != nil {
		t.Errorf("upload secret: %v", err)
	}
}

// auditLog is a fake Auditor.
type auditLog struct {
	mu      sync.Mutex
	entries []v1.AuditEntry
}

func (l *auditLog) AppendAudit(_ context.Context, e *v1.AuditEntry) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.entries = append(l.entries, *e)
	return nil
}

func TestPushesAndDeletesAreAudited(t *testing.T) {
	log := &auditLog{}
	e := newEnv(t, registry.Options{Audit: log})
	e.mustPush("alice", "p/nginx:1.27", randomImage(t))
	if err := e.deleteTag("val", "p/nginx:1.27"); code(err) != "DENIED" {
		t.Fatalf("viewer deletes: %v", err)
	}
	if err := e.deleteTag("alice", "p/nginx:1.27"); err != nil {
		t.Fatal(err)
	}
	e.get("kiln_forged", "/v2/p/nginx/manifests/1.27", "") // a read: not audited
	type row struct{ Actor, Action, Path, Project, Result string }
	var got []row
	log.mu.Lock()
	for _, en := range log.entries {
		got = append(got, row{en.Actor, en.Action, en.Path, en.Project, en.Result})
	}
	log.mu.Unlock()
	want := []row{
		{"user:alice", registry.AuditPush, "/v2/p/library/nginx/manifests/1.27", "p", v1.AuditSuccess},
		{"user:val", registry.AuditDelete, "/v2/p/nginx/manifests/1.27", "p", v1.AuditDenied},
		{"user:alice", registry.AuditDelete, "/v2/p/library/nginx/manifests/1.27", "p", v1.AuditSuccess},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("audit log (-want +got):\n%s", diff)
	}
}

// A cross-repository mount reads its source: a member of another project
// cannot mount p's blobs into its own.
func TestMountNeedsPullOnTheSource(t *testing.T) {
	e := newEnv(t, registry.Options{})
	img := randomImage(t)
	e.mustPush("alice", "p/nginx:1", img)
	layers, err := img.Layers()
	if err != nil {
		t.Fatal(err)
	}
	d, err := layers[0].Digest()
	if err != nil {
		t.Fatal(err)
	}
	mount := func(token, into, from string) int {
		req, _ := http.NewRequestWithContext(t.Context(), http.MethodPost,
			e.srv.URL+"/v2/"+into+"/blobs/uploads/?mount="+d.String()+"&from="+from, nil)
		req.Header.Set("Authorization", "Bearer "+token)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	if got := mount("bob", "q/stolen", "p/nginx"); got != http.StatusForbidden {
		t.Errorf("bob mounts from p into q: %d, want 403", got)
	}
	if got := mount("alice", "p/copy", "p/nginx"); got != http.StatusCreated {
		t.Errorf("alice mounts within p: %d, want 201", got)
	}
}

// A push looks for blobs that are not there yet: those 404s are the
// client's business, not errors in kilnd's log.
func TestClientErrorsAreNotLoggedAsErrors(t *testing.T) {
	var buf testlog.Buffer
	e := newEnv(t, registry.Options{Logger: slog.New(slog.NewTextHandler(&buf, nil))})
	e.mustPush("alice", "p/app:1", randomImage(t))
	if _, err := e.pull("alice", "p/app:missing"); code(err) != "MANIFEST_UNKNOWN" {
		t.Fatalf("pull a missing tag: %v", err)
	}
	if strings.Contains(buf.String(), "level=ERROR") {
		t.Errorf("client errors logged as errors:\n%s", buf.String())
	}
}

// projects is a fake of Options.Projects.
type projects struct {
	mu    sync.Mutex
	names map[string]bool
}

func (p *projects) GetProject(_ context.Context, name string) (*v1.Project, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.names[name] {
		return nil, store.ErrNotFound
	}
	return &v1.Project{Name: name}, nil
}

// The images of a deleted project are garbage.
func TestADeletedProjectsImagesAreCollected(t *testing.T) {
	ps := &projects{names: map[string]bool{"p": true, "q": true}}
	e := newEnv(t, registry.Options{Projects: ps})
	e.mustPush("alice", "p/app:1", randomImage(t))
	e.mustPush("bob", "q/app:1", randomImage(t))
	e.mustPush("root", registry.System+"/pause:3.10", randomImage(t)) // no project, never an orphan
	if c, err := e.reg.Collect(t.Context()); err != nil || c != (registry.Collected{}) {
		t.Fatalf("a collection with nothing to collect: %+v %v", c, err)
	}
	ps.mu.Lock()
	delete(ps.names, "q")
	ps.mu.Unlock()
	c, err := e.reg.Collect(t.Context())
	if err != nil || c.Repositories != 1 || c.Blobs != 4 {
		t.Errorf("collection after q was deleted: %+v %v, want q/library/app and its 4 blobs", c, err)
	}
	if _, err := e.pull("alice", "p/app:1"); err != nil {
		t.Errorf("p's image after q's collection: %v", err)
	}
}

// Bad input is the client's error, never a 500.
func TestBadInputIsNever500(t *testing.T) {
	e := newEnv(t, registry.Options{})
	e.mustPush("alice", "p/app:1", randomImage(t))
	for _, tc := range []struct{ method, path, body string }{
		{"GET", "/v2/p/APP/manifests/1", ""},
		{"GET", "/v2/p/app/manifests/not a tag", ""},
		{"GET", "/v2/p/app/manifests/sha256:nothex", ""},
		{"GET", "/v2/p/app/blobs/sha256:0000", ""},
		{"GET", "/v2/p/app/blobs/md5:abc", ""},
		{"PUT", "/v2/p/app/manifests/2", "{not json"},
		{"PUT", "/v2/p/app/manifests/2", `{"schemaVersion": 2, "mediaType": "application/vnd.oci.image.manifest.v1+json", "config": {"digest": "sha256:` + strings.Repeat("0", 64) + `", "size": 1}, "layers": []}`},
		{"PATCH", "/v2/p/app/blobs/uploads/not-an-upload", "x"},
		{"PUT", "/v2/p/app/blobs/uploads/not-an-upload?digest=sha256:abc", "x"},
		{"DELETE", "/v2/p/app/manifests/nope", ""},
		{"DELETE", "/v2/p/app/blobs/sha256:" + strings.Repeat("0", 64), ""},
		{"GET", "/v2/_catalog?n=x", ""},
		{"POST", "/v2/_catalog", ""},
		{"GET", "/v2/p/app/tags/list?n=-1", ""},
	} {
		req, _ := http.NewRequestWithContext(t.Context(), tc.method, e.srv.URL+strings.ReplaceAll(tc.path, " ", "%20"), strings.NewReader(tc.body))
		req.Header.Set("Authorization", "Bearer alice")
		if tc.method == "PUT" && strings.Contains(tc.path, "manifests") {
			req.Header.Set("Content-Type", "application/vnd.oci.image.manifest.v1+json")
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode >= 500 || resp.StatusCode < 400 {
			t.Errorf("%s %s: %d %s, want a 4xx", tc.method, tc.path, resp.StatusCode, body)
		}
	}
}

// System images: every node pulls them by the name its pods ask for,
// unless its project has an image of that name and reference.
func TestNodesFallBackToSystemImages(t *testing.T) {
	e := newEnv(t, registry.Options{})
	system := randomImage(t)
	e.mustPush("root", registry.System+"/pause:3.10", system)
	if err := e.push("alice", registry.System+"/pause:3.10", randomImage(t)); code(err) != "DENIED" && status(err) != http.StatusForbidden {
		t.Errorf("a project's operator pushes a system image: %v, want DENIED", err)
	}
	for _, node := range []string{"nodep", "nodeq"} {
		got, err := e.pull(node, "pause:3.10")
		if err != nil || digestOf(t, got) != digestOf(t, system) {
			t.Fatalf("%s pulls pause:3.10: %v, want the system image", node, err)
		}
	}
	// p's own pause shadows the system's for p's nodes only.
	own := randomImage(t)
	e.mustPush("alice", "p/pause:3.10", own)
	if got, err := e.pull("nodep", "library/pause:3.10"); err != nil || digestOf(t, got) != digestOf(t, own) {
		t.Errorf("node of p pulls pause:3.10: %v, want p's own", err)
	}
	if got, err := e.pull("nodeq", "library/pause:3.10"); err != nil || digestOf(t, got) != digestOf(t, system) {
		t.Errorf("node of q pulls pause:3.10: %v, want the system's", err)
	}
	// A tag neither has is unknown.
	if _, err := e.pull("nodeq", "pause:9.9"); code(err) != "MANIFEST_UNKNOWN" {
		t.Errorf("a tag no one has: %v, want MANIFEST_UNKNOWN", err)
	}
}

// TestStoredBytes: the registry's size is its blobs', each once however
// many repositories hold it.
func TestStoredBytes(t *testing.T) {
	e := newEnv(t, registry.Options{})
	if n, err := e.reg.StoredBytes(); err != nil || n != 0 {
		t.Fatalf("empty registry: %d bytes, %v; want 0", n, err)
	}
	img := randomImage(t)
	e.mustPush("alice", "p/nginx:1.27", img)
	manifest, err := img.RawManifest()
	if err != nil {
		t.Fatal(err)
	}
	config, err := img.RawConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	want := int64(len(manifest) + len(config))
	layers, err := img.Layers()
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range layers {
		size, err := l.Size()
		if err != nil {
			t.Fatal(err)
		}
		want += size
	}
	if n, err := e.reg.StoredBytes(); err != nil || n != want {
		t.Errorf("after a push: %d bytes, %v; want %d (manifest, config and layers)", n, err, want)
	}
	e.mustPush("alice", "p/again:1", img) // the same blobs under another name
	if n, err := e.reg.StoredBytes(); err != nil || n != want {
		t.Errorf("after the same image again: %d bytes, %v; want %d", n, err, want)
	}
}
