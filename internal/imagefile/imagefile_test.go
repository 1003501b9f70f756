package imagefile

import (
	"archive/tar"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	ggcr "github.com/google/go-containerregistry/pkg/v1"

	"kiln.dev/kiln/test/ocitest"
)

func TestOpenReadsEachForm(t *testing.T) {
	dir := t.TempDir()
	img := ocitest.Named{Name: "kiln.dev/demo:1", Image: ocitest.Random(t, 256)}
	want := ocitest.Digest(t, img.Image)

	save := filepath.Join(dir, "save.tar")
	ocitest.WriteDockerArchive(t, save, img)
	lay := filepath.Join(dir, "layout")
	ocitest.WriteLayout(t, lay, img)
	archive := filepath.Join(dir, "oci.tar")
	ocitest.WriteOCIArchive(t, archive, img)

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
			got, want := digest(t, f), want
			// A docker save archive holds the layers uncompressed: its
			// manifest is another, its image (config) the same.
			if tc.path == save {
				got, want = configOf(t, f.Image), configOf(t, img.Image)
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

func digest(t *testing.T, f *File) string {
	t.Helper()
	d, err := f.Digest()
	if err != nil {
		t.Fatal(err)
	}
	return d.String()
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
	b := ocitest.Random(t, 256)
	archive := filepath.Join(dir, "oci.tar")
	ocitest.WriteOCIArchive(t, archive, ocitest.Named{Name: "app:1", Image: ocitest.Random(t, 256)}, ocitest.Named{Name: "app:2", Image: b})
	_, err := Open(archive, "")
	var nn *NameNeededError
	if !errors.Is(err, ErrNameNeeded) || !errors.As(err, &nn) || nn.Images != 2 || !slices.Equal(nn.Names, []string{"app:1", "app:2"}) {
		t.Fatalf("Open without a name: %v (%+v), want ErrNameNeeded of 2 images, app:1 and app:2", err, nn)
	}
	f, err := Open(archive, "docker.io/library/app:2")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if digest(t, f) != ocitest.Digest(t, b) {
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
	writeTar(t, otherTar, map[string]string{"x": "x"})
	escape := filepath.Join(dir, "escape.tar")
	writeTar(t, escape, map[string]string{"oci-layout": `{"imageLayoutVersion":"1.0.0"}`, "index.json": "{}", "../evil": "x"})

	missing := filepath.Join(dir, "missing.tar")
	for _, tc := range []struct {
		path  string
		is    error
		entry string // the *EntryError's entry, if any
		file  string // the *fs.PathError's file, if any
	}{
		{path: notTar, is: ErrNotImageFile},
		{path: otherTar, is: ErrNotImageTar},
		{path: escape, is: ErrEntryOutside, entry: "../evil"},
		{path: missing, is: fs.ErrNotExist, file: missing},
	} {
		_, err := Open(tc.path, "")
		var ee *EntryError
		var pe *fs.PathError
		switch {
		case !errors.Is(err, tc.is):
			t.Errorf("Open(%s): %v, want %v", filepath.Base(tc.path), err, tc.is)
		case tc.entry != "" && (!errors.As(err, &ee) || ee.Name != tc.entry):
			t.Errorf("Open(%s): %v, want an *EntryError of entry %q", filepath.Base(tc.path), err, tc.entry)
		case tc.file != "" && (!errors.As(err, &pe) || pe.Path != tc.file):
			t.Errorf("Open(%s): %v, want an *fs.PathError of %s", filepath.Base(tc.path), err, tc.file)
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

// OpenNames reads an image recorded under several names (the kube image:
// kiln.dev/kube-apiserver:VERSION, kiln.dev/etcd:VERSION, ...) with every
// name, from each form; several images still need a name.
func TestOpenNamesReadsEveryNameOfOneImage(t *testing.T) {
	dir := t.TempDir()
	img := ocitest.Random(t, 256)
	names := []string{"kiln.dev/kube-apiserver:v1.36.3", "kiln.dev/etcd:v1.36.3", "kiln.dev/kube:v1.36.3"}
	var named []ocitest.Named
	for _, n := range names {
		named = append(named, ocitest.Named{Name: n, Image: img})
	}
	archive := filepath.Join(dir, "oci.tar")
	ocitest.WriteOCIArchive(t, archive, named...)
	lay := filepath.Join(dir, "layout")
	ocitest.WriteLayout(t, lay, named...)
	save := filepath.Join(dir, "save.tar")
	ocitest.WriteDockerArchive(t, save, named...)

	for _, path := range []string{archive, lay, save} {
		f, err := OpenNames(path)
		if err != nil {
			t.Fatalf("OpenNames(%s): %v", filepath.Base(path), err)
		}
		got := slices.Sorted(slices.Values(f.Names))
		if want := slices.Sorted(slices.Values(names)); !slices.Equal(got, want) || f.Name != f.Names[0] || f.Image == nil {
			t.Errorf("OpenNames(%s): name %q, names %q; want %q", filepath.Base(path), f.Name, f.Names, want)
		}
		f.Close()
		// Open, which names one image, still asks which name.
		if _, err := Open(path, ""); !errors.Is(err, ErrNameNeeded) {
			t.Errorf("Open(%s) without a name: %v, want ErrNameNeeded", filepath.Base(path), err)
		}
	}

	two := filepath.Join(dir, "two.tar")
	ocitest.WriteOCIArchive(t, two, ocitest.Named{Name: "a:1", Image: ocitest.Random(t, 64)}, ocitest.Named{Name: "b:1", Image: ocitest.Random(t, 64)})
	var nn *NameNeededError
	if _, err := OpenNames(two); !errors.As(err, &nn) || !errors.Is(err, ErrNameNeeded) || nn.Images != 2 {
		t.Errorf("OpenNames of two images: %v, want ErrNameNeeded of 2 images", err)
	}
}

// scripts/oci-archive.sh -d -l -n -z (the kube image's form): the program
// under DIR with links to it, a gzipped layer, one manifest under every
// name, which OpenNames reads.
func TestOCIArchiveScriptNamesLinksAndGzip(t *testing.T) {
	bash, err := exec.LookPath("bash")
	if err != nil {
		t.Skipf("no bash to run scripts/oci-archive.sh: %v: SKIPPED", err)
	}
	dir := t.TempDir()
	prog := filepath.Join(dir, "kiln-kube")
	os.WriteFile(prog, []byte("#!/bin/sh\necho kube\n"), 0o755)
	out := filepath.Join(dir, "kube.tar")
	cmd := exec.CommandContext(t.Context(), bash, "../../scripts/oci-archive.sh", "-d", "/usr/local/bin", "-l", "kube-apiserver", "-l", "etcd",
		"-n", "kiln.dev/kube-apiserver:v1", "-n", "kiln.dev/etcd:v1", "-z", out, "kiln.dev/kube:v1", prog)
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("oci-archive.sh: %v\n%s", err, b)
	}
	f, err := OpenNames(out)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if want := []string{"kiln.dev/kube:v1", "kiln.dev/kube-apiserver:v1", "kiln.dev/etcd:v1"}; !slices.Equal(f.Names, want) {
		t.Errorf("names %q, want %q", f.Names, want)
	}
	cf, err := f.Image.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	if strings.Join(cf.Config.Entrypoint, " ") != "/usr/local/bin/kiln-kube" || !slices.Equal(cf.Config.Env, []string{"PATH=/usr/local/bin"}) {
		t.Errorf("entrypoint %q, env %q", cf.Config.Entrypoint, cf.Config.Env)
	}
	layers, err := f.Image.Layers()
	if err != nil || len(layers) != 1 {
		t.Fatalf("%d layers: %v", len(layers), err)
	}
	if mt, _ := layers[0].MediaType(); mt != "application/vnd.oci.image.layer.v1.tar+gzip" {
		t.Errorf("layer media type %s, want tar+gzip", mt)
	}
	rc, err := layers[0].Uncompressed() // also checks the diff_id against the uncompressed tar
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	var got []string
	tr := tar.NewReader(rc)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			t.Fatal(err)
		}
		got = append(got, fmt.Sprintf("%s %o %s", h.Name, h.Mode, h.Linkname))
	}
	want := []string{"usr/ 755 ", "usr/local/ 755 ", "usr/local/bin/ 755 ", "usr/local/bin/etcd 777 kiln-kube",
		"usr/local/bin/kiln-kube 755 ", "usr/local/bin/kube-apiserver 777 kiln-kube"}
	if !slices.Equal(got, want) {
		t.Errorf("layer:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}
