package local

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
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"time"

	v1 "kiln.dev/kiln/api/v1"
	"kiln.dev/kiln/internal/agent"
	distrolocal "kiln.dev/kiln/internal/distro/local"
	"kiln.dev/kiln/internal/failure"
	"kiln.dev/kiln/internal/names"
)

// Backups: the instructions etcd-snapshot and etcd-restore (api/v1
// backups.go, docs/agent-protocol.md), carried out with `kiln-kube
// etcd-snapshot` of the node's installed version against the etcd member
// its install recorded (specsFile).
//
// A restore runs in phases, each on every control-plane node before the
// next. stage downloads the snapshot to dirBackup/BACKUP.db, checked (size,
// SHA-256, etcd's status of it) before it takes that name. stop stops the
// control plane's components, etcd last; the kubelet and kube-proxy run on.
// restore stops them again if they run (an agent restarted since stop
// started them: Resume), restores the staged snapshot into
// kiln-etcd.restoring, marks it (restoreMarker), moves kiln-etcd aside to
// kiln-etcd.before-BACKUP and the restored one into its place, and starts
// etcd without waiting for it (its peers may not be restored yet). start
// starts every recorded component and waits until etcd and the API server
// are healthy. Each phase is idempotent: a staged file with the right
// digest is not downloaded again, a data dir marked by the same restore is
// not restored again.

// Steps of the backup instructions, reported through Reporter.Progress
// (restore's start phase reports install's steps).
const (
	StepSnapshotEtcd     = "snapshot-etcd"
	StepUploadSnapshot   = "upload-snapshot"
	StepDownloadSnapshot = "download-snapshot"
	StepCheckSnapshot    = "check-snapshot"
	StepStopControlPlane = "stop-control-plane"
	StepRestoreEtcd      = "restore-etcd"
)

const (
	// dirBackup holds snapshots being saved, uploaded or staged.
	dirBackup = "var/lib/kiln-backup"
	// restoreMarker, in etcd's data dir, says which restore made it.
	restoreMarker = "kiln-restore.json"
	// asideMarker, in a data dir moved aside, names the restored dir that
	// replaced it (restoreMark.Nonce).
	asideMarker = "kiln-moved-aside"
	// restoreRevisionBump is added to the restored revision, which is marked
	// compacted: no revision a client of the cluster before saw is reused,
	// and their watches fail as compacted, so they list again (etcd's advice
	// for a Kubernetes restore). Every member restores with the same.
	restoreRevisionBump = 1_000_000_000
	// snapshotTimeout bounds a save, an upload or a download.
	snapshotTimeout = 30 * time.Minute
)

// toolFunc runs a program and returns its standard output; its error is a
// *toolError.
type toolFunc func(ctx context.Context, program string, args ...string) ([]byte, error)

// toolError is a program that did not run or did not succeed.
type toolError struct {
	argv   []string
	exited bool   // it ran and exited non-zero: what it said is in stderr
	stderr string // its last lines
	err    error
}

func (e *toolError) Error() string {
	if e.stderr != "" {
		return fmt.Sprintf("%s: %v: %s", strings.Join(e.argv, " "), e.err, e.stderr)
	}
	return fmt.Sprintf("%s: %v", strings.Join(e.argv, " "), e.err)
}

func (e *toolError) Unwrap() error { return e.err }

// toolMessage is what err says to a user: what the program said when it
// ran and failed, else the whole error.
func toolMessage(err error) string {
	var te *toolError
	if errors.As(err, &te) && te.exited && te.stderr != "" {
		return te.stderr
	}
	return err.Error()
}

