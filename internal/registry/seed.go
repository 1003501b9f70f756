package registry

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"

	"github.com/distribution/distribution/v3"
	"github.com/distribution/distribution/v3/registry/storage"
	"github.com/distribution/reference"
	ggcr "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/types"
	"github.com/opencontainers/go-digest"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"

	"kiln.dev/kiln/internal/imagefile"
)

// Seeding: the system images Kiln builds (CoreDNS, the demo application;
// make system-images) are put into the System namespace by kilnd at start,
// from their archives, with no client and no credential: Seed writes
// through Distribution's storage, as a push through the handler would
// store them.

// Seeded is what Seed did with one name of an archive's image.
type Seeded struct {
	// Ref is the name the archive records: kiln.dev/coredns:1.15.0.
	Ref string
	// Repository and Tag are where it is stored: the name as a node's
	// containerd asks its mirror for it, in System
	// (kiln.system/library/coredns, 1.15.0).
	Repository, Tag string
	// Digest is the image's (or index's) manifest digest.
	Digest string
	// Pushed is false when the tag already named that digest: nothing was
	// written.
	Pushed bool
}

// Seed puts the image of the archive at path into the System namespace,
// under every name the archive records for it: an OCI archive
// (scripts/oci-archive.sh) or a docker save archive, holding one image and
// one or more names (the kube image is kiln.dev/kube-apiserver:VERSION,
// kiln.dev/etcd:VERSION, ...: an index entry per name, all of one
// manifest). Each name is stored as a node asks for it (names.go): the
// registry host dropped, library/ before a name of one component. So
// kiln.dev/coredns:1.15.0 becomes kiln.system/library/coredns:1.15.0, which
// a node whose containerd pulls /v2/coredns/manifests/1.15.0?ns=kiln.dev
// gets through the system-image fallback. It returns one Seeded per name,
// in the archive's order.
//
// Seed is idempotent: a name whose tag already names the image's digest is
// not written again (Pushed false). Otherwise it writes the blobs the
// repository lacks (a blob another name's repository has is mounted from
// there, not copied), then the manifest, then moves the tag.
func (r *Registry) Seed(ctx context.Context, path string) ([]Seeded, error) {
	f, err := imagefile.OpenNames(path)
	if errors.Is(err, imagefile.ErrNameNeeded) {
		return nil, fmt.Errorf("%w (a system image's archive holds one image and records its names)", err)
	} else if err != nil {
		return nil, err
	}
	defer f.Close()
	d, err := f.Digest()
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", path, err)
	}
	var all []Seeded
	var from reference.Named // a repository written before, whose blobs the next ones mount
	for _, name := range f.Names {
		s, repo, err := r.seedOne(ctx, f, path, name, d.String(), from)
		if err != nil {
			return all, err
		}
		all = append(all, s)
		from = repo
	}
	return all, nil
}

// seedOne stores the image of f under name, mounting blobs from the
// repository from when it is set; it returns the repository's name.
func (r *Registry) seedOne(ctx context.Context, f *imagefile.File, path, name, dg string, from reference.Named) (Seeded, reference.Named, error) {
	n, err := imagefile.ParseName(name, true)
	if err != nil {
		return Seeded{}, nil, fmt.Errorf("the name %q in %s: %w", name, path, err)
	}
	s := Seeded{Ref: name, Repository: System + "/" + n.Repository, Tag: n.Tag, Digest: dg}
	named, err := reference.WithName(s.Repository)
	if err != nil {
		return s, nil, fmt.Errorf("the name %q in %s: %w", name, path, err)
	}
	repo, err := r.ns.Repository(ctx, named)
	if err != nil {
		return s, nil, fmt.Errorf("repository %s: %w", s.Repository, err)
	}
	if desc, err := repo.Tags(ctx).Get(ctx, s.Tag); err == nil && desc.Digest.String() == s.Digest {
		return s, named, nil
	}
	// No collection runs between the blobs' writes and the manifest's.
	r.gcMu.RLock()
	defer r.gcMu.RUnlock()
	w := seeder{repo: repo, from: from}
	var desc ocispec.Descriptor
	if f.Index != nil {
		desc, err = w.index(ctx, f.Index)
	} else {
		desc, err = w.image(ctx, f.Image)
	}
	if err != nil {
		return s, nil, fmt.Errorf("seed %s from %s: %w", s.Repository+":"+s.Tag, path, err)
	}
	if err := repo.Tags(ctx).Tag(ctx, s.Tag, desc); err != nil {
		return s, nil, fmt.Errorf("tag %s:%s: %w", s.Repository, s.Tag, err)
	}
	s.Pushed = true
	return s, named, nil
}

