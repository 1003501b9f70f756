package backup_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	v1 "kiln.dev/kiln/api/v1"
	"kiln.dev/kiln/internal/backup"
	"kiln.dev/kiln/internal/failure"
)

// roundTrip puts data as key in l, reads it back, deletes it (twice) and
// checks it is gone.
func roundTrip(t *testing.T, l backup.Location, key string, data []byte) {
	t.Helper()
	ctx := t.Context()
	if err := l.Put(ctx, key, bytes.NewReader(data)); err != nil {
		t.Fatalf("Put %s: %v", key, err)
	}
	if got := get(t, l, key); !bytes.Equal(got, data) {
		t.Fatalf("Get %s: %d bytes, not the %d put", key, len(got), len(data))
	}
	// A second Put replaces the object whole.
	again := append(bytes.Clone(data[:len(data)/2]), "again"...)
	if err := l.Put(ctx, key, bytes.NewReader(again)); err != nil {
		t.Fatalf("Put %s again: %v", key, err)
	}
	if got := get(t, l, key); !bytes.Equal(got, again) {
		t.Fatalf("Get %s after a second Put: %d bytes, not the %d put", key, len(got), len(again))
	}
	for range 2 {
		if err := l.Delete(ctx, key); err != nil {
			t.Fatalf("Delete %s: %v", key, err)
		}
	}
	if _, err := l.Get(ctx, key); !errors.Is(err, backup.ErrNotFound) {
		t.Fatalf("Get %s after Delete: %v; want ErrNotFound", key, err)
	}
}

func get(t *testing.T, l backup.Location, key string) []byte {
	t.Helper()
	r, err := l.Get(t.Context(), key)
	if err != nil {
		t.Fatalf("Get %s: %v", key, err)
	}
	defer r.Close()
	b, err := io.ReadAll(r)
	if err != nil {
		t.Fatalf("read %s: %v", key, err)
	}
	return b
}

