package kubeadm

import (
	"fmt"
	"strings"

	"kiln.dev/kiln/internal/sysimages"
)

// The install from Kiln (Input.CNI = CNIBridge): nothing comes from the
// internet. kubeadm, the kubelet and kubectl are kiln-kube, copied out of the
// kube image in Kiln's registry; containerd (the host's package) pulls every
// image through Kiln's registry, the control plane's static pods' included;
// kiln-agent runs containerd, the kubelet, kube-proxy and the pod network as
// its services; Kiln's CoreDNS is applied by the controller. The bridge pod
// network is the kiln distribution's: the CNI bridge plugin on each node's
// pod range and a route per other node's (docs/distro-kiln.md).

// CNIBridge is Kiln's pod network (v1.CNIBridge): with it the plan installs
// from Kiln.
const CNIBridge = "bridge"

// KubeImageRepository is where kubeadm names the control plane's images
// (kiln.dev/kube-apiserver:VERSION, kiln.dev/etcd:VERSION, ...): Kiln's
// registry answers for kiln.dev (internal/sysimages).
const KubeImageRepository = "kiln.dev"

// Paths of an install from Kiln.
const (
	// KubeDir holds kiln-kube of each version: KubeDir/VERSION/kiln-kube.
	KubeDir       = "/opt/kiln/kube"
	KubeletRun    = "/etc/kiln/kubelet-run"
	KubeProxyConf = "/etc/kiln/kube-proxy.conf"
	KubeProxyYAML = "/etc/kiln/kube-proxy.yaml"
	// CgroupRootFile, when a host has it, names the cgroup the kubelet puts
	// pods under (a host that is a container: kiln-host-init writes it).
	CgroupRootFile = "/run/kiln/cgroup-root"
	// PodNetworkState is the pod network's state (kiln-agent pod-network).
	PodNetworkState = "/var/lib/kiln-node"
	// KubeadmDone says the node's kubeadm init or join succeeded.
	KubeadmDone = "/etc/kiln/kubeadm-done"
	// KilnCACert and KilnCAKey are the cluster CA on the first
	// control-plane node, copied to /etc/kubernetes/pki before kubeadm init.
	KilnCACert = "/etc/kiln/pki/ca.crt"
	KilnCAKey  = "/etc/kiln/pki/ca.key"
)

// Services kiln-agent runs for an install from Kiln.
const (
	ServiceContainerd = "containerd"
	ServiceKubelet    = "kubelet"
	ServiceKubeProxy  = "kube-proxy"
	ServicePodNetwork = "pod-network"
)

// CNIBinDir is where an install from Kiln puts the CNI plugins
// (containerd's bin_dir), apart from any the host's packages installed.
const CNIBinDir = "/opt/kiln/cni/bin"

// CNIPlugins are the CNI plugins the bridge pod network runs
// (docs/distro-kiln.md), copied from sysimages.CNIPluginsImage.
var CNIPlugins = []string{"bridge", "host-local", "portmap", "loopback"}

// Steps of an install from Kiln.
const (
	StepFetchKubernetes = "fetch-kubernetes"
	StepStartServices   = "start-services"
	StepPodNetwork      = "start-pod-network"
)

// KubeImage is the image that holds kiln-kube of version, and the file in it.
func KubeImage(version string) (image, file string) {
	return KubeImageRepository + "/kube:" + version, "usr/local/bin/kiln-kube"
}

// fromKiln reports whether the plan installs from Kiln.
func (s *spec) fromKiln() bool { return s.CNI == CNIBridge }

// kubeBinary is kiln-kube of the plan's version on the host.
func (s *spec) kubeBinary() string { return KubeDir + "/" + s.KubernetesVersion + "/kiln-kube" }

func (b *builder) kilnFiles() {
	s := b.s
	b.file(ContainerdConfig, 0o644, "containerd pulls every image through Kiln's registry (certs.d) and runs "+
		"containers with the cgroupfs driver, like the kubelet", kilnContainerdConfig)
	b.file(KubeletRun, 0o755, "how kiln-agent runs the kubelet: what kubeadm's systemd drop-in does", kubeletRunScript)
	b.file(KubeProxyConf, 0o600, "kube-proxy's credentials (system:kube-proxy, from the cluster CA); the pod "+
		"network lists nodes with them too", s.KubeProxyKubeconfig)
	b.file(KubeProxyYAML, 0o644, "kube-proxy in iptables mode", s.kubeProxyConfig())
	if ca := s.ClusterCA; ca != nil {
		// Kept apart from /etc/kubernetes/pki, which kubeadm reset empties:
		// copied there before each kubeadm init (kilnKubeadm).
		b.file(KilnCACert, 0o644, "the cluster CA Kiln keeps: kubeadm init signs the cluster's certificates with it instead of making one",
			pemText(ca.CertPEM))
		b.file(KilnCAKey, 0o600, "the cluster CA's key (kubeadm init --upload-certs shares it with the other control-plane nodes)",
			pemText(ca.KeyPEM))
	}
	b.file(KubeadmConfigPath, 0o600, "kubeadm's configuration for this node (it holds the join secrets)", s.kubeadmConfig())
}

