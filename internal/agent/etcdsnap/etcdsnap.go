// Package etcdsnap is the node side of backups that every distribution
// shares (api/v1 backups.go, docs/agent-protocol.md): it saves a snapshot
// of an etcd member with `kiln-kube etcd-snapshot save` and uploads it,
// downloads and checks a snapshot before a restore (stage), and restores a
// staged snapshot into a member's data dir. What is distribution's own,
// where the member is and how its control plane stops and starts, stays
// with the distribution's executor (internal/agent/distro/...).
//
// Every action is idempotent: a staged file with the right digest is not
// downloaded again, a data dir marked by the same restore is not restored
// again, and a data dir moved aside is told from one made since.
package etcdsnap

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"time"

	v1 "kiln.dev/kiln/api/v1"
	"kiln.dev/kiln/internal/agent"
	"kiln.dev/kiln/internal/atomicfile"
	"kiln.dev/kiln/internal/failure"
	"kiln.dev/kiln/internal/names"
)

// Steps of the backup instructions, reported through Reporter.Progress.
const (
	StepSnapshotEtcd     = "snapshot-etcd"
	StepUploadSnapshot   = "upload-snapshot"
	StepDownloadSnapshot = "download-snapshot"
	StepCheckSnapshot    = "check-snapshot"
	StepStopControlPlane = "stop-control-plane"
	StepRestoreEtcd      = "restore-etcd"
)

const (
	// DirBackup, under a node's root, holds snapshots being saved,
	// uploaded or staged.
	DirBackup = "var/lib/kiln-backup"
	// RestoreMarker, in etcd's data dir, says which restore made it.
	RestoreMarker = "kiln-restore.json"
	// AsideMarker, in a data dir moved aside, names the restored dir that
	// replaced it (restoreMark.Nonce).
	AsideMarker = "kiln-moved-aside"
	// RestoreRevisionBump is added to the restored revision, which is
	// marked compacted: no revision a client of the cluster before saw is
	// reused, and their watches fail as compacted, so they list again
	// (etcd's advice for a Kubernetes restore). Every member restores with
	// the same.
	RestoreRevisionBump = 1_000_000_000
	// SnapshotTimeout bounds a save, an upload or a download.
	SnapshotTimeout = 30 * time.Minute
	// logTailLines is how many of a tool's last lines of stderr an error
	// carries.
	logTailLines = 12
)

// Tool runs a program and returns its standard output; its error is a
// *ToolError.
type Tool func(ctx context.Context, program string, args ...string) ([]byte, error)

// ToolError is a program that did not run or did not succeed.
type ToolError struct {
	Argv   []string
	Exited bool   // it ran and exited non-zero: what it said is in Stderr
	Stderr string // its last lines
	Err    error
}

func (e *ToolError) Error() string {
	if e.Stderr != "" {
		return fmt.Sprintf("%s: %v: %s", strings.Join(e.Argv, " "), e.Err, e.Stderr)
	}
	return fmt.Sprintf("%s: %v", strings.Join(e.Argv, " "), e.Err)
}

func (e *ToolError) Unwrap() error { return e.Err }

// exited reports whether err is a tool that ran and failed: what it says
// is about its input, not about this node.
func exited(err error) bool {
	var te *ToolError
	return errors.As(err, &te) && te.Exited
}

// ToolMessage is what err says to a user: what the program said when it
// ran and failed, else the whole error.
func ToolMessage(err error) string {
	var te *ToolError
	if errors.As(err, &te) && te.Exited && te.Stderr != "" {
		return te.Stderr
	}
	return err.Error()
}

