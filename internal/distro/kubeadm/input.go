package kubeadm

import (
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"encoding/pem"
	"errors"
	"fmt"
	"maps"
	"net"
	"net/netip"
	"regexp"
	"slices"
	"strconv"
	"strings"

	v1 "kiln.dev/kiln/api/v1"
	"kiln.dev/kiln/internal/distro"
	"kiln.dev/kiln/internal/names"
)

// Defaults of the cluster's address plan and network plugin, the same as the
// API's.
const (
	DefaultPodCIDR     = "10.244.0.0/16"
	DefaultServiceCIDR = "10.96.0.0/12"
	DefaultCNI         = CNICalico
	DefaultArch        = "amd64"
)

// The network plugins the plan installs.
const (
	CNICalico = "calico"
	CNICilium = "cilium"
)

// Input is what the controller knows when it builds one node's install.
type Input struct {
	// ClusterName is the cluster's name (kubeadm's clusterName).
	ClusterName string `json:"clusterName"`
	// KubernetesVersion is vMAJOR.MINOR.PATCH, one of distro.KubeadmVersions.
	KubernetesVersion string `json:"kubernetesVersion"`
	// Endpoint is the cluster's API endpoint, host:port (the load balancer
	// in front of the control-plane nodes): kubeadm's controlPlaneEndpoint
	// and the address joining nodes discover the cluster at. The host is an
	// IPv4 address or a DNS name.
	Endpoint string `json:"endpoint"`
	// PodCIDR and ServiceCIDR are IPv4 prefixes; DefaultPodCIDR and
	// DefaultServiceCIDR when empty.
	PodCIDR     string `json:"podCIDR"`
	ServiceCIDR string `json:"serviceCIDR"`
	// CNI is CNIBridge, CNICalico or CNICilium; DefaultCNI when empty.
	// With CNIBridge the plan installs from Kiln (fromkiln.go): kiln-kube and
	// images from Kiln's registry, no internet. Calico and Cilium come from
	// their releases on the internet, kubeadm and the kubelet from
	// pkgs.k8s.io. Flannel, which the API accepts, is refused: this plan
	// does not install it.
	CNI string `json:"cni"`
	// KubeProxyKubeconfig is kube-proxy's kubeconfig (system:kube-proxy,
	// signed by the cluster CA, server the endpoint); required with
	// CNIBridge, where kiln-agent runs kube-proxy.
	KubeProxyKubeconfig string `json:"kubeProxyKubeconfig,omitempty"`
	// Node is the node to install.
	Node Node `json:"node"`
	// DedicatedControlPlane: control-plane nodes get the taint
	// node-role.kubernetes.io/control-plane:NoSchedule. Otherwise they get no
	// taint and run workloads too (converged).
	DedicatedControlPlane bool `json:"dedicatedControlPlane"`
	// FirstControlPlane: this control-plane node creates the cluster
	// (kubeadm init). Every other node joins it (kubeadm join).
	FirstControlPlane bool `json:"firstControlPlane"`
	// Join is what a joining node needs, produced by the controller.
	Join JoinMaterial `json:"join"`
	// ClusterCA is the cluster CA the first control-plane node's kubeadm
	// init uses instead of making one (/etc/kubernetes/pki/ca.crt and
	// ca.key): the controller keeps it, so it knows the CA hash joining
	// nodes trust before any node is installed and issues kubeconfigs the
	// API server accepts. Optional on the first control-plane node (kubeadm
	// makes a CA); refused elsewhere (joining control-plane nodes download
	// it with the other control-plane certificates).
	ClusterCA *ClusterCA `json:"clusterCA,omitempty"`
	// Proxy is the cluster's HTTP proxy; nil for none. Its root CA is
	// trusted by the host even without proxy URLs.
	Proxy *v1.Proxy `json:"proxy,omitempty"`
}