func (b *builder) kilnCommands() {
	s := b.s
	b.checkInterface()
	b.step = StepPrepareKernel
	b.run("pods' traffic is forwarded between the pod bridge and the network", "sysctl", "-w", "net.ipv4.ip_forward=1")

	b.step = StepFetchKubernetes
	image, file := KubeImage(s.KubernetesVersion)
	bin := s.kubeBinary()
	b.plan.Commands = append(b.plan.Commands, Command{Step: b.step, SkipIf: []string{"test", "-x", bin},
		Reason: "kubeadm, the kubelet and kubectl " + s.KubernetesVersion + ": kiln-kube, from Kiln's registry",
		Fetch:  &Fetch{Image: image, File: file, Path: bin}})
	b.run("they answer to their upstream names",
		"sh", "-c", `for n in kubeadm kubelet kubectl; do ln -sfn "$1" "/usr/local/bin/$n"; done`, "link-kubernetes", bin)
	for _, plugin := range CNIPlugins {
		path := CNIBinDir + "/" + plugin
		b.plan.Commands = append(b.plan.Commands, Command{Step: b.step, SkipIf: []string{"test", "-x", path},
			Reason: "the CNI plugin " + plugin + " of the bridge pod network, from Kiln's registry",
			Fetch:  &Fetch{Image: sysimages.CNIPluginsImage, File: "opt/cni/bin/" + plugin, Path: path}})
	}

	b.step = StepStartServices
	b.service(ServiceContainerd, "the container runtime, with Kiln's configuration", "containerd", "--config", ContainerdConfig)
	// Its CRI plugin, not only its socket: the socket of the containerd
	// before a reset is still there, and a containerd that just started
	// answers before its CRI service is up (kubeadm's preflight then fails
	// "unknown service runtime.v1.RuntimeService": seen on a busy machine).
	b.run("wait until containerd's CRI service answers",
		"sh", "-c", `i=0; until ctr plugins ls 2>/dev/null | grep -Eq '^io\.containerd\.grpc\.v1[[:space:]]+cri[[:space:]].*[[:space:]]ok[[:space:]]*$'; do i=$((i+1)); `+
			`if [ $i -gt 300 ]; then echo "containerd's CRI plugin did not answer within 60 s (ctr plugins ls)" >&2; ctr plugins ls >&2; exit 1; fi; sleep 0.2; done`,
		"wait-containerd")
	b.service(ServiceKubelet, "the kubelet; it waits for the configuration kubeadm writes", KubeletRun)

	b.kilnKubeadm()

	b.step = StepPodNetwork
	b.service(ServiceKubeProxy, "Services on this node", bin, "kube-proxy", "--config", KubeProxyYAML)
	b.service(ServicePodNetwork, "the bridge pod network: the node's pod range once the controller manager allocates it, "+
		"a route per other node's; the node takes pods once every other node routes to it",
		"kiln-agent", "pod-network", "--node", s.Node.Name, "--endpoint", s.endpoint, "--kubeconfig", KubeProxyConf,
		"--node-kubeconfig", KubeletKubeconfig, "--cluster-cidr", s.pod.String())
}

// kilnKubeadm runs kubeadm init on the first control-plane node, kubeadm
// join on the others, and marks the node done (KubeadmDone) once it
// succeeded: a plan run again skips it. An attempt that did not finish (the
// host stopped in the middle, the agent runs the plan again when it is
// back) is undone first with kubeadm reset: kubeadm refuses to run over
// what it left, and the node cannot be part of the cluster yet (the first
// control-plane node's init, which others wait for, or a join, which
// kubeadm reset takes back out of etcd).
func (b *builder) kilnKubeadm() {
	s := b.s
	done := []string{"test", "-e", KubeadmDone}
	argv := []string{"kubeadm", "join", "--config", KubeadmConfigPath}
	what := "join the cluster at " + s.endpoint
	b.step = StepKubeadmJoin
	if s.FirstControlPlane {
		b.step = StepKubeadmInit
		argv = []string{"kubeadm", "init", "--config", KubeadmConfigPath, "--upload-certs", "--skip-token-print", "--skip-certificate-key-print"}
		what = "create the cluster; --upload-certs lets the other control-plane nodes join; its output (the node's logs) omits the token and the key"
	}
	b.runUnless([]string{"sh", "-c", `[ -e "$1" ] || [ -z "$(ls -A /etc/kubernetes/manifests 2>/dev/null)$(ls /etc/kubernetes/*.conf 2>/dev/null)" ]`,
		"kubeadm-unfinished", KubeadmDone},
		"undo a kubeadm "+argv[1]+" that did not finish (kubeadm refuses to run over what it left)",
		"kubeadm", "reset", "--force", "--cri-socket", ContainerdSocket)
	if s.ClusterCA != nil {
		b.runUnless(done, "the cluster CA where kubeadm init looks for it",
			"sh", "-c", `mkdir -p /etc/kubernetes/pki && cp -p "$1" "$2" /etc/kubernetes/pki/`, "copy-cluster-ca", KilnCACert, KilnCAKey)
	}
	b.runUnless(done, what, argv...)
	b.runUnless(done, "mark this node's kubeadm "+argv[1]+" done: a plan run again does not run it again", "touch", KubeadmDone)
}

