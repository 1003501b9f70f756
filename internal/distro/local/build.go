package local

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net"
	"slices"
	"strings"
	"time"

	"kiln.dev/kiln/internal/distro"
	"kiln.dev/kiln/internal/distro/kiln"

	v1 "kiln.dev/kiln/api/v1"
	"kiln.dev/kiln/internal/pki"
)

// ServiceAccountIssuer is the issuer of service-account tokens.
const ServiceAccountIssuer = "https://kubernetes.default.svc.cluster.local"

// BuildInput is what the controller knows when it builds a node's install.
type BuildInput struct {
	// CA is the cluster CA; its key signs every certificate of the node
	// but the front-proxy client's.
	CA *pki.CA
	// Trust is the PEM bundle of the CAs the node trusts (its ca.crt and
	// its kubeconfigs'): both CAs while the cluster's CA is being
	// replaced (trust.ClusterCAs.NodeTrustPEM); CA's certificate when
	// empty.
	Trust []byte
	// FrontProxyCA is the aggregation layer's CA: it issues the API
	// server's front-proxy-client certificate, and extension API servers
	// trust request headers from that certificate only. Control-plane
	// nodes only.
	FrontProxyCA *pki.CA
	// ServiceAccountKey and ServiceAccountPub are the service-account key
	// pair (pki.NewServiceAccountKey), PEM. Control-plane nodes only.
	ServiceAccountKey, ServiceAccountPub []byte
	// ClusterID is the cluster's id (/v1/projects/p/clusters/c), ClusterName
	// its name (the kubeconfigs' cluster name).
	ClusterID, ClusterName string
	KubernetesVersion      string
	ServiceCIDR, PodCIDR   string
	// Endpoint is the cluster's API endpoint, host:port (the load balancer).
	Endpoint string
	// Node is the node to install.
	Node Node
	// DedicatedControlPlane: control-plane nodes are tainted
	// node-role.kubernetes.io/control-plane:NoSchedule.
	DedicatedControlPlane bool
	// ControlPlane are the control-plane nodes in order (names and
	// addresses). Required for a control-plane node.
	ControlPlane []Member
	// EtcdJoin: this control-plane node joins the etcd cluster of the other
	// members instead of founding it. The plan sets it on every
	// control-plane node but the first.
	EtcdJoin bool
	// Containers: the node runs containers (the kiln distribution): it
	// gets internal/distro/kiln's ContainerParams, kube-proxy's kubeconfig
	// and a kubelet serving certificate. False: a hollow kubelet (the local distribution).
	Containers bool
	// Proxy is spec.proxy; nil for none.
	Proxy *v1.Proxy
	// CertificateTTL is the certificates' lifetime; pki.DefaultValidity
	// when zero.
	CertificateTTL time.Duration
	// Now is the issue time; time.Now() when zero.
	Now time.Time
}

// trust is the bundle of the CAs the node trusts.
func (in BuildInput) trust() []byte {
	if len(in.Trust) > 0 {
		return in.Trust
	}
	return in.CA.CertPEM()
}