// RunTool is the Tool of a real node.
func RunTool(ctx context.Context, program string, args ...string) ([]byte, error) {
	cmd := exec.CommandContext(ctx, program, args...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	if err != nil {
		var exit *exec.ExitError
		return stdout.Bytes(), &ToolError{Argv: append([]string{filepath.Base(program)}, args...), Exited: errors.As(err, &exit),
			Stderr: Tail(stderr.String(), logTailLines), Err: err}
	}
	return stdout.Bytes(), nil
}

// Tail is the last n lines of s.
func Tail(s string, n int) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// Member is a node's etcd member: the kiln-kube that saves and restores
// its snapshots, and what its command line says.
type Member struct {
	Binary    string
	Name      string
	DataDir   string
	ClientURL string
	PeerURL   string
	// TLS are kiln-kube etcd-snapshot save's flags for a client
	// certificate etcd accepts (--cacert, --cert, --key).
	TLS []string
}

// Node does a node's snapshot work. Root is the node's root (DirBackup is
// under it); Tool is RunTool when nil.
type Node struct {
	Root   string
	Tool   Tool
	Logger *slog.Logger
}

func (n *Node) tool(ctx context.Context, program string, args ...string) ([]byte, error) {
	if n.Tool == nil {
		return RunTool(ctx, program, args...)
	}
	return n.Tool(ctx, program, args...)
}

func (n *Node) logger() *slog.Logger {
	if n.Logger == nil {
		return slog.New(slog.DiscardHandler)
	}
	return n.Logger
}

// Capabilities returns what of report a backup instruction needs.
func Capabilities(report agent.Reporter) (agent.Transferer, agent.DataReporter, error) {
	tr, ok := report.(agent.Transferer)
	dr, ok2 := report.(agent.DataReporter)
	if !ok || !ok2 {
		return nil, nil, failure.Terminal(v1.CodeInternal, "this agent cannot transfer snapshots (its reporter has no Upload, Download or SetData)")
	}
	return tr, dr, nil
}

// RunStep reports step name around fn: Running, then Succeeded with fn's
// message or Failed with its error's.
func RunStep(ctx context.Context, report agent.Reporter, name string, fn func() (string, error)) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	report.Progress(name, v1.StepRunning, "")
	msg, err := fn()
	if err != nil {
		return Fail(report, name, err)
	}
	report.Progress(name, v1.StepSucceeded, msg)
	return nil
}

// Step is a named step of RunSteps.
type Step struct {
	Name string
	Fn   func() (string, error)
}

// RunSteps runs steps in order with RunStep, up to the first that fails.
func RunSteps(ctx context.Context, report agent.Reporter, steps ...Step) error {
	for _, st := range steps {
		if err := RunStep(ctx, report, st.Name, st.Fn); err != nil {
			return err
		}
	}
	return nil
}

// Fail reports step as Failed with err's message (a *failure.Error's
// Message) and returns err.
func Fail(report agent.Reporter, step string, err error) error {
	msg := err.Error()
	var fe *failure.Error
	if errors.As(err, &fe) {
		msg = fe.Message
	}
	report.Progress(step, v1.StepFailed, msg)
	return err
}

// decodeParams reads an instruction's params (unknown fields are left for
// newer agents) and checks its backup's name, which names files here.
func decodeParams(in v1.Instruction, p any, backup func() string) error {
	if err := json.Unmarshal(in.Params, p); err != nil {
		return &failure.Error{Code: v1.CodeInvalidParameter, Err: err, Message: fmt.Sprintf("%s params: %v", in.Kind, err)}
	}
	if b := backup(); !names.IsDNSLabel(b, 253) {
		return failure.Terminal(v1.CodeInvalidParameter, "%s params: backup %q is not a name", in.Kind, b)
	}
	return nil
}

// SnapshotParams reads an etcd-snapshot instruction's params.
func SnapshotParams(in v1.Instruction) (v1.EtcdSnapshotParams, error) {
	var p v1.EtcdSnapshotParams
	err := decodeParams(in, &p, func() string { return p.Backup })
	return p, err
}