// runTool is the toolFunc of a real node.
func runTool(ctx context.Context, program string, args ...string) ([]byte, error) {
	cmd := exec.CommandContext(ctx, program, args...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	if err != nil {
		var exit *exec.ExitError
		return stdout.Bytes(), &toolError{argv: append([]string{filepath.Base(program)}, args...), exited: errors.As(err, &exit),
			stderr: tail(stderr.String(), logTailLines), err: err}
	}
	return stdout.Bytes(), nil
}

// tail is the last n lines of s.
func tail(s string, n int) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// member is this node's etcd member, as its install recorded it.
type member struct {
	spec      spec
	binary    string // kiln-kube of the installed version
	name      string
	dataDir   string
	clientURL string
	peerURL   string
}

// installed returns what the last install on this root runs, and its etcd
// member. A node without one (a worker, or no install) is a terminal
// error.
func (e *Executor) installed() ([]spec, member, error) {
	all, err := loadSpecs(filepath.Join(e.Root, specsFile))
	if errors.Is(err, os.ErrNotExist) {
		all, err = loadSpecs(filepath.Join(e.Root, legacySpecsFile))
	}
	if errors.Is(err, os.ErrNotExist) {
		return nil, member{}, failure.Terminal(v1.CodeInvalidParameter, "this node has no etcd member: nothing is installed on it")
	}
	if err != nil {
		return nil, member{}, agent.Retryable(v1.CodeInternal, err, "read the node's components: %v", err)
	}
	for i, s := range all {
		if s.binary == "" {
			// Recorded by an agent that had one kiln-kube for every version.
			all[i].binary = e.KubeBinary
		}
	}
	for _, s := range all {
		if s.name != Etcd {
			continue
		}
		m := member{spec: s, binary: s.binary, name: argValue(s.args, "--name"), dataDir: argValue(s.args, "--data-dir"),
			clientURL: firstURL(argValue(s.args, "--advertise-client-urls")),
			peerURL:   firstURL(argValue(s.args, "--initial-advertise-peer-urls"))}
		if m.name == "" || m.dataDir == "" || m.clientURL == "" || m.peerURL == "" {
			return nil, member{}, failure.Terminal(v1.CodeInternal,
				"the recorded etcd command line lacks --name, --data-dir, --advertise-client-urls or --initial-advertise-peer-urls: %q", s.args)
		}
		return all, m, nil
	}
	return nil, member{}, failure.Terminal(v1.CodeInvalidParameter,
		"this node has no etcd member: etcd snapshots and restores run on control-plane nodes")
}

// argValue is the value of flag in args (--flag value or --flag=value), ""
// if it is not there; the last one wins.
func argValue(args []string, flag string) string {
	v := ""
	for i, a := range args {
		switch {
		case a == flag && i+1 < len(args):
			v = args[i+1]
		case strings.HasPrefix(a, flag+"="):
			v = strings.TrimPrefix(a, flag+"=")
		}
	}
	return v
}

func firstURL(list string) string {
	first, _, _ := strings.Cut(list, ",")
	return strings.TrimSpace(first)
}

// tlsArgs are kiln-kube etcd-snapshot save's flags for the node's etcd
// client certificate (the API server's).
func (e *Executor) tlsArgs() []string {
	f := func(rel string) string { return filepath.Join(e.Root, filepath.FromSlash(rel)) }
	return []string{"--cacert", f(distrolocal.FileCA), "--cert", f(distrolocal.FileAPIServerEtcdCert), "--key", f(distrolocal.FileAPIServerEtcdKey)}
}

// capabilities returns what of report a backup instruction needs.
func capabilities(report agent.Reporter) (agent.Transferer, agent.DataReporter, error) {
	tr, ok := report.(agent.Transferer)
	dr, ok2 := report.(agent.DataReporter)
	if !ok || !ok2 {
		return nil, nil, failure.Terminal(v1.CodeInternal, "this agent cannot transfer snapshots (its reporter has no Upload, Download or SetData)")
	}
	return tr, dr, nil
}

// runStep reports step name around fn: Running, then Succeeded with fn's
// message or Failed with its error's.
func runStep(ctx context.Context, report agent.Reporter, name string, fn func() (string, error)) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	report.Progress(name, v1.StepRunning, "")
	msg, err := fn()
	if err != nil {
		var fe *failure.Error
		if errors.As(err, &fe) {
			report.Progress(name, v1.StepFailed, fe.Message)
		} else {
			report.Progress(name, v1.StepFailed, err.Error())
		}
		return err
	}
	report.Progress(name, v1.StepSucceeded, msg)
	return nil
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

// parseSnapshotResult reads the JSON line that kiln-kube etcd-snapshot save
// and status print.
func parseSnapshotResult(out []byte) (v1.EtcdSnapshotResult, error) {
	var res v1.EtcdSnapshotResult
	line := bytes.TrimSpace(out)
	if i := bytes.LastIndexByte(line, '\n'); i >= 0 {
		line = line[i+1:]
	}
	if err := json.Unmarshal(line, &res); err != nil {
		return res, fmt.Errorf("kiln-kube etcd-snapshot printed %q: %w", tail(string(out), 3), err)
	}
	if res.Size <= 0 || len(res.SHA256) != sha256.Size*2 {
		return res, fmt.Errorf("kiln-kube etcd-snapshot printed %q: no size or digest", tail(string(out), 3))
	}
	return res, nil
}

// snapshot carries out an etcd-snapshot instruction: a snapshot of this
// node's etcd member, uploaded to the controller; its size, digest and
// status are the result's data.
func (e *Executor) snapshot(ctx context.Context, in v1.Instruction, report agent.Reporter) error {
	var p v1.EtcdSnapshotParams
	if err := decodeParams(in, &p, func() string { return p.Backup }); err != nil {
		report.Progress(StepSnapshotEtcd, v1.StepFailed, failure.From(err).Message)
		return err
	}
	tr, dr, err := capabilities(report)
	if err != nil {
		return err
	}
	_, m, err := e.installed()
	if err != nil {
		report.Progress(StepSnapshotEtcd, v1.StepFailed, failure.From(err).Message)
		return err
	}
	e.Logger.Info("taking a snapshot of etcd", "instruction", in.ID, "backup", p.Backup, "member", m.name)
	dir := filepath.Join(e.Root, dirBackup)
	path := filepath.Join(dir, "save-"+p.Backup+".db")
	defer func() {
		_ = os.Remove(path)
		_ = os.Remove(path + ".part")
	}()
	var res v1.EtcdSnapshotResult
	if err := runStep(ctx, report, StepSnapshotEtcd, func() (string, error) {
		if err := os.MkdirAll(dir, 0o700); err != nil {
			return "", agent.Retryable(v1.CodeInternal, err, "%v", err)
		}
		_ = os.Remove(path)
		sctx, cancel := context.WithTimeout(ctx, snapshotTimeout)
		defer cancel()
		out, err := e.tool(sctx, m.binary, append([]string{"etcd-snapshot", "save", path, "--endpoints", m.clientURL}, e.tlsArgs()...)...)
		if ctx.Err() != nil {
			return "", ctx.Err()
		}
		if err != nil {
			return "", agent.Retryable(v1.CodeUnavailable, err, "save a snapshot of etcd member %s: %s", m.name, toolMessage(err))
		}
		if res, err = parseSnapshotResult(out); err != nil {
			return "", agent.Retryable(v1.CodeInternal, err, "%v", err)
		}
		return fmt.Sprintf("%d bytes, revision %d, %d keys", res.Size, res.Etcd.Revision, res.Etcd.TotalKeys), nil
	}); err != nil {
		return err
	}
	if err := runStep(ctx, report, StepUploadSnapshot, func() (string, error) {
		f, err := os.Open(path)
		if err != nil {
			return "", agent.Retryable(v1.CodeInternal, err, "%v", err)
		}
		defer f.Close()
		if st, err := f.Stat(); err != nil || st.Size() != res.Size {
			return "", agent.Retryable(v1.CodeInternal, errors.New("size changed"), "the snapshot %s is not the %d bytes saved", path, res.Size)
		}
		uctx, cancel := context.WithTimeout(ctx, snapshotTimeout)
		defer cancel()
		if err := tr.Upload(uctx, v1.AgentSnapshotPath+in.ID, f, res.Size, res.SHA256); err != nil {
			if ctx.Err() == nil && uctx.Err() != nil {
				return "", agent.Retryable(v1.CodeTimeout, err, "the upload did not end within %s", snapshotTimeout)
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

// restoreParams checks an etcd-restore instruction's params for its phase.
func restoreParams(in v1.Instruction) (v1.EtcdRestoreParams, error) {
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

// restore carries out one phase of an etcd-restore instruction.
func (e *Executor) restore(ctx context.Context, in v1.Instruction, report agent.Reporter) error {
	p, err := restoreParams(in)
	if err != nil {
		report.Progress(StepRestoreEtcd, v1.StepFailed, failure.From(err).Message)
		return err
	}
	if p.Phase == v1.RestoreKubelet {
		return e.restartKubelet(ctx, report)
	}
	all, m, err := e.installed()
	if err != nil {
		report.Progress(StepRestoreEtcd, v1.StepFailed, failure.From(err).Message)
		return err
	}
	e.Logger.Info("restoring etcd", "instruction", in.ID, "backup", p.Backup, "phase", p.Phase, "member", m.name)
	switch p.Phase {
	case v1.RestoreStage:
		tr, _, err := capabilities(report)
		if err != nil {
			return err
		}
		return e.stage(ctx, in, p, m, tr, report)
	case v1.RestoreStop:
		return runStep(ctx, report, StepStopControlPlane, func() (string, error) {
			e.stopControlPlane()
			return "controller-manager, scheduler, apiserver and etcd stopped", nil
		})
	case v1.RestoreEtcd:
		return e.restoreEtcd(ctx, p, m, report)
	default:
		return e.startAgain(ctx, p, all, m, report)
	}
}

// restartKubelet stops the node's kubelet and starts it again: it
// registers its node with the API as it starts, and the restored API may
// hold no Node of it.
func (e *Executor) restartKubelet(ctx context.Context, report agent.Reporter) error {
	all, err := loadSpecs(filepath.Join(e.Root, specsFile))
	if errors.Is(err, os.ErrNotExist) {
		all, err = loadSpecs(filepath.Join(e.Root, legacySpecsFile))
	}
	if err != nil {
		return failure.Terminal(v1.CodeInvalidParameter, "this node has no kubelet to restart: %v", err)
	}
	for _, s := range all {
		if s.name != Kubelet {
			continue
		}
		if s.binary == "" {
			s.binary = e.KubeBinary
		}
		return runStep(ctx, report, StepStartKubelet, func() (string, error) {
			e.sup.stop(Kubelet)
			if _, err := e.sup.ensure(s); err != nil {
				return "", agent.Retryable(v1.CodeInternal, err, "start the kubelet: %v", err)
			}
			return "restarted: it registers its node with the restored API", nil
		})
	}
	return failure.Terminal(v1.CodeInvalidParameter, "this node runs no kubelet")
}

// stagedPath is where stage keeps backup's snapshot.
func (e *Executor) stagedPath(backup string) string {
	return filepath.Join(e.Root, dirBackup, backup+".db")
}

// stage downloads the snapshot and checks it: its size and digest against
// the params, then etcd's status of it. Only a checked snapshot takes its
// staged name; one staged already with the right digest is kept.
func (e *Executor) stage(ctx context.Context, in v1.Instruction, p v1.EtcdRestoreParams, m member, tr agent.Transferer, report agent.Reporter) error {
	staged := e.stagedPath(p.Backup)
	part := staged + ".part"
	if ok, err := fileDigestIs(staged, p.Size, p.SHA256); err != nil {
		return agent.Retryable(v1.CodeInternal, err, "read the staged snapshot: %v", err)
	} else if ok {
		report.Progress(StepDownloadSnapshot, v1.StepSucceeded, "already staged")
		report.Progress(StepCheckSnapshot, v1.StepSucceeded, "already checked")
		return nil
	}
	if err := runStep(ctx, report, StepDownloadSnapshot, func() (string, error) {
		if err := os.MkdirAll(filepath.Dir(staged), 0o700); err != nil {
			return "", agent.Retryable(v1.CodeInternal, err, "%v", err)
		}
		_ = os.Remove(staged)
		f, err := os.OpenFile(part, os.O_CREATE|os.O_TRUNC|os.O_WRONLY, 0o600)
		if err != nil {
			return "", agent.Retryable(v1.CodeInternal, err, "%v", err)
		}
		h := sha256.New()
		dctx, cancel := context.WithTimeout(ctx, snapshotTimeout)
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
				return "", agent.Retryable(v1.CodeTimeout, err, "the download did not end within %s", snapshotTimeout)
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
	return runStep(ctx, report, StepCheckSnapshot, func() (string, error) {
		out, err := e.tool(ctx, m.binary, "etcd-snapshot", "status", part)
		if ctx.Err() != nil {
			return "", ctx.Err()
		}
		if te := (*toolError)(nil); errors.As(err, &te) && te.exited {
			_ = os.Remove(part)
			return "", &failure.Error{Code: v1.CodeInvalidParameter, Err: err,
				Message: fmt.Sprintf("backup %s is not a usable etcd snapshot: %s", p.Backup, toolMessage(err))}
		}
		if err != nil {
			return "", agent.Retryable(v1.CodeInternal, err, "check the snapshot of backup %s: %v", p.Backup, err)
		}
		res, err := parseSnapshotResult(out)
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
		if err := syncDir(filepath.Dir(staged)); err != nil {
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

// controlPlaneStopOrder: the clients of the API server, then the API
// server, then etcd (stopOrder without the kubelet and kube-proxy).
var controlPlaneStopOrder = [][]string{{ControllerManager, Scheduler}, {APIServer}, {Etcd}}

// stopControlPlane stops the control plane's components that run, etcd
// last; the kubelet and kube-proxy run on. The specs file still lists
// them: an agent restarted before the restore starts them again (Resume).
func (e *Executor) stopControlPlane() {
	for _, stage := range controlPlaneStopOrder {
		e.sup.stop(stage...)
	}
}

// restoreMark is restoreMarker's content: the restore that made a data
// dir. Nonce tells this making of it from another of the same restore.
type restoreMark struct {
	Backup         string `json:"backup"`
	SHA256         string `json:"sha256"`
	InitialCluster string `json:"initialCluster"`
	Token          string `json:"token"`
	Nonce          string `json:"nonce"`
}

func (r restoreMark) same(o restoreMark) bool {
	return r.Backup == o.Backup && r.SHA256 == o.SHA256 && r.InitialCluster == o.InitialCluster && r.Token == o.Token
}

// readMark returns the restore that made dataDir, if it holds a member that
// one made.
func readMark(dataDir string) (restoreMark, bool) {
	var r restoreMark
	b, err := os.ReadFile(filepath.Join(dataDir, restoreMarker))
	if err != nil || json.Unmarshal(b, &r) != nil {
		return r, false
	}
	if entries, err := os.ReadDir(filepath.Join(dataDir, "member", "wal")); err != nil || len(entries) == 0 {
		return r, false
	}
	return r, true
}

// restoreEtcd makes etcd's data dir the staged snapshot restored as this
// member of p.InitialCluster, and starts etcd without waiting for it.
func (e *Executor) restoreEtcd(ctx context.Context, p v1.EtcdRestoreParams, m member, report agent.Reporter) error {
	want := restoreMark{Backup: p.Backup, SHA256: p.SHA256, InitialCluster: p.InitialCluster, Token: p.Token}
	if err := runStep(ctx, report, StepRestoreEtcd, func() (string, error) {
		if got, ok := readMark(m.dataDir); ok && got.same(want) {
			return "already restored", nil
		}
		staged := e.stagedPath(p.Backup)
		if st, err := os.Stat(staged); err != nil || st.Size() != p.Size {
			return "", failure.Terminal(v1.CodeConflict, "backup %s is not staged on this node: the %s phase comes first", p.Backup, v1.RestoreStage)
		}
		// Whatever runs (an agent restarted since the stop phase started
		// it again): etcd must not run on the data dir it replaces.
		e.stopControlPlane()

		restoring := m.dataDir + ".restoring"
		mark, ok := readMark(restoring)
		if !ok || !mark.same(want) {
			if err := os.RemoveAll(restoring); err != nil {
				return "", agent.Retryable(v1.CodeInternal, err, "%v", err)
			}
			_, err := e.tool(ctx, m.binary, "etcd-snapshot", "restore", staged, "--data-dir", restoring,
				"--name", m.name, "--initial-advertise-peer-urls", m.peerURL,
				"--initial-cluster", p.InitialCluster, "--initial-cluster-token", p.Token,
				"--bump-revision", fmt.Sprint(restoreRevisionBump), "--mark-compacted")
			if ctx.Err() != nil {
				return "", ctx.Err()
			}
			if te := (*toolError)(nil); errors.As(err, &te) && te.exited {
				return "", &failure.Error{Code: v1.CodeInvalidParameter, Err: err,
					Message: fmt.Sprintf("restore backup %s as etcd member %s (%s) of %s: %s", p.Backup, m.name, m.peerURL, p.InitialCluster, toolMessage(err))}
			}
			if err != nil {
				return "", agent.Retryable(v1.CodeInternal, err, "restore backup %s: %v", p.Backup, err)
			}
			mark = want
			mark.Nonce = rand.Text()
			if err := writeJSON(filepath.Join(restoring, restoreMarker), mark); err != nil {
				return "", agent.Retryable(v1.CodeInternal, err, "%v", err)
			}
		}
		if err := e.swapDataDir(m.dataDir, restoring, m.dataDir+".before-"+p.Backup, mark.Nonce); err != nil {
			return "", agent.Retryable(v1.CodeInternal, err, "put the restored data dir in place: %v", err)
		}
		return fmt.Sprintf("restored as member %s of %s", m.name, p.InitialCluster), nil
	}); err != nil {
		return err
	}
	return runStep(ctx, report, StepStartEtcd, func() (string, error) {
		already, err := e.sup.ensure(m.spec)
		if err != nil {
			return "", agent.Retryable(v1.CodeInternal, err, "start etcd: %v", err)
		}
		if already {
			return "already running", nil
		}
		return "started", nil
	})
}

// swapDataDir moves dataDir aside to before (replacing an older one) and
// restoring into its place. nonce marks what was moved aside: an agent
// that died between the two renames, restarted, finds before marked with
// the nonce of the restored dir still waiting, and a dataDir made since
// (Resume started etcd on nothing) is not the data to keep.
func (e *Executor) swapDataDir(dataDir, restoring, before, nonce string) error {
	if _, err := os.Stat(dataDir); err == nil {
		aside, _ := os.ReadFile(filepath.Join(before, asideMarker))
		if string(aside) == nonce {
			e.Logger.Warn("removing an etcd data dir made after the one restored over was moved aside", "dir", dataDir)
			if err := os.RemoveAll(dataDir); err != nil {
				return err
			}
		} else {
			if err := writeFile(filepath.Join(dataDir, asideMarker), []byte(nonce), 0o600); err != nil {
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
	return syncDir(filepath.Dir(dataDir))
}

// namedStep is a step of runStep.
type namedStep struct {
	name string
	fn   func() (string, error)
}

// startAgain starts every recorded component, in install's order with its
// steps, waiting until etcd and the API server are healthy, then removes
// the staged snapshot.
func (e *Executor) startAgain(ctx context.Context, p v1.EtcdRestoreParams, all []spec, m member, report agent.Reporter) error {
	u, err := url.Parse(m.clientURL)
	if err != nil {
		return failure.Terminal(v1.CodeInternal, "etcd's client URL %q: %v", m.clientURL, err)
	}
	addr := u.Hostname()
	etcdClient, err := fileClient(e.Root, distrolocal.FileAPIServerEtcdCert, distrolocal.FileAPIServerEtcdKey)
	if err != nil {
		return agent.Retryable(v1.CodeInternal, err, "etcd client: %v", err)
	}
	apiClient, err := fileClient(e.Root, distrolocal.FileAPIServerKubeletCert, distrolocal.FileAPIServerKubeletKey)
	if err != nil {
		return agent.Retryable(v1.CodeInternal, err, "API client: %v", err)
	}
	start := e.startStep
	healthy := func(name string, check func(context.Context) error) func() (string, error) {
		return e.healthyStep(ctx, name, check)
	}
	for _, s := range all {
		var steps []namedStep
		switch s.name {
		case Etcd:
			steps = []namedStep{{StepStartEtcd, start(s)},
				{StepEtcdHealthy, healthy(Etcd, func(ctx context.Context) error { return etcdHealthy(ctx, etcdClient, addr) })}}
		case APIServer:
			steps = []namedStep{{StepStartAPIServer, start(s)},
				{StepAPIServerReady, healthy(APIServer, func(ctx context.Context) error { return apiServerReady(ctx, apiClient, addr) })}}
		case ControllerManager:
			steps = []namedStep{{StepStartControllerManager, start(s)}}
		case Scheduler:
			steps = []namedStep{{StepStartScheduler, start(s)}}
		case Kubelet:
			steps = []namedStep{{StepStartKubelet, start(s)}}
		case KubeProxy:
			steps = []namedStep{{StepStartKubeProxy, start(s)}}
		}
		for _, st := range steps {
			if err := runStep(ctx, report, st.name, st.fn); err != nil {
				return err
			}
		}
	}
	if p.Backup != "" {
		_ = os.Remove(e.stagedPath(p.Backup))
	}
	return nil
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
