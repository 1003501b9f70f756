package kubeadm

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	v1 "kiln.dev/kiln/api/v1"
	"kiln.dev/kiln/internal/agent"
	"kiln.dev/kiln/internal/agent/etcdsnap"
	distrokubeadm "kiln.dev/kiln/internal/distro/kubeadm"
	"kiln.dev/kiln/internal/failure"
)

// Backups of a kubeadm cluster: the instructions etcd-snapshot and
// etcd-restore (api/v1 backups.go), on the etcd member kubeadm runs as a
// static pod (ManifestsDir/etcd.yaml), with kiln-kube of the cluster's
// version (KubeDir; fetched from Kiln's registry on a host that installed
// from the internet). internal/agent/etcdsnap does what every
// distribution shares.
//
// The control plane stops and starts as the kubelet sees its manifests: the
// stop phase moves them to StoppedManifestsDir, the API server's clients
// first, etcd last, and waits until their processes are gone; the restore
// phase restores etcd's data dir and moves etcd's manifest back; the start
// phase moves the others back and waits until etcd and the API server
// answer. A manifest is where one of the two directories says, so an agent
// restarted in the middle goes on from there.

// Where kubeadm keeps what a backup touches.
const (
	ManifestsDir        = distrokubeadm.ManifestsDir
	StoppedManifestsDir = distrokubeadm.StoppedManifestsDir
	etcdCACert          = distrokubeadm.PKIDir + "/etcd/ca.crt"
	etcdClientCert      = distrokubeadm.PKIDir + "/apiserver-etcd-client.crt"
	etcdClientKey       = distrokubeadm.PKIDir + "/apiserver-etcd-client.key"
	apiClientCert       = distrokubeadm.PKIDir + "/apiserver-kubelet-client.crt"
	apiClientKey        = distrokubeadm.PKIDir + "/apiserver-kubelet-client.key"
)

// The control plane's static pods (ManifestsDir/NAME.yaml), in the order a
// restore stops them: the API server's clients, the API server, etcd.
const (
	podControllerManager = "kube-controller-manager"
	podScheduler         = "kube-scheduler"
	podAPIServer         = "kube-apiserver"
	podEtcd              = "etcd"
)

var stopOrder = []string{podControllerManager, podScheduler, podAPIServer, podEtcd}

// Steps of a restore's start phase.
const (
	StepStartEtcd          = "start-etcd"
	StepEtcdHealthy        = "etcd-healthy"
	StepStartControlPlane  = "start-control-plane"
	StepAPIServerReady     = "apiserver-ready"
	StepRestartKubelet     = "restart-kubelet"
	StepFetchKubeForBackup = "fetch-kiln-kube"
)

// Waits of a restore: Executor.wait bounds each when it is not zero.
const (
	// stopWait bounds how long the kubelet has to stop the static pods.
	stopWait = 3 * time.Minute
	// healthyWait bounds how long etcd and then the API server have to
	// answer after their manifests are back.
	healthyWait = 5 * time.Minute
	healthPoll  = time.Second
)

// waitOr is d, or Executor.wait when it is set.
func (e *Executor) waitOr(d time.Duration) time.Duration {
	if e.wait > 0 {
		return e.wait
	}
	return d
}

// snap is the executor's etcdsnap.Node.
func (e *Executor) snap() *etcdsnap.Node {
	return &etcdsnap.Node{Root: e.root(), Tool: e.tool, Logger: e.logger()}
}

// hostPath is rel (a host path) under the executor's root.
func (e *Executor) hostPath(rel string) string {
	return filepath.Join(e.root(), filepath.FromSlash(rel))
}

// snapshot carries out an etcd-snapshot instruction.
func (e *Executor) snapshot(ctx context.Context, in v1.Instruction, report agent.Reporter) error {
	p, err := etcdsnap.SnapshotParams(in)
	if err != nil {
		return etcdsnap.Fail(report, etcdsnap.StepSnapshotEtcd, err)
	}
	m, err := e.member(ctx, p.KubernetesVersion, report)
	if err != nil {
		return etcdsnap.Fail(report, etcdsnap.StepSnapshotEtcd, err)
	}
	return e.snap().Snapshot(ctx, in, p.Backup, m, report)
}