// Node is the machine the plan installs.
type Node struct {
	// Name is the Kubernetes node name, a lower-case DNS subdomain.
	Name string `json:"name"`
	// Address is the node's IPv4 address: the kubelet's node-ip and, on
	// control-plane nodes, the API server's advertise address.
	Address string `json:"address"`
	// Role is v1.RoleControlPlane or v1.RoleWorker.
	Role string `json:"role"`
	// Interface is the network interface that holds Address; optional. The
	// plan checks that it does; on the first control-plane node with Calico
	// it is Calico's address autodetection for every node.
	Interface string `json:"interface,omitempty"`
	// Arch is the node's architecture, amd64 or arm64 (DefaultArch when
	// empty): the cilium CLI download.
	Arch string `json:"arch,omitempty"`
	// Labels are the node's labels, set by its kubelet (--node-labels).
	// Labels a kubelet may not set (node-role.kubernetes.io/..., other
	// kubernetes.io and k8s.io labels) are refused.
	Labels map[string]string `json:"labels,omitempty"`
}

// JoinMaterial is what kubeadm join needs, and what the first control-plane
// node's kubeadm init may be given so that the controller knows it ahead.
type JoinMaterial struct {
	// Token is a bootstrap token, [a-z0-9]{6}.[a-z0-9]{16}. Required to
	// join; on the first control-plane node, optional: kubeadm init creates
	// it.
	Token string `json:"token,omitempty"`
	// CACertHashes are "sha256:<hex>" hashes of the cluster CA's public key
	// (its SubjectPublicKeyInfo), read from the first control-plane node's
	// /etc/kubernetes/pki/ca.crt. Required to join; refused on the first
	// control-plane node, which creates the CA.
	CACertHashes []string `json:"caCertHashes,omitempty"`
	// CertificateKey is the 64 hex digit key that encrypts the control-plane
	// certificates kubeadm init uploads (--upload-certs). Required for a
	// control-plane join; optional on the first control-plane node (kubeadm
	// init uses it instead of making one up); refused on workers.
	CertificateKey string `json:"certificateKey,omitempty"`
}

// ClusterCA is a CA certificate and its private key, PEM.
type ClusterCA struct {
	CertPEM string `json:"certPEM"`
	KeyPEM  string `json:"keyPEM"`
}

// CACertHash is the hash joining nodes pin the cluster CA by
// (JoinMaterial.CACertHashes): "sha256:" and the hex SHA-256 of the DER
// SubjectPublicKeyInfo of the first certificate in certPEM.
func CACertHash(certPEM []byte) (string, error) {
	block, _ := pem.Decode(certPEM)
	if block == nil || block.Type != "CERTIFICATE" {
		return "", errors.New("no PEM certificate")
	}
	cert, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		return "", fmt.Errorf("parse certificate: %w", err)
	}
	sum := sha256.Sum256(cert.RawSubjectPublicKeyInfo)
	return "sha256:" + hex.EncodeToString(sum[:]), nil
}

// ErrInvalidInput is what every refusal of Build wraps.
var ErrInvalidInput = errors.New("invalid kubeadm plan input")

// FieldError is Build's refusal of an input: the field at fault, as its JSON
// path in Input (for example node.address or join.caCertHashes[0]), and why.
type FieldError struct {
	Field  string
	Reason string
}

func (e *FieldError) Error() string { return "kubeadm plan: " + e.Field + ": " + e.Reason }

// Unwrap makes every FieldError match ErrInvalidInput.
func (e *FieldError) Unwrap() error { return ErrInvalidInput }

func refuse(field, format string, args ...any) *FieldError {
	return &FieldError{Field: field, Reason: fmt.Sprintf(format, args...)}
}

// spec is a checked Input with its defaults filled in and its values parsed.
type spec struct {
	Input
	pod, service           netip.Prefix
	address                netip.Addr
	endpointHost, endpoint string
	minor                  string // v1.36
	pkgVersion             string // 1.36.3-1.1
	labels                 string // k=v,... sorted
	proxy                  distro.ProxyEnv
	rootCA                 string // normalised PEM, "" for none
}

