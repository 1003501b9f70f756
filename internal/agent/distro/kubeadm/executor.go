package kubeadm

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	v1 "kiln.dev/kiln/api/v1"
	"kiln.dev/kiln/internal/agent"
	"kiln.dev/kiln/internal/agent/etcdsnap"
	"kiln.dev/kiln/internal/agent/mirror"
	"kiln.dev/kiln/internal/atomicfile"
	distrokubeadm "kiln.dev/kiln/internal/distro/kubeadm"
	"kiln.dev/kiln/internal/failure"
)

// Executor is the node side of the kubeadm distribution: kiln-agent's
// agent.Executor for the instructions `install` (params: the JSON of a
// Plan, see distrokubeadm.ParsePlan), `reset` (distrokubeadm.ResetPlan),
// and the backups' `etcd-snapshot` and `etcd-restore` (backup.go).
// It runs a plan as Plan.Script says: the files first (step write-files),
// then each command in order. The agent must run as root: the commands
// install packages, change the kernel's settings and run kubeadm. One
// instruction runs at a time. Use it as a pointer; the zero value works on
// the host.
//
// Each line a command prints (stdout and stderr, in order) is sent to the
// agent's log stream named after the command's step (`kiln node logs`),
// after a line "+ COMMAND" that says what runs. A failed command fails the
// instruction; whether the controller tries again is said by fail.
type Executor struct {
	// Root is where the plan's files go: Root joined with each file's path;
	// "" is "/". Commands are not affected: they run on the host as they
	// are. Tests give a temporary directory (and test doubles on Path).
	Root string
	// Path is the PATH commands are looked up in and run with (a plan's
	// Env may still set its own); DefaultPath when empty.
	Path string
	// Logger gets operator logs; default: discarded.
	Logger *slog.Logger
	// CommandTimeout bounds each command and each skip check;
	// DefaultCommandTimeout when zero.
	CommandTimeout time.Duration
	// Registry is Kiln's registry, with the node's certificate files: a
	// plan's fetch commands pull from it, and its registryMirror points
	// containerd at it. Nil: such plans fail.
	Registry *mirror.Mirror
	// Self is the program a command's "kiln-agent" runs; this program
	// (os.Executable) when empty.
	Self string

	// tool runs kiln-kube etcd-snapshot (backups); etcdsnap.RunTool when
	// nil. procs lists which control-plane processes run (backup.go's
	// running) when not nil. wait, when not zero, bounds each of a
	// restore's waits.
	tool  etcdsnap.Tool
	procs func(names []string) ([]string, error)
	wait  time.Duration

	mu       sync.Mutex // one instruction at a time
	initOnce sync.Once
	svc      *services
}

// services returns the executor's services, made once.
func (e *Executor) services() *services {
	e.initOnce.Do(func() {
		e.svc = newServices(e.root(), e.logger().With("part", "services"), func() []string {
			return append(os.Environ(), "PATH="+e.path())
		})
	})
	return e.svc
}

// Resume supervises the services the last install started again: the
// agent calls it when it starts.
func (e *Executor) Resume() error { return e.services().resume() }

// Close stops supervising the services and leaves them running, for the
// next agent to adopt.
func (e *Executor) Close() { e.services().release() }

// root is where files go: Root, or "/".
func (e *Executor) root() string {
	if e.Root == "" {
		return "/"
	}
	return e.Root
}

func (e *Executor) path() string {
	if e.Path == "" {
		return DefaultPath
	}
	return e.Path
}

// argv is a command's argv with "kiln-agent" replaced by this program.
func (e *Executor) argv(argv []string) ([]string, error) {
	if len(argv) == 0 || argv[0] != "kiln-agent" {
		return argv, nil
	}
	self := e.Self
	if self == "" {
		var err error
		if self, err = os.Executable(); err != nil {
			return nil, fmt.Errorf("find this program (kiln-agent): %w", err)
		}
	}
	return append([]string{self}, argv[1:]...), nil
}

