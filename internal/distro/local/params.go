// Package local is the controller side of the `local` distribution: what a
// node of a cluster on this computer installs for its role, with the
// components of kiln-kube (embedded etcd, kube-apiserver,
// kube-controller-manager, kube-scheduler and the hollow kubelet).
//
// BuildInstall (in kilnd's plans) is a pure function from the cluster's
// secrets and topology to InstallParams: every certificate and kubeconfig the
// node needs, issued by the cluster CA, and the settings of each component.
// InstallParams, its files, ports and ParseParams are the format both sides
// share. The kiln distribution's nodes get the same params with Containers
// (BuildInput.Containers): internal/distro/kiln's ContainerParams (the real
// kubelet, kube-proxy and the pod network, the cluster DNS) and the files
// they read (kube-proxy's kubeconfig, the kubelet's serving certificate),
// which this package issues. FindKubeBinaries finds the kiln-kube programs, one per Kubernetes
// version (kilnd offers the versions it finds).
//
// The node side, which writes those files and runs the components, is
// internal/agent/distro/local (kiln-agent). This package imports nothing of
// the agent's, so kilnd links none of it.
//
// docs/distro-local.md describes the files, flags and steps.
package local

import (
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"path"
	"slices"
	"strings"
	"time"

	"kiln.dev/kiln/internal/distro"
	"kiln.dev/kiln/internal/distro/kiln"

	v1 "kiln.dev/kiln/api/v1"
)

// ParamsVersion is the version of the InstallParams format. An executor
// refuses params of another version (terminal).
const ParamsVersion = 1

// Ports every component binds on the node's own address.
const (
	EtcdClientPort        = 2379
	EtcdPeerPort          = 2380
	APIServerPort         = 6443
	ControllerManagerPort = 10257
	SchedulerPort         = 10259
	KubeletPort           = 10250
)

// ControlPlaneTaint is the taint of a dedicated control-plane node.
const ControlPlaneTaint = "node-role.kubernetes.io/control-plane:NoSchedule"

// Files a node gets, relative to its root. Keys and kubeconfigs are written
// 0600, certificates and public keys 0644.
const (
	FileCA = "etc/kiln/pki/ca.crt"
	// FileProxyCA is spec.proxy.rootCA: the components trust it besides
	// the system's roots (SSL_CERT_DIR).
	FileProxyCA               = "etc/kiln/ca-certificates/proxy-ca.crt"
	FileEtcdCert              = "etc/kiln/pki/etcd/member.crt" // serving and peer
	FileEtcdKey               = "etc/kiln/pki/etcd/member.key"
	FileAPIServerCert         = "etc/kiln/pki/apiserver.crt"
	FileAPIServerKey          = "etc/kiln/pki/apiserver.key"
	FileAPIServerEtcdCert     = "etc/kiln/pki/apiserver-etcd-client.crt"
	FileAPIServerEtcdKey      = "etc/kiln/pki/apiserver-etcd-client.key"
	FileAPIServerKubeletCert  = "etc/kiln/pki/apiserver-kubelet-client.crt"
	FileAPIServerKubeletKey   = "etc/kiln/pki/apiserver-kubelet-client.key"
	FileFrontProxyCA          = "etc/kiln/pki/front-proxy-ca.crt"
	FileFrontProxyClientCert  = "etc/kiln/pki/front-proxy-client.crt"
	FileFrontProxyClientKey   = "etc/kiln/pki/front-proxy-client.key"
	FileServiceAccountKey     = "etc/kiln/pki/sa.key"
	FileServiceAccountPub     = "etc/kiln/pki/sa.pub"
	FileControllerManagerConf = "etc/kiln/controller-manager.conf"
	FileSchedulerConf         = "etc/kiln/scheduler.conf"
	FileKubeletConf           = "etc/kiln/kubelet.conf"
	// Files of a node that runs containers (InstallParams.Containers):
	// kube-proxy's kubeconfig and the kubelet's serving certificate.
	FileKubeProxyConf      = "etc/kiln/kube-proxy.conf"
	FileKubeletServingCert = "etc/kiln/pki/kubelet.crt"
	FileKubeletServingKey  = "etc/kiln/pki/kubelet.key"
)

