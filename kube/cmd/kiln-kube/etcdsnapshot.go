package main

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
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime/debug"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	"go.etcd.io/etcd/client/pkg/v3/transport"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/etcdutl/v3/snapshot"
	"go.uber.org/zap"
	"google.golang.org/grpc/grpclog"
)

// snapshotResult is what `etcd-snapshot save` and `etcd-snapshot status` print, one JSON line:
// kiln's v1.EtcdSnapshotResult (api/v1, which this module does not import), field for field.
type snapshotResult struct {
	Size   int64          `json:"size"`
	SHA256 string         `json:"sha256"`
	Etcd   snapshotStatus `json:"etcd"`
}

// snapshotStatus is kiln's v1.EtcdSnapshotStatus: etcdutl's snapshot.Status.
type snapshotStatus struct {
	Hash      uint32 `json:"hash"`
	Revision  int64  `json:"revision"`
	TotalKeys int    `json:"totalKeys"`
	TotalSize int64  `json:"totalSize"`
	Version   string `json:"version,omitempty"`
}

// errNotSnapshot is wrapped by status's error when the file is no complete etcd snapshot.
var errNotSnapshot = errors.New("not an etcd snapshot")

// runEtcdSnapshot is `kiln-kube etcd-snapshot`: it prints its error on stderr and exits 1.
func runEtcdSnapshot() int {
	// The client's connection warnings (a closed connection after a save): its errors are the
	// command's.
	grpclog.SetLoggerV2(grpclog.NewLoggerV2(io.Discard, io.Discard, os.Stderr))
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	cmd := newEtcdSnapshotCommand()
	if err := cmd.ExecuteContext(ctx); err != nil {
		fmt.Fprintf(os.Stderr, "kiln-kube etcd-snapshot: %v\n", err)
		return 1
	}
	return 0
}

