package local

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	v1 "kiln.dev/kiln/api/v1"
	"kiln.dev/kiln/internal/agent"
	"kiln.dev/kiln/internal/agent/etcdsnap"
	"kiln.dev/kiln/internal/atomicfile"
	distrolocal "kiln.dev/kiln/internal/distro/local"
	"kiln.dev/kiln/internal/failure"
)

// DefaultStepTimeout bounds each wait for a component to become healthy.
const DefaultStepTimeout = 2 * time.Minute

// logTailLines is how many lines of a component's log an error carries.
const logTailLines = 12

// Executor is the node side of the local distribution: kiln-agent's
// agent.Executor for the instructions `install` (params:
// distrolocal.InstallParams), `reset`, and the backups' `etcd-snapshot` and
// `etcd-restore` (backup.go). Use it as a pointer; the zero value of the
// optional fields works. With an Extension it is the engine of the kiln
// distribution's executor (internal/agent/distro/kiln).
//
// Components run as children of the agent process, in its process group (so
// stopping the agent's group stops them), are restarted with backoff when
// they exit, and outlive Execute: an install returns once everything is
// healthy and leaves them running. A restarted agent adopts the components
// the previous one started (pid files under Root/run with the process's
// start time and a hash of its configuration).
type Executor struct {
	// KubeBinary is where kiln-kube is (distrolocal.FindKubeBinaries): a
	// directory of kiln-kube-VERSION programs, one per Kubernetes version
	// this node installs, or one kiln-kube program, which installs its own
	// version.
	// An install runs the program of its params' KubernetesVersion and fails
	// (terminal, UnsupportedVersion) when there is none. Required.
	KubeBinary string
	// Root is the node's root directory: files go to Root/etc/kiln, data to
	// Root/var/lib/kiln-*, logs to Root/var/log/kiln. Required.
	Root string
	// Logger gets operator logs; default: discarded.
	Logger *slog.Logger
	// StepTimeout bounds each health wait; DefaultStepTimeout when zero.
	StepTimeout time.Duration
	// StopTimeout is how long a component has after SIGTERM before
	// SIGKILL; DefaultStopTimeout when zero.
	StopTimeout time.Duration
	// Extension is what a distribution built on this executor adds to its
	// nodes (the kiln distribution's containers); nil: hollow nodes.
	Extension Extension

	// tool runs kiln-kube etcd-snapshot (backups); etcdsnap.RunTool when nil.
	tool etcdsnap.Tool

	initOnce sync.Once
	run      sync.Mutex // one instruction at a time
	sup      *supervisor
	logs     *logForwarder
}

var _ agent.Executor = (*Executor)(nil)

func (e *Executor) init() {
	e.initOnce.Do(func() {
		if e.Logger == nil {
			e.Logger = slog.New(slog.DiscardHandler)
		}
		if e.StepTimeout <= 0 {
			e.StepTimeout = DefaultStepTimeout
		}
		if e.StopTimeout <= 0 {
			e.StopTimeout = DefaultStopTimeout
		}
		if e.tool == nil {
			e.tool = etcdsnap.RunTool
		}
		e.logs = newLogForwarder()
		e.sup = newSupervisor(e.Root, e.Logger, e.StopTimeout, e.logs)
	})
}

// Execute runs an install, reset, etcd-snapshot, etcd-restore or
// etcd-leave instruction. Its errors are *failure.Error: bad params are terminal; a
// component that does not become healthy in time is retryable (wrapping
// agent.ErrRetryable) and its message carries the last lines of the
// component's log.
func (e *Executor) Execute(ctx context.Context, in v1.Instruction, report agent.Reporter) error {
	e.init()
	e.run.Lock()
	defer e.run.Unlock()
	// Component lines go to the latest instruction's reporter (the agent's
	// outbox outlives the instruction).
	e.logs.setSink(report)
	log := e.Logger.With("instruction", in.ID, "kind", in.Kind)
	switch in.Kind {
	case v1.InstructionInstall:
		p, err := distrolocal.ParseParams(in.Params)
		if err != nil {
			report.Progress(StepWriteCertificates, v1.StepFailed, err.Error())
			return &failure.Error{Code: v1.CodeInvalidParameter, Message: err.Error(), Err: err}
		}
		if e.Root == "" || e.KubeBinary == "" {
			return failure.Terminal(v1.CodeInternal, "the local distribution has no root or no kiln-kube binary configured")
		}
		binary, err := e.binary(ctx, p.KubernetesVersion)
		if err != nil {
			var fe *failure.Error
			if errors.As(err, &fe) {
				report.Progress(StepWriteCertificates, v1.StepFailed, fe.Message)
			}
			return err
		}
		log.Info("installing", "node", p.Node.Name, "role", p.Node.Role, "version", p.KubernetesVersion, "binary", binary)
		start := time.Now()
		if err := e.install(ctx, p, binary, report); err != nil {
			return err
		}
		log.Info("installed", "node", p.Node.Name, "took", time.Since(start).Round(time.Millisecond))
		return nil
	case v1.InstructionReset:
		log.Info("resetting")
		return e.reset(report)
	case v1.InstructionEtcdSnapshot:
		return e.snapshot(ctx, in, report)
	case v1.InstructionEtcdRestore:
		return e.restore(ctx, in, report)
	case v1.InstructionEtcdLeave:
		return e.leave(ctx, in, report)
	default:
		return failure.Terminal(v1.CodeInvalidParameter, "the local distribution does not know instruction kind %q", in.Kind)
	}
}

