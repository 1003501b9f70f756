// Package kiln is the node side of what the `kiln` distribution adds to the
// local one: its bridge pod network (the CNI bridge plugin on the node's pod
// range, a route per other node's, a masquerade rule for what leaves the pod
// ranges). The executor that installs a kiln node is
// internal/agent/distro/local's (InstallParams.Containers: the real kubelet
// on the node's containerd, kube-proxy, the registry mirror), which sets this
// network up; kubeadm's installs from Kiln run it on its own, as kiln-agent's
// service pod-network (PodNetwork). It never imports the store.
//
// docs/distro-kiln.md describes it.
package kiln
