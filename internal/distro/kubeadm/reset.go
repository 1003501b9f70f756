package kubeadm

import (
	"slices"
	"strings"
)

// Step names of the reset plan, in order.
const (
	StepStopServices = "stop-services"
	StepKubeadmReset = "kubeadm-reset"
	StepCleanNetwork = "clean-network"
	StepRemoveFiles  = "remove-files"
)

// CNIConfigDir is where a CNI writes its configuration, which the container
// runtime reads.
const CNIConfigDir = "/etc/cni/net.d"

// cniLinks are the network devices Calico and Cilium create on a node (and
// cni0 and kube-ipvs0, the bridge plugin's and kube-proxy's IPVS mode's).
// tunl0 is not one: the kernel's ipip module owns it.
var cniLinks = []string{"cni0", "kiln0", "vxlan.calico", "vxlan-v6.calico", "cilium_host", "cilium_vxlan", "cilium_geneve", "kube-ipvs0"}

// CNILinks are the network devices a reset removes by name: what the CNIs
// an install runs create on a node.
func CNILinks() []string { return slices.Clone(cniLinks) }

// kubernetesRuleMarks are what marks a line of iptables-save as
// Kubernetes's or a CNI's (removeKubernetesRules says whose).
var kubernetesRuleMarks = []string{"KUBE-", "CNI-", "cali-", "cali:", "CILIUM", "cilium", "kiln pod network"}

// IsKubernetesRule reports whether line, one line of iptables-save's
// output (a chain's declaration or a rule), is one a reset removes.
func IsKubernetesRule(line string) bool {
	for _, m := range kubernetesRuleMarks {
		if strings.Contains(line, m) {
			return true
		}
	}
	return false
}

// removeKubernetesRules drops, from every iptables table, the chains and
// rules of kube-proxy and the kubelet (KUBE-*), the CNI plugins (CNI-*),
// Calico (cali-*, comments cali:), Cilium (CILIUM_*, comments cilium-*) and
// Kiln's bridge pod network (its masquerade rule's comment, "kiln pod network"),
// and keeps every other rule and each chain's policy: iptables-restore
// replaces each table with what iptables-save printed minus those lines. It
// is k3s's cleanup, not the iptables -F that kubeadm's documentation shows,
// which would also flush the host's own firewall (and, with a DROP policy,
// lock the host out).
var removeKubernetesRules = `set -e
for t in iptables ip6tables iptables-legacy ip6tables-legacy; do
  command -v "$t-save" >/dev/null 2>&1 || continue
  "$t-save" | grep -v` + grepMarks() + ` | "$t-restore"
done`

// grepMarks is kubernetesRuleMarks as grep's -e arguments, quoted where
// they hold a space.
func grepMarks() string {
	var b strings.Builder
	for _, m := range kubernetesRuleMarks {
		if strings.Contains(m, " ") {
			m = "'" + m + "'"
		}
		b.WriteString(" -e " + m)
	}
	return b.String()
}

const removeLinks = `set -e
for l in "$@"; do
  if ip link show dev "$l" >/dev/null 2>&1; then ip link delete dev "$l"; fi
done`

