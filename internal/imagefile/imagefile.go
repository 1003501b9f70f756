// Package imagefile reads container images from the files they travel in,
// and reads image names as a container runtime asks a registry for them.
// `kiln image push` sends what it reads; kilnd seeds its registry's system
// images from archives (internal/registry's Seed).
//
// Three forms of file are read:
//
//   - a docker save archive (also podman save's, go-containerregistry's
//     tarball): a tar with manifest.json;
//   - an OCI image layout directory (oci-layout, index.json, blobs/), what
//     skopeo copy ... oci:DIR and buildah push ... oci:DIR write;
//   - an OCI archive: such a layout in a tar, what scripts/oci-archive.sh,
//     `ctr images export` and `docker load` read and write. It is unpacked
//     into a temporary directory, removed by Close.
package imagefile

import (
	"archive/tar"
	"cmp"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/google/go-containerregistry/pkg/name"
	ggcr "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

// ErrNameNeeded: the file holds several images, or records no name or
// several for its one, and no name was asked for. The error says what it
// holds; the caller says how to name one. The error wrapping it is a
// *NameNeededError.
var ErrNameNeeded = errors.New("name the image")

// NameNeededError is ErrNameNeeded with what the file holds: Images
// images (1 for one image of several names or of none), and Names, the
// names it records for them (an OCI layout's entry that records none is
// its digest; none when the one image has no name).
type NameNeededError struct {
	Images int
	Names  []string
}

func (e *NameNeededError) Error() string { return ErrNameNeeded.Error() }

// Is makes errors.Is(err, ErrNameNeeded) hold.
func (e *NameNeededError) Is(target error) bool { return target == ErrNameNeeded }

// Errors of a file that holds no image Open can read; the error wrapping
// one names the file.
var (
	// ErrNotImageFile: the path is neither a directory nor a tar.
	ErrNotImageFile = errors.New("neither an OCI layout directory nor a tar (a docker save or OCI archive)")
	// ErrNotImageTar: the tar is neither a docker save archive nor an OCI
	// archive.
	ErrNotImageTar = errors.New("a tar with neither manifest.json (a docker save archive) nor oci-layout and index.json (an OCI archive)")
	// ErrEntryOutside and ErrEntryKind: an OCI archive's entry is not
	// unpacked; the error is an *EntryError.
	ErrEntryOutside = errors.New("outside the archive")
	ErrEntryKind    = errors.New("neither a file nor a directory")
)

// EntryError is an entry of an OCI archive that is refused: Name is the
// entry as the tar records it, Err ErrEntryOutside or ErrEntryKind.
type EntryError struct {
	Name string
	Err  error
}

func (e *EntryError) Error() string { return fmt.Sprintf("entry %q is %v", e.Name, e.Err) }
func (e *EntryError) Unwrap() error { return e.Err }

// File is one image read from a file: an image, or a multi-platform index.
type File struct {
	// Name is the name asked for, or else the one the file records for
	// the image (a docker save archive's RepoTags, an OCI layout's
	// io.containerd.image.name or org.opencontainers.image.ref.name
	// annotation).
	Name string
	// Names are every name the file records for the image, Name first,
	// when it was read by OpenNames; [Name] when it was read by Open.
	Names []string
	Image ggcr.Image      // set unless Index is
	Index ggcr.ImageIndex // a multi-platform index, pushed whole
	// What is what the file is, for messages: "docker save archive
	// PATH", "OCI layout PATH", "OCI archive PATH".
	What string

	tmp string // the unpacked OCI archive, removed by Close
}

// Close removes what Open unpacked. Image and Index are unreadable after.
func (f *File) Close() error {
	if f.tmp == "" {
		return nil
	}
	return os.RemoveAll(f.tmp)
}

// Digest is the digest of the image's manifest or of the index.
func (f *File) Digest() (ggcr.Hash, error) {
	if f.Index != nil {
		return f.Index.Digest()
	}
	return f.Image.Digest()
}

// Open reads the image of the file or directory at path. want, when set,
// is the NAME:TAG asked for: it chooses among several images and names the
// one read. Close the File when done.
func Open(path, want string) (*File, error) {
	return open(path, want, false)
}

// OpenNames reads the one image of the file or directory at path under
// every name the file records for it (File.Names): an OCI layout or archive
// whose index has an entry per name, each of the same manifest (what
// `ctr images export` writes for an image of several names, and
// scripts/oci-archive.sh -n), or a docker save archive whose one image has
// several RepoTags. A file of several images, or of an image with no name,
// is ErrNameNeeded. Close the File when done.
func OpenNames(path string) (*File, error) {
	return open(path, "", true)
}

// open is Open, or OpenNames when every name is wanted (want is then "").
func open(path, want string, every bool) (*File, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return nil, fmt.Errorf("read the image: %w", err)
	}
	if fi.IsDir() {
		return openLayout(path, path, want, every, "OCI layout "+path)
	}
	entries, err := tarEntries(path)
	if err != nil {
		return nil, fmt.Errorf("%s is %w: %w", path, ErrNotImageFile, err)
	}
	switch {
	case entries["manifest.json"]:
		return openArchive(path, want, every)
	case entries["index.json"] && entries["oci-layout"]:
		return openOCIArchive(path, want, every)
	}
	return nil, fmt.Errorf("%s is %w", path, ErrNotImageTar)
}

