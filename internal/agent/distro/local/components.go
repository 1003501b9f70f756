package local

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"maps"
	"net"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"

	"kiln.dev/kiln/internal/atomicfile"
	distrolocal "kiln.dev/kiln/internal/distro/local"
	"kiln.dev/kiln/internal/pki"
)

// Component names: the log stream, the pid file, and (but for Kubelet, see
// subcommand) the kiln-kube subcommand.
const (
	Etcd              = "etcd"
	APIServer         = "apiserver"
	ControllerManager = "controller-manager"
	Scheduler         = "scheduler"
	Kubelet           = "kubelet"
	KubeProxy         = "kube-proxy" // nodes that run containers only: an Extension's (the kiln distribution's)
)

// subcommand is the kiln-kube subcommand that runs component name when its
// spec names none (command): a local node's kubelet is the hollow one, and
// `kiln-kube kubelet` the real kubelet of nodes that run containers
// (docs/kube.md), whose spec says so. Mapped where the process starts, so an
// install recorded before the rename resumes unchanged.
func subcommand(name string) string {
	if name == Kubelet {
		return "hollow-kubelet"
	}
	return name
}

// HollowLabel is on every node of the local distribution (value "true"):
// its kubelet is hollow, no container runs on it.
const HollowLabel = "kiln.dev/hollow"

// allComponents in start order.
var allComponents = []string{Etcd, APIServer, ControllerManager, Scheduler, Kubelet, KubeProxy}

// Directories under the node's root.
const (
	dirEtcd              = "var/lib/kiln-etcd"
	dirAPIServer         = "var/lib/kiln-apiserver"
	dirControllerManager = "var/lib/kiln-controller-manager"
	dirKubelet           = DirKubelet
	dirRun               = "run"               // pid files: a node's /run does not outlive it (tmpfs)
	dirState             = "var/lib/kiln-node" // what the last install runs: outlives a restart
	dirLog               = "var/log/kiln"
	dirEtc               = "etc/kiln"
)

// DirKubelet is the kubelet's directory, under the node's root.
const DirKubelet = "var/lib/kiln-kubelet"

// spec is how to run one component: BINARY COMMAND ARGS... with ENV added.
type spec struct {
	name    string
	command string // the kiln-kube subcommand; subcommand(name) when empty
	binary  string // the kiln-kube program of the install's Kubernetes version
	args    []string
	env     []string
	dirs    []string          // directories (absolute) to create first
	files   map[string]string // configuration files it reads (absolute path: content), written by install
	hash    string            // of binary, command, args, env, files and the node's files: a change restarts
}

// kiln-kube subcommand of the spec.
func (s spec) subcommand() string {
	if s.command != "" {
		return s.command
	}
	return subcommand(s.name)
}

