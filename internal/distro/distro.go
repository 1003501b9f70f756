// Package distro names the Kubernetes distributions Kiln installs and the
// versions each offers. The installers are in its subpackages (local,
// kubeadm).
package distro

import "slices"

// localVersions are the versions of kiln-kube that `make kube` builds (the
// Makefile's KUBE_VERSIONS: bin/kiln-kube-VERSION), oldest first.
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
