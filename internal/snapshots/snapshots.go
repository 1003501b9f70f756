// Package snapshots keeps the etcd snapshots of backups: sealed under
// kilnd's keyring in the project's backup location (package backup), each
// written once, from the upload of the agent that took it, and read back
// to check it and to serve a restore. Its Handler is that upload and
// download on the agent listener (v1.AgentSnapshotPath), to the node
// certificate of the node whose instruction it is.
package snapshots

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"hash"
	"io"
	"path"

	v1 "kiln.dev/kiln/api/v1"
	"kiln.dev/kiln/internal/backup"
	"kiln.dev/kiln/internal/secret"
	"kiln.dev/kiln/internal/store"
)

// Store is what the vault reads: the project (its backup location), its
// cloud accounts (an S3 location's credentials), and the backups.
type Store interface {
	GetProject(ctx context.Context, name string) (*v1.Project, error)
	GetCloudAccount(ctx context.Context, project, name string) (*store.CloudAccount, error)
	GetBackup(ctx context.Context, project, cluster, name string) (*store.Backup, error)
}

// Vault reads and writes backups' snapshots.
type Vault struct {
	Store   Store
	Keyring *secret.Keyring
	// DataDir is kilnd's: a project without a backup location keeps its
	// backups in DataDir/backups.
	DataDir string
}

// ObjectKey is where a backup's sealed snapshot is kept in its location:
// under its project, cluster and the cluster's uid (a cluster made again
// under a name never meets an earlier one's objects).
func ObjectKey(project, cluster, clusterUID, name string) string {
	return path.Join(project, cluster, clusterUID, name+".snapshot")
}

// Location is project's backup location.
func (v *Vault) Location(ctx context.Context, project string) (backup.Location, error) {
	p, err := v.Store.GetProject(ctx, project)
	if err != nil {
		return nil, fmt.Errorf("project %s: %w", project, err)
	}
	return backup.Open(ctx, p.BackupLocation, v.DataDir, func(ctx context.Context, name string) (string, map[string]string, error) {
		a, err := v.Store.GetCloudAccount(ctx, project, name)
		if err != nil {
			return "", nil, fmt.Errorf("cloud account %s of project %s: %w", name, project, err)
		}
		return a.Provider, a.Credentials, nil
	})
}

// ErrElsewhere is what reading a backup kept in another location than
// its project's current one wraps.
var ErrElsewhere = errors.New("the backup is not in the project's backup location")

// moved reports whether b was stored in another location than loc, the
// project's now.
func moved(b *store.Backup, loc backup.Location) bool {
	return b.Location != "" && b.Location != loc.String()
}

// Written is what a snapshot written or read back was: its size and the
// hex of its sha256.
type Written struct {
	Size   int64
	SHA256 string
	// Keys are the ids of the keyring's keys it is sealed under (read
	// back only).
	Keys []string
}

// Write seals the snapshot r into b's object, at once: a reader of the
// location never sees half of it.
func (v *Vault) Write(ctx context.Context, b *store.Backup, r io.Reader) (Written, error) {
	loc, err := v.Location(ctx, b.Project)
	if err != nil {
		return Written{}, err
	}
	d := newDigest(r)
	pr, pw := io.Pipe()
	go func() {
		sw := backup.Seal(pw, v.Keyring, b.Object)
		_, err := io.Copy(sw, d)
		if err == nil {
			err = sw.Close()
		}
		pw.CloseWithError(err)
	}()
	if err := loc.Put(ctx, b.Object, pr); err != nil {
		pr.CloseWithError(err)
		return Written{}, fmt.Errorf("store the snapshot of backup %s in %s: %w", b.Name, loc, err)
	}
	return d.written(), nil
}

