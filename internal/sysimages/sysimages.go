// Package sysimages names the system images: the images every real
// cluster's nodes pull from kilnd's registry whatever their project,
// built by Kiln from source (make system-images; docs/system-images.md)
// and seeded by kilnd at start into the registry's kiln.system namespace
// (internal/registry's Seed). The controller's manifests and the tests
// take the names from here.
//
// A node asking for kiln.dev/coredns:1.15.0 gets the image stored as
// kiln.system/library/coredns:1.15.0: containerd asks the registry mirror
// for /v2/coredns/manifests/1.15.0?ns=kiln.dev, and the registry drops
// the host and reads a name of one component as library/NAME.
//
// The kube image of a Kubernetes version (KubeImage) is kiln-kube of that
// version under several names: a kubeadm configuration with
// imageRepository kiln.dev (and etcd's local imageRepository kiln.dev,
// imageTag VERSION) makes kubeadm's control-plane static pods pull it.
//
// scripts/system-images.sh reads the names of this file (the lines
// NAME = "..."), so they are written out in full, one a line.
package sysimages

import "strings"

const (
	// CoreDNSImage is the cluster DNS, CoreDNS built from its Go module
	// (images/coredns) with the plugins a cluster's DNS needs; its tag is
	// the CoreDNS version images/coredns/go.mod requires.
	CoreDNSImage = "kiln.dev/coredns:1.15.0"
	// DemoImage is the demo application (images/demo): an HTTP server on
	// :8080 answering "hello from POD on NODE" (env POD_NAME and
	// NODE_NAME), /healthz for probes.
	DemoImage = "kiln.dev/demo:1"
	// PauseImage is the pods' sandbox (images/pause), the one containerd
	// is configured with: in the node image (nodeimage.PauseImage, the
	// same name) and seeded, for hosts without the node image.
	PauseImage = "kiln.dev/pause:1"
	// CNIPluginsImage holds the CNI plugins the bridge pod network runs
	// (bridge, host-local, portmap, loopback) in /opt/cni/bin, built from
	// github.com/containernetworking/plugins at its tag: the kubeadm
	// distribution's installs from Kiln copy them to the host.
	CNIPluginsImage = "kiln.dev/cni-plugins:v1.10.0"
	// PauseKubeadmTags are more tags of the pause image: those kubeadm's
	// preflight pulls (kubeadm config images list) in the versions Kiln
	// offers, 1.35 and 1.36. Separated by spaces, for
	// scripts/system-images.sh.
	PauseKubeadmTags = "3.10.1 3.10.2"
	// LocalPathImage is Rancher's local-path-provisioner, built from its
	// Go module at the tag: the local-path pack's (charts/local-path).
	LocalPathImage = "kiln.dev/local-path-provisioner:v0.0.30"
	// BusyboxImage is Debian's static busybox (busybox-static) with
	// /bin/sh, mkdir, rm and chmod: the local-path pack's helper pods run
	// its scripts with it.
	BusyboxImage = "kiln.dev/busybox:1.35.0"
	// MetricsServerImage is the Kubernetes metrics-server, built from its
	// Go module at the tag: the metrics-server pack's
	// (charts/metrics-server).
	MetricsServerImage = "kiln.dev/metrics-server:v0.8.0"
	// MetalLBControllerImage and MetalLBSpeakerImage are MetalLB's
	// controller (allocates Services' addresses from the pools) and speaker
	// (announces them: layer 2), built from its Go module at the tag: the
	// metallb pack's (charts/metallb), which edge clusters with
	// spec.network.loadBalancerPool get.
	MetalLBControllerImage = "kiln.dev/metallb-controller:v0.15.2"

	MetalLBSpeakerImage = "kiln.dev/metallb-speaker:v0.15.2"
	// MetalLBFRRK8s is the version of github.com/metallb/frr-k8s that
	// MetalLB is built with (a replace in its go.mod): the one its go.mod
	// requires (v0.0.20) is not served by the module proxy here, and
	// v0.0.21 is the nearest that is. Only MetalLB's BGP mode through
	// frr-k8s uses it; Kiln runs the layer-2 mode.
	MetalLBFRRK8s = "v0.0.21"
	// KubeRouterImage is kube-router's network policy controller, built
	// from images/kube-router (a module of Kiln's requiring kube-router at
	// the tag, with the dependencies security flaws are reported against
	// lifted) with Debian's iptables and ipset: the DaemonSet of the
	// kube-router pod network (spec.network.cni kube-router), run in
	// firewall-only mode on Kiln's bridge network.
	KubeRouterImage = "kiln.dev/kube-router:v2.1.0"
	// TraefikImage is Traefik, built from its Go module
	// (github.com/traefik/traefik/v3, ./cmd/traefik) at the tag: the
	// ingress pack's (charts/ingress), the cluster's default IngressClass.
	TraefikImage = "kiln.dev/traefik:v3.7.13"
	// TraefikGoHTTPAuth is the version of github.com/containous/go-http-auth
	// (Traefik's fork of github.com/abbot/go-http-auth, a replace in its
	// go.mod) that Traefik is built with: the one v3.7.13 names
	// (v0.4.1-0.20260804094822-b975dcaa8c48) is refused by the module proxy
	// here, and this one, which Traefik v3.7.10 and before name, is served.
	// Only the basicAuth and digestAuth middlewares use it, which the
	// ingress pack's Traefik cannot be given: it has no provider of
	// middlewares (no CRDs, no file).
	TraefikGoHTTPAuth = "v0.4.1-0.20200324110947-a37a7636d23e"

	// Registry is the registry host of every system image's name, and
	// the imageRepository of a kubeadm configuration.
	Registry = "kiln.dev"
	// KubeImageRepositories are the repositories the kube image of a
	// Kubernetes version is named in, each tagged with the version
	// (kiln.dev/kube-apiserver:v1.36.3): the images of kubeadm's
	// control-plane static pods (kube-apiserver, kube-controller-manager,
	// kube-scheduler, and etcd: kiln-kube's embedded etcd of that build),
	// and kube, the host binaries (a node agent extracts kiln-kube from it).
	// Separated by spaces, for scripts/system-images.sh.
	KubeImageRepositories = "kube-apiserver kube-controller-manager kube-scheduler etcd kube"
)

// The components a kube image is named for (KubeImage's component).
const (
	KubeAPIServer         = "kube-apiserver"
	KubeControllerManager = "kube-controller-manager"
	KubeScheduler         = "kube-scheduler"
	Etcd                  = "etcd"
	KubeHost              = "kube"
)

// KubeImage is the name of the kube image of a Kubernetes version for a
// component: KubeImage(KubeAPIServer, "v1.36.3") is
// kiln.dev/kube-apiserver:v1.36.3. Every component's name is the same
// image.
func KubeImage(component, version string) string {
	return Registry + "/" + component + ":" + version
}

// KubeImages are every name of the kube image of a Kubernetes version, in
// KubeImageRepositories' order.
func KubeImages(version string) []string {
	var names []string
	for _, r := range strings.Fields(KubeImageRepositories) {
		names = append(names, KubeImage(r, version))
	}
	return names
}