// service appends a command that starts argv as kiln-agent's service name.
func (b *builder) service(name, reason string, argv ...string) {
	b.plan.Commands = append(b.plan.Commands, Command{Step: b.step, Service: name, Argv: argv, Reason: reason})
}

// kilnContainerdConfig is containerd's configuration on a host installed
// from Kiln: as on Kiln's node image (images/node/files/etc/containerd).
const kilnContainerdConfig = `# Written by Kiln: containerd for the kubelet; every image comes from Kiln's registry.
version = 2

[plugins."io.containerd.grpc.v1.cri"]
  # Kiln's pause image, from Kiln's registry (a node pulls it once).
  sandbox_image = "kiln.dev/pause:1"
  # A host that is a container may have no CAP_SYS_RESOURCE: no score goes below containerd's own.
  restrict_oom_score_adj = true

  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"

  [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
    runtime_type = "io.containerd.runc.v2"

  [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
    SystemdCgroup = false

  # One hosts.toml per registry, written by kiln-agent: each sends pulls to Kiln's registry.
  [plugins."io.containerd.grpc.v1.cri".registry]
    config_path = "/etc/containerd/certs.d"

  [plugins."io.containerd.grpc.v1.cri".cni]
    # Kiln's CNI plugins, from Kiln's registry.
    bin_dir = "` + CNIBinDir + `"
    conf_dir = "/etc/cni/net.d"
`

// kubeletRunScript runs the kubelet as kubeadm's systemd drop-in
// (10-kubeadm.conf) does, once kubeadm init or join has written its
// configuration, with the cgroup root the host names.
const kubeletRunScript = `#!/bin/sh
# Written by Kiln: the kubelet, as kubeadm's systemd drop-in (10-kubeadm.conf) runs it; kiln-agent
# runs this script as its service "kubelet" and starts it again when it exits.
set -eu
# kubeadm init or join writes the flags, then the configuration: wait for both.
until [ -f /var/lib/kubelet/kubeadm-flags.env ] && [ -f /var/lib/kubelet/config.yaml ]; do sleep 0.5; done
KUBELET_KUBEADM_ARGS=
. /var/lib/kubelet/kubeadm-flags.env
set --
if [ -s ` + CgroupRootFile + ` ]; then
	# A host that is a container: pods go under its own cgroup.
	set -- --cgroup-root="$(cat ` + CgroupRootFile + `)"
fi
# shellcheck disable=SC2086 # kubeadm's flags are words
exec kubelet --bootstrap-kubeconfig=/etc/kubernetes/bootstrap-kubelet.conf --kubeconfig=/etc/kubernetes/kubelet.conf \
	--config=/var/lib/kubelet/config.yaml $KUBELET_KUBEADM_ARGS "$@"
`

// kubeProxyConfig is kube-proxy's configuration: iptables mode; conntrack's
// table size is the host's to set (maxPerCore 0 leaves it); NodePorts
// answer on the node's primary address.
func (s *spec) kubeProxyConfig() string {
	return fmt.Sprintf(`apiVersion: kubeproxy.config.k8s.io/v1alpha1
kind: KubeProxyConfiguration
mode: iptables
clientConnection: {kubeconfig: %s}
hostnameOverride: %s
clusterCIDR: %s
nodePortAddresses: [primary]
conntrack: {maxPerCore: 0}
`, q(KubeProxyConf), q(s.Node.Name), q(s.pod.String()))
}

// kilnClusterConfig is what ClusterConfiguration says besides the common
// part on an install from Kiln: the images from Kiln's registry, kiln-kube's
// etcd, no kube-proxy and CoreDNS add-ons (kiln-agent runs kube-proxy; the
// controller applies Kiln's CoreDNS).
func (s *spec) kilnClusterConfig(b *strings.Builder) {
	fmt.Fprintf(b, "imageRepository: %s\n", q(KubeImageRepository))
	fmt.Fprintf(b, "etcd:\n  local:\n    imageRepository: %s\n    imageTag: %s\n", q(KubeImageRepository), q(s.KubernetesVersion))
	b.WriteString("dns:\n  disabled: true\nproxy:\n  disabled: true\n")
}

// kilnPreflightIgnored are kubeadm's preflight checks an install from Kiln
// does not hold to, each for its reason: SystemVerification reads the
// kernel's configuration and cgroups the way a machine booted with systemd
// has them (Kiln's prechecks check what the kubelet needs); Swap, because the
// kubelet is configured to tolerate it (failSwapOn false).
var kilnPreflightIgnored = []string{"SystemVerification", "Swap"}
