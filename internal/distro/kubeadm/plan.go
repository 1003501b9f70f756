package kubeadm

import (
	"io/fs"
	"strings"

	v1 "kiln.dev/kiln/api/v1"
)

// Pinned releases and where they come from.
const (
	// CalicoVersion is the Calico release whose Tigera operator manifests
	// the plan applies (CalicoManifestBase/<version>/manifests/...).
	CalicoVersion      = "v3.32.2"
	CalicoManifestBase = "https://raw.githubusercontent.com/projectcalico/calico/"
	// CiliumVersion is the Cilium release the cilium CLI installs (its Helm
	// chart, fetched by the CLI).
	CiliumVersion = "1.19.5"
	// CiliumCLIVersion is the cilium CLI release the plan downloads from
	// CiliumCLIReleases/<version>/cilium-linux-<arch>.tar.gz.
	CiliumCLIVersion  = "v0.19.5"
	CiliumCLIReleases = "https://github.com/cilium/cilium-cli/releases/download/"
	// KubernetesPackages is the root of the Kubernetes apt repositories, one
	// per minor: KubernetesPackages/core:/stable:/v1.36/deb/.
	KubernetesPackages = "https://pkgs.k8s.io"
)

// Paths on the host.
const (
	KubeadmConfigPath = "/etc/kiln/kubeadm.yaml"
	ClusterCACert     = "/etc/kubernetes/pki/ca.crt"
	ClusterCAKey      = "/etc/kubernetes/pki/ca.key"
	AdminKubeconfig   = "/etc/kubernetes/admin.conf"
	// ManifestsDir holds the control plane's static pods.
	ManifestsDir = "/etc/kubernetes/manifests"
	// StoppedManifestsDir holds the static pods a restore stopped
	// (internal/agent/distro/kubeadm backup.go): the kubelet does not read
	// it.
	StoppedManifestsDir = "/etc/kubernetes/manifests.stopped-by-kiln"
	KubeletKubeconfig   = "/etc/kubernetes/kubelet.conf"
	ProxyCAPath         = "/usr/local/share/ca-certificates/kiln-proxy-ca.crt"
	CalicoInstallation  = "/etc/kiln/calico-installation.yaml"
	ContainerdConfig    = "/etc/containerd/config.toml"
	ContainerdSocket    = "unix:///var/run/containerd/containerd.sock"
	AptKeyring          = "/etc/apt/keyrings/kubernetes-apt-keyring.gpg"
	CiliumCLIDir        = "/var/lib/kiln/cilium-cli/" + CiliumCLIVersion
	// The proxy settings of apt, containerd and the kubelet (they may hold
	// the proxy's credentials).
	AptProxyConf          = "/etc/apt/apt.conf.d/90kiln-proxy"
	ContainerdProxyDropIn = "/etc/systemd/system/containerd.service.d/kiln-proxy.conf"
	KubeletProxyDropIn    = "/etc/systemd/system/kubelet.service.d/kiln-proxy.conf"
)

// ControlPlaneTaint is the taint of a dedicated control plane's nodes.
const ControlPlaneTaint = "node-role.kubernetes.io/control-plane:NoSchedule"

// Step names, in the order a plan runs them. A plan has the ones that apply
// to its node.
const (
	StepWriteFiles              = "write-files"
	StepCheckInterface          = "check-interface"
	StepPrepareKernel           = "prepare-kernel"
	StepInstallPrerequisites    = "install-prerequisites"
	StepTrustProxyCA            = "trust-proxy-ca"
	StepAddKubernetesRepository = "add-kubernetes-repository"
	StepInstallPackages         = "install-packages"
	StepEnableServices          = "enable-services"
	StepKubeadmInit             = "kubeadm-init"
	StepKubeadmJoin             = "kubeadm-join"
	StepInstallCNI              = "install-cni"
)

// Plan is what a node runs to install Kubernetes with kubeadm: write the
// files, then run the commands in order, each with Env in its environment.
type Plan struct {
	// Summary says in one line which node and which cluster the plan is for.
	Summary string `json:"summary"`
	// Env is NAME=value, set for every command: DEBIAN_FRONTEND and the
	// proxy variables.
	Env   []string `json:"env"`
	Files []File   `json:"files"`
	// RegistryMirror: kiln-agent writes containerd's hosts.toml of every
	// common registry host (internal/agent/mirror) with the files, sending
	// every pull to Kiln's registry with the node's certificate.
	RegistryMirror bool      `json:"registryMirror,omitempty"`
	Commands       []Command `json:"commands"`
}

// File is one file the plan writes (step write-files), replacing what is
// there. Parent directories are created as needed.
type File struct {
	Path    string      `json:"path"`
	Mode    fs.FileMode `json:"mode"`
	Content string      `json:"content"`
	Reason  string      `json:"reason"`
}

