package kubeadm

import (
	"fmt"
	"regexp"
	"strconv"
	"strings"

	v1 "kiln.dev/kiln/api/v1"
	"kiln.dev/kiln/internal/distro"
)

// BootstrapTokenTTL is how long the bootstrap token that kubeadm init creates
// from JoinMaterial.Token stays valid.
const BootstrapTokenTTL = "24h0m0s"

// q quotes a value for YAML. Every value the renderers quote was checked to
// be printable ASCII, so Go's quoting is also YAML's (and JSON's).
func q(s string) string { return strconv.Quote(s) }

// kubeadmConfig is /etc/kiln/kubeadm.yaml: InitConfiguration,
// ClusterConfiguration and KubeletConfiguration on the first control-plane
// node, JoinConfiguration on the others.
func (s *spec) kubeadmConfig() string {
	var b strings.Builder
	fmt.Fprintf(&b, "# Written by Kiln: kubeadm configuration of %s.\n", s.summary())
	if !s.FirstControlPlane {
		s.joinConfig(&b)
		return b.String()
	}
	b.WriteString("apiVersion: kubeadm.k8s.io/v1beta4\nkind: InitConfiguration\n")
	if s.Join.Token != "" {
		b.WriteString("bootstrapTokens:\n")
		fmt.Fprintf(&b, "- token: %s\n", q(s.Join.Token))
		fmt.Fprintf(&b, "  description: %s\n", q("Kiln: nodes join cluster "+s.ClusterName+" with this token"))
		fmt.Fprintf(&b, "  ttl: %s\n", BootstrapTokenTTL)
		b.WriteString("  usages:\n  - signing\n  - authentication\n")
		b.WriteString("  groups:\n  - system:bootstrappers:kubeadm:default-node-token\n")
	}
	if s.Join.CertificateKey != "" {
		fmt.Fprintf(&b, "certificateKey: %s\n", q(s.Join.CertificateKey))
	}
	b.WriteString("localAPIEndpoint:\n")
	fmt.Fprintf(&b, "  advertiseAddress: %s\n  bindPort: 6443\n", q(s.address.String()))
	s.nodeRegistration(&b)
	b.WriteString("---\napiVersion: kubeadm.k8s.io/v1beta4\nkind: ClusterConfiguration\n")
	fmt.Fprintf(&b, "clusterName: %s\n", q(s.ClusterName))
	fmt.Fprintf(&b, "kubernetesVersion: %s\n", q(s.KubernetesVersion))
	fmt.Fprintf(&b, "controlPlaneEndpoint: %s\n", q(s.endpoint))
	// The API server verifies the kubelets' serving certificates, which
	// the kubelets ask the cluster for (serverTLSBootstrap below) and kilnd
	// approves (internal/plan/install, approveKubeletServing).
	b.WriteString("apiServer:\n  extraArgs:\n")
	fmt.Fprintf(&b, "  - name: kubelet-certificate-authority\n    value: %s\n", q(ClusterCACert))
	if s.fromKiln() {
		s.kilnClusterConfig(&b)
	}
	b.WriteString("networking:\n  dnsDomain: cluster.local\n")
	fmt.Fprintf(&b, "  podSubnet: %s\n  serviceSubnet: %s\n", q(s.pod.String()), q(s.service.String()))
	b.WriteString("---\napiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n")
	b.WriteString("serverTLSBootstrap: true\n")
	if s.fromKiln() {
		b.WriteString(distro.ContainerKubelet)
	} else {
		b.WriteString("cgroupDriver: systemd\n")
	}
	return b.String()
}

func (s *spec) joinConfig(b *strings.Builder) {
	b.WriteString("apiVersion: kubeadm.k8s.io/v1beta4\nkind: JoinConfiguration\n")
	b.WriteString("discovery:\n  bootstrapToken:\n")
	fmt.Fprintf(b, "    apiServerEndpoint: %s\n", q(s.endpoint))
	fmt.Fprintf(b, "    token: %s\n", q(s.Join.Token))
	b.WriteString("    caCertHashes:\n")
	for _, h := range s.Join.CACertHashes {
		fmt.Fprintf(b, "    - %s\n", q(h))
	}
	s.nodeRegistration(b)
	if s.Node.Role == v1.RoleControlPlane {
		b.WriteString("controlPlane:\n  localAPIEndpoint:\n")
		fmt.Fprintf(b, "    advertiseAddress: %s\n    bindPort: 6443\n", q(s.address.String()))
		fmt.Fprintf(b, "  certificateKey: %s\n", q(s.Join.CertificateKey))
	}
}