var _ agent.Executor = (*Executor)(nil)

// Execute runs an install, reset, upload-certs (a plan, as an install's
// params are), etcd-snapshot or etcd-restore instruction (backup.go). Its errors are *failure.Error: params that are
// not a plan are terminal (InvalidParameter); a command's failure is
// described at fail.
func (e *Executor) Execute(ctx context.Context, in v1.Instruction, report agent.Reporter) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	log := e.logger().With("instruction", in.ID, "kind", in.Kind)
	var p *distrokubeadm.Plan
	switch in.Kind {
	case v1.InstructionEtcdSnapshot:
		return e.snapshot(ctx, in, report)
	case v1.InstructionEtcdRestore:
		return e.restore(ctx, in, report)
	case v1.InstructionInstall, v1.InstructionUploadCerts:
		var err error
		if p, err = distrokubeadm.ParsePlan(in.Params); err != nil {
			report.Progress(in.Kind, v1.StepFailed, err.Error())
			return &failure.Error{Code: v1.CodeInvalidParameter, Target: "params", Message: "the " + in.Kind + " instruction's params are refused", Err: err}
		}
	case v1.InstructionReset:
		p = distrokubeadm.ResetPlan()
	default:
		fe := failure.Terminal(v1.CodeInvalidParameter, "the kubeadm distribution does not know instruction kind %q", in.Kind)
		fe.Target = "kind"
		report.Progress(in.Kind, v1.StepFailed, fe.Message)
		return fe
	}
	log.Info("running plan", "plan", p.Summary)
	start := time.Now()
	if in.Kind == v1.InstructionInstall {
		// What the host had before, for kiln-agent uninstall (record.go).
		if err := e.record(p); err != nil {
			fe := agent.Retryable(v1.CodeInternal, err, "step %s: record what the host had before the install: %v", distrokubeadm.StepWriteFiles, err)
			report.Progress(distrokubeadm.StepWriteFiles, v1.StepFailed, fe.Message)
			return fe
		}
	}
	if err := e.run(ctx, p, report, log); err != nil {
		return err
	}
	log.Info("plan done", "took", time.Since(start).Round(time.Millisecond))
	if in.Kind == v1.InstructionInstall {
		e.reportExpiry(report, log)
	}
	return nil
}

// reportExpiry says, in the install's result, when the first certificate
// kubeadm made on the node expires. Not knowing fails nothing: the
// certificates are kubeadm's, the install is done.
func (e *Executor) reportExpiry(report agent.Reporter, log *slog.Logger) {
	d, ok := report.(agent.DataReporter)
	if !ok {
		return
	}
	data, found, err := certificateExpiry(e.root())
	if err != nil {
		log.Warn("read the expiry of kubeadm's certificates", "err", err)
		return
	}
	if !found {
		return
	}
	raw, err := json.Marshal(data)
	if err != nil {
		return
	}
	log.Info("kubeadm's certificates", "firstToExpire", data.Of, "notAfter", data.CertificatesNotAfter.Format(time.RFC3339))
	d.SetData(raw)
}

func (e *Executor) logger() *slog.Logger {
	if e.Logger == nil {
		return slog.New(slog.DiscardHandler)
	}
	return e.Logger
}

func (e *Executor) timeout() time.Duration {
	if e.CommandTimeout <= 0 {
		return DefaultCommandTimeout
	}
	return e.CommandTimeout
}

