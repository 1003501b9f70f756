package backup

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"

	v1 "kiln.dev/kiln/api/v1"
	"kiln.dev/kiln/internal/atomicfile"
	"kiln.dev/kiln/internal/failure"
)

// directory is a Location in a directory of the local file system.
type directory struct {
	root string
}

// Directory returns the location of the objects under dir, which is made
// (mode 0700, as are the directories of keys) when the first object is put.
// Objects are files of mode 0600.
func Directory(dir string) Location { return &directory{root: dir} }

func (d *directory) String() string { return "directory" }

// path is the file of key.
func (d *directory) path(key string) (string, error) {
	if err := checkKey(key); err != nil {
		return "", err
	}
	return filepath.Join(d.root, filepath.FromSlash(key)), nil
}

// Put writes r to a temporary file beside the object's, syncs it and
// renames it into place.
func (d *directory) Put(ctx context.Context, key string, r io.Reader) error {
	path, err := d.path(key)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return d.fail("put", key, err)
	}
	f, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*.tmp")
	if err != nil {
		return d.fail("put", key, err)
	}
	tmp := f.Name()
	_, cerr := io.Copy(f, readerCtx{ctx, r})
	if err := errors.Join(cerr, f.Chmod(0o600), f.Sync(), f.Close()); err != nil {
		os.Remove(tmp)
		return d.fail("put", key, err)
	}
	if err := atomicfile.Rename(tmp, path); err != nil {
		os.Remove(tmp)
		return d.fail("put", key, err)
	}
	return nil
}

func (d *directory) Get(ctx context.Context, key string) (io.ReadCloser, error) {
	path, err := d.path(key)
	if err != nil {
		return nil, err
	}
	f, err := os.Open(path)
	if err != nil {
		return nil, d.fail("get", key, err)
	}
	if fi, err := f.Stat(); err != nil || fi.IsDir() {
		f.Close()
		if err == nil {
			err = fmt.Errorf("%s is a directory: %w", path, fs.ErrNotExist)
		}
		return nil, d.fail("get", key, err)
	}
	return f, nil
}

func (d *directory) Delete(ctx context.Context, key string) error {
	path, err := d.path(key)
	if err != nil {
		return err
	}
	if err := os.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return d.fail("delete", key, err)
	}
	return nil
}

// fail turns an error of the file system into one a user can act on.
// Errors of the reader given to Put (a context's included) are returned as
// they are.
func (d *directory) fail(op, key string, err error) error {
	var re readError
	switch {
	case errors.As(err, &re):
		return re.err
	case errors.Is(err, fs.ErrNotExist) && op == "get":
		e := failure.Terminal(v1.CodeNotFound, "backup object %s is not in the backup directory %s", key, d.root)
		e.Err = fmt.Errorf("%w: %w", ErrNotFound, err)
		return e
	case errors.Is(err, syscall.ENOSPC) || errors.Is(err, syscall.EDQUOT):
		e := failure.Terminal(v1.CodeQuotaExceeded, "no space left on the disk of the backup directory %s for backup object %s: free space there, or give the project an S3 backup location", d.root, key)
		e.Err = fmt.Errorf("%w: %w", ErrNoSpace, err)
		return e
	}
	return fmt.Errorf("%s backup object %s in directory %s: %w", op, key, d.root, err)
}

// readerCtx reads r until ctx ends; its errors are readErrors, told apart
// from the file system's.
type readerCtx struct {
	ctx context.Context
	r   io.Reader
}

func (r readerCtx) Read(p []byte) (int, error) {
	if err := r.ctx.Err(); err != nil {
		return 0, readError{err}
	}
	n, err := r.r.Read(p)
	if err != nil && err != io.EOF {
		err = readError{err}
	}
	return n, err
}

// readError is an error of the reader an object is put from.
type readError struct{ err error }

func (e readError) Error() string { return e.err.Error() }
func (e readError) Unwrap() error { return e.err }
