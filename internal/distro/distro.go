// Package distro names the Kubernetes distributions Kiln installs and the
// versions each offers. The installers are in its subpackages (local, ...).
package distro

import "slices"

// localVersions are the versions of bin/kiln-kube that `make kube` builds
// (the Makefile's KUBE_VERSION), oldest first.
var localVersions = []string{"v1.36.3"}

// LocalVersions returns the Kubernetes versions the local distribution
// installs, oldest first.
func LocalVersions() []string { return slices.Clone(localVersions) }

// kubeadmVersions are the Kubernetes releases the kubeadm distribution
// installs from pkgs.k8s.io, oldest first.
var kubeadmVersions = []string{"v1.34.3", "v1.35.1", "v1.36.3"}

// KubeadmVersions returns the Kubernetes versions the kubeadm distribution
// installs, oldest first.
func KubeadmVersions() []string { return slices.Clone(kubeadmVersions) }
