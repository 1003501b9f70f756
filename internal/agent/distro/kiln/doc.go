// Package kiln is the node side of the `kiln` distribution: its Executor
// (NewExecutor), which kiln-agent runs on a node in Kiln's node image, is
// internal/agent/distro/local's executor (the supervisor, kiln-kube's
// components, backups) with what a node that runs containers adds, handed to
// it as a local.Extension: the real kubelet on the node's containerd, under
// the node image's cgroup root, and kube-proxy (containers.go), containerd's
// registry mirror, and the bridge pod network (network.go: the CNI bridge
// plugin on the node's pod range, a route per other node's, a masquerade
// rule for what leaves the pod ranges; netready.go: the node's
// NetworkUnavailable condition, True until every other node routes to it).
// kubeadm's installs from Kiln run the
// pod network on its own, as kiln-agent's service pod-network (PodNetwork).
// It never imports the store.
//
// docs/distro-kiln.md describes it.
package kiln