var (
	tokenRE          = regexp.MustCompile(`^[a-z0-9]{6}\.[a-z0-9]{16}$`)
	caCertHashRE     = regexp.MustCompile(`^sha256:[0-9a-f]{64}$`)
	certificateKeyRE = regexp.MustCompile(`^[0-9a-f]{64}$`)
	interfaceRE      = regexp.MustCompile(`^[A-Za-z0-9_][A-Za-z0-9_.-]{0,14}$`)
)

// check validates in and fills in its defaults.
func check(in Input) (*spec, error) {
	s := &spec{Input: in}
	if s.PodCIDR == "" {
		s.PodCIDR = DefaultPodCIDR
	}
	if s.ServiceCIDR == "" {
		s.ServiceCIDR = DefaultServiceCIDR
	}
	if s.CNI == "" {
		s.CNI = DefaultCNI
	}
	if s.Node.Arch == "" {
		s.Node.Arch = DefaultArch
	}
	for _, f := range []func() error{s.cluster, s.network, s.node, s.join, s.clusterCA, s.checkProxy} {
		if err := f(); err != nil {
			return nil, err
		}
	}
	return s, nil
}

func (s *spec) cluster() error {
	if !names.IsDNSLabel(s.ClusterName, names.MaxLabel) {
		return refuse("clusterName", "%q must be a lower-case DNS-1123 label", s.ClusterName)
	}
	v := s.KubernetesVersion
	if !names.IsKubernetesVersion(v) {
		return refuse("kubernetesVersion", "%q must look like vMAJOR.MINOR.PATCH, for example v1.36.3", v)
	}
	if offered := distro.KubeadmVersions(); !slices.Contains(offered, v) {
		return refuse("kubernetesVersion", "Kubernetes %s is not offered by the kubeadm distribution; use one of %s",
			v, strings.Join(offered, ", "))
	}
	parts := strings.SplitN(strings.TrimPrefix(v, "v"), ".", 3)
	s.minor = "v" + parts[0] + "." + parts[1]
	s.pkgVersion = strings.TrimPrefix(v, "v") + "-1.1"

	host, port, err := net.SplitHostPort(s.Endpoint)
	if err != nil || host == "" {
		return refuse("endpoint", "%q must be host:port, for example 10.0.0.5:6443", s.Endpoint)
	}
	if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 || strconv.Itoa(n) != port {
		return refuse("endpoint", "port %q must be a number between 1 and 65535", port)
	}
	if ip, err := netip.ParseAddr(host); err == nil {
		if !ip.Is4() {
			return refuse("endpoint", "host %s: this plan supports IPv4 clusters only", host)
		}
	} else if !names.IsDNSSubdomain(host) {
		return refuse("endpoint", "host %q must be an IPv4 address or a lower-case DNS name", host)
	}
	s.endpointHost, s.endpoint = host, net.JoinHostPort(host, port)
	return nil
}

func (s *spec) network() error {
	var err error
	if s.pod, err = prefix("podCIDR", s.PodCIDR); err != nil {
		return err
	}
	if b := s.pod.Bits(); b < 8 || b > 24 {
		return refuse("podCIDR", "%s: the prefix length must be between /8 and /24: every node gets a /24 of it, and at most 65536 of them", s.pod)
	}
	if s.service, err = prefix("serviceCIDR", s.ServiceCIDR); err != nil {
		return err
	}
	if b := s.service.Bits(); b < 12 || b > 28 {
		return refuse("serviceCIDR", "%s: the prefix length must be between /12 (the API server's largest range) and /28 (the DNS service takes the 10th address)", s.service)
	}
	if s.pod.Overlaps(s.service) {
		return refuse("serviceCIDR", "%s overlaps podCIDR %s", s.service, s.pod)
	}
	if ip, err := netip.ParseAddr(s.endpointHost); err == nil {
		for _, p := range []netip.Prefix{s.pod, s.service} {
			if p.Contains(ip) {
				return refuse("endpoint", "host %s is inside %s, an address range of the cluster's pods or services", ip, p)
			}
		}
	}
	switch s.CNI {
	case CNICalico, CNICilium:
	case CNIBridge:
		if s.KubeProxyKubeconfig == "" {
			return refuse("kubeProxyKubeconfig", "an install from Kiln (cni bridge) runs kube-proxy with this kubeconfig: the controller makes it")
		}
	case "flannel":
		return refuse("cni", "flannel is not installed by the kubeadm distribution; use bridge, calico or cilium")
	default:
		return refuse("cni", "%q must be bridge, calico or cilium", s.CNI)
	}
	return nil
}