// ResetPlan returns the plan that undoes an install on a node, whatever its
// role and however far the install got, so that the host can be installed
// again, in the same cluster or another. It keeps the packages (containerd,
// kubelet, kubeadm, kubectl, held), the apt repository and its key, the
// images containerd pulled, containerd's configuration, the kernel modules
// and sysctls, swap off and the cilium CLI: a re-install finds them and is
// quick. Its commands use host paths only (no file to write), and a step
// whose work is done is skipped, so it can run again.
//
// What kubeadm reset leaves (its documentation says: the CNI configuration,
// iptables rules and kubeconfig files in home directories, which Kiln does
// not write) is removed by the later steps, with Kiln's own files that hold
// secrets or belong to one cluster.
func ResetPlan() *Plan {
	b := &builder{}
	b.plan.Summary = "reset of a kubeadm node: kubeadm reset, the CNI's configuration, state, iptables rules and devices, " +
		"Kiln's cluster files; the packages stay"

	b.step = StepStopServices
	b.plan.Commands = append(b.plan.Commands, Command{Step: b.step, Stop: []string{ServicePodNetwork, ServiceKubeProxy, ServiceKubelet},
		Reason: "an install from Kiln: kiln-agent's services but containerd, which kubeadm reset asks to remove the containers"})

	b.step = StepKubeadmReset
	// kubeadm writes certificates to /etc/kubernetes/pki before anything
	// else: no file there means kubeadm init or join never ran.
	nothingToReset := []string{"sh", "-c",
		`! command -v kubeadm >/dev/null 2>&1 || [ -z "$(find /etc/kubernetes -type f 2>/dev/null | head -n 1)" ]`,
		"kubeadm-reset-needed"}
	b.runUnless(nothingToReset,
		"stop the kubelet, remove the Kubernetes containers, the static pods, the certificates, the kubeconfigs, "+
			"etcd's data (with this node's etcd member) and the kubelet's state",
		"kubeadm", "reset", "--force", "--cri-socket", ContainerdSocket, "--cleanup-tmp-dir")
	b.run("the certificates and keys, also where kubeadm reset did not run (kubeadm not installed): "+
		"a key written for kubeadm init is a secret",
		"rm", "-rf", "--one-file-system", "/etc/kubernetes/pki")
	b.run("what a restore from a backup left: etcd's data it replaced (DATADIR.before-BACKUP), a staged snapshot, "+
		"the directory the static pods' manifests waited in",
		"sh", "-c", `rm -rf --one-file-system /var/lib/etcd.before-* /var/lib/etcd.restoring "$@"`, "remove-restore-leftovers",
		"/var/lib/kiln-backup", StoppedManifestsDir)

	b.step = StepCleanNetwork
	b.runUnless([]string{"sh", "-c", `[ -z "$(ls -A "$1" 2>/dev/null)" ]`, "cni-config-empty", CNIConfigDir},
		"the CNI's configuration (kubeadm reset leaves it): a stale one gives the next install's pods the old network",
		"find", CNIConfigDir, "-mindepth", "1", "-delete")
	// Not /run/cilium: Cilium mounts the cgroup2 hierarchy under it. It is
	// on tmpfs, gone at the next boot.
	b.run("the CNI plugins' state: IP allocations, Calico's node name",
		"rm", "-rf", "--one-file-system", "/var/lib/cni", "/var/lib/calico", "/run/calico")
	b.run("the Kubernetes and CNI iptables rules (kubeadm reset leaves them); the host's own rules stay",
		"sh", "-c", removeKubernetesRules, "remove-kubernetes-rules")
	b.run("the CNI's network devices, and the routes through them",
		append([]string{"sh", "-c", removeLinks, "remove-cni-links"}, cniLinks...)...)
	b.run("the routes to other nodes' pod ranges Kiln's bridge pod network added (protocol 77)",
		"ip", "-4", "route", "flush", "proto", "77")
	b.plan.Commands = append(b.plan.Commands, Command{Step: b.step, Stop: []string{ServiceContainerd},
		Reason: "an install from Kiln: containerd, once kubeadm reset removed the containers"})

	b.step = StepRemoveFiles
	b.run("Kiln's files of this cluster: the kubeadm configuration (it holds the join secrets), kube-proxy's "+
		"credentials and configuration, Calico's installation, the bridge pod network's state",
		"rm", "-rf", "--one-file-system", KubeadmConfigPath, KubeadmDone, "/etc/kiln/pki", KubeProxyConf, KubeProxyYAML, CalicoInstallation, PodNetworkState)
	b.run("the proxy settings (they may hold the proxy's credentials; the next cluster may have no proxy) and the proxy's root CA",
		"rm", "-f", AptProxyConf, ContainerdProxyDropIn, KubeletProxyDropIn, ProxyCAPath)
	b.runUnless([]string{"sh", "-c", "! command -v update-ca-certificates >/dev/null 2>&1", "no-ca-certificates"},
		"take the proxy's root CA out of the system trust store",
		"update-ca-certificates")
	b.runUnless([]string{"sh", "-c", "! [ -d /run/systemd/system ]", "no-systemd"},
		"systemd forgets the proxy drop-ins (containerd keeps the proxy until it restarts: the next install restarts it)",
		"systemctl", "daemon-reload")
	return &b.plan
}