// Command is one command the plan runs. It fails the plan when it exits
// with a status other than 0.
type Command struct {
	// Step is the name of the step the command belongs to.
	Step string `json:"step"`
	// Argv is the program and its arguments, run without a shell.
	Argv []string `json:"argv"`
	// Reason says why the command runs.
	Reason string `json:"reason"`
	// SkipIf, when set, is run first: if it exits with 0 the work is
	// already done and Argv is not run.
	SkipIf []string `json:"skipIf,omitempty"`
	// Service, when set, names a service of kiln-agent's: Argv is started
	// under its supervision (restarted when it exits, started again when
	// the agent starts) instead of run to its end; a service of that name
	// running the same Argv is left alone. An Argv whose program is
	// "kiln-agent" runs the agent's own program.
	Service string `json:"service,omitempty"`
	// Stop, when set (and Argv is not), names services of kiln-agent's to
	// stop; a service that does not run is no error.
	Stop []string `json:"stop,omitempty"`
	// Fetch, when set (and Argv is not), copies a file out of an image in
	// Kiln's registry.
	Fetch *Fetch `json:"fetch,omitempty"`
}

// Fetch copies File of Image, pulled from Kiln's registry with the node's
// certificate, to Path on the host (mode 0755, replacing what is there).
type Fetch struct {
	Image string `json:"image"`
	File  string `json:"file"`
	Path  string `json:"path"`
}

// Steps returns the names of the plan's steps in order.
func (p *Plan) Steps() []string {
	var steps []string
	if len(p.Files) > 0 || p.RegistryMirror {
		steps = append(steps, StepWriteFiles)
	}
	for _, c := range p.Commands {
		if len(steps) == 0 || steps[len(steps)-1] != c.Step {
			steps = append(steps, c.Step)
		}
	}
	return steps
}

// Build returns the plan that installs in's node, or a *FieldError (which
// wraps ErrInvalidInput) naming the input field that cannot work. It has no
// side effect: the same input gives the same plan.
func Build(in Input) (*Plan, error) {
	s, err := check(in)
	if err != nil {
		return nil, err
	}
	b := &builder{s: s}
	b.plan.Summary = s.summary()
	if s.fromKiln() {
		b.plan.RegistryMirror = true
		b.kilnFiles()
		b.kilnCommands()
		return &b.plan, nil
	}
	b.plan.Env = append([]string{"DEBIAN_FRONTEND=noninteractive"}, s.proxy.Env()...)
	b.files()
	b.commands()
	return &b.plan, nil
}

func (s *spec) summary() string {
	what := "worker, kubeadm join"
	switch {
	case s.Node.Role == v1.RoleControlPlane && s.FirstControlPlane:
		what = "first control-plane node, kubeadm init"
	case s.Node.Role == v1.RoleControlPlane:
		what = "control-plane node, kubeadm join --control-plane"
	}
	return "node " + s.Node.Name + " (" + what + ") of cluster " + s.ClusterName + ", Kubernetes " + s.KubernetesVersion
}

// builder appends a plan's files and commands.
type builder struct {
	s    *spec
	plan Plan
	step string
}

func (b *builder) file(path string, mode fs.FileMode, reason, content string) {
	b.plan.Files = append(b.plan.Files, File{Path: path, Mode: mode, Content: content, Reason: reason})
}

func (b *builder) run(reason string, argv ...string) {
	b.plan.Commands = append(b.plan.Commands, Command{Step: b.step, Argv: argv, Reason: reason})
}

func (b *builder) runUnless(skipIf []string, reason string, argv ...string) {
	b.plan.Commands = append(b.plan.Commands, Command{Step: b.step, Argv: argv, Reason: reason, SkipIf: skipIf})
}