// specs returns what runs on the node of p, in start order, with binary,
// the kiln-kube of p.KubernetesVersion, and what an Extension adds (parts).
func specs(p distrolocal.InstallParams, root, binary string, parts NodeParts) []spec {
	f := func(rel string) string { return filepath.Join(root, filepath.FromSlash(rel)) }
	addr := p.Node.Address
	var out []spec
	if cp := p.ControlPlane; cp != nil {
		etcd := spec{name: Etcd, dirs: []string{f(dirEtcd)}, args: []string{
			"--name", p.Node.Name,
			"--data-dir", f(dirEtcd),
			"--listen-client-urls", distrolocal.EtcdClientURL(addr),
			"--advertise-client-urls", distrolocal.EtcdClientURL(addr),
			"--listen-peer-urls", distrolocal.EtcdPeerURL(addr),
			"--initial-advertise-peer-urls", distrolocal.EtcdPeerURL(addr),
			"--initial-cluster-token", cp.EtcdToken,
			"--cert-file", f(distrolocal.FileEtcdCert), "--key-file", f(distrolocal.FileEtcdKey),
			"--trusted-ca-file", f(distrolocal.FileCA), "--client-cert-auth",
			"--peer-cert-file", f(distrolocal.FileEtcdCert), "--peer-key-file", f(distrolocal.FileEtcdKey),
			"--peer-trusted-ca-file", f(distrolocal.FileCA), "--peer-client-cert-auth",
		}}
		if cp.EtcdJoin {
			// kiln-kube etcd --join adds this member through an existing
			// one (MemberAdd) and starts it with the cluster it was told.
			etcd.args = append(etcd.args,
				"--join", strings.Join(cp.EtcdJoinURLs, ","),
				"--join-cert-file", f(distrolocal.FileAPIServerEtcdCert), "--join-key-file", f(distrolocal.FileAPIServerEtcdKey),
				"--join-ca-file", f(distrolocal.FileCA))
		} else {
			etcd.args = append(etcd.args,
				"--initial-cluster", p.Node.Name+"="+distrolocal.EtcdPeerURL(addr), "--initial-cluster-state", "new")
		}
		out = append(out, etcd)

		out = append(out, spec{name: APIServer, dirs: []string{f(dirAPIServer)}, args: []string{
			"--etcd-servers", distrolocal.EtcdClientURL(addr),
			"--etcd-cafile", f(distrolocal.FileCA),
			"--etcd-certfile", f(distrolocal.FileAPIServerEtcdCert), "--etcd-keyfile", f(distrolocal.FileAPIServerEtcdKey),
			"--bind-address", addr, "--advertise-address", addr, "--secure-port", fmt.Sprint(distrolocal.APIServerPort),
			"--tls-cert-file", f(distrolocal.FileAPIServerCert), "--tls-private-key-file", f(distrolocal.FileAPIServerKey),
			"--client-ca-file", f(distrolocal.FileCA),
			"--kubelet-client-certificate", f(distrolocal.FileAPIServerKubeletCert),
			"--kubelet-client-key", f(distrolocal.FileAPIServerKubeletKey),
			// A node's address, not its name: names resolve on a Docker
			// network, not in a VPC (kubeadm's order).
			"--kubelet-preferred-address-types", "InternalIP,ExternalIP,Hostname",
			// The aggregation layer (metrics.k8s.io of the metrics-server
			// pack): the API server proxies to an extension API server
			// with the front-proxy client certificate and names the user
			// in these headers; the extension trusts them from that
			// certificate only. It reaches the extension at its pods'
			// addresses, not the Service's, so a control-plane node needs
			// no kube-proxy for it.
			"--requestheader-client-ca-file", f(distrolocal.FileFrontProxyCA),
			"--requestheader-allowed-names", pki.UserFrontProxyClient,
			"--requestheader-username-headers", "X-Remote-User",
			"--requestheader-group-headers", "X-Remote-Group",
			"--requestheader-extra-headers-prefix", "X-Remote-Extra-",
			"--proxy-client-cert-file", f(distrolocal.FileFrontProxyClientCert),
			"--proxy-client-key-file", f(distrolocal.FileFrontProxyClientKey),
			"--enable-aggregator-routing=true",
			"--service-account-issuer", cp.ServiceAccountIssuer,
			"--service-account-key-file", f(distrolocal.FileServiceAccountPub),
			"--service-account-signing-key-file", f(distrolocal.FileServiceAccountKey),
			"--service-cluster-ip-range", p.ServiceCIDR,
			"--authorization-mode", "Node,RBAC", "--enable-admission-plugins", "NodeRestriction",
			"--allow-privileged", "--endpoint-reconciler-type", reconciler(p),
			"--cert-dir", f(dirAPIServer),
		}, env: componentStatusEnv(addr)})
		if parts.Kubelet != nil {
			// Real kubelets serve with a certificate of the cluster CA
			// (the node's name and address): the API server verifies it
			// when it reaches them (logs, exec, port-forward). Hollow
			// kubelets serve none.
			apiserver := &out[len(out)-1]
			apiserver.args = append(apiserver.args, "--kubelet-certificate-authority", f(distrolocal.FileCA))
		}

		leader := fmt.Sprintf("--leader-elect=%t", cp.LeaderElect)
		// The controller manager and the scheduler authenticate clients
		// of their ports with the cluster CA given here, without looking
		// up the API server's extension-apiserver-authentication
		// ConfigMap: nothing reaches them through the aggregation layer.
		authn := []string{"--authentication-skip-lookup", "--client-ca-file", f(distrolocal.FileCA)}
		cm := spec{name: ControllerManager, dirs: []string{f(dirControllerManager)}, args: []string{
			"--kubeconfig", f(distrolocal.FileControllerManagerConf),
			"--authentication-kubeconfig", f(distrolocal.FileControllerManagerConf),
			"--authorization-kubeconfig", f(distrolocal.FileControllerManagerConf),
			"--bind-address", addr, "--secure-port", fmt.Sprint(distrolocal.ControllerManagerPort), leader,
			"--use-service-account-credentials",
			"--service-account-private-key-file", f(distrolocal.FileServiceAccountKey),
			"--root-ca-file", f(distrolocal.FileCA),
			"--service-cluster-ip-range", p.ServiceCIDR,
			"--cert-dir", f(dirControllerManager),
			// Its own client's rate (20 a second by default) made its start
			// last 4.5 s on a new cluster: each controller's service account
			// and token is asked for one after another before any controller
			// runs, the node-ipam controller (a node's pod range) among them.
			"--kube-api-qps", "100", "--kube-api-burst", "200",
		}}
		cm.args = append(cm.args, authn...)
		if p.PodCIDR != "" {
			cm.args = append(cm.args, "--cluster-cidr", p.PodCIDR, "--allocate-node-cidrs")
		}
		out = append(out, cm)

		out = append(out, spec{name: Scheduler, args: append([]string{
			"--kubeconfig", f(distrolocal.FileSchedulerConf),
			"--authentication-kubeconfig", f(distrolocal.FileSchedulerConf),
			"--authorization-kubeconfig", f(distrolocal.FileSchedulerConf),
			"--bind-address", addr, "--secure-port", fmt.Sprint(distrolocal.SchedulerPort), leader,
		}, authn...)})
	}

	if k := parts.Kubelet; k != nil {
		out = append(out, k.spec())
	} else {
		out = append(out, hollowKubelet(p, f))
	}
	for _, c := range parts.After {
		out = append(out, c.spec())
	}

	env := p.Proxy.Env()
	if p.Files[distrolocal.FileProxyCA] != "" {
		env = append(env, "SSL_CERT_DIR=/etc/ssl/certs:"+filepath.Dir(f(distrolocal.FileProxyCA)))
	}
	for i := range out {
		out[i].binary = binary
		out[i].env = append(out[i].env, env...)
		out[i].hash = specHash(out[i], p.Files)
	}
	return out
}