// run carries out p, one reported step at a time.
func (e *Executor) run(ctx context.Context, p *distrokubeadm.Plan, report agent.Reporter, log *slog.Logger) error {
	if len(p.Files) > 0 || p.RegistryMirror {
		if err := ctx.Err(); err != nil {
			return err
		}
		log.Info("writing files", "step", distrokubeadm.StepWriteFiles, "files", len(p.Files))
		report.Progress(distrokubeadm.StepWriteFiles, v1.StepRunning, "")
		n, err := e.writeFiles(p.Files)
		if err == nil && p.RegistryMirror {
			err = e.writeMirror()
		}
		if err != nil {
			fe := agent.Retryable(v1.CodeInternal, err, "step %s: %v", distrokubeadm.StepWriteFiles, err)
			report.Progress(distrokubeadm.StepWriteFiles, v1.StepFailed, fe.Message)
			return fe
		}
		msg := fmt.Sprintf("%d files written", n)
		if n < len(p.Files) {
			msg = fmt.Sprintf("%d of %d files written, the others were already as the plan says", n, len(p.Files))
		}
		report.Progress(distrokubeadm.StepWriteFiles, v1.StepSucceeded, msg)
	}
	// exec.Cmd uses the last of duplicate entries: the plan's Env wins.
	env := append(os.Environ(), "PATH="+e.path())
	env = append(env, p.Env...)
	for i := 0; i < len(p.Commands); {
		j := i + 1
		for j < len(p.Commands) && p.Commands[j].Step == p.Commands[i].Step {
			j++
		}
		if err := e.step(ctx, p.Commands[i].Step, p.Commands[i:j], env, report, log); err != nil {
			return err
		}
		i = j
	}
	return nil
}

// step runs one step's commands: Running when the first starts, Succeeded
// after the last, Failed at the first that fails.
func (e *Executor) step(ctx context.Context, name string, cmds []distrokubeadm.Command, env []string, report agent.Reporter, log *slog.Logger) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	log = log.With("step", name)
	log.Info("running step", "commands", len(cmds))
	report.Progress(name, v1.StepRunning, "")
	forward := func(line string) { report.Log(name, line) }
	var skipped []string
	for _, c := range cmds {
		if len(c.SkipIf) > 0 {
			// The check's output is dropped, as in Plan.Script.
			_, err := runCommand(ctx, c.SkipIf, env, e.timeout(), nil)
			var exit *exec.ExitError
			switch {
			case err == nil:
				skipped = append(skipped, commandLine(c.SkipIf))
				report.Log(name, fmt.Sprintf("already done (`%s` succeeded), not run: %s", commandLine(c.SkipIf), commandLine(c.Argv)))
				continue
			case !errors.As(err, &exit):
				return e.fail(name, c.SkipIf, nil, err, report)
			}
		}
		if err := e.command(ctx, name, c, env, forward, report, log); err != nil {
			return err
		}
	}
	msg := ""
	if checks := slices.Compact(slices.Clone(skipped)); len(skipped) == len(cmds) {
		msg = fmt.Sprintf("skipped, already done: `%s` succeeded", strings.Join(checks, "`, `"))
	} else if len(skipped) > 0 {
		msg = fmt.Sprintf("%d of %d commands skipped, already done: `%s` succeeded", len(skipped), len(cmds), strings.Join(checks, "`, `"))
	}
	report.Progress(name, v1.StepSucceeded, msg)
	log.Info("step done", "skipped", len(skipped))
	return nil
}

