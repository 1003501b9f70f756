package registry

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"
	"strings"
	"time"

	"github.com/distribution/distribution/v3"
	"github.com/distribution/distribution/v3/registry/storage"
	storagedriver "github.com/distribution/distribution/v3/registry/storage/driver"
	"github.com/distribution/reference"
	"github.com/opencontainers/go-digest"

	"kiln.dev/kiln/internal/store"
)

// Garbage collection is Distribution's mark and sweep, with untagged
// manifests removed: deleting a tag (kiln image delete NAME:TAG) leaves a
// manifest nothing tags, and the collection removes it, then every blob
// that no remaining manifest references, then the repositories left with
// no manifest. Before the mark, the repositories of projects that no
// longer exist are removed (Options.Projects), so that their blobs go too.
// It runs after every delete (Kick) and every Options.Interval.
//
// What is younger than Options.Grace is never removed (graceDriver): a
// push uploads its layers, then its config, then the manifest that
// references them (an index's platform manifests before the index), and a
// collection in between must not take them. A manifest write waits for a
// collection in progress in this process (gcMu). What is left is that a
// push which found an old unreferenced blob already there (and did not
// upload it again) can lose it to a collection before its manifest lands:
// the manifest is then refused (MANIFEST_BLOB_UNKNOWN) and the push, run
// again, uploads it.

// Kick asks for a collection soon (after a delete); it never blocks.
func (r *Registry) Kick() {
	select {
	case r.kick <- struct{}{}:
	default:
	}
}

// collectLoop collects after every Kick and every Interval until ctx ends.
func (r *Registry) collectLoop(ctx context.Context) {
	defer close(r.done)
	var tick <-chan time.Time
	if r.opts.Interval > 0 {
		t := time.NewTicker(r.opts.Interval)
		defer t.Stop()
		tick = t.C
	}
	for {
		select {
		case <-ctx.Done():
			return
		case <-r.kick:
		case <-tick:
		}
		if _, err := r.Collect(ctx); err != nil && ctx.Err() == nil {
			r.log.Error("registry: garbage collection", "err", err)
		}
	}
}

// Collected is what a collection removed.
type Collected struct {
	Blobs        int // blobs (layers, configs, manifests) removed from disk
	Repositories int // repositories removed: left with no manifest, or of a project that no longer exists
}

// Collect runs a garbage collection now and says what it removed.
func (r *Registry) Collect(ctx context.Context) (Collected, error) {
	r.gcMu.Lock()
	defer r.gcMu.Unlock()
	var c Collected
	before, err := r.countBlobs(ctx)
	if err != nil {
		return c, err
	}
	gd := graceDriver{StorageDriver: r.driver, grace: r.opts.Grace, now: r.opts.Now}
	if c.Repositories, err = r.removeOrphans(ctx, gd); err != nil {
		return c, err
	}
	err = storage.MarkAndSweep(ctx, gd, r.ns, storage.GCOpts{RemoveUntagged: true, Quiet: true})
	if err != nil && !errors.As(err, new(storagedriver.PathNotFoundError)) {
		return c, fmt.Errorf("mark and sweep: %w", err)
	}
	after, err := r.countBlobs(ctx)
	if err != nil {
		return c, err
	}
	c.Blobs = before - after
	empty, err := r.removeEmpty(ctx, gd)
	c.Repositories += empty
	if err != nil {
		return c, err
	}
	if c.Blobs > 0 || c.Repositories > 0 {
		r.log.Info("registry: garbage collected", "blobs", c.Blobs, "repositories", c.Repositories)
	}
	return c, nil
}

// StoredBytes is the size of every blob on disk (layers, configs and
// manifests, each once however many repositories link it), what the
// registry takes of DATA_DIR: the sum of the blob files' sizes, read from
// the filesystem at each call.
func (r *Registry) StoredBytes() (int64, error) {
	var n int64
	err := filepath.WalkDir(filepath.Join(r.opts.Dir, "docker/registry/v2/blobs"), func(path string, e fs.DirEntry, err error) error {
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				return nil // nothing pushed yet, or a blob collected while we walked
			}
			return err
		}
		if e.Type().IsRegular() {
			info, err := e.Info()
			if errors.Is(err, fs.ErrNotExist) {
				return nil
			}
			if err != nil {
				return err
			}
			n += info.Size()
		}
		return nil
	})
	if err != nil {
		return 0, fmt.Errorf("registry: size of blobs: %w", err)
	}
	return n, nil
}

// countBlobs counts the blobs on disk.
func (r *Registry) countBlobs(ctx context.Context) (int, error) {
	n := 0
	err := r.ns.Blobs().Enumerate(ctx, func(digest.Digest) error { n++; return nil })
	if errors.As(err, new(storagedriver.PathNotFoundError)) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("count blobs: %w", err)
	}
	return n, nil
}

