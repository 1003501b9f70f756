package imagefile

import (
	"archive/tar"
	"errors"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/name"
	ggcr "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/random"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

func randomImage(t *testing.T) ggcr.Image {
	t.Helper()
	img, err := random.Image(256, 1)
	if err != nil {
		t.Fatal(err)
	}
	return img
}

func digestOf(t *testing.T, d interface{ Digest() (ggcr.Hash, error) }) string {
	t.Helper()
	h, err := d.Digest()
	if err != nil {
		t.Fatal(err)
	}
	return h.String()
}

// writeLayout writes an OCI layout in dir with one image per name.
func writeLayout(t *testing.T, dir string, images map[string]ggcr.Image) {
	t.Helper()
	p, err := layout.Write(dir, empty.Index)
	if err != nil {
		t.Fatal(err)
	}
	for n, img := range images {
		if err := p.AppendImage(img, layout.WithAnnotations(map[string]string{AnnotationContainerdName: n})); err != nil {
			t.Fatal(err)
		}
	}
}

// tarDir writes the files under dir into a tar at path, names relative to
// dir (an OCI archive, when dir is a layout).
func tarDir(t *testing.T, dir, path string) {
	t.Helper()
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	tw := tar.NewWriter(f)
	if err := tw.AddFS(os.DirFS(dir)); err != nil {
		t.Fatal(err)
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
}

func TestOpenReadsEachForm(t *testing.T) {
	dir := t.TempDir()
	img := randomImage(t)
	want := digestOf(t, img)

	save := filepath.Join(dir, "save.tar")
	tag, _ := name.NewTag("kiln.dev/demo:1")
	if err := tarball.WriteToFile(save, tag, img); err != nil {
		t.Fatal(err)
	}
	lay := filepath.Join(dir, "layout")
	writeLayout(t, lay, map[string]ggcr.Image{"kiln.dev/demo:1": img})
	archive := filepath.Join(dir, "oci.tar")
	tarDir(t, lay, archive)

	for _, tc := range []struct{ name, path, what string }{
		{"docker save", save, "docker save archive "},
		{"OCI layout", lay, "OCI layout "},
		{"OCI archive", archive, "OCI archive "},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f, err := Open(tc.path, "")
			if err != nil {
				t.Fatal(err)
			}
			if f.Name != "kiln.dev/demo:1" || f.What != tc.what+tc.path {
				t.Errorf("name %q, what %q", f.Name, f.What)
			}
			got, want := digestOf(t, f), want
			// A docker save archive holds the layers uncompressed: its
			// manifest is another, its image (config) the same.
			if tc.path == save {
				got, want = configOf(t, f.Image), configOf(t, img)
			}
			if got != want {
				t.Errorf("digest %s, want %s", got, want)
			}
			if err := f.Close(); err != nil {
				t.Error(err)
			}
			if f.tmp != "" {
				if _, err := os.Stat(f.tmp); !errors.Is(err, fs.ErrNotExist) {
					t.Errorf("Close left %s: %v", f.tmp, err)
				}
			}
		})
	}
}

func configOf(t *testing.T, img ggcr.Image) string {
	t.Helper()
	h, err := img.ConfigName()
	if err != nil {
		t.Fatal(err)
	}
	return h.String()
}

func TestSeveralImagesNeedAName(t *testing.T) {
	dir := t.TempDir()
	a, b := randomImage(t), randomImage(t)
	lay := filepath.Join(dir, "layout")
	writeLayout(t, lay, map[string]ggcr.Image{"app:1": a, "app:2": b})
	archive := filepath.Join(dir, "oci.tar")
	tarDir(t, lay, archive)
	_, err := Open(archive, "")
	if !errors.Is(err, ErrNameNeeded) || !strings.Contains(err.Error(), "holds 2 images") {
		t.Fatalf("Open without a name: %v, want ErrNameNeeded", err)
	}
	f, err := Open(archive, "docker.io/library/app:2")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if digestOf(t, f) != digestOf(t, b) {
		t.Error("Open chose another image than app:2")
	}
}

func TestOpenRefusesOtherFiles(t *testing.T) {
	dir := t.TempDir()
	unpacked := filepath.Join(dir, "tmp", "unpacked") // where an OCI archive is unpacked
	os.MkdirAll(unpacked, 0o700)
	t.Setenv("TMPDIR", unpacked)
	notTar := filepath.Join(dir, "notes.txt")
	os.WriteFile(notTar, []byte("not a tar at all, but long enough to be read as one's header......"), 0o600)
	otherTar := filepath.Join(dir, "other.tar")
	os.Mkdir(filepath.Join(dir, "other"), 0o700)
	os.WriteFile(filepath.Join(dir, "other", "x"), []byte("x"), 0o600)
	tarDir(t, filepath.Join(dir, "other"), otherTar)
	escape := filepath.Join(dir, "escape.tar")
	writeTar(t, escape, map[string]string{"oci-layout": `{"imageLayoutVersion":"1.0.0"}`, "index.json": "{}", "../evil": "x"})

	for _, tc := range []struct{ path, want string }{
		{notTar, "neither an OCI layout directory nor a tar"},
		{otherTar, "a tar with neither manifest.json"},
		{escape, `entry "../evil" is outside the archive`},
		{filepath.Join(dir, "missing.tar"), "no such file"},
	} {
		if _, err := Open(tc.path, ""); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Open(%s): %v, want %q", filepath.Base(tc.path), err, tc.want)
		}
	}
	// Nothing written, ../evil included (it would be beside the
	// directory the archive is unpacked in).
	if left, _ := os.ReadDir(unpacked); len(left) != 0 {
		t.Errorf("a refused archive left %s in %s", left[0].Name(), unpacked)
	}
}

func writeTar(t *testing.T, path string, files map[string]string) {
	t.Helper()
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	tw := tar.NewWriter(f)
	for n, body := range files {
		tw.WriteHeader(&tar.Header{Name: n, Mode: 0o644, Size: int64(len(body)), Typeflag: tar.TypeReg})
		tw.Write([]byte(body))
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
}

// What scripts/oci-archive.sh writes (the pause, CoreDNS and demo images)
// is an OCI archive Open reads, named as the script was told.
func TestOCIArchiveScript(t *testing.T) {
	bash, err := exec.LookPath("bash")
	if err != nil {
		t.Skipf("no bash to run scripts/oci-archive.sh: %v: SKIPPED", err)
	}
	dir := t.TempDir()
	prog := filepath.Join(dir, "hello")
	os.WriteFile(prog, []byte("#!/bin/sh\necho hello\n"), 0o755)
	out := filepath.Join(dir, "hello.tar")
	cmd := exec.CommandContext(t.Context(), bash, "../../scripts/oci-archive.sh", out, "kiln.dev/hello:1", prog, "--flag")
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("oci-archive.sh: %v\n%s", err, b)
	}
	f, err := Open(out, "")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	cf, err := f.Image.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	layers, err := f.Image.Layers()
	if err != nil {
		t.Fatal(err)
	}
	if f.Name != "kiln.dev/hello:1" || len(layers) != 1 || strings.Join(cf.Config.Entrypoint, " ") != "/hello --flag" {
		t.Errorf("name %q, %d layers, entrypoint %q", f.Name, len(layers), cf.Config.Entrypoint)
	}
}