// binary is the kiln-kube program that installs Kubernetes version. Its
// errors are terminal *failure.Error: without the program, running the
// instruction again does not help.
func (e *Executor) binary(ctx context.Context, version string) (string, error) {
	bins, err := distrolocal.FindKubeBinaries(ctx, e.KubeBinary)
	if err != nil {
		return "", &failure.Error{Code: v1.CodeInternal, Err: err,
			Message: fmt.Sprintf("this agent cannot install Kubernetes: %v (build it with `make kube`)", err)}
	}
	if path, ok := bins[version]; ok {
		return path, nil
	}
	return "", failure.Terminal(v1.CodeUnsupportedVersion, "this agent has no kiln-kube for Kubernetes %q: %s has %s",
		version, e.KubeBinary, strings.Join(bins.Versions(), ", "))
}

// Resume supervises again what the last install on this root runs: it
// adopts the components still running (pid file and start time) and
// restarts the others. kiln-agent calls it when it starts, so components
// orphaned by an agent that died are watched again without a new
// instruction. A root without an install is left alone. Component log
// lines are forwarded from the next instruction on.
func (e *Executor) Resume() error {
	e.init()
	e.run.Lock()
	defer e.run.Unlock()
	all, err := loadSpecs(filepath.Join(e.Root, specsFile))
	if errors.Is(err, os.ErrNotExist) {
		all, err = loadSpecs(filepath.Join(e.Root, legacySpecsFile))
	}
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("resume components: %w", err)
	}
	var errs []error
	for _, s := range all {
		if s.binary == "" {
			// Recorded by an agent that had one kiln-kube for every version.
			if st, err := os.Stat(e.KubeBinary); err != nil || st.IsDir() {
				errs = append(errs, fmt.Errorf("%s: recorded without its kiln-kube program, and %s is not one", s.name, e.KubeBinary))
				continue
			}
			s.binary = e.KubeBinary
		}
		if _, err := e.sup.ensure(s); err != nil {
			errs = append(errs, err)
		}
	}
	if x := e.Extension; x != nil {
		if err := x.Resume(e.Root); err != nil {
			errs = append(errs, err)
		}
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("resume components: %w", err)
	}
	return nil
}

// Close stops supervising and forwarding without stopping the components:
// the agent is shutting down and the next one adopts them. To stop them,
// run a reset instruction or call Stop.
func (e *Executor) Close() {
	e.init()
	if x := e.Extension; x != nil {
		x.Stop()
	}
	e.sup.release()
	e.logs.close()
}

// Stop stops every component (supervised or recorded in a pid file) and
// keeps the files.
func (e *Executor) Stop() {
	e.init()
	e.run.Lock()
	defer e.run.Unlock()
	e.sup.stopAll()
}

// install brings the node to p, one reported step at a time.
func (e *Executor) install(ctx context.Context, p distrolocal.InstallParams, binary string, report agent.Reporter) error {
	step := func(name string, fn func() (string, error)) error { return etcdsnap.RunStep(ctx, report, name, fn) }
	var parts NodeParts
	if x := e.Extension; x != nil {
		var err error
		if parts, err = x.Install(p, e.Root); err != nil {
			report.Progress(StepWriteCertificates, v1.StepFailed, err.Error())
			return agent.Retryable(v1.CodeInternal, err, "%v", err)
		}
	}
	all := specs(p, e.Root, binary, parts)
	var changed int
	if err := step(StepWriteCertificates, func() (string, error) {
		var err error
		changed, err = e.writeFiles(p)
		if err == nil {
			err = writeSpecFiles(all)
		}
		if err == nil && parts.WriteFiles != nil {
			err = parts.WriteFiles()
		}
		if err != nil {
			return "", agent.Retryable(v1.CodeInternal, err, "write the node's files: %v", err)
		}
		return fmt.Sprintf("%d of %d files written", changed, len(p.Files)), nil
	}); err != nil {
		return err
	}
	if err := saveSpecs(filepath.Join(e.Root, specsFile), all); err != nil {
		return agent.Retryable(v1.CodeInternal, err, "record the node's components: %v", err)
	}
	byName := map[string]spec{}
	for _, s := range all {
		byName[s.name] = s
	}
	start := func(name string) func() (string, error) { return e.startStep(byName[name]) }
	healthy := func(name string, check func(context.Context) error) func() (string, error) {
		return e.healthyStep(ctx, name, check)
	}
	addr := p.Node.Address
	if p.IsControlPlane() {
		etcdClient, err := fileClient(e.Root, distrolocal.FileAPIServerEtcdCert, distrolocal.FileAPIServerEtcdKey)
		if err != nil {
			return agent.Retryable(v1.CodeInternal, err, "etcd client: %v", err)
		}
		apiClient, err := fileClient(e.Root, distrolocal.FileAPIServerKubeletCert, distrolocal.FileAPIServerKubeletKey)
		if err != nil {
			return agent.Retryable(v1.CodeInternal, err, "API client: %v", err)
		}
		for _, s := range []struct {
			name string
			fn   func() (string, error)
		}{
			{StepStartEtcd, start(Etcd)},
			{StepEtcdHealthy, healthy(Etcd, func(ctx context.Context) error { return etcdHealthy(ctx, etcdClient, addr) })},
			{StepStartAPIServer, start(APIServer)},
			{StepAPIServerReady, healthy(APIServer, func(ctx context.Context) error { return apiServerReady(ctx, apiClient, addr) })},
			{StepStartControllerManager, start(ControllerManager)},
			{StepStartScheduler, start(Scheduler)},
		} {
			if err := step(s.name, s.fn); err != nil {
				return err
			}
		}
	}
	kubeletClient, err := kubeconfigClient(e.Root, distrolocal.FileKubeletConf)
	if err != nil {
		return agent.Retryable(v1.CodeInternal, err, "kubelet client: %v", err)
	}
	if err := step(StepStartKubelet, start(Kubelet)); err != nil {
		return err
	}
	for _, c := range parts.After {
		if err := step(c.StartStep, start(c.Name)); err != nil {
			return err
		}
	}
	if err := step(StepKubeletRegistered, healthy(Kubelet, func(ctx context.Context) error {
		return nodeRegistered(ctx, kubeletClient, p.Endpoint, p.Node.Name)
	})); err != nil {
		return err
	}
	for _, s := range parts.Steps {
		if err := step(s.Name, func() (string, error) { return s.Run(ctx, kubeletClient) }); err != nil {
			return err
		}
	}
	return nil
}