// prefix parses an IPv4 CIDR that is its own network address.
func prefix(field, s string) (netip.Prefix, error) {
	p, err := netip.ParsePrefix(s)
	switch {
	case err != nil:
		return p, refuse(field, "%q must be an IPv4 CIDR, for example 10.244.0.0/16", s)
	case !p.Addr().Is4():
		return p, refuse(field, "%s: this plan supports IPv4 clusters only", s)
	case p != p.Masked():
		return p, refuse(field, "%s has host bits set; the network is %s", s, p.Masked())
	}
	return p, nil
}

// kubeletLabelNamespaces and kubeletLabels are the kubernetes.io and k8s.io
// labels a kubelet may set on its own node (the kubelet refuses the others
// in --node-labels, and NodeRestriction would refuse them anyway).
var (
	kubeletLabelNamespaces = []string{"kubelet.kubernetes.io", "node.kubernetes.io"}
	kubeletLabels          = []string{
		"kubernetes.io/hostname", "kubernetes.io/arch", "kubernetes.io/os",
		"beta.kubernetes.io/arch", "beta.kubernetes.io/os", "beta.kubernetes.io/instance-type",
		"topology.kubernetes.io/region", "topology.kubernetes.io/zone",
		"failure-domain.beta.kubernetes.io/region", "failure-domain.beta.kubernetes.io/zone",
	}
)

func (s *spec) node() error {
	n := s.Node
	if !names.IsDNSSubdomain(n.Name) {
		return refuse("node.name", "%q must be a lower-case DNS subdomain", n.Name)
	}
	var err error
	if s.address, err = netip.ParseAddr(n.Address); err != nil || !s.address.Is4() || s.address.Zone() != "" {
		return refuse("node.address", "%q must be an IPv4 address", n.Address)
	}
	if s.address.IsUnspecified() || s.address.IsLoopback() || s.address.IsMulticast() {
		return refuse("node.address", "%s cannot be a node's address", s.address)
	}
	for _, p := range []netip.Prefix{s.pod, s.service} {
		if p.Contains(s.address) {
			return refuse("node.address", "%s is inside %s, an address range of the cluster's pods or services", s.address, p)
		}
	}
	switch n.Role {
	case v1.RoleControlPlane:
	case v1.RoleWorker:
		if s.FirstControlPlane {
			return refuse("firstControlPlane", "set on a worker; only a control-plane node runs kubeadm init")
		}
	default:
		return refuse("node.role", "%q must be %s or %s", n.Role, v1.RoleControlPlane, v1.RoleWorker)
	}
	if n.Interface != "" && !interfaceRE.MatchString(n.Interface) {
		return refuse("node.interface", "%q must be a network interface name: 1-15 letters, digits, '_', '.' or '-'", n.Interface)
	}
	if n.Arch != "amd64" && n.Arch != "arm64" {
		return refuse("node.arch", "%q must be amd64 or arm64", n.Arch)
	}
	labels := make([]string, 0, len(n.Labels))
	for _, k := range slices.Sorted(maps.Keys(n.Labels)) {
		field := "node.labels[" + strconv.Quote(k) + "]"
		if msg := names.LabelKey(k); msg != "" {
			return refuse(field, "%s", msg)
		}
		if msg := names.LabelValue(n.Labels[k]); msg != "" {
			return refuse(field, "%s", msg)
		}
		if !KubeletMaySet(k) {
			return refuse(field, "a kubelet may not set a label in the kubernetes.io or k8s.io namespaces other than %s/*, %s/* and %s; the controller sets it through the API",
				kubeletLabelNamespaces[0], kubeletLabelNamespaces[1], strings.Join(kubeletLabels, ", "))
		}
		labels = append(labels, k+"="+n.Labels[k])
	}
	s.labels = strings.Join(labels, ",")
	return nil
}

