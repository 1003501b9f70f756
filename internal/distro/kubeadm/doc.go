// Package kubeadm builds the plan that installs Kubernetes with kubeadm on a
// real host: a Debian or Ubuntu machine (apt, systemd) that a user brought to
// the cluster.
//
// Build is a pure function: from one node's Input it returns a Plan, the
// files to write and the commands to run, in order, or a *FieldError naming
// the input field that cannot work. It does no I/O, reads no clock and uses
// no randomness: the same input gives the same plan, byte for byte. Plan.Script
// renders the plan as a POSIX shell script; the golden files under testdata
// pin those scripts.
//
// What the plan does, in its named steps:
//
//   - write-files: kernel modules and sysctls for Kubernetes networking, the
//     proxy's root CA, the proxy environment as systemd drop-ins for
//     containerd and the kubelet and as an apt configuration, containerd's
//     configuration (SystemdCgroup = true), the pkgs.k8s.io apt source, the
//     kubeadm configuration (/etc/kiln/kubeadm.yaml) and, on the first
//     control-plane node with Calico, the Installation resource.
//   - check-interface (when the node names one): the interface holds the
//     node's address.
//   - prepare-kernel: swap off (now and in /etc/fstab), overlay and
//     br_netfilter loaded, sysctls applied.
//   - install-prerequisites, trust-proxy-ca (with a root CA),
//     add-kubernetes-repository, install-packages: containerd from the
//     distribution's archive; kubelet, kubeadm and kubectl at the exact
//     version from the minor's repository of pkgs.k8s.io, then held.
//   - enable-services: containerd restarted with its configuration, the
//     kubelet enabled.
//   - kubeadm-init (first control-plane node, with --upload-certs) or
//     kubeadm-join (every other node).
//   - install-cni (first control-plane node): Calico through the Tigera
//     operator, or Cilium through the cilium CLI.
//
// What is pinned: the Kubernetes version (one of distro.KubeadmVersions, as
// the apt package version 1.36.3-1.1 and the repository
// https://pkgs.k8s.io/core:/stable:/v1.36/deb/); Calico CalicoVersion (the
// operator-crds.yaml and tigera-operator.yaml manifests of that release);
// Cilium CiliumVersion installed by the cilium CLI CiliumCLIVersion, whose
// download is checked against the release's own .sha256sum file (Kiln pins
// no hash of its own). containerd is the distribution's package, not pinned.
//
// ResetPlan is the plan of a reset instruction: kubeadm reset, then what it
// leaves (the CNI's configuration, state, iptables rules and devices) and
// Kiln's files that belong to the cluster; the packages stay.
//
// The plan is the format both sides share: ParsePlan decodes it from an
// install instruction's params. The node side, which runs it, is
// internal/agent/distro/kubeadm (kiln-agent); this package imports nothing
// of the agent's, so kilnd links none of it. docs/distro-kubeadm.md has the
// details.
package kubeadm
