// Package etcdsnaptest has test doubles for the node side of backups: a
// kiln-kube etcd-snapshot that needs no etcd, and the transfers kiln-agent
// gives an executor. Tests that need a real etcd use real kiln-kube.
package etcdsnaptest

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"

	v1 "kiln.dev/kiln/api/v1"
	"kiln.dev/kiln/internal/agent/etcdsnap"
	"kiln.dev/kiln/internal/failure"
)

// Tool stands for kiln-kube etcd-snapshot (its Run is an etcdsnap.Tool):
// save writes Snapshot, status accepts a file that does not start with
// "garbage", restore makes a data dir whose WAL is the snapshot.
type Tool struct {
	Snapshot []byte
	mu       sync.Mutex
	calls    []string
	args     [][]string
}

// Run runs the double.
func (f *Tool) Run(_ context.Context, program string, args ...string) ([]byte, error) {
	f.mu.Lock()
	f.calls = append(f.calls, strings.Join(args[:2], " "))
	f.args = append(f.args, args)
	f.mu.Unlock()
	result := func(b []byte) []byte {
		out, _ := json.Marshal(v1.EtcdSnapshotResult{Size: int64(len(b)), SHA256: Digest(b),
			Etcd: v1.EtcdSnapshotStatus{Hash: 7, Revision: 42, TotalKeys: 3, TotalSize: 4096, Version: "3.6.0"}})
		return append([]byte("a warning\n"), out...)
	}
	failed := func(stderr string) error {
		return &etcdsnap.ToolError{Argv: args, Exited: true, Stderr: stderr, Err: errors.New("exit status 1")}
	}
	switch args[1] {
	case "save":
		return result(f.Snapshot), os.WriteFile(args[2], f.Snapshot, 0o600)
	case "status":
		b, err := os.ReadFile(args[2])
		if err != nil {
			return nil, failed(err.Error())
		}
		if bytes.HasPrefix(b, []byte("garbage")) {
			return nil, failed("kiln-kube etcd-snapshot: " + args[2] + ": not an etcd snapshot: it does not end with the SHA-256 etcd appends")
		}
		return result(b), nil
	case "restore":
		b, err := os.ReadFile(args[2])
		if err != nil {
			return nil, err
		}
		dir := flag(args, "--data-dir")
		if _, err := os.Stat(dir); err == nil {
			return nil, failed("--data-dir exists")
		}
		wal := filepath.Join(dir, "member", "wal")
		if err := os.MkdirAll(wal, 0o700); err != nil {
			return nil, err
		}
		return nil, os.WriteFile(filepath.Join(wal, "0.wal"), b, 0o600)
	}
	return nil, fmt.Errorf("fake kiln-kube: %q", args)
}

// Count is how many times call ("etcd-snapshot save") ran.
func (f *Tool) Count(call string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	n := 0
	for _, c := range f.calls {
		if c == call {
			n++
		}
	}
	return n
}

// Last is the arguments of the last run of call, nil if it did not run.
func (f *Tool) Last(call string) []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	for i := len(f.calls) - 1; i >= 0; i-- {
		if f.calls[i] == call {
			return f.args[i]
		}
	}
	return nil
}

func flag(args []string, name string) string {
	for i, a := range args {
		if a == name && i+1 < len(args) {
			return args[i+1]
		}
	}
	return ""
}

// Transfers is what kiln-agent gives an executor to move snapshots and
// report result data: uploads are kept in Uploads (failing with UploadErr),
// downloads come from Downloads (failing with DownloadErr), data is kept
// in Data. Embed it beside a progress recorder.
type Transfers struct {
	mu          sync.Mutex
	Uploads     map[string][]byte
	UploadErr   error
	Downloads   map[string][]byte
	DownloadErr error
	Data        json.RawMessage
}

// Upload keeps body as path's, checked against size and sum.
func (r *Transfers) Upload(_ context.Context, path string, body io.Reader, size int64, sum string) error {
	b, err := io.ReadAll(body)
	if err != nil {
		return err
	}
	if int64(len(b)) != size || Digest(b) != sum {
		return fmt.Errorf("upload of %d bytes of %s: the body has %d of %s", size, sum, len(b), Digest(b))
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.UploadErr != nil {
		return r.UploadErr
	}
	if r.Uploads == nil {
		r.Uploads = map[string][]byte{}
	}
	r.Uploads[path] = b
	return nil
}

// Download writes path's bytes to w.
func (r *Transfers) Download(_ context.Context, path string, w io.Writer) (int64, string, error) {
	r.mu.Lock()
	b, ok := r.Downloads[path]
	err := r.DownloadErr
	r.mu.Unlock()
	if err != nil {
		return 0, "", err
	}
	if !ok {
		return 0, "", failure.Terminal(v1.CodeNotFound, "no snapshot at %s", path)
	}
	n, err := w.Write(b)
	return int64(n), Digest(b), err
}

// SetData keeps d.
func (r *Transfers) SetData(d json.RawMessage) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.Data = d
}

// Digest is b's SHA-256, hex.
func Digest(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}
