package main

import (
	"context"

	"github.com/spf13/cobra"
	kubeletapp "k8s.io/kubernetes/cmd/kubelet/app"
)

// newNodeKubeletCommand is the real kubelet, upstream's cmd/kubelet: it runs pods' containers
// through a CRI runtime (containerd on Kiln's node image), with cAdvisor and the container
// manager of the host. It sets up its own signal context (SIGTERM stops it), as upstream's main
// does, so nothing else in this process may.
//
// On a cgroup v1 host (Docker's cgroupfs driver, as on the machines Kiln's docker nodes run on),
// Kubernetes 1.35 and later refuse to start unless the kubelet's configuration file says
// failCgroupV1: false (docs/node-image.md).
func newNodeKubeletCommand() *cobra.Command {
	return kubeletapp.NewKubeletCommand(context.Background())
}
