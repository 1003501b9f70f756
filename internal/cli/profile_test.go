package cli

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"io/fs"
	"log"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	"github.com/google/go-containerregistry/pkg/v1/remote"

	v1 "kiln.dev/kiln/api/v1"
	"kiln.dev/kiln/internal/chartfile"
	"kiln.dev/kiln/internal/chartfile/charttest"
)

func TestParseProfileRef(t *testing.T) {
	tests := []struct {
		name, in    string
		wantName    string
		wantVersion int
		wantErr     error // why the usage error of PROFILE says it is refused
	}{
		{name: "name", in: "web", wantName: "web"},
		{name: "name and version", in: "web:12", wantName: "web", wantVersion: 12},
		{name: "no name", in: ":2", wantErr: errNoProfile},
		{name: "empty version", in: "web:", wantErr: errProfileVersion},
		{name: "zero", in: "web:0", wantErr: errProfileVersion},
		{name: "not a number", in: "web:latest", wantErr: errProfileVersion},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			n, v, err := parseProfileRef(tt.in, "PROFILE")
			if tt.wantErr != nil {
				var ue usageError
				if !errors.As(err, &ue) || ue.arg != "PROFILE" || !errors.Is(err, tt.wantErr) {
					t.Fatalf("parseProfileRef(%q) error = %v, want a usage error of PROFILE: %v", tt.in, err, tt.wantErr)
				}
				return
			}
			if err != nil || n != tt.wantName || v != tt.wantVersion {
				t.Errorf("parseProfileRef(%q) = %q, %d, %v; want %q, %d", tt.in, n, v, err, tt.wantName, tt.wantVersion)
			}
		})
	}
}

// TestReadProfileFile: the files packs name are read relative to the
// profile file, and their keys are not sent.
func TestReadProfileFile(t *testing.T) {
	dir := t.TempDir()
	write := func(name, content string) string {
		t.Helper()
		path := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
		return path
	}
	write("m/app.yaml", "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: app\n")
	write("values.json", `{"replicas": 2, "image": {"tag": "a"}}`)
	tests := []struct {
		name string
		file string
		want *v1.Profile
		// When fails, the error is a *fileFieldError of field ("" for the
		// file as a whole) matching is, when set.
		fails bool
		field string
		is    error
	}{
		{name: "files read", file: `
version: 3
kubernetesVersion: v1.36.3
cni: cilium
packs:
- name: app
  version: "1"
  manifestsFile: m/app.yaml
- name: web
  version: 0.1.0
  chart: web-chart
  valuesFile: values.json
  order: 5
`, want: &v1.Profile{Version: 3, KubernetesVersion: "v1.36.3", CNI: "cilium", Packs: []v1.Pack{
			{Name: "app", Version: "1", Manifests: "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: app\n"},
			{Name: "web", Version: "0.1.0", Chart: "web-chart", Order: 5, Values: map[string]any{"replicas": float64(2), "image": map[string]any{"tag": "a"}}},
		}}},
		{name: "what get -o yaml prints is taken", file: `
name: web
id: /v1/projects/default/profiles/web/versions/1
etag: "1"
version: 1
kubernetesVersion: v1.36.3
published: true
createdAt: "2026-03-01T12:00:00Z"
`, want: &v1.Profile{Name: "web", Version: 1, KubernetesVersion: "v1.36.3"}},
		// Read without its unknown field valueFile, the file is a profile.
		{name: "unknown field", file: "kubernetesVersion: v1.36.3\npacks:\n- name: a\n  valueFile: x.yaml\n", fails: true},
		{name: "both manifests", file: "packs:\n- name: a\n  manifests: x\n  manifestsFile: m/app.yaml\n", fails: true, field: "packs[0].manifestsFile", is: errNotBoth},
		{name: "both values", file: "packs:\n- name: a\n  values: {x: 1}\n  valuesFile: values.json\n", fails: true, field: "packs[0].valuesFile", is: errNotBoth},
		{name: "missing file", file: "packs:\n- name: a\n  manifestsFile: nope.yaml\n", fails: true, field: "packs[0].manifestsFile", is: fs.ErrNotExist},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := write("profile.yaml", tt.file)
			a := &app{}
			got, err := a.readProfileFile(path)
			if tt.fails {
				var fe *fileFieldError
				if !errors.As(err, &fe) || fe.field != tt.field || tt.is != nil && !errors.Is(err, tt.is) {
					t.Fatalf("error = %v, want one of field %q: %v", err, tt.field, tt.is)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("profile (-want +got):\n%s", diff)
			}
		})
	}
}