func TestDirectory(t *testing.T) {
	root := filepath.Join(t.TempDir(), "backups")
	l := backup.Directory(root)
	if l.String() != "directory" {
		t.Errorf("String = %q", l.String())
	}
	if _, err := l.Get(t.Context(), "c1/b1"); !errors.Is(err, backup.ErrNotFound) || failure.From(err).Code != v1.CodeNotFound {
		t.Errorf("Get before the directory exists: %v; want ErrNotFound", err)
	}
	roundTrip(t, l, "c1/b1", randomBytes(300_000, 1))

	// Modes: the objects' 0600, the directories' 0700; no temporary file left.
	if err := l.Put(t.Context(), "c2/sub/b2", strings.NewReader("snapshot")); err != nil {
		t.Fatal(err)
	}
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		want := fs.FileMode(0o600)
		if d.IsDir() {
			want = fs.ModeDir | 0o700
		}
		if fi.Mode() != want {
			t.Errorf("%s has mode %s; want %s", path, fi.Mode(), want)
		}
		if strings.HasPrefix(d.Name(), ".") {
			t.Errorf("%s is left behind", path)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	// A directory on the way to a key is not an object.
	if _, err := l.Get(t.Context(), "c2/sub"); !errors.Is(err, backup.ErrNotFound) {
		t.Errorf("Get of a directory: %v; want ErrNotFound", err)
	}
}

func TestDirectoryBadKeys(t *testing.T) {
	dir := t.TempDir()
	l := backup.Directory(filepath.Join(dir, "backups"))
	ctx := t.Context()
	for _, key := range []string{"", ".", "..", "../b1", "c1/../../b1", "/etc/passwd", "c1//b1", "c1/./b1", "c1/", `c1\..\b1`} {
		if err := l.Put(ctx, key, strings.NewReader("x")); failure.From(err).Code != v1.CodeInvalidParameter {
			t.Errorf("Put %q: %v; want InvalidParameter", key, err)
		}
		if _, err := l.Get(ctx, key); failure.From(err).Code != v1.CodeInvalidParameter {
			t.Errorf("Get %q: %v; want InvalidParameter", key, err)
		}
		if err := l.Delete(ctx, key); failure.From(err).Code != v1.CodeInvalidParameter {
			t.Errorf("Delete %q: %v; want InvalidParameter", key, err)
		}
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 0 {
		t.Errorf("bad keys wrote %v", entries)
	}
}

// A Put whose reader fails leaves nothing, not a part, and returns the
// reader's error; an object already there stays as it was.
func TestDirectoryPutFails(t *testing.T) {
	l := backup.Directory(t.TempDir())
	ctx := t.Context()
	if err := l.Put(ctx, "b1", strings.NewReader("whole")); err != nil {
		t.Fatal(err)
	}
	boom := errors.New("agent went away")
	if err := l.Put(ctx, "b1", io.MultiReader(strings.NewReader("part"), errReader{boom})); !errors.Is(err, boom) {
		t.Errorf("Put from a failing reader: %v", err)
	}
	if got := get(t, l, "b1"); string(got) != "whole" {
		t.Errorf("after a failed Put the object is %q", got)
	}
	cancelled, cancel := context.WithCancel(ctx)
	cancel()
	if err := l.Put(cancelled, "b2", strings.NewReader("x")); !errors.Is(err, context.Canceled) {
		t.Errorf("Put with a cancelled context: %v", err)
	}
	if _, err := l.Get(ctx, "b2"); !errors.Is(err, backup.ErrNotFound) {
		t.Errorf("a cancelled Put left b2: %v", err)
	}
}

type errReader struct{ err error }

func (r errReader) Read([]byte) (int, error) { return 0, r.err }

func TestOpen(t *testing.T) {
	dataDir := t.TempDir()
	ctx := t.Context()
	noAccount := func(context.Context, string) (string, map[string]string, error) {
		t.Error("the account was looked up for a directory location")
		return "", nil, nil
	}
	for _, loc := range []*v1.BackupLocation{nil, {}} {
		l, err := backup.Open(ctx, loc, dataDir, noAccount)
		if err != nil || l.String() != "directory" {
			t.Fatalf("Open(%v) = %v, %v; want the directory", loc, l, err)
		}
		if err := l.Put(ctx, "c1/b1", strings.NewReader("x")); err != nil {
			t.Fatal(err)
		}
		if _, err := os.Stat(filepath.Join(dataDir, "backups", "c1", "b1")); err != nil {
			t.Errorf("the object is not under DATA_DIR/backups: %v", err)
		}
	}

	docker := func(context.Context, string) (string, map[string]string, error) { return "docker", nil, nil }
	loc := &v1.BackupLocation{S3: &v1.S3Location{CloudAccount: "local", Bucket: "kiln-backups"}}
	_, err := backup.Open(ctx, loc, dataDir, docker)
	if e := failure.From(err); e.Code != v1.CodeInvalidParameter || !strings.Contains(e.Message, `"local", of provider "docker"`) {
		t.Errorf("Open with a docker account: %v; want InvalidParameter naming it", err)
	}
	missing := errors.New(`cloud account "local" not found`)
	_, err = backup.Open(ctx, loc, dataDir, func(context.Context, string) (string, map[string]string, error) { return "", nil, missing })
	if !errors.Is(err, missing) {
		t.Errorf("Open with a missing account: %v", err)
	}
	aws := func(context.Context, string) (string, map[string]string, error) {
		return "aws", map[string]string{"accessKeyId": "AKIA", "secretAccessKey": "s"}, nil
	}
	l, err := backup.Open(ctx, &v1.BackupLocation{S3: &v1.S3Location{CloudAccount: "local", Bucket: "kiln-backups", Prefix: "/kiln/"}}, dataDir, aws)
	if err != nil || l.String() != "s3://kiln-backups/kiln" {
		t.Errorf("Open of an S3 location = %v, %v", l, err)
	}
}