// RestoreParams checks an etcd-restore instruction's params for its phase.
func RestoreParams(in v1.Instruction) (v1.EtcdRestoreParams, error) {
	var p v1.EtcdRestoreParams
	if err := decodeParams(in, &p, func() string { return p.Backup }); err != nil {
		return p, err
	}
	switch p.Phase {
	case v1.RestoreStage, v1.RestoreEtcd:
		if p.Size <= 0 || !sha256Hex.MatchString(p.SHA256) {
			return p, failure.Terminal(v1.CodeInvalidParameter, "etcd-restore params: the snapshot's size %d or sha256 %q is not one", p.Size, p.SHA256)
		}
		if p.Phase == v1.RestoreEtcd && (p.InitialCluster == "" || p.Token == "") {
			return p, failure.Terminal(v1.CodeInvalidParameter, "etcd-restore params: phase %s needs initialCluster and token", p.Phase)
		}
	case v1.RestoreStop, v1.RestoreStart, v1.RestoreKubelet:
	default:
		return p, failure.Terminal(v1.CodeInvalidParameter, "etcd-restore params: phase %q: want %s, %s, %s, %s or %s",
			p.Phase, v1.RestoreStage, v1.RestoreStop, v1.RestoreEtcd, v1.RestoreStart, v1.RestoreKubelet)
	}
	return p, nil
}

var sha256Hex = regexp.MustCompile(`^[0-9a-f]{64}$`)

// ParseResult reads the JSON line that kiln-kube etcd-snapshot save and
// status print.
func ParseResult(out []byte) (v1.EtcdSnapshotResult, error) {
	var res v1.EtcdSnapshotResult
	line := bytes.TrimSpace(out)
	if i := bytes.LastIndexByte(line, '\n'); i >= 0 {
		line = line[i+1:]
	}
	if err := json.Unmarshal(line, &res); err != nil {
		return res, fmt.Errorf("kiln-kube etcd-snapshot printed %q: %w", Tail(string(out), 3), err)
	}
	if res.Size <= 0 || len(res.SHA256) != sha256.Size*2 {
		return res, fmt.Errorf("kiln-kube etcd-snapshot printed %q: no size or digest", Tail(string(out), 3))
	}
	return res, nil
}

// Snapshot carries out the etcd-snapshot instruction in for backup: a
// snapshot of member m, uploaded to the controller; its size, digest and
// status are the result's data.
func (n *Node) Snapshot(ctx context.Context, in v1.Instruction, backup string, m Member, report agent.Reporter) error {
	tr, dr, err := Capabilities(report)
	if err != nil {
		return err
	}
	n.logger().Info("taking a snapshot of etcd", "instruction", in.ID, "backup", backup, "member", m.Name)
	dir := filepath.Join(n.Root, DirBackup)
	path := filepath.Join(dir, "save-"+backup+".db")
	defer func() {
		_ = os.Remove(path)
		_ = os.Remove(path + ".part")
	}()
	var res v1.EtcdSnapshotResult
	if err := RunStep(ctx, report, StepSnapshotEtcd, func() (string, error) {
		if err := os.MkdirAll(dir, 0o700); err != nil {
			return "", agent.Retryable(v1.CodeInternal, err, "%v", err)
		}
		_ = os.Remove(path)
		sctx, cancel := context.WithTimeout(ctx, SnapshotTimeout)
		defer cancel()
		out, err := n.tool(sctx, m.Binary, append([]string{"etcd-snapshot", "save", path, "--endpoints", m.ClientURL}, m.TLS...)...)
		if ctx.Err() != nil {
			return "", ctx.Err()
		}
		if err != nil {
			return "", agent.Retryable(v1.CodeUnavailable, err, "save a snapshot of etcd member %s: %s", m.Name, ToolMessage(err))
		}
		if res, err = ParseResult(out); err != nil {
			return "", agent.Retryable(v1.CodeInternal, err, "%v", err)
		}
		return fmt.Sprintf("%d bytes, revision %d, %d keys", res.Size, res.Etcd.Revision, res.Etcd.TotalKeys), nil
	}); err != nil {
		return err
	}
	if err := RunStep(ctx, report, StepUploadSnapshot, func() (string, error) {
		f, err := os.Open(path)
		if err != nil {
			return "", agent.Retryable(v1.CodeInternal, err, "%v", err)
		}
		defer f.Close()
		if st, err := f.Stat(); err != nil || st.Size() != res.Size {
			return "", agent.Retryable(v1.CodeInternal, errors.New("size changed"), "the snapshot %s is not the %d bytes saved", path, res.Size)
		}
		uctx, cancel := context.WithTimeout(ctx, SnapshotTimeout)
		defer cancel()
		if err := tr.Upload(uctx, v1.AgentSnapshotPath+in.ID, f, res.Size, res.SHA256); err != nil {
			if ctx.Err() == nil && uctx.Err() != nil {
				return "", agent.Retryable(v1.CodeTimeout, err, "the upload did not end within %s", SnapshotTimeout)
			}
			return "", err
		}
		return fmt.Sprintf("%d bytes uploaded", res.Size), nil
	}); err != nil {
		return err
	}
	data, err := json.Marshal(res)
	if err != nil {
		return failure.Terminal(v1.CodeInternal, "%v", err)
	}
	dr.SetData(data)
	return nil
}