// restore carries out one phase of an etcd-restore instruction.
func (e *Executor) restore(ctx context.Context, in v1.Instruction, report agent.Reporter) error {
	p, err := etcdsnap.RestoreParams(in)
	if err != nil {
		return etcdsnap.Fail(report, etcdsnap.StepRestoreEtcd, err)
	}
	if p.Phase == v1.RestoreKubelet {
		return etcdsnap.RunStep(ctx, report, StepRestartKubelet, func() (string, error) { return e.restartKubelet(ctx) })
	}
	m, err := e.member(ctx, p.KubernetesVersion, report)
	if err != nil {
		return etcdsnap.Fail(report, etcdsnap.StepRestoreEtcd, err)
	}
	e.logger().Info("restoring etcd", "instruction", in.ID, "backup", p.Backup, "phase", p.Phase, "member", m.Name)
	switch p.Phase {
	case v1.RestoreStage:
		return e.snap().Stage(ctx, in, p, m.Binary, report)
	case v1.RestoreStop:
		return etcdsnap.RunStep(ctx, report, etcdsnap.StepStopControlPlane, func() (string, error) {
			if err := e.stopPods(ctx, stopOrder...); err != nil {
				return "", err
			}
			return "controller-manager, scheduler, apiserver and etcd stopped (their manifests are in " + StoppedManifestsDir + ")", nil
		})
	case v1.RestoreEtcd:
		return e.restoreEtcd(ctx, p, m, report)
	default:
		return e.startAgain(ctx, p, report)
	}
}

// member reads this node's etcd member from its static pod's manifest
// (wherever a restore left it), with kiln-kube of version to save and
// restore its snapshots: fetched from Kiln's registry when the host has
// none. A node without the manifest (a worker) is a terminal error.
func (e *Executor) member(ctx context.Context, version string, report agent.Reporter) (etcdsnap.Member, error) {
	args, err := e.podArgs(podEtcd)
	if err != nil {
		return etcdsnap.Member{}, err
	}
	m := etcdsnap.Member{
		Name: args["name"], DataDir: args["data-dir"], PeerURL: firstURL(args["initial-advertise-peer-urls"]),
		ClientURL: firstURL(args["advertise-client-urls"]),
		TLS:       []string{"--cacert", e.hostPath(etcdCACert), "--cert", e.hostPath(etcdClientCert), "--key", e.hostPath(etcdClientKey)},
	}
	if m.Name == "" || m.DataDir == "" || m.PeerURL == "" || m.ClientURL == "" {
		return m, failure.Terminal(v1.CodeProviderError, "etcd's static pod (%s) lacks --name, --data-dir, --initial-advertise-peer-urls or --advertise-client-urls", podEtcd+".yaml")
	}
	// kubeadm's etcd listens on 127.0.0.1 too; its certificate names it.
	if strings.Contains(args["listen-client-urls"], "https://127.0.0.1:2379") {
		m.ClientURL = "https://127.0.0.1:2379"
	}
	m.DataDir = e.hostPath(m.DataDir)
	if version == "" {
		return m, failure.Terminal(v1.CodeInvalidParameter, "the instruction names no Kubernetes version: the kubeadm distribution takes snapshots with kiln-kube of the cluster's version (is kilnd older than this agent?)")
	}
	if m.Binary, err = e.kubeTool(ctx, version, report); err != nil {
		return m, err
	}
	return m, nil
}

// kubeTool returns kiln-kube of version on this host, fetched from Kiln's
// registry if the host has none (it installed Kubernetes from the
// internet).
func (e *Executor) kubeTool(ctx context.Context, version string, report agent.Reporter) (string, error) {
	image, file := distrokubeadm.KubeImage(version)
	rel := distrokubeadm.KubeDir + "/" + version + "/kiln-kube"
	bin := e.hostPath(rel)
	if st, err := os.Stat(bin); err == nil && st.Mode().Perm()&0o111 != 0 {
		return bin, nil
	}
	err := etcdsnap.RunStep(ctx, report, StepFetchKubeForBackup, func() (string, error) {
		if err := fetch(ctx, e.Registry, e.root(), &distrokubeadm.Fetch{Image: image, File: file, Path: rel}); err != nil {
			if errors.Is(err, errImageMissing) {
				return "", failure.Terminal(v1.CodeProviderError, "kiln-kube %s, which takes etcd snapshots, is not in Kiln's registry: %v", version, err)
			}
			return "", agent.Retryable(v1.CodeUnavailable, err, "fetch kiln-kube %s from Kiln's registry: %v", version, err)
		}
		return "kiln-kube " + version + " from Kiln's registry, to save and restore etcd snapshots", nil
	})
	return bin, err
}