// KubeletMaySet reports whether a kubelet may set label key k on its node.
func KubeletMaySet(k string) bool {
	ns, _, ok := strings.Cut(k, "/")
	if !ok {
		return true
	}
	restricted := func(domain string) bool { return ns == domain || strings.HasSuffix(ns, "."+domain) }
	if !restricted("kubernetes.io") && !restricted("k8s.io") {
		return true
	}
	for _, allowed := range kubeletLabelNamespaces {
		if ns == allowed || strings.HasSuffix(ns, "."+allowed) {
			return true
		}
	}
	return slices.Contains(kubeletLabels, k)
}

func (s *spec) join() error {
	j := s.Join
	if j.Token != "" && !tokenRE.MatchString(j.Token) {
		return refuse("join.token", "must be a bootstrap token, [a-z0-9]{6}.[a-z0-9]{16}")
	}
	for i, h := range j.CACertHashes {
		if !caCertHashRE.MatchString(h) {
			return refuse(fmt.Sprintf("join.caCertHashes[%d]", i), "%q must be sha256: and 64 lower-case hex digits", h)
		}
	}
	if j.CertificateKey != "" && !certificateKeyRE.MatchString(j.CertificateKey) {
		return refuse("join.certificateKey", "must be 64 lower-case hex digits (a 32-byte key)")
	}
	switch {
	case s.FirstControlPlane:
		if len(j.CACertHashes) > 0 {
			return refuse("join.caCertHashes", "set on the first control-plane node, which creates the cluster CA")
		}
	case j.Token == "":
		return refuse("join.token", "a joining node needs the bootstrap token the first control-plane node accepts")
	case len(j.CACertHashes) == 0:
		return refuse("join.caCertHashes", "a joining node needs the hash of the cluster CA's public key to trust the endpoint")
	case s.Node.Role == v1.RoleControlPlane && j.CertificateKey == "":
		return refuse("join.certificateKey", "a joining control-plane node needs the key of the certificates kubeadm init uploaded")
	case s.Node.Role == v1.RoleWorker && j.CertificateKey != "":
		return refuse("join.certificateKey", "set on a worker; only control-plane nodes download the control-plane certificates")
	}
	return nil
}

// clusterCA checks the CA given to the first control-plane node: a CA
// certificate and the private key of its public key.
func (s *spec) clusterCA() error {
	ca := s.ClusterCA
	switch {
	case ca == nil:
		return nil
	case !s.FirstControlPlane:
		return refuse("clusterCA", "set on a node that joins; only the first control-plane node's kubeadm init takes the cluster CA")
	}
	pair, err := tls.X509KeyPair([]byte(ca.CertPEM), []byte(ca.KeyPEM))
	if err != nil {
		return refuse("clusterCA", "the certificate and key must be a PEM pair: %v", err)
	}
	cert, err := x509.ParseCertificate(pair.Certificate[0])
	if err != nil {
		return refuse("clusterCA.certPEM", "%v", err)
	}
	if !cert.IsCA {
		return refuse("clusterCA.certPEM", "%q is not a CA certificate", cert.Subject.CommonName)
	}
	return nil
}