// nodeRegistration names the node, gives its kubelet the node IP and labels,
// and sets its taints: an empty list, not kubeadm's default control-plane
// taint, unless the control plane is dedicated.
func (s *spec) nodeRegistration(b *strings.Builder) {
	b.WriteString("nodeRegistration:\n")
	fmt.Fprintf(b, "  name: %s\n", q(s.Node.Name))
	fmt.Fprintf(b, "  criSocket: %s\n", q(ContainerdSocket))
	b.WriteString("  kubeletExtraArgs:\n")
	fmt.Fprintf(b, "  - name: node-ip\n    value: %s\n", q(s.address.String()))
	if s.labels != "" {
		fmt.Fprintf(b, "  - name: node-labels\n    value: %s\n", q(s.labels))
	}
	if s.fromKiln() {
		b.WriteString("  imagePullPolicy: IfNotPresent\n  ignorePreflightErrors:\n")
		for _, c := range kilnPreflightIgnored {
			fmt.Fprintf(b, "  - %s\n", c)
		}
	}
	if s.Node.Role == v1.RoleControlPlane && s.DedicatedControlPlane {
		key, effect, _ := strings.Cut(ControlPlaneTaint, ":")
		fmt.Fprintf(b, "  taints:\n  - key: %s\n    effect: %s\n", key, effect)
	} else {
		b.WriteString("  taints: []\n")
	}
}

// calicoInstallation is the Tigera operator's Installation (and the
// APIServer it serves Calico's API with): one IPv4 pool, the pod CIDR, in
// /26 blocks with VXLAN between subnets; node addresses from the Kubernetes
// nodes' InternalIP (the kubelets' node-ip), or from the interface when the
// first control-plane node names one.
func (s *spec) calicoInstallation() string {
	var b strings.Builder
	fmt.Fprintf(&b, "# Written by Kiln: Calico %s for cluster %s, carried out by the Tigera operator.\n", CalicoVersion, s.ClusterName)
	b.WriteString("apiVersion: operator.tigera.io/v1\nkind: Installation\nmetadata:\n  name: default\nspec:\n")
	b.WriteString("  calicoNetwork:\n    ipPools:\n    - name: default-ipv4-ippool\n")
	fmt.Fprintf(&b, "      cidr: %s\n", q(s.pod.String()))
	b.WriteString("      blockSize: 26\n      encapsulation: VXLANCrossSubnet\n      natOutgoing: Enabled\n      nodeSelector: all()\n")
	b.WriteString("    nodeAddressAutodetectionV4:\n")
	if s.Node.Interface != "" {
		fmt.Fprintf(&b, "      interface: %s\n", q("^"+regexp.QuoteMeta(s.Node.Interface)+"$"))
	} else {
		b.WriteString("      kubernetes: NodeInternalIP\n")
	}
	b.WriteString("---\napiVersion: operator.tigera.io/v1\nkind: APIServer\nmetadata:\n  name: default\nspec: {}\n")
	return b.String()
}

// aptProxy is apt's configuration of the proxy.
func (s *spec) aptProxy() string {
	var b strings.Builder
	b.WriteString("// Written by Kiln: the cluster's proxy for apt.\n")
	if s.proxy.HTTP != "" {
		fmt.Fprintf(&b, "Acquire::http::Proxy %s;\n", q(s.proxy.HTTP))
	}
	if s.proxy.HTTPS != "" {
		fmt.Fprintf(&b, "Acquire::https::Proxy %s;\n", q(s.proxy.HTTPS))
	}
	return b.String()
}

// systemdProxy is a drop-in that puts the proxy variables in a service's
// environment. '%' starts a specifier in a unit file, so it is doubled.
func (s *spec) systemdProxy(service string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "# Written by Kiln: the cluster's proxy for %s.\n[Service]\n", service)
	for _, kv := range s.proxy.Env() {
		fmt.Fprintf(&b, "Environment=\"%s\"\n", strings.ReplaceAll(kv, "%", "%%"))
	}
	return b.String()
}