// containerFiles are the files every node that runs containers gets.
var containerFiles = []string{FileKubeProxyConf, FileKubeletServingCert, FileKubeletServingKey}

// controlPlaneFiles are the files only a control-plane node gets.
var controlPlaneFiles = []string{
	FileEtcdCert, FileEtcdKey, FileAPIServerCert, FileAPIServerKey,
	FileAPIServerEtcdCert, FileAPIServerEtcdKey, FileAPIServerKubeletCert, FileAPIServerKubeletKey,
	FileFrontProxyCA, FileFrontProxyClientCert, FileFrontProxyClientKey,
	FileServiceAccountKey, FileServiceAccountPub, FileControllerManagerConf, FileSchedulerConf,
}

// workerFiles are the files every node gets.
var workerFiles = []string{FileCA, FileKubeletConf}

// ErrInvalidParams: install params that cannot be installed (a bug in the
// controller, or params of another version). Running them again does not
// help.
var ErrInvalidParams = errors.New("invalid install params")

// InstallParams are the params of an `install` instruction: everything a node
// needs, so the node side makes no decision of its own beyond picking a free
// kubelet port. It is JSON; the private keys inside travel over the agent's
// mTLS session and sit in the controller's instructions table.
type InstallParams struct {
	Version           int    `json:"version"`
	ClusterID         string `json:"clusterID"`
	ClusterName       string `json:"clusterName"`
	KubernetesVersion string `json:"kubernetesVersion"`
	Node              Node   `json:"node"`
	// Endpoint is the cluster's API endpoint (the load balancer), host:port;
	// kubelets and, through it, everything on a worker reach the API there.
	Endpoint    string `json:"endpoint"`
	ServiceCIDR string `json:"serviceCIDR"`
	PodCIDR     string `json:"podCIDR"`
	// Taints the kubelet registers the node with (key=value:Effect or
	// key:Effect).
	Taints []string `json:"taints,omitempty"`
	// ControlPlane is set on control-plane nodes only.
	ControlPlane *ControlPlaneParams `json:"controlPlane,omitempty"`
	// Proxy is the HTTP proxy every component uses (spec.proxy), with what
	// must not go through it added to its no-proxy list; nil for none.
	Proxy *distro.ProxyEnv `json:"proxy,omitempty"`
	// Containers is set on the nodes of the kiln distribution, which run
	// containers: the real kubelet on the node's containerd, kube-proxy and
	// the pod network (its params are internal/distro/kiln's). Nil: the
	// kubelet is hollow (the local distribution).
	Containers *kiln.ContainerParams `json:"containers,omitempty"`
	// Files are the node's files, path (relative to its root) -> content.
	Files map[string]string `json:"files"`
	// CertificatesNotAfter is when the first of the certificates in Files
	// that BuildInstall issued expires (CA certificates not counted): the
	// node's certificates are to be renewed before it. The node ignores it.
	CertificatesNotAfter time.Time `json:"certificatesNotAfter,omitzero"`
}

// Node is the node being installed.
type Node struct {
	Name    string `json:"name"`
	Role    string `json:"role"`    // v1.RoleControlPlane or v1.RoleWorker
	Address string `json:"address"` // the address every component binds, e.g. 127.0.0.2
}

// Member is a control-plane node: an etcd member and an API server.
type Member struct {
	Name    string `json:"name"`
	Address string `json:"address"`
}