// BuildInstall issues every certificate the node needs with the cluster CA,
// renders its kubeconfigs, and returns the params of its install
// instruction. It has no side effect; each call issues new keys.
func BuildInstall(in BuildInput) (InstallParams, error) {
	if in.CA == nil {
		return InstallParams{}, fmt.Errorf("build install for %s: no cluster CA", in.Node.Name)
	}
	p := InstallParams{
		Version:           ParamsVersion,
		ClusterID:         in.ClusterID,
		ClusterName:       in.ClusterName,
		KubernetesVersion: in.KubernetesVersion,
		Node:              in.Node,
		Endpoint:          in.Endpoint,
		ServiceCIDR:       in.ServiceCIDR,
		PodCIDR:           in.PodCIDR,
		Files:             map[string]string{FileCA: string(in.trust())},
	}
	b := builder{in: in, files: p.Files, notAfter: &p.CertificatesNotAfter}
	if pr := in.Proxy; pr != nil {
		endpointHost, _, _ := net.SplitHostPort(in.Endpoint)
		p.Proxy = &distro.ProxyEnv{HTTP: pr.HTTPProxy, HTTPS: pr.HTTPSProxy, NoProxy: distro.MergeNoProxy(
			strings.Split(pr.NoProxy, ","), distro.NoProxyRequired(in.Node.Address, endpointHost, in.PodCIDR, in.ServiceCIDR))}
		if pr.RootCA != "" {
			p.Files[FileProxyCA] = pr.RootCA
		}
	}
	if in.Node.Role == v1.RoleControlPlane {
		cp, err := b.controlPlane()
		if err != nil {
			return InstallParams{}, fmt.Errorf("build install for %s: %w", in.Node.Name, err)
		}
		p.ControlPlane = cp
		if in.DedicatedControlPlane {
			p.Taints = []string{ControlPlaneTaint}
		}
	}
	// Every node, control plane included, runs a kubelet registered through
	// the endpoint.
	if err := b.kubeconfig(FileKubeletConf, "https://"+in.Endpoint, pki.NodeClientRequest(in.Node.Name)); err != nil {
		return InstallParams{}, fmt.Errorf("build install for %s: %w", in.Node.Name, err)
	}
	if in.Containers {
		c, err := b.containers()
		if err != nil {
			return InstallParams{}, fmt.Errorf("build install for %s: %w", in.Node.Name, err)
		}
		p.Containers = c
	}
	if err := p.Validate(); err != nil {
		return InstallParams{}, fmt.Errorf("build install for %s: %w", in.Node.Name, err)
	}
	return p, nil
}

type builder struct {
	in    BuildInput
	files map[string]string
	// notAfter is the earliest expiry of the certificates issued so far.
	notAfter *time.Time
}

// issued notes the expiry of a certificate the builder issued.
func (b builder) issued(certPEM []byte) error {
	c, err := pki.ParseCertificate(certPEM)
	if err != nil {
		return err
	}
	if b.notAfter.IsZero() || c.NotAfter.Before(*b.notAfter) {
		*b.notAfter = c.NotAfter
	}
	return nil
}

func (b builder) controlPlane() (*ControlPlaneParams, error) {
	in := b.in
	if len(in.ServiceAccountKey) == 0 || len(in.ServiceAccountPub) == 0 {
		return nil, fmt.Errorf("%w: no service-account key pair", ErrInvalidParams)
	}
	if in.FrontProxyCA == nil {
		return nil, fmt.Errorf("%w: no front-proxy CA", ErrInvalidParams)
	}
	nodeIP := net.ParseIP(in.Node.Address)
	if nodeIP == nil {
		return nil, fmt.Errorf("%w: node address %q", ErrInvalidParams, in.Node.Address)
	}
	var joinURLs []string
	for _, m := range in.ControlPlane {
		if m.Name != in.Node.Name {
			joinURLs = append(joinURLs, EtcdClientURL(m.Address))
		}
	}
	cp := &ControlPlaneParams{
		Members:   slices.Clone(in.ControlPlane),
		EtcdJoin:  in.EtcdJoin,
		EtcdToken: etcdToken(in.ClusterID),
		// Always on, as kubeadm does: a control plane that grows from one
		// node keeps its first controller-manager and scheduler running,
		// and without leader election they would act beside the new ones.
		LeaderElect:          true,
		ServiceAccountIssuer: ServiceAccountIssuer,
	}
	if in.EtcdJoin {
		cp.EtcdJoinURLs = joinURLs
	}

	// The API server's serving certificate names the endpoint and the
	// node's address besides the in-cluster names (APIServerRequest).
	names, ips := []string{in.Node.Name}, []net.IP{nodeIP}
	if host, _, err := net.SplitHostPort(in.Endpoint); err == nil {
		if ip := net.ParseIP(host); ip != nil {
			ips = append(ips, ip)
		} else {
			names = append(names, host)
		}
	}
	apiReq, err := pki.APIServerRequest(in.ServiceCIDR, names, ips)
	if err != nil {
		return nil, err
	}
	local := "https://" + net.JoinHostPort(in.Node.Address, fmt.Sprint(APIServerPort))
	steps := []struct {
		cert, key string
		req       pki.CertRequest
	}{
		{FileEtcdCert, FileEtcdKey, pki.EtcdRequest(in.Node.Name, []net.IP{nodeIP})},
		{FileAPIServerCert, FileAPIServerKey, apiReq},
		{FileAPIServerEtcdCert, FileAPIServerEtcdKey, pki.CertRequest{CommonName: "kube-apiserver-etcd-client", Usage: pki.UsageClient}},
		{FileAPIServerKubeletCert, FileAPIServerKubeletKey, pki.APIServerKubeletClientRequest()},
	}
	for _, s := range steps {
		if err := b.issue(s.cert, s.key, s.req); err != nil {
			return nil, err
		}
	}
	b.files[FileFrontProxyCA] = string(in.FrontProxyCA.CertPEM())
	if err := b.issueBy(in.FrontProxyCA, FileFrontProxyClientCert, FileFrontProxyClientKey, pki.FrontProxyClientRequest()); err != nil {
		return nil, err
	}
	b.files[FileServiceAccountKey] = string(in.ServiceAccountKey)
	b.files[FileServiceAccountPub] = string(in.ServiceAccountPub)
	if err := b.kubeconfig(FileControllerManagerConf, local, pki.ControllerManagerRequest()); err != nil {
		return nil, err
	}
	if err := b.kubeconfig(FileSchedulerConf, local, pki.SchedulerRequest()); err != nil {
		return nil, err
	}
	return cp, nil
}