// command carries out one command of step name: a program run to its end,
// a service started or stopped, a file fetched from Kiln's registry.
func (e *Executor) command(ctx context.Context, name string, c distrokubeadm.Command, env []string,
	forward func(string), report agent.Reporter, log *slog.Logger) error {
	switch {
	case len(c.Stop) > 0:
		report.Log(name, "stopping kiln-agent's services: "+strings.Join(c.Stop, ", "))
		if err := e.services().stop(c.Stop); err != nil {
			fe := agent.Retryable(v1.CodeInternal, err, "step %s: stop services %s: %v", name, strings.Join(c.Stop, ", "), err)
			report.Progress(name, v1.StepFailed, fe.Message)
			return fe
		}
		return nil
	case c.Fetch != nil:
		f := c.Fetch
		report.Log(name, fmt.Sprintf("fetching %s of %s from Kiln's registry to %s", f.File, f.Image, f.Path))
		if err := fetch(ctx, e.Registry, e.root(), f); err != nil {
			code, retry := v1.CodeUnavailable, true
			if errors.Is(err, errImageMissing) {
				code, retry = v1.CodeProviderError, false
			}
			var fe *failure.Error
			if retry {
				fe = agent.Retryable(code, err, "step %s: %v", name, err)
			} else {
				fe = &failure.Error{Code: code, Message: fmt.Sprintf("step %s: %v", name, err), Err: err}
			}
			report.Progress(name, v1.StepFailed, fe.Message)
			return fe
		}
		return nil
	}
	argv, err := e.argv(c.Argv)
	if err != nil {
		return e.fail(name, c.Argv, nil, err, report)
	}
	if c.Service != "" {
		prog, err := lookPath(argv[0], e.path())
		if err != nil {
			return e.fail(name, c.Argv, nil, err, report)
		}
		already, err := e.services().ensure(c.Service, append([]string{prog}, argv[1:]...))
		if err != nil {
			return e.fail(name, c.Argv, nil, err, report)
		}
		if already {
			report.Log(name, "service "+c.Service+" already runs: "+commandLine(c.Argv))
		} else {
			report.Log(name, "started service "+c.Service+": "+commandLine(c.Argv))
		}
		return nil
	}
	report.Log(name, "+ "+commandLine(c.Argv))
	log.Debug("running command", "argv", argv)
	if tail, err := runCommand(ctx, argv, env, e.timeout(), forward); err != nil {
		return e.fail(name, c.Argv, tail, err, report)
	}
	return nil
}

// writeMirror writes containerd's hosts.toml of every common registry
// host, sending pulls to Kiln's registry.
func (e *Executor) writeMirror() error {
	if e.Registry == nil {
		return errors.New("the plan points containerd at Kiln's registry, and this agent has none")
	}
	_, err := mirror.Write(e.root(), *e.Registry)
	return err
}

// fail reports step as Failed because argv failed with err, having printed
// tail last, and returns the instruction's error. The rule:
//
//   - a program that is not installed, or that cannot start, is terminal
//     (ProviderError): the message names the package to install;
//   - a command that exits with a status other than 0, or runs past
//     CommandTimeout, is retryable when it fetches over the network
//     (apt-get, curl, kubectl, the cilium CLI: see fetches), as a mirror,
//     the proxy or the new cluster's API server may be back the next time;
//     anything else (kubeadm init or join, a local change) is terminal, as
//     running it again does the same (a failed kubeadm init or join needs a
//     reset first). Codes: Unavailable (retryable exit), ProviderError
//     (terminal exit), Timeout;
//   - a command stopped because ctx ended (the agent is stopping) is
//     retryable, Canceled: the agent keeps no result for it and runs the
//     instruction again when it starts.
//
// The message says the step, the command, how it ended and its last
// tailLines lines of output.
func (e *Executor) fail(step string, argv, tail []string, err error, report agent.Reporter) error {
	cmd := commandLine(argv)
	output := ""
	if len(tail) > 0 {
		output = fmt.Sprintf("; its last %d lines of output:\n%s", len(tail), strings.Join(tail, "\n"))
	}
	// classify builds the error; a retryable one wraps agent.ErrRetryable.
	classify := func(code string, retryable bool, format string, args ...any) *failure.Error {
		if retryable {
			return agent.Retryable(code, err, format, args...)
		}
		return &failure.Error{Code: code, Message: fmt.Sprintf(format, args...), Err: err}
	}
	var (
		fe      *failure.Error
		missing *notFoundError
		timeout *timeoutError
		exit    *exec.ExitError
	)
	switch {
	case errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded):
		fe = classify(v1.CodeCanceled, true, "step %s: `%s` was stopped: the agent is stopping", step, cmd)
	case errors.As(err, &missing):
		fe = classify(v1.CodeProviderError, false,
			"step %s: cannot run `%s`: %s is not installed on this host (%s): install %s",
			step, cmd, missing.program, missing.where(), packageOf(missing.program))
	case errors.As(err, &timeout):
		fe = classify(v1.CodeTimeout, fetches(argv), "step %s: `%s` did not finish within %s and was stopped%s",
			step, cmd, timeout.after, output)
	case errors.As(err, &exit) && fetches(argv):
		fe = classify(v1.CodeUnavailable, true, "step %s: `%s` failed (%s)%s", step, cmd, exit.ProcessState, output)
	case errors.As(err, &exit):
		fe = classify(v1.CodeProviderError, false, "step %s: `%s` failed (%s)%s", step, cmd, exit.ProcessState, output)
	default:
		fe = classify(v1.CodeProviderError, false, "step %s: cannot run `%s`: %v", step, cmd, err)
	}
	report.Progress(step, v1.StepFailed, fe.Message)
	return fe
}

