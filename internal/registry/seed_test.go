package registry_test

import (
	"errors"
	"io"
	"io/fs"
	"net/http"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"kiln.dev/kiln/internal/imagefile"
	"kiln.dev/kiln/internal/registry"
	"kiln.dev/kiln/test/ocitest"
)

// files lists every file under dir with its size and modification time.
func files(t *testing.T, dir string) map[string]string {
	t.Helper()
	out := map[string]string{}
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		out[p] = fi.ModTime().Format(time.RFC3339Nano) + " " + fi.Mode().String()
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// A system image seeded from its archive is stored under the name a node's
// containerd asks its mirror for, and every node gets it through the
// fallback; seeding it again changes nothing and says so.
func TestSeedIsIdempotentAndNodesPullTheSeededImage(t *testing.T) {
	e := newEnv(t, registry.Options{})
	dir := t.TempDir()
	coredns := ocitest.Named{Name: "kiln.dev/coredns:1.15.0", Image: ocitest.Random(t, 2048)}
	archive := filepath.Join(dir, "coredns.tar")
	ocitest.WriteOCIArchive(t, archive, coredns)

	got, err := e.reg.Seed(t.Context(), archive)
	if err != nil {
		t.Fatal(err)
	}
	want := registry.Seeded{Ref: "kiln.dev/coredns:1.15.0", Repository: "kiln.system/library/coredns", Tag: "1.15.0",
		Digest: ocitest.Digest(t, coredns.Image), Pushed: true}
	if diff := cmp.Diff([]registry.Seeded{want}, got); diff != "" {
		t.Errorf("first seed (-want +got):\n%s", diff)
	}

	// What containerd sends for kiln.dev/coredns:1.15.0 through its mirror.
	for _, node := range []string{"nodep", "nodeq"} {
		resp := e.get(node, "/v2/coredns/manifests/1.15.0?ns=kiln.dev", "application/vnd.oci.image.manifest.v1+json")
		body, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != http.StatusOK || resp.Header.Get("Docker-Content-Digest") != want.Digest {
			t.Errorf("%s: GET /v2/coredns/manifests/1.15.0?ns=kiln.dev: %d %s %s, want the seeded manifest",
				node, resp.StatusCode, resp.Header.Get("Docker-Content-Digest"), body)
		}
		img, err := e.pull(node, "coredns:1.15.0") // every blob read and checked
		if err != nil || digestOf(t, img) != want.Digest {
			t.Errorf("%s pulls coredns:1.15.0: %v", node, err)
		}
	}
	// The catalog lists it among the system images.
	resp := e.get("root", "/v2/_catalog", "")
	if body, _ := io.ReadAll(resp.Body); !strings.Contains(string(body), `"kiln.system/library/coredns"`) {
		t.Errorf("catalog: %s, want the seeded repository", body)
	}

	before := files(t, e.dir)
	again, err := e.reg.Seed(t.Context(), archive)
	want.Pushed = false
	if err != nil || len(again) != 1 || again[0] != want {
		t.Errorf("second seed: %+v %v, want %+v", again, err, want)
	}
	if diff := cmp.Diff(before, files(t, e.dir)); diff != "" {
		t.Errorf("the second seed changed the registry's files (-before +after):\n%s", diff)
	}

	// A new build of the same name replaces it.
	rebuilt := ocitest.Named{Name: coredns.Name, Image: ocitest.Random(t, 2048)}
	ocitest.WriteOCIArchive(t, archive, rebuilt)
	got, err = e.reg.Seed(t.Context(), archive)
	if err != nil || len(got) != 1 || !got[0].Pushed || got[0].Digest != ocitest.Digest(t, rebuilt.Image) {
		t.Fatalf("seed of a rebuilt image: %+v %v, want it pushed", got, err)
	}
	if img, err := e.pull("nodep", "coredns:1.15.0"); err != nil || digestOf(t, img) != got[0].Digest {
		t.Errorf("after the rebuild a node pulls %v, want the rebuilt image", err)
	}
}

// A docker save archive is seeded too; its layers are stored compressed,
// as go-containerregistry reads them.
func TestSeedADockerSaveArchive(t *testing.T) {
	e := newEnv(t, registry.Options{})
	archive := filepath.Join(t.TempDir(), "demo.tar")
	ocitest.WriteDockerArchive(t, archive, ocitest.Named{Name: "kiln.dev/demo:1", Image: ocitest.Random(t, 4096)})
	all, err := e.reg.Seed(t.Context(), archive)
	if err != nil || len(all) != 1 {
		t.Fatalf("seed: %+v %v", all, err)
	}
	got := all[0]
	if !got.Pushed || got.Repository != "kiln.system/library/demo" || got.Tag != "1" {
		t.Fatalf("seed: %+v", got)
	}
	img, err := e.pull("nodeq", "demo:1")
	if err != nil || digestOf(t, img) != got.Digest {
		t.Fatalf("a node pulls demo:1: %v, want %s", err, got.Digest)
	}
	if again, err := e.reg.Seed(t.Context(), archive); err != nil || len(again) != 1 || again[0].Pushed || again[0].Digest != got.Digest {
		t.Errorf("second seed: %+v %v, want nothing pushed", again, err)
	}
}

func TestSeedRefusesWhatIsNoSystemImage(t *testing.T) {
	e := newEnv(t, registry.Options{})
	dir := t.TempDir()
	two := filepath.Join(dir, "two.tar")
	ocitest.WriteOCIArchive(t, two, ocitest.Named{Name: "a:1", Image: ocitest.Random(t, 64)}, ocitest.Named{Name: "b:1", Image: ocitest.Random(t, 64)})
	untagged := filepath.Join(dir, "untagged.tar")
	ocitest.WriteOCIArchive(t, untagged, ocitest.Named{Name: "kiln.dev/untagged", Image: ocitest.Random(t, 64)})
	var (
		nn *imagefile.NameNeededError
		pe *fs.PathError
	)
	if got, err := e.reg.Seed(t.Context(), two); !errors.As(err, &nn) || !errors.Is(err, imagefile.ErrNameNeeded) ||
		nn.Images != 2 || !slices.Equal(nn.Names, []string{"a:1", "b:1"}) {
		t.Errorf("Seed(two.tar) = %+v, %v; want ErrNameNeeded of 2 images, a:1 and b:1", got, err)
	}
	if got, err := e.reg.Seed(t.Context(), untagged); !errors.Is(err, imagefile.ErrNoTag) {
		t.Errorf("Seed(untagged.tar) = %+v, %v; want ErrNoTag", got, err)
	}
	missing := filepath.Join(dir, "missing.tar")
	if got, err := e.reg.Seed(t.Context(), missing); !errors.Is(err, fs.ErrNotExist) || !errors.As(err, &pe) || pe.Path != missing {
		t.Errorf("Seed(missing.tar) = %+v, %v; want fs.ErrNotExist of it", got, err)
	}
}

// The kube image is one image under several names (an index entry per
// name, all of one manifest): every name is seeded, and a node pulls each
// by containerd's path; each layer's data is stored once (Seed mounts it
// into the other repositories rather than upload it again; the storage
// would keep one copy either way). Seeding again writes nothing.
func TestSeedEveryNameOfAnImage(t *testing.T) {
	e := newEnv(t, registry.Options{})
	img := ocitest.Random(t, 4096)
	names := []string{"kiln.dev/kube-apiserver:v1.36.3", "kiln.dev/kube-controller-manager:v1.36.3",
		"kiln.dev/kube-scheduler:v1.36.3", "kiln.dev/etcd:v1.36.3", "kiln.dev/kube:v1.36.3"}
	var named []ocitest.Named
	for _, n := range names {
		named = append(named, ocitest.Named{Name: n, Image: img})
	}
	archive := filepath.Join(t.TempDir(), "kube-v1.36.3.tar")
	ocitest.WriteOCIArchive(t, archive, named...)

	got, err := e.reg.Seed(t.Context(), archive)
	if err != nil {
		t.Fatal(err)
	}
	digest := ocitest.Digest(t, img)
	var want []registry.Seeded
	for _, n := range names {
		repo := strings.TrimSuffix(strings.TrimPrefix(n, "kiln.dev/"), ":v1.36.3")
		want = append(want, registry.Seeded{Ref: n, Repository: "kiln.system/library/" + repo, Tag: "v1.36.3", Digest: digest, Pushed: true})
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("seed (-want +got):\n%s", diff)
	}
	for _, w := range want {
		repo := strings.TrimPrefix(w.Repository, "kiln.system/library/")
		resp := e.get("nodep", "/v2/"+repo+"/manifests/v1.36.3?ns=kiln.dev", "application/vnd.oci.image.manifest.v1+json")
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK || resp.Header.Get("Docker-Content-Digest") != digest {
			t.Errorf("GET /v2/%s/manifests/v1.36.3?ns=kiln.dev: %d %s, want the seeded manifest", repo, resp.StatusCode, resp.Header.Get("Docker-Content-Digest"))
		}
		if pulled, err := e.pull("nodeq", repo+":v1.36.3"); err != nil || digestOf(t, pulled) != digest {
			t.Errorf("a node pulls %s:v1.36.3: %v", repo, err)
		}
	}
	// One copy of each layer's data, however many repositories link it.
	layers, err := img.Layers()
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range layers {
		d, _ := l.Digest()
		var copies []string
		filepath.WalkDir(e.dir, func(p string, de fs.DirEntry, err error) error {
			if err == nil && de.Name() == "data" && strings.Contains(p, d.Hex) {
				copies = append(copies, p)
			}
			return nil
		})
		if len(copies) != 1 {
			t.Errorf("layer %s stored %d times: %q", d, len(copies), copies)
		}
	}

	before := files(t, e.dir)
	again, err := e.reg.Seed(t.Context(), archive)
	if err != nil || len(again) != len(names) || slices.ContainsFunc(again, func(s registry.Seeded) bool { return s.Pushed }) {
		t.Errorf("second seed: %+v %v, want every name already there", again, err)
	}
	if diff := cmp.Diff(before, files(t, e.dir)); diff != "" {
		t.Errorf("the second seed changed the registry's files (-before +after):\n%s", diff)
	}
}
