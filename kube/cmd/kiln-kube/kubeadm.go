package main

import (
	kubeadm "k8s.io/kubernetes/cmd/kubeadm/app"
	kubeadmerrors "k8s.io/kubernetes/cmd/kubeadm/app/util/errors"
)

// runKubeadm is upstream kubeadm's main (cmd/kubeadm): init, join, reset and their phases, of
// this kiln-kube's Kubernetes version. kubeadm runs no other binary of its own; the kubelet it
// configures and the static pods' commands (kube-apiserver, etcd, ...) are kiln-kube again,
// through links named as the upstream binaries (main's dispatch on the program name).
func runKubeadm() int {
	kubeadmerrors.HandleError(kubeadm.Run()) // prints the error and exits non-zero, as upstream
	return 0
}