func TestCountObjects(t *testing.T) {
	tests := []struct {
		in   string
		want int
	}{
		{"", 0},
		{"a: 1\n", 1},
		{"---\na: 1\n---\n# only a comment\n---\nb: 2\n", 2},
		{"a: 1\n--- # next\nb: 2\n...\n", 2},
	}
	for _, tt := range tests {
		if got := countObjects(tt.in); got != tt.want {
			t.Errorf("countObjects(%q) = %d, want %d", tt.in, got, tt.want)
		}
	}
}

func sampleProfiles() (from, to *v1.Profile) {
	from = &v1.Profile{Name: "web", Version: 1, KubernetesVersion: "v1.35.5", Published: true, PublishedAt: at(time.Hour), CreatedAt: t0,
		Packs: []v1.Pack{
			{Name: "app", Version: "1", Order: 10, Namespace: "demo", Manifests: "kind: ConfigMap\ndata:\n  a: \"1\"\n---\nkind: Secret\n"},
			{Name: "web", Version: "0.1.0", Values: map[string]any{"replicas": float64(2), "image": map[string]any{"tag": "a", "pull": "Always"}}},
			{Name: "old", Version: "2", Chart: "legacy", Order: 5},
			{Name: "same", Version: "1", Order: 30},
		}}
	to = &v1.Profile{Name: "web", Version: 2, KubernetesVersion: "v1.36.3", CNI: "cilium", CreatedAt: t0,
		Packs: []v1.Pack{
			{Name: "web", Version: "0.2.0", Order: 1, Values: map[string]any{"replicas": float64(3), "image": map[string]any{"tag": "a"}, "extra": []any{"x"}}},
			{Name: "app", Version: "1", Order: 10, Namespace: "demo", Manifests: "kind: ConfigMap\ndata:\n  a: \"2\"\n---\nkind: Secret\n"},
			{Name: "metrics", Version: "3.12.2", Chart: "metrics-server", Order: 20},
			{Name: "same", Version: "1", Order: 30},
		}}
	return from, to
}

func TestRenderProfile(t *testing.T) {
	_, p := sampleProfiles()
	versions := []v1.ProfileVersion{
		{Version: 1, Published: true, PublishedAt: at(time.Hour), CreatedAt: t0},
		{Version: 2, CreatedAt: t0},
	}
	var b bytes.Buffer
	if err := renderProfile(&b, p, versions); err != nil {
		t.Fatal(err)
	}
	golden(t, "profile.table", b.Bytes())
}

func TestDiffProfiles(t *testing.T) {
	from, to := sampleProfiles()
	d := diffProfiles(from, to)
	var b bytes.Buffer
	if err := renderProfileDiff(&b, d); err != nil {
		t.Fatal(err)
	}
	golden(t, "profile-diff.txt", b.Bytes())

	if same := diffProfiles(from, from); !same.Same || same.Unchanged != len(from.Packs) {
		t.Errorf("a version compared with itself: %+v, want the same", same)
	}
}

// fakeProfiles is a server with profile web (versions 1 and 2 published,
// 3 a draft) and cluster shop on web:1, that records the PATCH of shop.
type fakeProfiles struct {
	t     *testing.T
	patch map[string]any
	calls []string
}