// seeder writes an image into one repository.
type seeder struct {
	repo distribution.Repository
	// from, when set, is a repository that may hold the blobs already:
	// they are mounted from it (a link, no copy).
	from reference.Named
}

// image writes an image's config and layers, then its manifest.
func (w seeder) image(ctx context.Context, img ggcr.Image) (ocispec.Descriptor, error) {
	m, err := img.Manifest()
	if err != nil {
		return ocispec.Descriptor{}, err
	}
	config, err := img.RawConfigFile()
	if err != nil {
		return ocispec.Descriptor{}, err
	}
	if err := w.blob(ctx, m.Config, func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(config)), nil }); err != nil {
		return ocispec.Descriptor{}, fmt.Errorf("config: %w", err)
	}
	for _, l := range m.Layers {
		if !l.MediaType.IsDistributable() {
			continue // a foreign layer: pulled from its URLs, not from a registry
		}
		layer, err := img.LayerByDigest(l.Digest)
		if err != nil {
			return ocispec.Descriptor{}, err
		}
		if err := w.blob(ctx, l, layer.Compressed); err != nil {
			return ocispec.Descriptor{}, fmt.Errorf("layer %s: %w", l.Digest, err)
		}
	}
	return w.manifest(ctx, img)
}

// index writes every image and index an index names, then the index.
func (w seeder) index(ctx context.Context, idx ggcr.ImageIndex) (ocispec.Descriptor, error) {
	im, err := idx.IndexManifest()
	if err != nil {
		return ocispec.Descriptor{}, err
	}
	for _, d := range im.Manifests {
		switch {
		case d.MediaType.IsIndex():
			child, err := idx.ImageIndex(d.Digest)
			if err == nil {
				_, err = w.index(ctx, child)
			}
			if err != nil {
				return ocispec.Descriptor{}, fmt.Errorf("index %s: %w", d.Digest, err)
			}
		case d.MediaType.IsImage():
			child, err := idx.Image(d.Digest)
			if err == nil {
				_, err = w.image(ctx, child)
			}
			if err != nil {
				return ocispec.Descriptor{}, fmt.Errorf("image %s: %w", d.Digest, err)
			}
		default:
			return ocispec.Descriptor{}, fmt.Errorf("%s: an index entry of media type %q, neither an image nor an index", d.Digest, d.MediaType)
		}
	}
	return w.manifest(ctx, idx)
}

// manifest writes the manifest of an image or an index (Distribution
// checks that what it references is there).
func (w seeder) manifest(ctx context.Context, m interface {
	RawManifest() ([]byte, error)
	MediaType() (types.MediaType, error)
}) (ocispec.Descriptor, error) {
	raw, err := m.RawManifest()
	if err != nil {
		return ocispec.Descriptor{}, err
	}
	mt, err := m.MediaType()
	if err != nil {
		return ocispec.Descriptor{}, err
	}
	dm, desc, err := distribution.UnmarshalManifest(string(mt), raw)
	if err != nil {
		return ocispec.Descriptor{}, fmt.Errorf("manifest: %w", err)
	}
	ms, err := w.repo.Manifests(ctx)
	if err != nil {
		return ocispec.Descriptor{}, err
	}
	if _, err := ms.Put(ctx, dm); err != nil {
		return ocispec.Descriptor{}, fmt.Errorf("manifest %s: %w", desc.Digest, err)
	}
	return desc, nil
}

// blob writes the blob d unless the repository has it.
func (w seeder) blob(ctx context.Context, d ggcr.Descriptor, open func() (io.ReadCloser, error)) error {
	bs := w.repo.Blobs(ctx)
	dg := digest.Digest(d.Digest.String())
	if _, err := bs.Stat(ctx, dg); err == nil {
		return nil
	} else if !errors.Is(err, distribution.ErrBlobUnknown) {
		return err
	}
	var opts []distribution.BlobCreateOption
	if w.from != nil {
		canonical, err := reference.WithDigest(w.from, dg)
		if err != nil {
			return err
		}
		opts = append(opts, storage.WithMountFrom(canonical))
	}
	bw, err := bs.Create(ctx, opts...)
	if mounted := (distribution.ErrBlobMounted{}); errors.As(err, &mounted) {
		return nil
	} else if err != nil {
		return err
	}
	rc, err := open()
	if err != nil {
		bw.Cancel(ctx)
		return err
	}
	defer rc.Close()
	if _, err := io.Copy(bw, rc); err != nil {
		bw.Cancel(ctx)
		return err
	}
	if _, err := bw.Commit(ctx, ocispec.Descriptor{MediaType: string(d.MediaType), Digest: dg, Size: d.Size}); err != nil {
		bw.Cancel(ctx)
		return err
	}
	return nil
}