// hollowKubelet is the kubelet of a local node. Role labels are not set
// here: NodeRestriction refuses node-role.kubernetes.io labels from a
// kubelet; the plan sets them. HollowLabel says in Kubernetes what the node
// is.
func hollowKubelet(p distrolocal.InstallParams, f func(string) string) spec {
	kubelet := spec{name: Kubelet, dirs: []string{f(dirKubelet)}, args: []string{
		"--name", p.Node.Name,
		"--kubeconfig", f(distrolocal.FileKubeletConf),
		"--root-dir", f(dirKubelet),
		"--address", p.Node.Address, "--node-ip", p.Node.Address,
		"--kubelet-port", fmt.Sprint(distrolocal.KubeletPort), "--kubelet-read-only-port", "0",
		"--node-labels", HollowLabel + "=true",
	}}
	if len(p.Taints) > 0 {
		kubelet.args = append(kubelet.args, "--register-with-taints", strings.Join(p.Taints, ","))
	}
	return kubelet
}

// reconciler is the API server's --endpoint-reconciler-type: the default
// Service kubernetes lists the API servers where pods can reach them (lease)
// on nodes that run containers; local nodes' addresses are loopback ones no
// pod could use, and none runs anyway (none).
func reconciler(p distrolocal.InstallParams) string {
	if p.Containers != nil {
		return "lease"
	}
	return "none"
}

// componentStatusEnv tells kiln-kube's apiserver where its node's
// controller-manager and scheduler listen, so that `kubectl get
// componentstatuses` probes them there: upstream probes 127.0.0.1, where a
// local node's are not (docs/kube.md, "The componentstatus patch").
func componentStatusEnv(addr string) []string {
	return []string{
		"KILN_COMPONENTSTATUS_CONTROLLER_MANAGER=" + net.JoinHostPort(addr, fmt.Sprint(distrolocal.ControllerManagerPort)),
		"KILN_COMPONENTSTATUS_SCHEDULER=" + net.JoinHostPort(addr, fmt.Sprint(distrolocal.SchedulerPort)),
	}
}