// newEtcdSnapshotCommand is etcdutl's snapshot save, status and restore
// (go.etcd.io/etcd/etcdutl/v3/snapshot, the version of the embedded etcd), for Kiln's backups:
// save and status print the snapshot's size, SHA-256 and etcd's status of it as one JSON line;
// restore makes a new data directory, never over an existing one.
func newEtcdSnapshotCommand() *cobra.Command {
	root := &cobra.Command{
		Use:           "etcd-snapshot",
		Short:         "etcd snapshots: save one from a member, check one, restore one into a new data directory",
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.CompletionOptions.DisableDefaultCmd = true
	root.AddCommand(newSnapshotSaveCommand(), newSnapshotStatusCommand(), newSnapshotRestoreCommand(), newSnapshotBoltStatusCommand())
	return root
}

func newSnapshotSaveCommand() *cobra.Command {
	var (
		endpoints, cacert, cert, key string
		timeout                      time.Duration
	)
	cmd := &cobra.Command{
		Use:   "save FILE",
		Short: "save a snapshot of the member at --endpoints into FILE and print its size, SHA-256 and status (JSON)",
		Args:  cobra.ExactArgs(1),
		RunE: func(c *cobra.Command, args []string) error {
			ctx, cancel := context.WithTimeout(c.Context(), timeout)
			defer cancel()
			res, err := saveSnapshot(ctx, args[0], endpoints, transport.TLSInfo{CertFile: cert, KeyFile: key, TrustedCAFile: cacert})
			if err != nil {
				return err
			}
			return printJSON(c.OutOrStdout(), res)
		},
	}
	fs := cmd.Flags()
	fs.StringVar(&endpoints, "endpoints", "http://127.0.0.1:2379", "the client URL of the one member to take the snapshot from")
	fs.StringVar(&cacert, "cacert", "", "CA of the member's serving certificate")
	fs.StringVar(&cert, "cert", "", "client certificate")
	fs.StringVar(&key, "key", "", "client key")
	fs.DurationVar(&timeout, "timeout", 5*time.Minute, "give up when the snapshot is not saved within this time")
	return cmd
}

func newSnapshotStatusCommand() *cobra.Command {
	var skipHashCheck bool
	cmd := &cobra.Command{
		Use:   "status FILE",
		Short: "check the snapshot FILE and print its size, SHA-256 and status (JSON); exit 1 if it is no complete snapshot",
		Args:  cobra.ExactArgs(1),
		RunE: func(c *cobra.Command, args []string) error {
			res, err := snapshotFileStatus(args[0], skipHashCheck)
			if err != nil {
				return err
			}
			return printJSON(c.OutOrStdout(), res)
		},
	}
	cmd.Flags().BoolVar(&skipHashCheck, "skip-hash-check", false,
		"accept a file without the SHA-256 that etcd appends to a snapshot (a db file copied from a data directory)")
	return cmd
}

// restoreOptions are the flags of `etcd-snapshot restore`, named as etcdutl's.
type restoreOptions struct {
	name, dataDir, initialCluster, token, peerURLs string
	skipHashCheck, markCompacted                   bool
	bumpRevision                                   uint64
}

func newSnapshotRestoreCommand() *cobra.Command {
	var o restoreOptions
	cmd := &cobra.Command{
		Use: "restore FILE",
		Short: "restore the snapshot FILE into --data-dir, which must not exist, as member --name of a new cluster " +
			"--initial-cluster",
		Args: cobra.ExactArgs(1),
		RunE: func(c *cobra.Command, args []string) error {
			if err := restoreSnapshot(args[0], o); err != nil {
				return err
			}
			fmt.Fprintf(c.ErrOrStderr(), "kiln-kube etcd-snapshot: restored %s into %s as member %s of %s\n",
				args[0], o.dataDir, o.name, o.initialCluster)
			return nil
		},
	}
	fs := cmd.Flags()
	fs.StringVar(&o.name, "name", "default", "the member's name")
	fs.StringVar(&o.dataDir, "data-dir", "", "the data directory to make (it must not exist)")
	fs.StringVar(&o.initialCluster, "initial-cluster", "", "the new cluster's members: name=peerURL,... (default ${name}=${initial-advertise-peer-urls})")
	fs.StringVar(&o.token, "initial-cluster-token", "etcd-cluster", "the new cluster's token")
	fs.StringVar(&o.peerURLs, "initial-advertise-peer-urls", "http://localhost:2380", "the member's peer URLs (comma-separated)")
	fs.BoolVar(&o.skipHashCheck, "skip-hash-check", false, "accept a snapshot without its SHA-256 (a db file copied from a data directory)")
	fs.Uint64Var(&o.bumpRevision, "bump-revision", 0, "add this to the latest revision, so that no revision a client saw before is reused (needs --mark-compacted)")
	fs.BoolVar(&o.markCompacted, "mark-compacted", false, "mark the latest revision compacted: watches of older revisions fail and clients list again (needs --bump-revision)")
	return cmd
}

// saveSnapshot saves a snapshot of the one member at endpoint into path (etcd streams it and
// appends its SHA-256; it is written to path.part, synced, then renamed) and returns its status.
func saveSnapshot(ctx context.Context, path, endpoint string, tlsInfo transport.TLSInfo) (snapshotResult, error) {
	if endpoint == "" || strings.Contains(endpoint, ",") {
		return snapshotResult{}, fmt.Errorf("--endpoints %q: give the client URL of exactly one member", endpoint)
	}
	cfg := clientv3.Config{Endpoints: []string{endpoint}, DialTimeout: 10 * time.Second, Logger: zap.NewNop()}
	if tlsInfo.CertFile != "" || tlsInfo.KeyFile != "" || tlsInfo.TrustedCAFile != "" {
		tlsConfig, err := tlsInfo.ClientConfig()
		if err != nil {
			return snapshotResult{}, fmt.Errorf("client TLS: %w", err)
		}
		cfg.TLS = tlsConfig
	}
	if _, err := snapshot.NewV3(zap.NewNop()).Save(ctx, cfg, path); err != nil {
		return snapshotResult{}, fmt.Errorf("save a snapshot of %s into %s: %w", endpoint, path, err)
	}
	return snapshotFileStatus(path, false)
}

// snapshotFileStatus checks the snapshot at path and returns its size, SHA-256 and etcd's
// status of it. Unless skipHashCheck, the file must end with the SHA-256 of what precedes it, as
// etcd appends it to a snapshot: a truncated or altered file fails here, before bbolt reads it.
// A file bbolt cannot read, or whose pages do not check, is no snapshot either. Such errors wrap
// errNotSnapshot.
func snapshotFileStatus(path string, skipHashCheck bool) (res snapshotResult, err error) {
	f, err := os.Open(path)
	if err != nil {
		return res, err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return res, err
	}
	if !st.Mode().IsRegular() {
		return res, fmt.Errorf("%s: %w: not a regular file", path, errNotSnapshot)
	}
	res.Size = st.Size()
	whole, body := sha256.New(), sha256.New()
	hasHash := hasSnapshotHash(res.Size)
	n := res.Size
	if hasHash {
		n -= sha256.Size
	}
	if _, err := io.CopyN(io.MultiWriter(whole, body), f, n); err != nil {
		return res, fmt.Errorf("read %s: %w", path, err)
	}
	if hasHash {
		trailer := make([]byte, sha256.Size)
		if _, err := io.ReadFull(f, trailer); err != nil {
			return res, fmt.Errorf("read %s: %w", path, err)
		}
		whole.Write(trailer)
		if got := body.Sum(nil); string(got) != string(trailer) && !skipHashCheck {
			return res, fmt.Errorf("%s: %w: its content does not match the SHA-256 it ends with (truncated or altered)", path, errNotSnapshot)
		}
	} else if !skipHashCheck {
		return res, fmt.Errorf("%s: %w: it does not end with the SHA-256 etcd appends to a snapshot (truncated, or not a snapshot; "+
			"--skip-hash-check takes a db file copied from a data directory)", path, errNotSnapshot)
	}
	res.SHA256 = hex.EncodeToString(whole.Sum(nil))
	s, err := boltStatus(path)
	if err != nil {
		return res, fmt.Errorf("%s: %w: %w", path, errNotSnapshot, err)
	}
	res.Etcd = snapshotStatus{Hash: s.Hash, Revision: s.Revision, TotalKeys: s.TotalKey, TotalSize: s.TotalSize, Version: s.Version}
	return res, nil
}

// hasSnapshotHash says whether a file of size n ends with a SHA-256, as etcdutl tells (its
// database is a whole number of 512-byte sectors).
func hasSnapshotHash(n int64) bool { return n%512 == sha256.Size }

// boltStatus is etcdutl's Status of the file at path, read by a child process
// (`etcd-snapshot bolt-status`): bbolt may panic on a corrupt file in a goroutine of its own
// (its page check), where no recover reaches, so a crash of the child is turned into an error
// here, saying so.
func boltStatus(path string) (snapshot.Status, error) {
	var s snapshot.Status
	self, err := os.Executable()
	if err != nil {
		return s, err
	}
	cmd := exec.Command(self, "etcd-snapshot", "bolt-status", path)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err = cmd.Run()
	var exit *exec.ExitError
	switch {
	case err == nil:
		if err := json.Unmarshal(stdout.Bytes(), &s); err != nil {
			return s, fmt.Errorf("etcd-snapshot bolt-status printed %q: %w", stdout.String(), err)
		}
		return s, nil
	case errors.As(err, &exit) && exit.ExitCode() == 1:
		// Its error, which it printed as runEtcdSnapshot does.
		msg := strings.TrimSpace(stderr.String())
		if i := strings.LastIndexByte(msg, '\n'); i >= 0 {
			msg = msg[i+1:]
		}
		return s, errors.New(strings.TrimPrefix(msg, "kiln-kube etcd-snapshot: "))
	case errors.As(err, &exit):
		first, _, _ := strings.Cut(strings.TrimSpace(stderr.String()), "\n")
		return s, fmt.Errorf("reading it crashed bbolt (%s)", first)
	default:
		return s, err
	}
}

// newSnapshotBoltStatusCommand is the child of boltStatus: etcdutl's Status as JSON, with the
// faults bbolt may meet in this goroutine (it maps the file) turned into errors.
func newSnapshotBoltStatusCommand() *cobra.Command {
	return &cobra.Command{
		Use:    "bolt-status FILE",
		Hidden: true,
		Args:   cobra.ExactArgs(1),
		RunE: func(c *cobra.Command, args []string) (err error) {
			defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
			defer func() {
				if r := recover(); r != nil {
					err = fmt.Errorf("reading it failed: %v", r)
				}
			}()
			s, err := snapshot.NewV3(zap.NewNop()).Status(args[0])
			if err != nil {
				return err
			}
			return printJSON(c.OutOrStdout(), s)
		},
	}
}

// restoreSnapshot restores the snapshot at path into a new data directory, o.dataDir. It
// restores into o.dataDir.part first and renames it into place, so a data directory is either
// whole or absent.
func restoreSnapshot(path string, o restoreOptions) error {
	if o.dataDir == "" {
		return errors.New("--data-dir is required")
	}
	if _, err := os.Lstat(o.dataDir); err == nil {
		return fmt.Errorf("--data-dir %s exists: restore makes a new data directory, never over one", o.dataDir)
	} else if !errors.Is(err, os.ErrNotExist) {
		return err
	}
	if (o.bumpRevision > 0) != o.markCompacted {
		return errors.New("--bump-revision and --mark-compacted go together")
	}
	var peers []string
	for _, u := range strings.Split(o.peerURLs, ",") {
		peers = append(peers, strings.TrimSpace(u))
	}
	if o.initialCluster == "" {
		o.initialCluster = o.name + "=" + peers[0]
	}
	// A clear error for a file that is no snapshot, before etcdutl reads it.
	if _, err := snapshotFileStatus(path, o.skipHashCheck); err != nil {
		return err
	}
	part := filepath.Clean(o.dataDir) + ".part"
	if err := os.RemoveAll(part); err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(part), 0o700); err != nil {
		return err
	}
	err := restorePart(snapshot.RestoreConfig{
		SnapshotPath:        path,
		Name:                o.name,
		OutputDataDir:       part,
		PeerURLs:            peers,
		InitialCluster:      o.initialCluster,
		InitialClusterToken: o.token,
		SkipHashCheck:       o.skipHashCheck,
		RevisionBump:        o.bumpRevision,
		MarkCompacted:       o.markCompacted,
	})
	if err != nil {
		_ = os.RemoveAll(part)
		return fmt.Errorf("restore %s: %w", path, err)
	}
	if err := os.Rename(part, o.dataDir); err != nil {
		return fmt.Errorf("restore %s: %w", path, err)
	}
	return syncDir(filepath.Dir(o.dataDir))
}

// restorePart is etcdutl's Restore, with the faults and panics bbolt may meet in a corrupt
// file turned into errors.
func restorePart(cfg snapshot.RestoreConfig) (err error) {
	defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("%s: %w: reading it failed: %v", cfg.SnapshotPath, errNotSnapshot, r)
		}
	}()
	return snapshot.NewV3(zap.NewNop()).Restore(cfg)
}

// syncDir makes a rename in dir durable.
func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}

func printJSON(w io.Writer, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	_, err = fmt.Fprintf(w, "%s\n", b)
	return err
}