func (b *builder) files() {
	s := b.s
	b.file("/etc/modules-load.d/kiln-kubernetes.conf", 0o644,
		"kernel modules for container storage (overlay) and bridged pod traffic (br_netfilter), loaded at boot",
		"# Written by Kiln: kernel modules Kubernetes networking needs.\noverlay\nbr_netfilter\n")
	b.file("/etc/sysctl.d/99-kiln-kubernetes.conf", 0o644,
		"forward packets and let iptables see bridged traffic, as kube-proxy and the CNI expect",
		"# Written by Kiln: sysctls Kubernetes networking needs.\n"+
			"net.ipv4.ip_forward = 1\n"+
			"net.bridge.bridge-nf-call-iptables = 1\n"+
			"net.bridge.bridge-nf-call-ip6tables = 1\n")
	if s.rootCA != "" {
		b.file(ProxyCAPath, 0o644, "the proxy's root CA, for the system trust store (update-ca-certificates)", s.rootCA)
	}
	if s.proxy.Set() {
		b.file(AptProxyConf, 0o644, "apt reaches its repositories through the proxy", s.aptProxy())
		b.file(ContainerdProxyDropIn, 0o644,
			"containerd pulls images through the proxy", s.systemdProxy("containerd"))
		b.file(KubeletProxyDropIn, 0o644,
			"the kubelet's environment has the proxy and what bypasses it", s.systemdProxy("the kubelet"))
	}
	b.file(ContainerdConfig, 0o644, "containerd's CRI runtime uses the systemd cgroup driver, like the kubelet", containerdConfig)
	b.file("/etc/apt/sources.list.d/kubernetes.list", 0o644,
		"the Kubernetes "+s.minor+" package repository, signed by its own key",
		"deb [signed-by="+AptKeyring+"] "+s.repository()+" /\n")
	b.caFiles()
	b.file(KubeadmConfigPath, 0o600, "kubeadm's configuration for this node (it holds the join secrets)", s.kubeadmConfig())
	if s.FirstControlPlane && s.CNI == CNICalico {
		b.file(CalicoInstallation, 0o644, "the Calico installation the Tigera operator carries out: the pod CIDR as its IP pool", s.calicoInstallation())
	}
}

// caFiles writes the cluster CA Kiln keeps on the first control-plane node.
func (b *builder) caFiles() {
	if ca := b.s.ClusterCA; ca != nil {
		b.file(ClusterCACert, 0o644, "the cluster CA Kiln keeps: kubeadm init signs the cluster's certificates with it instead of making one",
			pemText(ca.CertPEM))
		b.file(ClusterCAKey, 0o600, "the cluster CA's key (kubeadm init --upload-certs shares it with the other control-plane nodes)",
			pemText(ca.KeyPEM))
	}
}

// pemText is PEM text ending in a newline.
func pemText(s string) string {
	return strings.TrimRight(s, "\n") + "\n"
}

// repository is the apt repository of the version's minor.
func (s *spec) repository() string {
	return KubernetesPackages + "/core:/stable:/" + s.minor + "/deb/"
}

const containerdConfig = `# Written by Kiln: containerd for the kubelet.
version = 2

[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
  runtime_type = "io.containerd.runc.v2"

[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
  SystemdCgroup = true
`

func (b *builder) commands() {
	s := b.s
	b.checkInterface()

	b.step = StepPrepareKernel
	b.run("the kubelet does not run with swap on", "swapoff", "-a")
	b.run("keep swap off after a reboot: comment out the swap lines of /etc/fstab",
		"sed", "-i", "-E", `/^[^#].*[[:space:]]swap[[:space:]]/s/^/#/`, "/etc/fstab")
	b.run("load the modules now (modules-load.d loads them at boot)", "modprobe", "overlay")
	b.run("bridged pod traffic passes through iptables", "modprobe", "br_netfilter")
	b.run("apply the sysctls now", "sysctl", "--system")

	b.step = StepInstallPrerequisites
	b.run("refresh the package lists", "apt-get", "update")
	b.run("the tools the next steps use", "apt-get", "install", "-y", "ca-certificates", "curl", "gpg")

	if s.rootCA != "" {
		b.step = StepTrustProxyCA
		b.run("add the proxy's root CA to the system trust store (curl, apt, containerd use it)", "update-ca-certificates")
	}

	b.step = StepAddKubernetesRepository
	key := "/etc/kiln/kubernetes-" + s.minor + "-release.key"
	b.run("the signing key of the Kubernetes "+s.minor+" repository",
		"curl", "-fsSL", "--retry", "3", "--create-dirs", "-o", key, s.repository()+"Release.key")
	b.run("where apt keeps repository keys", "mkdir", "-p", "-m", "0755", "/etc/apt/keyrings")
	b.run("in the binary form apt's signed-by reads", "gpg", "--batch", "--yes", "--dearmor", "-o", AptKeyring, key)

	b.step = StepInstallPackages
	b.run("read the Kubernetes repository", "apt-get", "update")
	b.run("containerd from the distribution; kubelet, kubeadm and kubectl at exactly "+s.KubernetesVersion+" (keep Kiln's containerd configuration)",
		"apt-get", "install", "-y", "--allow-change-held-packages",
		"-o", "Dpkg::Options::=--force-confdef", "-o", "Dpkg::Options::=--force-confold",
		"containerd", "kubelet="+s.pkgVersion, "kubeadm="+s.pkgVersion, "kubectl="+s.pkgVersion)
	b.run("keep apt from upgrading them: a Kubernetes upgrade is kubeadm's", "apt-mark", "hold", "kubelet", "kubeadm", "kubectl")

	b.step = StepEnableServices
	b.run("systemd reads the units and drop-ins just written or installed", "systemctl", "daemon-reload")
	b.run("start containerd at boot", "systemctl", "enable", "containerd")
	b.run("containerd with Kiln's configuration, the proxy and the trust store", "systemctl", "restart", "containerd")
	b.run("kubeadm starts the kubelet; it must start at boot too", "systemctl", "enable", "kubelet")

	if !b.kubeadm() {
		return
	}
	b.step = StepInstallCNI
	if s.CNI == CNICalico {
		b.calico()
	} else {
		b.cilium()
	}
}

