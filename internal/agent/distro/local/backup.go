package local

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strings"

	v1 "kiln.dev/kiln/api/v1"
	"kiln.dev/kiln/internal/agent"
	"kiln.dev/kiln/internal/agent/etcdsnap"
	distrolocal "kiln.dev/kiln/internal/distro/local"
	"kiln.dev/kiln/internal/failure"
)

// Backups: the instructions etcd-snapshot and etcd-restore (api/v1
// backups.go, docs/agent-protocol.md), carried out with `kiln-kube
// etcd-snapshot` of the node's installed version against the etcd member
// its install recorded (specsFile); internal/agent/etcdsnap does what
// every distribution shares.
//
// A restore runs in phases, each on every control-plane node before the
// next. stage downloads the snapshot and checks it (etcdsnap.Stage). stop
// stops the control plane's components, etcd last; the kubelet and
// kube-proxy run on. restore stops them again if they run (an agent
// restarted since stop started them: Resume), restores the staged
// snapshot into etcd's data dir (etcdsnap.RestoreDataDir) and starts etcd
// without waiting for it (its peers may not be restored yet). start starts
// every recorded component and waits until etcd and the API server are
// healthy.

// Steps of the backup instructions, reported through Reporter.Progress
// (restore's start phase reports install's steps).
const (
	StepSnapshotEtcd     = etcdsnap.StepSnapshotEtcd
	StepUploadSnapshot   = etcdsnap.StepUploadSnapshot
	StepDownloadSnapshot = etcdsnap.StepDownloadSnapshot
	StepCheckSnapshot    = etcdsnap.StepCheckSnapshot
	StepStopControlPlane = etcdsnap.StepStopControlPlane
	StepRestoreEtcd      = etcdsnap.StepRestoreEtcd
)

// dirBackup holds snapshots being saved, uploaded or staged.
const dirBackup = etcdsnap.DirBackup

// member is this node's etcd member, as its install recorded it.
type member struct {
	etcdsnap.Member
	spec spec
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
		m := member{spec: s, Member: etcdsnap.Member{Binary: s.binary, Name: argValue(s.args, "--name"), DataDir: argValue(s.args, "--data-dir"),
			ClientURL: firstURL(argValue(s.args, "--advertise-client-urls")),
			PeerURL:   firstURL(argValue(s.args, "--initial-advertise-peer-urls")), TLS: e.tlsArgs()}}
		if m.Name == "" || m.DataDir == "" || m.ClientURL == "" || m.PeerURL == "" {
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

// snapshot carries out an etcd-snapshot instruction: a snapshot of this
// node's etcd member, uploaded to the controller.
func (e *Executor) snapshot(ctx context.Context, in v1.Instruction, report agent.Reporter) error {
	p, err := etcdsnap.SnapshotParams(in)
	if err != nil {
		return etcdsnap.Fail(report, StepSnapshotEtcd, err)
	}
	_, m, err := e.installed()
	if err != nil {
		return etcdsnap.Fail(report, StepSnapshotEtcd, err)
	}
	return e.snap().Snapshot(ctx, in, p.Backup, m.Member, report)
}

// snap is the executor's etcdsnap.Node.
func (e *Executor) snap() *etcdsnap.Node {
	return &etcdsnap.Node{Root: e.Root, Tool: e.tool, Logger: e.Logger}
}

// restore carries out one phase of an etcd-restore instruction.
func (e *Executor) restore(ctx context.Context, in v1.Instruction, report agent.Reporter) error {
	p, err := etcdsnap.RestoreParams(in)
	if err != nil {
		return etcdsnap.Fail(report, StepRestoreEtcd, err)
	}
	if p.Phase == v1.RestoreKubelet {
		return e.restartKubelet(ctx, report)
	}
	all, m, err := e.installed()
	if err != nil {
		return etcdsnap.Fail(report, StepRestoreEtcd, err)
	}
	e.Logger.Info("restoring etcd", "instruction", in.ID, "backup", p.Backup, "phase", p.Phase, "member", m.Name)
	switch p.Phase {
	case v1.RestoreStage:
		return e.snap().Stage(ctx, in, p, m.Binary, report)
	case v1.RestoreStop:
		return etcdsnap.RunStep(ctx, report, StepStopControlPlane, func() (string, error) {
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
		return etcdsnap.RunStep(ctx, report, StepStartKubelet, func() (string, error) {
			e.sup.stop(Kubelet)
			if _, err := e.sup.ensure(s); err != nil {
				return "", agent.Retryable(v1.CodeInternal, err, "start the kubelet: %v", err)
			}
			return "restarted: it registers its node with the restored API", nil
		})
	}
	return failure.Terminal(v1.CodeInvalidParameter, "this node runs no kubelet")
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

// restoreEtcd makes etcd's data dir the staged snapshot restored as this
// member of p.InitialCluster, and starts etcd without waiting for it.
func (e *Executor) restoreEtcd(ctx context.Context, p v1.EtcdRestoreParams, m member, report agent.Reporter) error {
	if err := etcdsnap.RunStep(ctx, report, StepRestoreEtcd, func() (string, error) {
		if etcdsnap.Restored(m.Member, p) {
			return "already restored", nil
		}
		// Whatever runs (an agent restarted since the stop phase started
		// it again): etcd must not run on the data dir it replaces.
		e.stopControlPlane()
		if err := e.snap().RestoreDataDir(ctx, p, m.Member); err != nil {
			return "", err
		}
		return fmt.Sprintf("restored as member %s of %s", m.Name, p.InitialCluster), nil
	}); err != nil {
		return err
	}
	return etcdsnap.RunStep(ctx, report, StepStartEtcd, func() (string, error) {
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

// startAgain starts every recorded component, in install's order with its
// steps, waiting until etcd and the API server are healthy, then removes
// the staged snapshot.
func (e *Executor) startAgain(ctx context.Context, p v1.EtcdRestoreParams, all []spec, m member, report agent.Reporter) error {
	u, err := url.Parse(m.ClientURL)
	if err != nil {
		return failure.Terminal(v1.CodeInternal, "etcd's client URL %q: %v", m.ClientURL, err)
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
		var steps []etcdsnap.Step
		switch s.name {
		case Etcd:
			steps = []etcdsnap.Step{{Name: StepStartEtcd, Fn: start(s)},
				{Name: StepEtcdHealthy, Fn: healthy(Etcd, func(ctx context.Context) error { return etcdHealthy(ctx, etcdClient, addr) })}}
		case APIServer:
			steps = []etcdsnap.Step{{Name: StepStartAPIServer, Fn: start(s)},
				{Name: StepAPIServerReady, Fn: healthy(APIServer, func(ctx context.Context) error { return apiServerReady(ctx, apiClient, addr) })}}
		case ControllerManager:
			steps = []etcdsnap.Step{{Name: StepStartControllerManager, Fn: start(s)}}
		case Scheduler:
			steps = []etcdsnap.Step{{Name: StepStartScheduler, Fn: start(s)}}
		case Kubelet:
			steps = []etcdsnap.Step{{Name: StepStartKubelet, Fn: start(s)}}
		case KubeProxy:
			steps = []etcdsnap.Step{{Name: StepStartKubeProxy, Fn: start(s)}}
		}
		if err := etcdsnap.RunSteps(ctx, report, steps...); err != nil {
			return err
		}
	}
	e.snap().Unstage(p.Backup)
	return nil
}
