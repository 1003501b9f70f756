// Package distro names the Kubernetes distributions Kiln installs and the
// versions each offers: the one catalogue of versions (Versions), which kilnd
// hands to the providers whose machines install Kubernetes. What the
// controller plans for each is in its subpackages (local; kiln, the cluster
// DNS its nodes get besides local's install; kubeadm); what a node runs is in
// internal/agent/distro.
package distro

import (
	"slices"

	v1 "kiln.dev/kiln/api/v1"
)

// localVersions are the versions of kiln-kube that `make kube` builds (the
// Makefile's KUBE_VERSIONS: bin/kiln-kube-VERSION), oldest first. The kiln
// distribution offers the same: `make node-image` makes kiln/node:VERSION
// of each.
var localVersions = []string{"v1.35.4", "v1.36.3"}

// LocalVersions returns the Kubernetes versions the local distribution
// installs, oldest first.
func LocalVersions() []string { return slices.Clone(localVersions) }

// kubeadmVersions are the Kubernetes releases the kubeadm distribution
// installs, oldest first: one patch release of each supported minor.
var kubeadmVersions = []string{"v1.34.4", "v1.35.4", "v1.36.3"}

// KubeadmVersions returns the Kubernetes versions the kubeadm distribution
// installs, oldest first. The plan pins the apt package version from the
// chosen one (kubelet, kubeadm and kubectl at 1.36.3-1.1 from the v1.36
// repository of pkgs.k8s.io for v1.36.3), so a version offered here must be
// a published kubeadm release.
func KubeadmVersions() []string { return slices.Clone(kubeadmVersions) }

// Versions is the catalogue: each distribution Kiln installs
// (spec.distribution) mapped to the Kubernetes versions it offers, oldest
// first. kilnd hands it to the providers (edge.Edge.Versions; the local
// provider gets the local versions kiln-kube was built for), so no provider
// imports this package. The map and its lists are the caller's.
func Versions() map[string][]string {
	return map[string][]string{
		v1.DistroLocal:   LocalVersions(),
		v1.DistroKubeadm: KubeadmVersions(),
		v1.DistroKiln:    LocalVersions(),
	}
}

// Messages of Installed: what the nodes of each distribution are.
const (
	hollowMessage = "Hollow nodes: each node runs real Kubernetes components with a hollow kubelet " +
		"(real kubelet code, simulated container runtime). Pods are scheduled and reported Running, but no " +
		"container runs: every pod reports the IP 192.168.192.168, a Job's pods never finish, no pod network " +
		"(CNI) is installed, and kubectl logs, exec and port-forward do not work. For scale tests and trying " +
		"Kiln on machines without Docker (docs/distro-local.md)."
	realMessage = "Real nodes: containerd, runc and a kubelet installed with kubeadm; pods run as containers " +
		"on the pod network."
	kilnMessage = "Real nodes: kiln-kube's kubelet on containerd and runc in each node, kube-proxy, the CNI bridge " +
		"plugin with a route per node's pod range, and CoreDNS; images come from kilnd's registry (docs/distro-kiln.md)."
	// kubeRouterMessage is added to kilnMessage with spec.network.cni
	// kube-router.
	kubeRouterMessage = " kube-router's network policy controller runs on every node (firewall-only, on the bridge " +
		"network): NetworkPolicy is enforced."
	noneMessage     = "Simulated machines: no Kubernetes runs on them (the sim provider, for tests and benchmarks)."
	attachedMessage = "An attached cluster: Kiln did not make it and installs nothing on its nodes; it observes them, " +
		"and applies profiles, through the cluster's own kubeconfig."
)

// Installed says what spec's distribution installs on each node: the
// cluster's status.installed. The local distribution runs hollow kubelets
// and installs no pod network, whatever spec.network.cni says; kubeadm
// installs real kubelets and the CNI the spec names; kiln real kubelets and
// the bridge network, with kube-router's policy controller when the spec
// says kube-router.
func Installed(spec *v1.ClusterSpec) *v1.Installed {
	if spec.Attach != nil {
		return &v1.Installed{Distribution: "", Kubelet: v1.KubeletReal, CNI: "unknown", Message: attachedMessage}
	}
	switch spec.Distribution {
	case v1.DistroLocal:
		return &v1.Installed{Distribution: v1.DistroLocal, Kubelet: v1.KubeletHollow, CNI: v1.CNINone, Message: hollowMessage}
	case v1.DistroKubeadm:
		return &v1.Installed{Distribution: v1.DistroKubeadm, Kubelet: v1.KubeletReal, CNI: spec.Network.CNI,
			Message: realMessage + " CNI: " + spec.Network.CNI + "."}
	case v1.DistroKiln:
		if spec.Network.CNI == v1.CNIKubeRouter {
			return &v1.Installed{Distribution: v1.DistroKiln, Kubelet: v1.KubeletReal, CNI: v1.CNIKubeRouter, Message: kilnMessage + kubeRouterMessage}
		}
		return &v1.Installed{Distribution: v1.DistroKiln, Kubelet: v1.KubeletReal, CNI: v1.CNIBridge, Message: kilnMessage}
	}
	return &v1.Installed{Distribution: spec.Distribution, Kubelet: v1.KubeletNone, CNI: v1.CNINone, Message: noneMessage}
}

// ContainerKubelet is what every kubelet Kiln runs on containerd without
// systemd shares in its KubeletConfiguration (YAML lines): the kiln
// distribution's (Kiln's node image) and the kubeadm distribution's installs
// from Kiln. The cgroupfs driver (no systemd runs the kubelet), cgroup v1
// allowed, swap tolerated; low eviction thresholds and image garbage
// collection only on a full disk: a node that is a container shares its
// host's disk, and containerd 1.6 does not pin the pause image, which a
// node may not be able to pull again.
const ContainerKubelet = `cgroupDriver: cgroupfs
failCgroupV1: false
failSwapOn: false
serializeImagePulls: false
evictionHard: {memory.available: "50Mi", nodefs.available: "1%", imagefs.available: "1%"}
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
`