// tarEntries lists the names of a tar's entries (cleaned: ./index.json is
// index.json).
func tarEntries(path string) (map[string]bool, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	names := map[string]bool{}
	tr := tar.NewReader(f)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			if len(names) == 0 {
				return nil, errors.New("an empty tar")
			}
			return names, nil
		}
		if err != nil {
			return nil, err
		}
		names[filepath.Clean(h.Name)] = true
	}
}

// openArchive reads a docker save archive.
func openArchive(path, want string, every bool) (*File, error) {
	opener := func() (io.ReadCloser, error) { return os.Open(path) }
	m, err := tarball.LoadManifest(opener)
	if err != nil {
		return nil, fmt.Errorf("read the docker save archive %s: %w", path, err)
	}
	var tags []string
	for _, d := range m {
		tags = append(tags, d.RepoTags...)
	}
	var chosen *name.Tag
	f := &File{Name: want, What: "docker save archive " + path}
	switch {
	case want == "" && len(m) == 1 && (len(m[0].RepoTags) == 1 || every && len(m[0].RepoTags) > 1):
		f.Name = m[0].RepoTags[0]
	case want == "" && len(m) == 1:
		return nil, fmt.Errorf("%s records %d names (%s): %w", path, len(tags), strings.Join(orNone(tags), ", "),
			&NameNeededError{Images: 1, Names: tags})
	case want == "":
		return nil, fmt.Errorf("%s holds %d images (%s): %w", path, len(m), strings.Join(orNone(tags), ", "),
			&NameNeededError{Images: len(m), Names: tags})
	case len(m) > 1:
		t, err := name.NewTag(want)
		if err != nil {
			return nil, err
		}
		chosen = &t
	}
	img, err := tarball.Image(opener, chosen)
	if err != nil {
		return nil, fmt.Errorf("read %s: %w (it holds %s)", path, err, strings.Join(orNone(tags), ", "))
	}
	f.Image = img
	f.Names = []string{f.Name}
	if every {
		f.Names = m[0].RepoTags
	}
	return f, nil
}

func orNone(s []string) []string {
	if len(s) == 0 {
		return []string{"no name"}
	}
	return s
}

// openOCIArchive unpacks an OCI archive into a temporary directory and
// reads the layout there.
func openOCIArchive(path, want string, every bool) (*File, error) {
	tmp, err := os.MkdirTemp("", "kiln-oci-")
	if err != nil {
		return nil, err
	}
	if err := untar(path, tmp); err != nil {
		os.RemoveAll(tmp)
		return nil, fmt.Errorf("unpack the OCI archive %s: %w", path, err)
	}
	f, err := openLayout(tmp, path, want, every, "OCI archive "+path)
	if err != nil {
		os.RemoveAll(tmp)
		return nil, err
	}
	f.tmp = tmp
	return f, nil
}