func (f *fakeProfiles) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	f.calls = append(f.calls, r.Method+" "+r.URL.Path)
	version := func(n int, k8s string, published bool) v1.Profile {
		return v1.Profile{Name: "web", Version: n, KubernetesVersion: k8s, Published: published}
	}
	shop := v1.Cluster{Name: "shop", Spec: v1.ClusterSpec{KubernetesVersion: "v1.34.8", Profile: v1.ProfileRef{Name: "web", Version: 1}}}
	switch r.Method + " " + r.URL.Path {
	case "GET /v1/projects/default/profiles/web":
		p := version(3, "v1.36.3", false)
		p.Versions = []v1.ProfileVersion{{Version: 1, Published: true}, {Version: 2, Published: true}, {Version: 3}}
		json.NewEncoder(w).Encode(p)
	case "GET /v1/projects/default/profiles/web/versions/2":
		json.NewEncoder(w).Encode(version(2, "v1.35.5", true))
	case "GET /v1/projects/default/clusters/shop":
		json.NewEncoder(w).Encode(shop)
	case "PATCH /v1/projects/default/clusters/shop":
		if ct := r.Header.Get("Content-Type"); ct != "application/merge-patch+json" {
			f.t.Errorf("PATCH Content-Type %q", ct)
		}
		data, _ := io.ReadAll(r.Body)
		json.Unmarshal(data, &f.patch)
		shop.Spec.Profile, shop.Spec.KubernetesVersion = v1.ProfileRef{Name: "web", Version: 2}, "v1.35.5"
		shop.Status.ProvisioningState = v1.StateUpdating
		w.Header().Set("Azure-AsyncOperation", "/v1/operations/op-1")
		w.WriteHeader(http.StatusAccepted)
		json.NewEncoder(w).Encode(shop)
	case "POST /v1/projects/default/clusters/shop/reconcile":
		shop.Status.ProvisioningState = v1.StateUpdating
		w.Header().Set("Azure-AsyncOperation", "https://kiln.example/v1/operations/op-2")
		w.WriteHeader(http.StatusAccepted)
		json.NewEncoder(w).Encode(shop)
	case "DELETE /v1/projects/default/profiles/web/versions/1":
		w.WriteHeader(http.StatusConflict)
		json.NewEncoder(w).Encode(v1.ErrorResponse{Error: v1.Error{Code: v1.CodeConflict, Target: "version",
			Message: `profile "web" in project "default" version 1 is used by 1 cluster(s): [shop]`}})
	default:
		http.NotFound(w, r)
	}
}

func newFakeProfiles(t *testing.T) (*fakeProfiles, []string) {
	f := &fakeProfiles{t: t}
	srv := httptest.NewServer(f)
	t.Cleanup(srv.Close)
	return f, []string{"HOME=" + t.TempDir(), "KILN_SERVER=" + srv.URL, "KILN_TOKEN=tok"}
}

// TestSetProfileResolvesLatest: without a version, set-profile pins the
// newest published version (not the newest draft) and its Kubernetes
// version in one merge patch.
func TestSetProfileResolvesLatest(t *testing.T) {
	f, env := newFakeProfiles(t)
	code, stdout, stderr := runCLI(t, env, "", "cluster", "set-profile", "shop", "web")
	if code != ExitOK {
		t.Fatalf("exit %d, stderr:\n%s", code, stderr)
	}
	want := map[string]any{"spec": map[string]any{
		"profile":           map[string]any{"name": "web", "version": float64(2)},
		"kubernetesVersion": "v1.35.5",
	}}
	if diff := cmp.Diff(want, f.patch); diff != "" {
		t.Errorf("PATCH body (-want +got):\n%s", diff)
	}
	if w := `Moving cluster "shop" from profile web:1 to web:2 (Kubernetes v1.35.5) (operation op-1).`; !strings.Contains(stderr, w) {
		t.Errorf("stderr:\n%s\nwant %q", stderr, w)
	}
	if !strings.Contains(stdout, "Updating") {
		t.Errorf("stdout:\n%s\nwant the cluster, Updating", stdout)
	}
}