// writeSpecFiles writes the configuration files of specs, leaving those
// already right alone.
func writeSpecFiles(all []spec) error {
	for _, s := range all {
		for path, content := range s.files {
			if old, err := os.ReadFile(path); err == nil && string(old) == content {
				continue
			}
			if err := atomicfile.WriteMkdirAll(path, []byte(content), 0o600); err != nil {
				return fmt.Errorf("%s: %w", s.name, err)
			}
		}
	}
	return nil
}

// specHash covers the program, the command line, the environment and every
// file of the node: new certificates restart the components that read them,
// and another Kubernetes version (another program) restarts them all.
func specHash(s spec, files map[string]string) string {
	h := sha256.New()
	for _, part := range [][]string{{s.binary, s.name, s.command}, s.args, s.env} {
		for _, a := range part {
			fmt.Fprintf(h, "%d:%s\n", len(a), a)
		}
	}
	for _, n := range slices.Sorted(maps.Keys(s.files)) {
		fmt.Fprintf(h, "%s %d:%s\n", n, len(s.files[n]), s.files[n])
	}
	names := make([]string, 0, len(files))
	for n := range files {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		fmt.Fprintf(h, "%s %d:%s\n", n, len(files[n]), files[n])
	}
	return hex.EncodeToString(h.Sum(nil))[:16]
}

// Install steps, reported through Reporter.Progress.
const (
	StepWriteCertificates      = "write-certificates"
	StepStartEtcd              = "start-etcd"
	StepEtcdHealthy            = "etcd-healthy"
	StepStartAPIServer         = "start-apiserver"
	StepAPIServerReady         = "apiserver-ready"
	StepStartControllerManager = "start-controller-manager"
	StepStartScheduler         = "start-scheduler"
	StepStartKubelet           = "start-kubelet"
	StepKubeletRegistered      = "kubelet-registered"
	// Nodes that run containers only (the kiln distribution's Extension
	// starts kube-proxy; a restore starts it again).
	StepStartKubeProxy = "start-kube-proxy"
	StepStopComponents = "stop-components"
	StepRemoveFiles    = "remove-files"
)

var (
	controlPlaneSteps = []string{StepWriteCertificates, StepStartEtcd, StepEtcdHealthy, StepStartAPIServer,
		StepAPIServerReady, StepStartControllerManager, StepStartScheduler, StepStartKubelet, StepKubeletRegistered}
	workerSteps = []string{StepWriteCertificates, StepStartKubelet, StepKubeletRegistered}
)

// specsFile is Root/var/lib/kiln-node/components.json: what the last install runs, so a
// restarted agent can resume supervising it (Executor.Resume) without an
// instruction.
// (kept where a restarted node finds it: a docker node's /run is a tmpfs).
const specsFile = dirState + "/components.json"

// legacySpecsFile is where agents before docker nodes recorded it.
const legacySpecsFile = dirRun + "/components.json"

type specRecord struct {
	Name string `json:"name"`
	// Command is the kiln-kube subcommand; empty in records of agents
	// before real kubelets, and for components named after theirs.
	Command string `json:"command,omitempty"`
	// Binary is empty in records of agents before kiln-kube versions;
	// those ran the agent's one kiln-kube.
	Binary string   `json:"binary,omitempty"`
	Args   []string `json:"args"`
	Env    []string `json:"env,omitempty"`
	Dirs   []string `json:"dirs,omitempty"`
	Hash   string   `json:"hash"`
}

func saveSpecs(path string, ss []spec) error {
	recs := make([]specRecord, 0, len(ss))
	for _, s := range ss {
		recs = append(recs, specRecord{Name: s.name, Command: s.command, Binary: s.binary, Args: s.args, Env: s.env, Dirs: s.dirs, Hash: s.hash})
	}
	return writeJSON(path, recs)
}

func loadSpecs(path string) ([]spec, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var recs []specRecord
	if err := json.Unmarshal(b, &recs); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	out := make([]spec, 0, len(recs))
	for _, r := range recs {
		if !slices.Contains(allComponents, r.Name) || r.Hash == "" {
			return nil, fmt.Errorf("%s: unknown component %q", path, r.Name)
		}
		out = append(out, spec{name: r.Name, command: r.Command, binary: r.Binary, args: r.Args, env: r.Env, dirs: r.Dirs, hash: r.Hash})
	}
	return out, nil
}