// containers issues what a node that runs containers needs besides a
// hollow one: kube-proxy's kubeconfig (through the endpoint, as the
// kubelet's) and the kubelet's serving certificate for the node's name and
// address.
func (b builder) containers() (*kiln.ContainerParams, error) {
	in := b.in
	c, err := kiln.NewContainerParams(in.ServiceCIDR)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrInvalidParams, err)
	}
	nodeIP := net.ParseIP(in.Node.Address)
	if nodeIP == nil {
		return nil, fmt.Errorf("%w: node address %q", ErrInvalidParams, in.Node.Address)
	}
	if err := b.kubeconfig(FileKubeProxyConf, "https://"+in.Endpoint, pki.KubeProxyRequest()); err != nil {
		return nil, err
	}
	if err := b.issue(FileKubeletServingCert, FileKubeletServingKey, pki.NodeServingRequest(in.Node.Name, []net.IP{nodeIP})); err != nil {
		return nil, err
	}
	return c, nil
}

func (b builder) issue(certFile, keyFile string, req pki.CertRequest) error {
	return b.issueBy(b.in.CA, certFile, keyFile, req)
}

// issueBy is issue with another CA than the cluster's.
func (b builder) issueBy(ca *pki.CA, certFile, keyFile string, req pki.CertRequest) error {
	req.ValidFor, req.Now = b.in.CertificateTTL, b.in.Now
	cert, key, err := ca.Issue(req)
	if err == nil {
		err = b.issued(cert)
	}
	if err != nil {
		return fmt.Errorf("%s: %w", certFile, err)
	}
	b.files[certFile], b.files[keyFile] = string(cert), string(key)
	return nil
}

func (b builder) kubeconfig(file, server string, req pki.CertRequest) error {
	req.ValidFor, req.Now = b.in.CertificateTTL, b.in.Now
	cert, key, err := b.in.CA.Issue(req)
	if err == nil {
		err = b.issued(cert)
	}
	if err != nil {
		return fmt.Errorf("%s: %w", file, err)
	}
	b.files[file] = string(pki.Kubeconfig(server, b.in.trust(), cert, key, b.in.ClusterName, req.CommonName))
	return nil
}

// EtcdClientURL is the URL of a member's etcd for clients (the API server,
// members joining).
func EtcdClientURL(addr string) string {
	return "https://" + net.JoinHostPort(addr, fmt.Sprint(EtcdClientPort))
}

// EtcdPeerURL is the URL of a member's etcd for its peers.
func EtcdPeerURL(addr string) string {
	return "https://" + net.JoinHostPort(addr, fmt.Sprint(EtcdPeerPort))
}

// etcdToken is the initial cluster token: derived from the cluster id, so
// members of different clusters never mistake each other.
func etcdToken(clusterID string) string {
	sum := sha256.Sum256([]byte(clusterID))
	return "kiln-" + hex.EncodeToString(sum[:8])
}