// StagedPath is where Stage keeps backup's snapshot.
func (n *Node) StagedPath(backup string) string {
	return filepath.Join(n.Root, DirBackup, backup+".db")
}

// Unstage removes backup's staged snapshot: the restore is done.
func (n *Node) Unstage(backup string) {
	if backup != "" {
		_ = os.Remove(n.StagedPath(backup))
	}
}

// Stage downloads the snapshot of the etcd-restore instruction in and
// checks it: its size and digest against the params, then etcd's status of
// it (with binary, a kiln-kube). Only a checked snapshot takes its staged
// name; one staged already with the right digest is kept.
func (n *Node) Stage(ctx context.Context, in v1.Instruction, p v1.EtcdRestoreParams, binary string, report agent.Reporter) error {
	tr, _, err := Capabilities(report)
	if err != nil {
		return err
	}
	staged := n.StagedPath(p.Backup)
	part := staged + ".part"
	if ok, err := fileDigestIs(staged, p.Size, p.SHA256); err != nil {
		return agent.Retryable(v1.CodeInternal, err, "read the staged snapshot: %v", err)
	} else if ok {
		report.Progress(StepDownloadSnapshot, v1.StepSucceeded, "already staged")
		report.Progress(StepCheckSnapshot, v1.StepSucceeded, "already checked")
		return nil
	}
	if err := RunStep(ctx, report, StepDownloadSnapshot, func() (string, error) {
		if err := os.MkdirAll(filepath.Dir(staged), 0o700); err != nil {
			return "", agent.Retryable(v1.CodeInternal, err, "%v", err)
		}
		_ = os.Remove(staged)
		f, err := os.OpenFile(part, os.O_CREATE|os.O_TRUNC|os.O_WRONLY, 0o600)
		if err != nil {
			return "", agent.Retryable(v1.CodeInternal, err, "%v", err)
		}
		h := sha256.New()
		dctx, cancel := context.WithTimeout(ctx, SnapshotTimeout)
		defer cancel()
		n, _, err := tr.Download(dctx, v1.AgentSnapshotPath+in.ID, io.MultiWriter(f, h))
		if err == nil {
			err = f.Sync()
		}
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			_ = os.Remove(part)
			if ctx.Err() == nil && dctx.Err() != nil {
				return "", agent.Retryable(v1.CodeTimeout, err, "the download did not end within %s", SnapshotTimeout)
			}
			if fe := (*failure.Error)(nil); errors.As(err, &fe) || ctx.Err() != nil {
				return "", err
			}
			return "", agent.Retryable(v1.CodeInternal, err, "write %s: %v", part, err)
		}
		if got := hex.EncodeToString(h.Sum(nil)); n != p.Size || got != p.SHA256 {
			_ = os.Remove(part)
			return "", agent.Retryable(v1.CodeUnavailable, errSnapshotMismatch,
				"the snapshot of backup %s arrived as %d bytes of sha256 %s, not the %d bytes of %s it has", p.Backup, n, got, p.Size, p.SHA256)
		}
		return fmt.Sprintf("%d bytes", n), nil
	}); err != nil {
		return err
	}
	return RunStep(ctx, report, StepCheckSnapshot, func() (string, error) {
		out, err := n.tool(ctx, binary, "etcd-snapshot", "status", part)
		if ctx.Err() != nil {
			return "", ctx.Err()
		}
		if exited(err) {
			_ = os.Remove(part)
			return "", &failure.Error{Code: v1.CodeInvalidParameter, Err: err,
				Message: fmt.Sprintf("backup %s is not a usable etcd snapshot: %s", p.Backup, ToolMessage(err))}
		}
		if err != nil {
			return "", agent.Retryable(v1.CodeInternal, err, "check the snapshot of backup %s: %v", p.Backup, err)
		}
		res, err := ParseResult(out)
		if err != nil {
			return "", agent.Retryable(v1.CodeInternal, err, "%v", err)
		}
		if res.SHA256 != p.SHA256 {
			_ = os.Remove(part)
			return "", agent.Retryable(v1.CodeInternal, errSnapshotMismatch, "the downloaded snapshot changed on disk: sha256 %s, not %s", res.SHA256, p.SHA256)
		}
		if err := os.Rename(part, staged); err != nil {
			return "", agent.Retryable(v1.CodeInternal, err, "%v", err)
		}
		if err := SyncDir(filepath.Dir(staged)); err != nil {
			return "", agent.Retryable(v1.CodeInternal, err, "%v", err)
		}
		return fmt.Sprintf("etcd snapshot of revision %d, %d keys", res.Etcd.Revision, res.Etcd.TotalKeys), nil
	})
}