// manifest returns the path of pod's manifest, in ManifestsDir or, when a
// restore stopped it, StoppedManifestsDir; running says which.
func (e *Executor) manifest(pod string) (path string, running bool, err error) {
	for _, dir := range []string{ManifestsDir, StoppedManifestsDir} {
		p := e.hostPath(dir + "/" + pod + ".yaml")
		if _, err := os.Stat(p); err == nil {
			return p, dir == ManifestsDir, nil
		} else if !errors.Is(err, os.ErrNotExist) {
			return "", false, agent.Retryable(v1.CodeInternal, err, "%v", err)
		}
	}
	return "", false, failure.Terminal(v1.CodeInvalidParameter,
		"this node has no %s static pod (%s/%s.yaml): etcd snapshots and restores run on the control-plane nodes kubeadm made", pod, ManifestsDir, pod)
}

// podArgs reads the --flag=value arguments of pod's manifest, as kubeadm
// writes them: a line each ("    - --name=node-1").
func (e *Executor) podArgs(pod string) (map[string]string, error) {
	path, _, err := e.manifest(pod)
	if err != nil {
		return nil, err
	}
	f, err := os.Open(path)
	if err != nil {
		return nil, agent.Retryable(v1.CodeInternal, err, "%v", err)
	}
	defer f.Close()
	return manifestArgs(f)
}

// manifestArgs reads the --flag=value lines of a static pod's manifest.
func manifestArgs(r io.Reader) (map[string]string, error) {
	args := map[string]string{}
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		flag, ok := strings.CutPrefix(line, "- --")
		if !ok {
			continue
		}
		name, value, _ := strings.Cut(flag, "=")
		args[name] = strings.Trim(value, `"'`)
	}
	if err := sc.Err(); err != nil {
		return nil, agent.Retryable(v1.CodeInternal, err, "read a static pod's manifest: %v", err)
	}
	return args, nil
}

func firstURL(list string) string {
	first, _, _ := strings.Cut(list, ",")
	return strings.TrimSpace(first)
}

// stopPods moves the manifests of pods, in order, out of the kubelet's
// sight, then waits until their processes are gone.
func (e *Executor) stopPods(ctx context.Context, pods ...string) error {
	if err := mkdirAll(e.hostPath(StoppedManifestsDir)); err != nil {
		return agent.Retryable(v1.CodeInternal, err, "%v", err)
	}
	for _, pod := range pods {
		if err := e.movePod(pod, ManifestsDir, StoppedManifestsDir); err != nil {
			return err
		}
	}
	limit := e.waitOr(stopWait)
	ctx, cancel := context.WithTimeout(ctx, limit)
	defer cancel()
	for {
		left, err := e.running(pods)
		if err != nil {
			return agent.Retryable(v1.CodeInternal, err, "list the node's processes: %v", err)
		}
		if len(left) == 0 {
			return nil
		}
		select {
		case <-ctx.Done():
			if err := ctx.Err(); errors.Is(err, context.Canceled) {
				return err
			}
			return agent.Retryable(v1.CodeTimeout, ctx.Err(), "the kubelet did not stop %s within %s of their manifests leaving %s",
				strings.Join(left, ", "), limit, ManifestsDir)
		case <-time.After(healthPoll):
		}
	}
}

// movePod moves pod's manifest from one directory to the other; one
// already there is left.
func (e *Executor) movePod(pod, from, to string) error {
	src, dst := e.hostPath(from+"/"+pod+".yaml"), e.hostPath(to+"/"+pod+".yaml")
	if _, err := os.Stat(src); errors.Is(err, os.ErrNotExist) {
		if _, err := os.Stat(dst); err == nil {
			return nil
		}
		return failure.Terminal(v1.CodeProviderError, "the %s static pod's manifest is in neither %s nor %s", pod, ManifestsDir, StoppedManifestsDir)
	}
	if err := os.Rename(src, dst); err != nil {
		return agent.Retryable(v1.CodeInternal, err, "move the %s static pod's manifest: %v", pod, err)
	}
	if err := etcdsnap.SyncDir(filepath.Dir(dst)); err != nil {
		return agent.Retryable(v1.CodeInternal, err, "%v", err)
	}
	return nil
}

