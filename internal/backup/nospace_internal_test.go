package backup

import (
	"errors"
	"io/fs"
	"strings"
	"syscall"
	"testing"

	v1 "kiln.dev/kiln/api/v1"
	"kiln.dev/kiln/internal/failure"
)

// A full disk (which a test cannot make without mounting one) is an error
// naming the directory and saying what to do.
func TestNoSpace(t *testing.T) {
	full := &fs.PathError{Op: "write", Path: "/data/backups/c1/.b1.123.tmp", Err: syscall.ENOSPC}
	d := &directory{root: "/data/backups"}
	err := d.fail("put", "c1/b1", full)
	e := failure.From(err)
	if !errors.Is(err, ErrNoSpace) || !errors.Is(err, syscall.ENOSPC) || e.Code != v1.CodeQuotaExceeded ||
		!strings.Contains(e.Message, "no space left on the disk of the backup directory /data/backups") {
		t.Errorf("directory: %v", err)
	}
	l := &s3Location{loc: v1.S3Location{Bucket: "kiln-backups", CloudAccount: "local"}, opts: S3Options{TempDir: "/data"}}
	err = l.spoolFailed("c1/b1", full)
	e = failure.From(err)
	if !errors.Is(err, ErrNoSpace) || e.Code != v1.CodeQuotaExceeded ||
		!strings.Contains(e.Message, "no space left on the disk of /data to stage backup object c1/b1 before its upload to s3://kiln-backups") {
		t.Errorf("s3: %v", err)
	}
}