// Read opens b's snapshot, unsealed. Reading it to its end fails when it
// is not the snapshot b's record describes (size and sha256): a reader
// must read it to its end before it trusts it.
func (v *Vault) Read(ctx context.Context, b *store.Backup) (io.ReadCloser, error) {
	loc, err := v.Location(ctx, b.Project)
	if err != nil {
		return nil, err
	}
	if moved(b, loc) {
		return nil, fmt.Errorf("%w: backup %s is kept in %s, and project %s's backup location is now %s: set it back to read the backup",
			ErrElsewhere, b.Name, b.Location, b.Project, loc)
	}
	rc, err := loc.Get(ctx, b.Object)
	if err != nil {
		return nil, fmt.Errorf("read the snapshot of backup %s from %s: %w", b.Name, loc, err)
	}
	u := backup.Unseal(rc, v.Keyring, b.Object)
	return &checked{Reader: u, keys: u.Keys, closer: rc, b: b, d: sha256.New()}, nil
}

// Check reads b's snapshot to its end: an error says it is missing, was
// changed, or is not what the record says.
func (v *Vault) Check(ctx context.Context, b *store.Backup) (Written, error) {
	rc, err := v.Read(ctx, b)
	if err != nil {
		return Written{}, err
	}
	defer rc.Close()
	d := newDigest(rc)
	if _, err := io.Copy(io.Discard, d); err != nil {
		return Written{}, err
	}
	w := d.written()
	w.Keys = rc.(*checked).keys()
	return w, nil
}

// Delete removes b's object; one already gone is no error.
func (v *Vault) Delete(ctx context.Context, b *store.Backup) error {
	if b.Object == "" {
		return nil
	}
	loc, err := v.Location(ctx, b.Project)
	if err != nil {
		return err
	}
	if moved(b, loc) {
		return nil // kept where the project no longer points: left there (docs/backups.md)
	}
	if err := loc.Delete(ctx, b.Object); err != nil {
		return fmt.Errorf("delete the snapshot of backup %s from %s: %w", b.Name, loc, err)
	}
	return nil
}

// digest counts and hashes what is read through it.
type digest struct {
	r io.Reader
	h hash.Hash
	n int64
}

func newDigest(r io.Reader) *digest { return &digest{r: r, h: sha256.New()} }

func (d *digest) Read(p []byte) (int, error) {
	n, err := d.r.Read(p)
	d.h.Write(p[:n])
	d.n += int64(n)
	return n, err
}

func (d *digest) written() Written {
	return Written{Size: d.n, SHA256: hex.EncodeToString(d.h.Sum(nil))}
}

// checked is an unsealed snapshot whose end is checked against its
// record.
type checked struct {
	io.Reader
	keys   func() []string
	closer io.Closer
	b      *store.Backup
	d      hash.Hash
	n      int64
}

// ErrMismatch is what reading a snapshot that is not its record's ends
// with.
var ErrMismatch = errors.New("the snapshot is not the one its backup recorded")

// Damaged reports an error of reading a snapshot that is there but is not
// the one recorded: changed, cut short, or sealed for another backup. Any
// other error is of reaching the location.
func Damaged(err error) bool { return errors.Is(err, ErrMismatch) || errors.Is(err, backup.ErrCorrupt) }

func (c *checked) Read(p []byte) (int, error) {
	n, err := c.Reader.Read(p)
	c.d.Write(p[:n])
	c.n += int64(n)
	if c.b.Size > 0 && c.n > c.b.Size {
		return n, fmt.Errorf("%w: backup %s is longer than its %d bytes", ErrMismatch, c.b.Name, c.b.Size)
	}
	if errors.Is(err, io.EOF) && c.b.SHA256 != "" {
		if got := hex.EncodeToString(c.d.Sum(nil)); got != c.b.SHA256 || c.n != c.b.Size {
			return n, fmt.Errorf("%w: backup %s reads %d bytes of sha256 %s, recorded %d bytes of sha256 %s",
				ErrMismatch, c.b.Name, c.n, got, c.b.Size, c.b.SHA256)
		}
	}
	return n, err
}

func (c *checked) Close() error { return c.closer.Close() }

// params decodes an instruction's params.
func params[T any](in *store.Instruction) (T, error) {
	var p T
	err := json.Unmarshal(in.Params, &p)
	return p, err
}