// checkInterface checks that the node's address is on the interface the
// node was configured with.
func (b *builder) checkInterface() {
	s := b.s
	if s.Node.Interface != "" {
		b.step = StepCheckInterface
		b.run("the node's address must be on interface "+s.Node.Interface,
			"sh", "-c", `ip -4 -o addr show dev "$1" | grep -qF " $2/"`, "check-interface", s.Node.Interface, s.address.String())
	}
}

// kubeadm runs kubeadm init on the first control-plane node, kubeadm join
// on the others, each skipped when the node has its kubelet's kubeconfig
// already; it reports whether the node is the first.
func (b *builder) kubeadm() bool {
	s := b.s
	done := []string{"test", "-e", KubeletKubeconfig}
	if s.FirstControlPlane {
		b.step = StepKubeadmInit
		b.runUnless(done, "create the cluster; --upload-certs lets the other control-plane nodes join; "+
			"its output (the node's logs) omits the token and the key",
			"kubeadm", "init", "--config", KubeadmConfigPath, "--upload-certs", "--skip-token-print", "--skip-certificate-key-print")
		return true
	}
	b.step = StepKubeadmJoin
	b.runUnless(done, "join the cluster at "+s.endpoint, "kubeadm", "join", "--config", KubeadmConfigPath)
	return false
}

func (b *builder) kubectl(args ...string) []string {
	return append([]string{"kubectl", "--kubeconfig", AdminKubeconfig}, args...)
}

func (b *builder) calico() {
	base := CalicoManifestBase + CalicoVersion + "/manifests/"
	b.run("Calico "+CalicoVersion+": the Tigera operator's resource definitions",
		b.kubectl("apply", "--server-side", "--force-conflicts", "-f", base+"operator-crds.yaml")...)
	b.run("the Tigera operator",
		b.kubectl("apply", "--server-side", "--force-conflicts", "-f", base+"tigera-operator.yaml")...)
	b.run("wait until the API serves the operator's resources",
		b.kubectl("wait", "--for", "condition=established", "--timeout", "120s",
			"crd/installations.operator.tigera.io", "crd/apiservers.operator.tigera.io")...)
	b.run("the installation: pod CIDR "+b.s.pod.String()+" as Calico's IP pool",
		b.kubectl("apply", "-f", CalicoInstallation)...)
}

func (b *builder) cilium() {
	s := b.s
	tarball := "cilium-linux-" + s.Node.Arch + ".tar.gz"
	url := CiliumCLIReleases + CiliumCLIVersion + "/" + tarball
	cli := CiliumCLIDir + "/cilium"
	have := []string{"test", "-x", cli}
	b.runUnless(have, "the cilium CLI "+CiliumCLIVersion+" ("+s.Node.Arch+")",
		"curl", "-fsSL", "--retry", "3", "--create-dirs", "-o", CiliumCLIDir+"/"+tarball, url)
	b.runUnless(have, "its checksum, published with the release",
		"curl", "-fsSL", "--retry", "3", "-o", CiliumCLIDir+"/"+tarball+".sha256sum", url+".sha256sum")
	b.runUnless(have, "check the download against it",
		"sh", "-c", `cd "$1" && sha256sum --check --strict "$2.sha256sum"`, "check-cilium-cli", CiliumCLIDir, tarball)
	b.runUnless(have, "unpack it", "tar", "-xzf", CiliumCLIDir+"/"+tarball, "-C", CiliumCLIDir, "cilium")
	env := []string{"env", "KUBECONFIG=" + AdminKubeconfig}
	b.runUnless(b.kubectl("-n", "kube-system", "get", "daemonset", "cilium"),
		"Cilium "+CiliumVersion+" with pod CIDR "+s.pod.String()+" as its cluster pool",
		append(env, cli, "install", "--version", CiliumVersion,
			"--set", "ipam.mode=cluster-pool",
			"--set", "ipam.operator.clusterPoolIPv4PodCIDRList={"+s.pod.String()+"}",
			"--set", "ipam.operator.clusterPoolIPv4MaskSize=24")...)
	b.run("wait until Cilium is ready", append(env, cli, "status", "--wait", "--wait-duration", "10m")...)
}