// errSnapshotMismatch: a snapshot is not the one the params name.
var errSnapshotMismatch = errors.New("the snapshot is not the one of the backup")

// fileDigestIs reports whether the file at path has size bytes of digest
// sha (hex); a missing file does not.
func fileDigestIs(path string, size int64, sha string) (bool, error) {
	f, err := os.Open(path)
	if errors.Is(err, os.ErrNotExist) {
		return false, nil
	} else if err != nil {
		return false, err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil || st.Size() != size {
		return false, err
	}
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return false, err
	}
	return hex.EncodeToString(h.Sum(nil)) == sha, nil
}

// restoreMark is RestoreMarker's content: the restore that made a data
// dir. Nonce tells this making of it from another of the same restore.
type restoreMark struct {
	Backup         string `json:"backup"`
	SHA256         string `json:"sha256"`
	InitialCluster string `json:"initialCluster"`
	Token          string `json:"token"`
	Nonce          string `json:"nonce"`
}

func markOf(p v1.EtcdRestoreParams) restoreMark {
	return restoreMark{Backup: p.Backup, SHA256: p.SHA256, InitialCluster: p.InitialCluster, Token: p.Token}
}

func (r restoreMark) same(o restoreMark) bool {
	return r.Backup == o.Backup && r.SHA256 == o.SHA256 && r.InitialCluster == o.InitialCluster && r.Token == o.Token
}

// readMark returns the restore that made dataDir, if it holds a member that
// one made.
func readMark(dataDir string) (restoreMark, bool) {
	var r restoreMark
	b, err := os.ReadFile(filepath.Join(dataDir, RestoreMarker))
	if err != nil || json.Unmarshal(b, &r) != nil {
		return r, false
	}
	if entries, err := os.ReadDir(filepath.Join(dataDir, "member", "wal")); err != nil || len(entries) == 0 {
		return r, false
	}
	return r, true
}

