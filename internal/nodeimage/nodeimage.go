// Package nodeimage says what Kiln's node image is called and what a container made from it is
// granted: the one place the docker provider and the tests take them from. The image itself is
// built by scripts/node-image.sh (make node-image) from images/node; docs/node-image.md says what
// it holds and why each grant is needed.
package nodeimage

import _ "embed"

// Repository is the node image's repository; the tag is the Kubernetes version.
const Repository = "kiln/node"

// Image is the node image of a Kubernetes version ("v1.36.3" -> "kiln/node:v1.36.3").
func Image(kubernetesVersion string) string { return Repository + ":" + kubernetesVersion }

// Labels the image carries: the hash of what it was built from (a build with the same hash
// does nothing) and its Kubernetes version.
const (
	LabelInputs            = "kiln.dev/node-image-inputs"
	LabelKubernetesVersion = "kiln.dev/kubernetes-version"
)

// Paths in the image.
const (
	// CgroupRootFile holds the cgroup the kubelet's cgroupRoot must be (under the node
	// container's own), written by the entrypoint at start.
	CgroupRootFile = "/run/kiln/cgroup-root"
	// ContainerdSocket is the CRI endpoint of the node's containerd.
	ContainerdSocket = "/run/containerd/containerd.sock"
	// MarkerFile exists on a node of the image (KEY=VALUE lines: KUBERNETES_VERSION,
	// CONTAINERD_CONFIG). Its containerd is the image's own, started by the entrypoint: not a
	// previous installation to replace (kiln-agent's previous-install precheck passes it).
	MarkerFile = "/etc/kiln/node-image"
	// PauseImage is the sandbox image containerd is configured with, imported at start from
	// the image's /usr/share/kiln/images (Kiln builds it: images/pause).
	PauseImage = "kiln.dev/pause:1"
	// KubeBinaryDir holds kiln-kube-VERSION programs (the agent's
	// --kube-binary): the image's own (a link to /usr/local/bin/kiln-kube,
	// of the image's Kubernetes version), and those of
	// other versions the docker provider mounts there, so a node upgrades
	// in place.
	KubeBinaryDir = "/opt/kiln/kube"
	// AgentPath is kiln-agent in the image (the docker provider runs its
	// proxy command as a Service's load balancer).
	AgentPath = "/usr/local/bin/kiln-agent"
	// AgentDataDir is the agent's data dir, on the node's /var volume:
	// kept across restarts.
	AgentDataDir = "/var/lib/kiln-agent"
	// CredentialsFile and PassphraseFile are the node's join files (mode
	// 0600), written from its bootstrap data before it starts; never in
	// a command line, an environment or user data a viewer reads.
	CredentialsFile = "/etc/kiln/credentials.json"
	PassphraseFile  = "/etc/kiln/passphrase"
)

// Capabilities are added to Docker's default set. SYS_ADMIN: mounts (the node's root made
// rshared, /proc/sys/net writable, containers' root filesystems and volumes), namespaces for the
// node's containers; NET_ADMIN: the pod network (bridge, veths, routes, iptables rules);
// SYS_PTRACE: runc, as root, joins the namespaces of a pod's sandbox through /proc/PID/ns of its
// pause process, and when the pod runs as another user (runAsUser, runAsGroup) the kernel lets
// root open those files only with CAP_SYS_PTRACE (ptrace_may_access); without it every such pod
// ends StartError ("can't get final child's PID from pipe: EOF").
var Capabilities = []string{"SYS_ADMIN", "NET_ADMIN", "SYS_PTRACE"}

// SeccompProfile is the node container's seccomp profile (seccomp.json): everything but the
// system calls that act on the whole host or that a node never needs. Docker's default profile
// refuses pivot_root and keyctl, without which runc cannot start the node's containers.
//
//go:embed seccomp.json
var SeccompProfile []byte

// CgroupBind mounts the host's cgroup v1 tree writable: the kubelet and runc make the pods'
// cgroups under the node container's own.
const CgroupBind = "/sys/fs/cgroup:/sys/fs/cgroup:rw"

// VarDir must be a volume: containerd's overlayfs snapshots and the kubelet's root cannot be on
// the container's own root filesystem (fuse-overlayfs here; overlayfs on it fails, and cAdvisor
// finds no filesystem to report).
const VarDir = "/var"

// RunTmpfs is a tmpfs, as /run is on a host: a restarted node finds no stale containerd socket
// or pid files.
const RunTmpfs = "/run"

// DockerRunArgs are the `docker run` flags of a node container: exactly the grants above,
// with the seccomp profile read from seccompFile (a copy of SeccompProfile: the docker CLI reads
// a path, the Engine API takes the profile's content). No --privileged: it is refused on the
// machines Kiln runs on (the host's capability bounding set lacks CAP_SYS_RESOURCE), and a node
// does not need it.
func DockerRunArgs(seccompFile string) []string {
	var args []string
	for _, c := range Capabilities {
		args = append(args, "--cap-add", c)
	}
	return append(args,
		"--security-opt", "seccomp="+seccompFile,
		// No AppArmor on the machines measured; where it is on, Docker's default profile
		// refuses mount.
		"--security-opt", "apparmor=unconfined",
		"-v", CgroupBind,
		"-v", VarDir,
		"--tmpfs", RunTmpfs,
	)
}
