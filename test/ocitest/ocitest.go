// Package ocitest writes the image files tests read: OCI image layouts,
// OCI archives (a layout in a tar, what scripts/oci-archive.sh writes) and
// docker save archives, of small random images. A failure is reported
// with t.Fatalf only (a testscript's adapter may implement just that).
package ocitest

import (
	"archive/tar"
	"os"
	"testing"

	"github.com/google/go-containerregistry/pkg/name"
	ggcr "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/random"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

// Named is an image and the name a file records for it.
type Named struct {
	Name  string // kiln.dev/coredns:1.15.0
	Image ggcr.Image
}

// Random is a random image of one layer of size bytes.
func Random(t testing.TB, size int64) ggcr.Image {
	t.Helper()
	img, err := random.Image(size, 1)
	if err != nil {
		t.Fatalf("ocitest: %v", err)
	}
	return img
}

// Digest is an image's manifest digest.
func Digest(t testing.TB, img ggcr.Image) string {
	t.Helper()
	d, err := img.Digest()
	if err != nil {
		t.Fatalf("ocitest: %v", err)
	}
	return d.String()
}

// WriteLayout writes an OCI image layout in dir holding the images, each
// name in the io.containerd.image.name annotation (as containerd and
// buildah record it).
func WriteLayout(t testing.TB, dir string, images ...Named) {
	t.Helper()
	p, err := layout.Write(dir, empty.Index)
	if err != nil {
		t.Fatalf("ocitest: %v", err)
	}
	for _, n := range images {
		if err := p.AppendImage(n.Image, layout.WithAnnotations(map[string]string{"io.containerd.image.name": n.Name})); err != nil {
			t.Fatalf("ocitest: %v", err)
		}
	}
}

// WriteOCIArchive writes an OCI archive at path: the layout WriteLayout
// writes, in a tar.
func WriteOCIArchive(t testing.TB, path string, images ...Named) {
	t.Helper()
	dir, err := os.MkdirTemp("", "ocitest-")
	if err != nil {
		t.Fatalf("ocitest: %v", err)
	}
	defer os.RemoveAll(dir)
	WriteLayout(t, dir, images...)
	f, err := os.Create(path)
	if err != nil {
		t.Fatalf("ocitest: %v", err)
	}
	tw := tar.NewWriter(f)
	if err := tw.AddFS(os.DirFS(dir)); err != nil {
		t.Fatalf("ocitest: %v", err)
	}
	if err := tw.Close(); err != nil {
		t.Fatalf("ocitest: %v", err)
	}
	if err := f.Close(); err != nil {
		t.Fatalf("ocitest: %v", err)
	}
}

// WriteDockerArchive writes a docker save archive at path holding the
// images, each under its name (its RepoTags).
func WriteDockerArchive(t testing.TB, path string, images ...Named) {
	t.Helper()
	refs := map[name.Reference]ggcr.Image{}
	for _, n := range images {
		tag, err := name.NewTag(n.Name)
		if err != nil {
			t.Fatalf("ocitest: %v", err)
		}
		refs[tag] = n.Image
	}
	if err := tarball.MultiRefWriteToFile(path, refs); err != nil {
		t.Fatalf("ocitest: %v", err)
	}
}