// running returns which of names run as a process on this host (its
// command, or its program's name); Executor.procs in tests.
func (e *Executor) running(names []string) ([]string, error) {
	if e.procs != nil {
		return e.procs(names)
	}
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return nil, err
	}
	found := map[string]bool{}
	for _, d := range entries {
		if d.Name()[0] < '0' || d.Name()[0] > '9' {
			continue
		}
		comm, _ := os.ReadFile(filepath.Join("/proc", d.Name(), "comm"))
		cmdline, _ := os.ReadFile(filepath.Join("/proc", d.Name(), "cmdline"))
		argv0, _, _ := strings.Cut(string(cmdline), "\x00")
		for _, n := range names {
			// comm is cut at 15 bytes: kube-controller.
			c := strings.TrimSpace(string(comm))
			if c == n || (len(c) == 15 && strings.HasPrefix(n, c)) || filepath.Base(argv0) == n {
				found[n] = true
			}
		}
	}
	var left []string
	for _, n := range names {
		if found[n] {
			left = append(left, n)
		}
	}
	return left, nil
}

// restoreEtcd makes etcd's data dir the staged snapshot restored as this
// member of p.InitialCluster, and gives etcd's manifest back to the
// kubelet, which starts it: its peers may not be restored yet, so nothing
// waits for it here.
func (e *Executor) restoreEtcd(ctx context.Context, p v1.EtcdRestoreParams, m etcdsnap.Member, report agent.Reporter) error {
	if !slices.Contains(strings.Split(p.InitialCluster, ","), m.Name+"="+m.PeerURL) {
		return etcdsnap.Fail(report, etcdsnap.StepRestoreEtcd, failure.Terminal(v1.CodeConflict,
			"this node's etcd member is %s at %s, which the restored cluster %s does not name: did the node's name or address change since kubeadm made it?",
			m.Name, m.PeerURL, p.InitialCluster))
	}
	if err := etcdsnap.RunStep(ctx, report, etcdsnap.StepRestoreEtcd, func() (string, error) {
		if etcdsnap.Restored(m, p) {
			return "already restored", nil
		}
		// The stop phase stopped it; it runs again only if something put
		// its manifest back: etcd must not run on the data dir it replaces.
		if err := e.stopPods(ctx, stopOrder...); err != nil {
			return "", err
		}
		if err := e.snap().RestoreDataDir(ctx, p, m); err != nil {
			return "", err
		}
		return fmt.Sprintf("restored as member %s of %s", m.Name, p.InitialCluster), nil
	}); err != nil {
		return err
	}
	return etcdsnap.RunStep(ctx, report, StepStartEtcd, func() (string, error) {
		if err := e.movePod(podEtcd, StoppedManifestsDir, ManifestsDir); err != nil {
			return "", err
		}
		return "etcd's manifest is back in " + ManifestsDir + ": the kubelet starts it", nil
	})
}

// startAgain gives every control-plane manifest back to the kubelet and
// waits until etcd and then the API server answer, then removes the staged
// snapshot.
func (e *Executor) startAgain(ctx context.Context, p v1.EtcdRestoreParams, report agent.Reporter) error {
	etcdArgs, err := e.podArgs(podEtcd)
	if err != nil {
		return etcdsnap.Fail(report, StepEtcdHealthy, err)
	}
	apiArgs, err := e.podArgs(podAPIServer)
	if err != nil {
		return etcdsnap.Fail(report, StepAPIServerReady, err)
	}
	if err := etcdsnap.RunSteps(ctx, report,
		etcdsnap.Step{Name: StepStartEtcd, Fn: func() (string, error) { return "", e.movePod(podEtcd, StoppedManifestsDir, ManifestsDir) }},
		etcdsnap.Step{Name: StepEtcdHealthy, Fn: func() (string, error) {
			u := "https://127.0.0.1:2379"
			if !strings.Contains(etcdArgs["listen-client-urls"], u) {
				u = firstURL(etcdArgs["advertise-client-urls"])
			}
			return e.waitHealthy(ctx, "etcd", u+"/health", etcdCACert, etcdClientCert, etcdClientKey, func(body []byte) error {
				var h struct {
					Health string `json:"health"`
					Reason string `json:"reason"`
				}
				if err := json.Unmarshal(body, &h); err != nil || h.Health != "true" {
					return fmt.Errorf("etcd /health says %s", strings.TrimSpace(string(body)))
				}
				return nil
			})
		}},
		etcdsnap.Step{Name: StepStartControlPlane, Fn: func() (string, error) {
			for _, pod := range []string{podAPIServer, podControllerManager, podScheduler} {
				if err := e.movePod(pod, StoppedManifestsDir, ManifestsDir); err != nil {
					return "", err
				}
			}
			return "the apiserver's, controller-manager's and scheduler's manifests are back in " + ManifestsDir, nil
		}},
		etcdsnap.Step{Name: StepAPIServerReady, Fn: func() (string, error) {
			port := apiArgs["secure-port"]
			if port == "" {
				port = "6443"
			}
			u := "https://" + net.JoinHostPort(apiArgs["advertise-address"], port) + "/readyz"
			return e.waitHealthy(ctx, "the API server", u, distrokubeadm.ClusterCACert, apiClientCert, apiClientKey, nil)
		}},
	); err != nil {
		return err
	}
	e.snap().Unstage(p.Backup)
	return nil
}

