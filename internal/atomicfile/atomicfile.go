// Package atomicfile writes files so that a reader, or the next process after
// a crash, sees the old content or the new, never a part.
package atomicfile

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
)

// Write writes data to a temporary file in path's directory with mode, syncs
// it, renames it over path and syncs the directory.
func Write(path string, data []byte, mode os.FileMode) error {
	tmp, err := writeTemp(path, data, mode)
	if err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	defer os.Remove(tmp) // a no-op once renamed
	if err := os.Rename(tmp, path); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err := syncDir(filepath.Dir(path)); err != nil {
		return fmt.Errorf("write %s: sync dir: %w", path, err)
	}
	return nil
}

// WriteMkdirAll is Write that first makes path's directory, and its parents,
// where missing (mode 0700). Its error making them is os.MkdirAll's (which
// names the directory).
func WriteMkdirAll(path string, data []byte, mode os.FileMode) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return err
	}
	return Write(path, data, mode)
}

// Create writes data to path like Write, but only if path does not exist:
// otherwise it returns an error matching fs.ErrExist and leaves the file as
// it is. Of several processes creating one path at once, exactly one
// succeeds (the file is linked into place, which never replaces).
func Create(path string, data []byte, mode os.FileMode) error {
	tmp, err := writeTemp(path, data, mode)
	if err != nil {
		return fmt.Errorf("create %s: %w", path, err)
	}
	defer os.Remove(tmp)
	if err := os.Link(tmp, path); err != nil {
		return fmt.Errorf("create %s: %w", path, err)
	}
	if err := syncDir(filepath.Dir(path)); err != nil {
		return fmt.Errorf("create %s: sync dir: %w", path, err)
	}
	return nil
}

// writeTemp writes data with mode to a new temporary file beside path,
// synced, and returns its name.
func writeTemp(path string, data []byte, mode os.FileMode) (string, error) {
	f, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+"-*")
	if err != nil {
		return "", err
	}
	_, werr := f.Write(data)
	if err := errors.Join(werr, f.Chmod(mode), f.Sync(), f.Close()); err != nil {
		os.Remove(f.Name())
		return "", err
	}
	return f.Name(), nil
}

// Rename renames oldpath to newpath (in the same directory, replacing it)
// and syncs the directory, so the rename survives a crash.
func Rename(oldpath, newpath string) error {
	if err := os.Rename(oldpath, newpath); err != nil {
		return err
	}
	if err := syncDir(filepath.Dir(newpath)); err != nil {
		return fmt.Errorf("rename %s: sync dir: %w", oldpath, err)
	}
	return nil
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	return errors.Join(d.Sync(), d.Close())
}

// WriteJSON writes v as indented JSON (and a newline) with Write.
func WriteJSON(path string, v any, mode os.FileMode) error {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	return Write(path, append(b, '\n'), mode)
}