// ControlPlaneParams say how a control-plane node runs etcd and the
// controllers.
type ControlPlaneParams struct {
	// Members are the control-plane nodes in order, this one included.
	Members []Member `json:"members"`
	// EtcdJoin: this node joins the etcd cluster of the members before it
	// (through EtcdJoinURLs) instead of founding a new one.
	EtcdJoin bool `json:"etcdJoin,omitempty"`
	// EtcdJoinURLs are the client URLs of the other members' etcd.
	EtcdJoinURLs []string `json:"etcdJoinURLs,omitempty"`
	// EtcdToken is the initial cluster token, unique per cluster.
	EtcdToken string `json:"etcdToken"`
	// LeaderElect is --leader-elect of the controller-manager and the
	// scheduler: BuildInstall always turns it on.
	LeaderElect bool `json:"leaderElect"`
	// ServiceAccountIssuer is --service-account-issuer.
	ServiceAccountIssuer string `json:"serviceAccountIssuer"`
}

// IsControlPlane reports whether the params install a control-plane node.
func (p InstallParams) IsControlPlane() bool { return p.Node.Role == v1.RoleControlPlane }

// ParseParams decodes and validates an instruction's params. Its errors wrap
// ErrInvalidParams.
func ParseParams(raw json.RawMessage) (InstallParams, error) {
	var p InstallParams
	dec := json.NewDecoder(strings.NewReader(string(raw)))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&p); err != nil {
		return InstallParams{}, fmt.Errorf("%w: decode: %w", ErrInvalidParams, err)
	}
	if err := p.Validate(); err != nil {
		return InstallParams{}, err
	}
	return p, nil
}

// Validate checks that the params can be installed. Its errors wrap
// ErrInvalidParams.
func (p InstallParams) Validate() error {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: %s", ErrInvalidParams, fmt.Sprintf(format, args...))
	}
	if p.Version != ParamsVersion {
		return bad("version %d, this agent installs version %d", p.Version, ParamsVersion)
	}
	if p.Node.Name == "" {
		return bad("no node name")
	}
	if _, err := netip.ParseAddr(p.Node.Address); err != nil {
		return bad("node address %q: %v", p.Node.Address, err)
	}
	if host, port, err := net.SplitHostPort(p.Endpoint); err != nil || host == "" || port == "" {
		return bad("endpoint %q is not host:port", p.Endpoint)
	}
	need := workerFiles
	if c := p.Containers; c != nil {
		if err := c.Validate(p.PodCIDR); err != nil {
			return bad("%v", err)
		}
		need = append(slices.Clone(need), containerFiles...)
	}
	switch p.Node.Role {
	case v1.RoleWorker:
		if p.ControlPlane != nil {
			return bad("a worker with control-plane params")
		}
	case v1.RoleControlPlane:
		cp := p.ControlPlane
		if cp == nil {
			return bad("a control-plane node without control-plane params")
		}
		if _, err := netip.ParsePrefix(p.ServiceCIDR); err != nil {
			return bad("service CIDR %q: %v", p.ServiceCIDR, err)
		}
		if !containsMember(cp.Members, p.Node) {
			return bad("node %s (%s) is not among the control-plane members", p.Node.Name, p.Node.Address)
		}
		if cp.EtcdJoin && len(cp.EtcdJoinURLs) == 0 {
			return bad("etcd join without a member to join")
		}
		need = append(slices.Clone(need), controlPlaneFiles...)
	default:
		return bad("role %q", p.Node.Role)
	}
	for _, f := range need {
		if p.Files[f] == "" {
			return bad("no file %s", f)
		}
	}
	for name := range p.Files {
		if !fileNameOK(name) {
			return bad("file %q is not a clean path under etc/kiln", name)
		}
	}
	return nil
}

func containsMember(ms []Member, n Node) bool {
	for _, m := range ms {
		if m.Name == n.Name && m.Address == n.Address {
			return true
		}
	}
	return false
}

// fileNameOK: a relative, clean path under etc/kiln/.
func fileNameOK(name string) bool {
	return path.Clean(name) == name && strings.HasPrefix(name, "etc/kiln/") && !strings.Contains(name, "..")
}

// FileMode is the mode a file is written with: certificates and public keys
// are readable by all, everything else (keys, kubeconfigs) by the owner only.
func FileMode(name string) uint32 {
	if strings.HasSuffix(name, ".crt") || strings.HasSuffix(name, ".pub") {
		return 0o644
	}
	return 0o600
}