// fetches reports whether argv fetches over the network: apt-get (the
// archive, pkgs.k8s.io), curl (keys, the cilium CLI), kubectl (the new
// cluster's API server, Calico's manifests from GitHub) and the cilium CLI
// (its chart, the cluster).
func fetches(argv []string) bool {
	switch program(argv) {
	case "apt-get", "curl", "kubectl", "cilium":
		return true
	}
	return false
}

// packageOf says which Debian and Ubuntu package installs program.
func packageOf(program string) string {
	pkg := map[string]string{
		"apt-get": "apt", "apt-mark": "apt", "curl": "curl", "gpg": "gpg", "kubeadm": "kubeadm",
		"kubectl": "kubectl", "modprobe": "kmod", "swapoff": "mount", "sysctl": "procps", "ip": "iproute2",
		"systemctl": "systemd", "update-ca-certificates": "ca-certificates", "sed": "sed", "tar": "tar",
		"sh": "dash", "find": "findutils", "mkdir": "coreutils", "rm": "coreutils", "test": "coreutils",
		"env": "coreutils", "containerd": "containerd", "iptables": "iptables",
	}[filepath.Base(program)]
	if pkg == "" {
		return "the package that provides it"
	}
	return "the " + pkg + " package"
}

// writeFiles writes files under Root, leaving those already as the plan
// says alone. It returns how many it wrote.
func (e *Executor) writeFiles(files []distrokubeadm.File) (int, error) {
	root := e.root()
	n := 0
	for _, f := range files {
		path := filepath.Join(root, filepath.FromSlash(f.Path))
		if st, err := os.Lstat(path); err == nil && st.Mode().IsRegular() && st.Mode().Perm() == f.Mode.Perm() {
			if old, err := os.ReadFile(path); err == nil && string(old) == f.Content {
				continue
			}
		}
		if err := mkdirAll(filepath.Dir(path)); err != nil {
			return n, fmt.Errorf("write %s: %w", path, err)
		}
		// A new file with exactly the mode (no umask), renamed over the old.
		if err := atomicfile.Write(path, []byte(f.Content), f.Mode.Perm()); err != nil {
			return n, err
		}
		n++
	}
	return n, nil
}

// mkdirAll makes dir and its missing parents, each with mode 0755 whatever
// the umask.
func mkdirAll(dir string) error {
	if st, err := os.Stat(dir); err == nil {
		if !st.IsDir() {
			return &fs.PathError{Op: "mkdir", Path: dir, Err: syscall.ENOTDIR}
		}
		return nil
	}
	if parent := filepath.Dir(dir); parent != dir {
		if err := mkdirAll(parent); err != nil {
			return err
		}
	}
	if err := os.Mkdir(dir, 0o755); err != nil {
		if errors.Is(err, fs.ErrExist) {
			return nil
		}
		return err
	}
	return os.Chmod(dir, 0o755)
}