// removeOrphans removes the repositories of projects that do not exist
// (Options.Projects): their blobs are then swept like any garbage.
func (r *Registry) removeOrphans(ctx context.Context, d storagedriver.StorageDriver) (int, error) {
	if r.opts.Projects == nil {
		return 0, nil
	}
	repos, err := r.repositories(ctx)
	if err != nil {
		return 0, fmt.Errorf("list repositories: %w", err)
	}
	gone := map[string]bool{}
	removed := 0
	vacuum := storage.NewVacuum(ctx, d)
	for _, name := range repos {
		project, _, _ := strings.Cut(name, "/")
		if project == System {
			continue
		}
		missing, seen := gone[project]
		if !seen {
			_, err := r.opts.Projects.GetProject(ctx, project)
			if err != nil && !errors.Is(err, store.ErrNotFound) {
				return removed, fmt.Errorf("project %s: %w", project, err)
			}
			missing = err != nil
			gone[project] = missing
		}
		if !missing {
			continue
		}
		if young, err := (graceDriver{StorageDriver: r.driver, grace: r.opts.Grace, now: r.opts.Now}).young(ctx, repositoryPath(name)); err != nil || young {
			continue
		}
		r.log.Info("registry: removing the images of a project that no longer exists", "repository", name)
		if err := vacuum.RemoveRepository(name); err != nil {
			return removed, fmt.Errorf("remove repository %s: %w", name, err)
		}
		removed++
	}
	return removed, nil
}

// removeEmpty removes the repositories that have no manifest left, so
// that the catalog does not list them.
func (r *Registry) removeEmpty(ctx context.Context, d storagedriver.StorageDriver) (int, error) {
	repos, err := r.repositories(ctx)
	if err != nil {
		return 0, fmt.Errorf("list repositories: %w", err)
	}
	removed := 0
	vacuum := storage.NewVacuum(ctx, d)
	for _, name := range repos {
		named, err := reference.WithName(name)
		if err != nil {
			continue
		}
		repo, err := r.ns.Repository(ctx, named)
		if err != nil {
			return removed, err
		}
		ms, err := repo.Manifests(ctx)
		if err != nil {
			return removed, err
		}
		empty := true
		err = ms.(distribution.ManifestEnumerator).Enumerate(ctx, func(digest.Digest) error {
			empty = false
			return storagedriver.ErrFilledBuffer
		})
		if err != nil && !errors.Is(err, storagedriver.ErrFilledBuffer) && !errors.As(err, new(storagedriver.PathNotFoundError)) {
			return removed, fmt.Errorf("repository %s: %w", name, err)
		}
		if !empty {
			continue
		}
		if young, err := (graceDriver{StorageDriver: r.driver, grace: r.opts.Grace, now: r.opts.Now}).young(ctx, repositoryPath(name)); err != nil || young {
			continue
		}
		if err := vacuum.RemoveRepository(name); err != nil {
			return removed, fmt.Errorf("remove repository %s: %w", name, err)
		}
		removed++
	}
	return removed, nil
}

// repositoryPath is where Distribution's filesystem layout keeps a
// repository.
func repositoryPath(name string) string { return "/docker/registry/v2/repositories/" + name }

// graceDriver is the storage driver the sweep deletes through: it leaves
// alone what holds a file younger than the grace.
type graceDriver struct {
	storagedriver.StorageDriver
	grace time.Duration
	now   func() time.Time
}

func (d graceDriver) Delete(ctx context.Context, path string) error {
	young, err := d.young(ctx, path)
	if err != nil {
		return err
	}
	if young {
		return nil
	}
	return d.StorageDriver.Delete(ctx, path)
}

// young reports whether path, or anything under it, was written within
// the grace.
func (d graceDriver) young(ctx context.Context, path string) (bool, error) {
	if d.grace <= 0 {
		return false, nil
	}
	cutoff := d.now().Add(-d.grace)
	fi, err := d.StorageDriver.Stat(ctx, path)
	if errors.As(err, new(storagedriver.PathNotFoundError)) {
		return false, nil
	} else if err != nil {
		return false, err
	}
	if fi.ModTime().After(cutoff) {
		return true, nil
	}
	if !fi.IsDir() {
		return false, nil
	}
	young := false
	err = d.StorageDriver.Walk(ctx, path, func(fi storagedriver.FileInfo) error {
		if fi.ModTime().After(cutoff) {
			young = true
			return storagedriver.ErrFilledBuffer
		}
		return nil
	})
	if err != nil && !errors.Is(err, storagedriver.ErrFilledBuffer) && !errors.As(err, new(storagedriver.PathNotFoundError)) {
		return false, err
	}
	return young, nil
}