// writeFiles writes p's files under Root, leaving files whose content is
// already right alone. It returns how many it wrote.
func (e *Executor) writeFiles(p distrolocal.InstallParams) (int, error) {
	n := 0
	for name, content := range p.Files {
		path := filepath.Join(e.Root, filepath.FromSlash(name))
		mode := os.FileMode(distrolocal.FileMode(name))
		if old, err := os.ReadFile(path); err == nil && string(old) == content {
			if st, err := os.Stat(path); err == nil && st.Mode().Perm() == mode {
				continue
			}
		}
		if err := atomicfile.WriteMkdirAll(path, []byte(content), mode); err != nil {
			return n, fmt.Errorf("write %s: %w", name, err)
		}
		n++
	}
	return n, nil
}

// reset stops every component and removes what install made.
func (e *Executor) reset(report agent.Reporter) error {
	report.Progress(StepStopComponents, v1.StepRunning, "")
	x := e.Extension
	if x != nil {
		x.Stop()
	}
	e.sup.stopAll()
	report.Progress(StepStopComponents, v1.StepSucceeded, "")
	report.Progress(StepRemoveFiles, v1.StepRunning, "")
	var errs []error
	if x != nil {
		if err := x.Reset(context.Background(), e.Root); err != nil {
			errs = append(errs, err)
		}
	}
	remove := []string{filepath.Join(e.Root, dirEtc), filepath.Join(e.Root, dirLog)}
	if libs, err := filepath.Glob(filepath.Join(e.Root, "var", "lib", "kiln-*")); err == nil {
		remove = append(remove, libs...)
	}
	for _, c := range allComponents {
		remove = append(remove, e.sup.pidPath(c))
	}
	remove = append(remove, filepath.Join(e.Root, specsFile), filepath.Join(e.Root, legacySpecsFile))
	for _, path := range remove {
		if err := os.RemoveAll(path); err != nil {
			errs = append(errs, err)
		}
	}
	if err := errors.Join(errs...); err != nil {
		report.Progress(StepRemoveFiles, v1.StepFailed, err.Error())
		return agent.Retryable(v1.CodeInternal, err, "remove the node's files: %v", err)
	}
	report.Progress(StepRemoveFiles, v1.StepSucceeded, "")
	return nil
}

// startStep starts component s unless it runs.
func (e *Executor) startStep(s spec) func() (string, error) {
	return func() (string, error) {
		already, err := e.sup.ensure(s)
		if err != nil {
			return "", agent.Retryable(v1.CodeInternal, err, "start %s: %v", s.name, err)
		}
		if already {
			return "already running", nil
		}
		return "started", nil
	}
}

// healthyStep waits until check passes, within StepTimeout; its error
// carries the last lines of component name's log.
func (e *Executor) healthyStep(ctx context.Context, name string, check func(context.Context) error) func() (string, error) {
	return func() (string, error) {
		t0 := time.Now()
		if err := WaitFor(ctx, e.StepTimeout, check); err != nil {
			if ctx.Err() != nil {
				return "", ctx.Err()
			}
			return "", agent.Retryable(v1.CodeTimeout, err, "%s is not healthy within %s: %v; last lines of its log:\n%s",
				name, e.StepTimeout, err, lastLines(e.sup.logPath(name), logTailLines))
		}
		return fmt.Sprintf("healthy after %s", time.Since(t0).Round(time.Millisecond)), nil
	}
}