func TestClusterReconcile(t *testing.T) {
	f, env := newFakeProfiles(t)
	code, stdout, stderr := runCLI(t, env, "", "cluster", "reconcile", "shop")
	if code != ExitOK {
		t.Fatalf("exit %d, stderr:\n%s", code, stderr)
	}
	if w := `Reconciling cluster "shop" (operation op-2). Follow it with: kiln operation watch op-2`; !strings.Contains(stderr, w) {
		t.Errorf("stderr:\n%s\nwant %q", stderr, w)
	}
	if !strings.Contains(stdout, "Updating") {
		t.Errorf("stdout:\n%s\nwant the cluster", stdout)
	}
	if diff := cmp.Diff([]string{"POST /v1/projects/default/clusters/shop/reconcile"}, f.calls); diff != "" {
		t.Errorf("calls (-want +got):\n%s", diff)
	}
}

// TestProfileDeleteInUse: the server's 409 is printed as every API error.
func TestProfileDeleteInUse(t *testing.T) {
	_, env := newFakeProfiles(t)
	code, _, stderr := runCLI(t, env, "", "profile", "delete", "web:1")
	want := "error: Conflict: profile \"web\" in project \"default\" version 1 is used by 1 cluster(s): [shop]\n  target: version\n"
	if code != ExitError || stderr != want {
		t.Errorf("exit %d, stderr:\n%s\nwant exit %d and\n%s", code, stderr, ExitError, want)
	}
}

// TestChartPush: a chart goes to PROJECT/charts/NAME:VERSION as Helm's
// OCI artifact: an OCI manifest, the chart's metadata as the config, the
// archive as the one layer.
func TestChartPush(t *testing.T) {
	reg := httptest.NewServer(registry.New(registry.Logger(log.New(io.Discard, "", 0))))
	t.Cleanup(reg.Close)
	archive := charttest.Archive(t, "web", "0.1.0", map[string]string{"values.yaml": "replicas: 1\n"})
	path := filepath.Join(t.TempDir(), "web-0.1.0.tgz")
	if err := os.WriteFile(path, archive, 0o644); err != nil {
		t.Fatal(err)
	}
	env := []string{"HOME=" + t.TempDir(), "KILN_SERVER=" + reg.URL, "KILN_TOKEN=tok", "KILN_PROJECT=team"}
	code, stdout, stderr := runCLI(t, env, "", "chart", "push", path)
	if code != ExitOK {
		t.Fatalf("exit %d, stderr:\n%s", code, stderr)
	}
	if !strings.HasPrefix(stdout, "chart web:0.1.0 pushed to team/charts/web (digest sha256:") {
		t.Errorf("stdout %q", stdout)
	}

	u, _ := url.Parse(reg.URL)
	ref, err := name.ParseReference(u.Host+"/team/charts/web:0.1.0", name.Insecure)
	if err != nil {
		t.Fatal(err)
	}
	img, err := remote.Image(ref)
	if err != nil {
		t.Fatal(err)
	}
	m, err := img.Manifest()
	if err != nil {
		t.Fatal(err)
	}
	if m.MediaType != "application/vnd.oci.image.manifest.v1+json" || m.Config.MediaType != chartfile.ConfigMediaType ||
		len(m.Layers) != 1 || m.Layers[0].MediaType != chartfile.LayerMediaType {
		t.Errorf("manifest %+v, want Helm's OCI artifact", m)
	}
	cfg, err := img.RawConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	var meta map[string]any
	if err := json.Unmarshal(cfg, &meta); err != nil || meta["name"] != "web" || meta["version"] != "0.1.0" || meta["apiVersion"] != "v2" {
		t.Errorf("config %s (%v), want the chart's metadata", cfg, err)
	}
	layers, err := img.Layers()
	if err != nil {
		t.Fatal(err)
	}
	rc, err := layers[0].Compressed()
	if err != nil {
		t.Fatal(err)
	}
	got, _ := io.ReadAll(rc)
	rc.Close()
	if !bytes.Equal(got, archive) {
		t.Errorf("the layer is not the archive (%d bytes, want %d)", len(got), len(archive))
	}

	code, stdout, stderr = runCLI(t, env, "", "chart", "list")
	if code != ExitOK || !strings.Contains(stdout, "web    0.1.0     sha256:") {
		t.Errorf("chart list: exit %d, stdout:\n%s\nstderr:\n%s", code, stdout, stderr)
	}
}