// untar writes the directories and regular files of the tar at path under
// dir. An entry that would land outside dir, or of another kind (a link, a
// device), is refused.
func untar(path, dir string) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	tr := tar.NewReader(f)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		if !filepath.IsLocal(h.Name) {
			return &EntryError{Name: h.Name, Err: ErrEntryOutside}
		}
		target := filepath.Join(dir, h.Name)
		switch h.Typeflag {
		case tar.TypeDir:
			if err := os.MkdirAll(target, 0o700); err != nil {
				return err
			}
		case tar.TypeReg:
			if err := writeFile(target, tr); err != nil {
				return err
			}
		default:
			return &EntryError{Name: h.Name, Err: ErrEntryKind}
		}
	}
}

func writeFile(path string, r io.Reader) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return err
	}
	w, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return err
	}
	if _, err := io.Copy(w, r); err != nil {
		w.Close()
		return err
	}
	return w.Close()
}

// Annotations of an OCI layout's index that name an image.
const (
	AnnotationContainerdName = "io.containerd.image.name"
	AnnotationRefName        = "org.opencontainers.image.ref.name"
)

// openLayout reads the OCI image layout in dir; shown is its name in
// messages (the archive it was unpacked from).
func openLayout(dir, shown, want string, every bool, what string) (*File, error) {
	p, err := layout.FromPath(dir)
	if err != nil {
		return nil, fmt.Errorf("%s is not an OCI image layout (no oci-layout and index.json): %w", shown, err)
	}
	idx, err := p.ImageIndex()
	if err != nil {
		return nil, fmt.Errorf("read the OCI layout %s: %w", shown, err)
	}
	im, err := idx.IndexManifest()
	if err != nil {
		return nil, fmt.Errorf("read the OCI layout %s: %w", shown, err)
	}
	named := func(d ggcr.Descriptor) string {
		if n := d.Annotations[AnnotationContainerdName]; n != "" {
			return n
		}
		return d.Annotations[AnnotationRefName]
	}
	var names []string
	for _, d := range im.Manifests {
		names = append(names, cmp.Or(named(d), d.Digest.String()))
	}
	var desc *ggcr.Descriptor
	switch {
	case len(im.Manifests) == 0:
		return nil, fmt.Errorf("the OCI layout %s holds no image", shown)
	case len(im.Manifests) == 1 || every && oneManifest(im.Manifests):
		desc = &im.Manifests[0]
	case want == "" && oneManifest(im.Manifests):
		return nil, fmt.Errorf("the OCI layout %s records %d names of its image (%s): %w", shown, len(im.Manifests), strings.Join(names, ", "),
			&NameNeededError{Images: 1, Names: names})
	case want == "":
		return nil, fmt.Errorf("the OCI layout %s holds %d images (%s): %w", shown, len(im.Manifests), strings.Join(names, ", "),
			&NameNeededError{Images: len(im.Manifests), Names: names})
	default:
		wantRef, _ := ParseName(want, true)
		for i, d := range im.Manifests {
			n := named(d)
			if r, err := ParseName(n, true); err == nil && r == wantRef || n == wantRef.Tag {
				desc = &im.Manifests[i]
				break
			}
		}
		if desc == nil {
			return nil, fmt.Errorf("the OCI layout %s holds no image named %s (it holds %s)", shown, want, strings.Join(names, ", "))
		}
	}
	f := &File{Name: want, What: what}
	if f.Name == "" {
		f.Name = named(*desc)
	}
	f.Names = []string{f.Name}
	if every {
		f.Names = nil
		for _, d := range im.Manifests {
			f.Names = append(f.Names, named(d))
		}
	}
	for _, n := range f.Names {
		if n == "" || !strings.ContainsAny(n, ":/") {
			return nil, fmt.Errorf("the OCI layout %s does not record the image's name: %w", shown, &NameNeededError{Images: 1})
		}
	}
	if desc.MediaType.IsIndex() {
		f.Index, err = idx.ImageIndex(desc.Digest)
	} else {
		f.Image, err = idx.Image(desc.Digest)
	}
	if err != nil {
		return nil, fmt.Errorf("read the OCI layout %s: %w", shown, err)
	}
	return f, nil
}

// oneManifest says every entry of an index is the same manifest (an image
// of several names).
func oneManifest(ds []ggcr.Descriptor) bool {
	for _, d := range ds[1:] {
		if d.Digest != ds[0].Digest {
			return false
		}
	}
	return true
}
