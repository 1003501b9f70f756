// Package backup keeps clusters' etcd snapshots, sealed, in a project's
// backup location: a directory under kilnd's data dir (DATA_DIR/backups) by
// default, or an S3 bucket reached with an aws cloud account's credentials
// (v1.BackupLocation).
//
// A snapshot is stored as a sealed stream (Seal, Unseal): chunks of the
// snapshot each sealed with kilnd's keyring, bound to the object's
// associated data, their index and whether they are the last, so a stored
// object that was altered, truncated, reordered or copied from another
// backup does not open. Locations store the sealed bytes as they are given.
package backup

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"path/filepath"
	"strings"

	v1 "kiln.dev/kiln/api/v1"
	"kiln.dev/kiln/internal/failure"
	awsprovider "kiln.dev/kiln/internal/provider/aws"
)

// Errors of locations, matched with errors.Is. Each comes inside a
// *failure.Error whose message names the location and says what to do.
var (
	// ErrNotFound: Get of a key the location does not hold.
	ErrNotFound = errors.New("backup object not found")
	// ErrNoSpace: the location's disk is full.
	ErrNoSpace = errors.New("no space left")
	// ErrNoBucket: the S3 location's bucket does not exist.
	ErrNoBucket = errors.New("bucket does not exist")
	// ErrDenied: the cloud account's credentials were refused, or lack a
	// permission on the bucket.
	ErrDenied = errors.New("access denied")
)

// Location is where a project's backups are kept. Keys are slash-separated
// paths ("CLUSTER-UID/BACKUP-ID"), without "." or ".." elements, empty
// elements or a leading slash. Its methods are safe for concurrent use.
type Location interface {
	// Put stores r's bytes (sealed already) as key, atomically: a reader
	// sees the object whole or not at all. An object already stored as key
	// is replaced, whole, by the new one (a step retried stores its backup
	// again under the same key).
	Put(ctx context.Context, key string, r io.Reader) error
	// Get opens the object stored as key; one that is not there is an
	// error matching ErrNotFound.
	Get(ctx context.Context, key string) (io.ReadCloser, error)
	// Delete removes the object stored as key; one that is not there is
	// not an error.
	Delete(ctx context.Context, key string) error
	// String says where the objects are, as v1.Backup.Location does:
	// "directory", or s3://BUCKET/PREFIX.
	String() string
}

// AccountFunc finds the cloud account named name: its provider and its
// credentials, opened.
type AccountFunc func(ctx context.Context, name string) (provider string, creds map[string]string, err error)

// DirectoryName is the directory of dataDir where backups are kept when a
// project has no backup location.
const DirectoryName = "backups"

// Open returns the location loc describes: loc nil or without S3 is the
// directory DirectoryName of dataDir; an S3 location reaches its bucket with
// the credentials of its cloud account (found with account), which must be
// of provider aws, and spools what it uploads in dataDir.
func Open(ctx context.Context, loc *v1.BackupLocation, dataDir string, account AccountFunc) (Location, error) {
	if loc == nil || loc.S3 == nil {
		return Directory(filepath.Join(dataDir, DirectoryName)), nil
	}
	s := loc.S3
	if s.CloudAccount == "" || s.Bucket == "" {
		e := failure.Terminal(v1.CodeInvalidParameter, "the project's S3 backup location needs a cloud account and a bucket")
		e.Target = "backupLocation.s3"
		return nil, e
	}
	provider, creds, err := account(ctx, s.CloudAccount)
	if err != nil {
		return nil, fmt.Errorf("backup location s3://%s: cloud account %q: %w", s.Bucket, s.CloudAccount, err)
	}
	if provider != awsprovider.Name {
		e := failure.Terminal(v1.CodeInvalidParameter, "the project's backup location s3://%s uses cloud account %q, of provider %q: an S3 backup location needs an account of provider %s",
			s.Bucket, s.CloudAccount, provider, awsprovider.Name)
		e.Target = "backupLocation.s3.cloudAccount"
		return nil, e
	}
	return S3(*s, creds, S3Options{TempDir: dataDir})
}

// checkKey refuses a key that is not a clean relative slash-separated path.
func checkKey(key string) error {
	if key == "." || !fs.ValidPath(key) || strings.Contains(key, `\`) {
		return failure.Terminal(v1.CodeInvalidParameter, "backup object key %q is not a relative path of names (no '.', '..', empty names or leading '/')", key)
	}
	return nil
}
