package main

import (
	"flag"
	"os"

	"github.com/spf13/pflag"
	kubeadm "k8s.io/kubernetes/cmd/kubeadm/app"
	kubeadmerrors "k8s.io/kubernetes/cmd/kubeadm/app/util/errors"
)

// runKubeadm is upstream kubeadm's main (cmd/kubeadm): init, join, reset and their phases, of
// this kiln-kube's Kubernetes version. kubeadm runs no other binary of its own; the kubelet it
// configures and the static pods' commands (kube-apiserver, etcd, ...) are kiln-kube again,
// through links named as the upstream binaries (main's dispatch on the program name).
func runKubeadm() int {
	// kubeadm adds the process's global flag sets to its own. Here they hold what the other
	// components' packages register when loaded (cAdvisor's --housekeeping-interval and ~30
	// more, --version), which upstream's kubeadm does not link: start from empty ones, so
	// kubeadm has upstream's flags (--rootfs, -v, --vmodule) and no others.
	flag.CommandLine = flag.NewFlagSet(os.Args[0], flag.ExitOnError)
	pflag.CommandLine = pflag.NewFlagSet(os.Args[0], pflag.ExitOnError)
	kubeadmerrors.HandleError(kubeadm.Run()) // prints the error and exits non-zero, as upstream
	return 0
}