// Restored reports whether m's data dir is the one p's restore made.
func Restored(m Member, p v1.EtcdRestoreParams) bool {
	got, ok := readMark(m.DataDir)
	return ok && got.same(markOf(p))
}

// RestoreDataDir makes m's data dir the staged snapshot of p restored as
// member m of p.InitialCluster. etcd must not run on it: the caller has
// stopped it. The data dir it replaces is kept beside it, as
// DATADIR.before-BACKUP.
func (n *Node) RestoreDataDir(ctx context.Context, p v1.EtcdRestoreParams, m Member) error {
	staged := n.StagedPath(p.Backup)
	if st, err := os.Stat(staged); err != nil || st.Size() != p.Size {
		return failure.Terminal(v1.CodeConflict, "backup %s is not staged on this node: the %s phase comes first", p.Backup, v1.RestoreStage)
	}
	want := markOf(p)
	restoring := m.DataDir + ".restoring"
	mark, ok := readMark(restoring)
	if !ok || !mark.same(want) {
		if err := os.RemoveAll(restoring); err != nil {
			return agent.Retryable(v1.CodeInternal, err, "%v", err)
		}
		_, err := n.tool(ctx, m.Binary, "etcd-snapshot", "restore", staged, "--data-dir", restoring,
			"--name", m.Name, "--initial-advertise-peer-urls", m.PeerURL,
			"--initial-cluster", p.InitialCluster, "--initial-cluster-token", p.Token,
			"--bump-revision", fmt.Sprint(RestoreRevisionBump), "--mark-compacted")
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if exited(err) {
			return &failure.Error{Code: v1.CodeInvalidParameter, Err: err,
				Message: fmt.Sprintf("restore backup %s as etcd member %s (%s) of %s: %s", p.Backup, m.Name, m.PeerURL, p.InitialCluster, ToolMessage(err))}
		}
		if err != nil {
			return agent.Retryable(v1.CodeInternal, err, "restore backup %s: %v", p.Backup, err)
		}
		mark = want
		mark.Nonce = rand.Text()
		if err := atomicfile.WriteJSON(filepath.Join(restoring, RestoreMarker), mark, 0o600); err != nil {
			return agent.Retryable(v1.CodeInternal, err, "%v", err)
		}
	}
	if err := n.swapDataDir(m.DataDir, restoring, m.DataDir+".before-"+p.Backup, mark.Nonce); err != nil {
		return agent.Retryable(v1.CodeInternal, err, "put the restored data dir in place: %v", err)
	}
	return nil
}

// swapDataDir moves dataDir aside to before (replacing an older one) and
// restoring into its place. nonce marks what was moved aside: an agent
// that died between the two renames, restarted, finds before marked with
// the nonce of the restored dir still waiting, and a dataDir made since
// (etcd started again on nothing) is not the data to keep.
func (n *Node) swapDataDir(dataDir, restoring, before, nonce string) error {
	if _, err := os.Stat(dataDir); err == nil {
		aside, _ := os.ReadFile(filepath.Join(before, AsideMarker))
		if string(aside) == nonce {
			n.logger().Warn("removing an etcd data dir made after the one restored over was moved aside", "dir", dataDir)
			if err := os.RemoveAll(dataDir); err != nil {
				return err
			}
		} else {
			if err := atomicfile.Write(filepath.Join(dataDir, AsideMarker), []byte(nonce), 0o600); err != nil {
				return err
			}
			if err := os.RemoveAll(before); err != nil {
				return err
			}
			if err := os.Rename(dataDir, before); err != nil {
				return err
			}
		}
	} else if !errors.Is(err, os.ErrNotExist) {
		return err
	}
	if err := os.Rename(restoring, dataDir); err != nil {
		return err
	}
	return SyncDir(filepath.Dir(dataDir))
}

// SyncDir makes a rename in dir durable.
func SyncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}