// waitHealthy polls u (what names it) with the client certificate of the
// files given until it answers 200 and check, if any, accepts the body.
func (e *Executor) waitHealthy(ctx context.Context, what, u, caFile, certFile, keyFile string, check func([]byte) error) (string, error) {
	if _, err := url.Parse(u); err != nil || u == "" {
		return "", failure.Terminal(v1.CodeProviderError, "%s's address %q from its static pod is not one", what, u)
	}
	c, err := e.httpsClient(caFile, certFile, keyFile)
	if err != nil {
		return "", agent.Retryable(v1.CodeInternal, err, "a client of %s: %v", what, err)
	}
	defer c.CloseIdleConnections()
	start, limit := time.Now(), e.waitOr(healthyWait)
	deadline := start.Add(limit)
	var last error
	for {
		last = get(ctx, c, u, check)
		if last == nil {
			return fmt.Sprintf("answered after %s", time.Since(start).Round(time.Second)), nil
		}
		if ctx.Err() != nil {
			return "", ctx.Err()
		}
		if time.Now().After(deadline) {
			return "", agent.Retryable(v1.CodeTimeout, last, "%s did not answer %s within %s: %v", what, u, limit, last)
		}
		select {
		case <-ctx.Done():
			return "", ctx.Err()
		case <-time.After(healthPoll):
		}
	}
}

// get checks one answer of u.
func get(ctx context.Context, c *http.Client, u string, check func([]byte) error) error {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return err
	}
	resp, err := c.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s: %s", resp.Status, etcdsnap.Tail(string(body), 3))
	}
	if check != nil {
		return check(body)
	}
	return nil
}

// httpsClient trusts the CA in caFile and presents certFile and keyFile
// (host paths under the root).
func (e *Executor) httpsClient(caFile, certFile, keyFile string) (*http.Client, error) {
	ca, err := os.ReadFile(e.hostPath(caFile))
	if err != nil {
		return nil, err
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(ca) {
		return nil, fmt.Errorf("%s holds no certificate", caFile)
	}
	cert, err := tls.LoadX509KeyPair(e.hostPath(certFile), e.hostPath(keyFile))
	if err != nil {
		return nil, err
	}
	return &http.Client{Transport: &http.Transport{
		TLSClientConfig: &tls.Config{RootCAs: pool, Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12},
	}}, nil
}

// restartKubelet restarts the node's kubelet, so that it registers its
// node with the restored API: kiln-agent's service on a host that
// installed from Kiln, systemd's unit on one that installed from the
// internet.
func (e *Executor) restartKubelet(ctx context.Context) (string, error) {
	ok, err := e.services().restart(distrokubeadm.ServiceKubelet)
	if err != nil {
		return "", agent.Retryable(v1.CodeInternal, err, "restart the kubelet: %v", err)
	}
	if ok {
		return "restarted: it registers its node with the restored API", nil
	}
	if e.Root != "" && e.Root != "/" {
		return "", failure.Terminal(v1.CodeInvalidParameter, "this node runs no kubelet that kiln-agent supervises")
	}
	argv := []string{"systemctl", "restart", "kubelet"}
	if _, err := runCommand(ctx, argv, append(os.Environ(), "PATH="+e.path()), e.timeout(), nil); err != nil {
		return "", agent.Retryable(v1.CodeProviderError, err, "`%s` failed: %v", commandLine(argv), err)
	}
	return "restarted with systemctl: it registers its node with the restored API", nil
}
