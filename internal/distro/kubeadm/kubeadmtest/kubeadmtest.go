// Package kubeadmtest holds the fixtures of the kubeadm distribution's tests
// on both sides: the inputs of the golden cases (internal/distro/kubeadm pins
// their scripts, internal/agent/distro/kubeadm runs their plans), the join
// material and the CAs they carry. Tests only.
package kubeadmtest

import (
	_ "embed"
	"strings"
	"testing"

	v1 "kiln.dev/kiln/api/v1"
	"kiln.dev/kiln/internal/distro/kubeadm"
)

// KubeProxyKubeconfig stands for the kube-proxy kubeconfig the controller
// issues (not a real one).
const KubeProxyKubeconfig = "apiVersion: v1\nkind: Config\n# kube-proxy's credentials\n"

// Join material as the controller would produce it (not real secrets).
const (
	Token          = "abcdef.0123456789abcdef"
	CertificateKey = "0d5b7c1e9f3a2b4c6d8e0f1a3b5c7d9e1f2a4b6c8d0e2f4a6b8c0d2e4f6a8b0c"
	CACertHash     = "sha256:7c1b0f2e3d4a5968778695a4b3c2d1e0f9e8d7c6b5a49382716059483726150f"
)

var (
	//go:embed testdata/proxy-ca.pem
	proxyCA string
	//go:embed testdata/cluster-ca.pem
	clusterCAPair string
)

// ProxyCA is the root CA of a TLS-intercepting proxy (testdata/proxy-ca.pem).
func ProxyCA() string { return proxyCA }

// ClusterCA is a test cluster CA (testdata/cluster-ca.pem: made with
// pki.NewCA, certificate then key).
func ClusterCA(t testing.TB) *kubeadm.ClusterCA {
	t.Helper()
	i := strings.Index(clusterCAPair, "-----BEGIN EC PRIVATE KEY-----")
	if i < 0 {
		t.Fatal("kubeadmtest/testdata/cluster-ca.pem has no EC private key")
	}
	return &kubeadm.ClusterCA{CertPEM: clusterCAPair[:i], KeyPEM: clusterCAPair[i:]}
}

// FirstControlPlane is a converged cluster's first control-plane node with
// every default: Calico, 10.244.0.0/16 and 10.96.0.0/12, no proxy.
func FirstControlPlane() kubeadm.Input {
	return kubeadm.Input{
		ClusterName:       "demo",
		KubernetesVersion: "v1.36.3",
		Endpoint:          "10.0.0.5:6443",
		Node:              kubeadm.Node{Name: "demo-cp-1", Address: "10.0.0.11", Role: v1.RoleControlPlane},
		FirstControlPlane: true,
	}
}

// A Case is a golden case: internal/distro/kubeadm/testdata/<Name>.golden
// pins the script of the plan built from Input.
type Case struct {
	Name  string
	Input kubeadm.Input
}

// Cases are the golden cases, each with an input of its own.
func Cases(t testing.TB) []Case {
	t.Helper()
	dedicatedFirstCilium := FirstControlPlane()
	dedicatedFirstCilium.KubernetesVersion = "v1.35.4"
	dedicatedFirstCilium.CNI = kubeadm.CNICilium
	dedicatedFirstCilium.DedicatedControlPlane = true
	dedicatedFirstCilium.Node.Arch = "arm64"
	dedicatedFirstCilium.Join = kubeadm.JoinMaterial{Token: Token, CertificateKey: CertificateKey}

	controlPlaneJoin := FirstControlPlane()
	controlPlaneJoin.Endpoint = "api.demo.example.com:443"
	controlPlaneJoin.DedicatedControlPlane = true
	controlPlaneJoin.FirstControlPlane = false
	controlPlaneJoin.Node = kubeadm.Node{Name: "demo-cp-2", Address: "10.0.0.12", Role: v1.RoleControlPlane}
	controlPlaneJoin.Join = kubeadm.JoinMaterial{Token: Token, CACertHashes: []string{CACertHash}, CertificateKey: CertificateKey}

	workerJoin := FirstControlPlane()
	workerJoin.FirstControlPlane = false
	workerJoin.Node = kubeadm.Node{
		Name: "demo-default-1", Address: "192.168.50.21", Role: v1.RoleWorker, Interface: "enp1s0",
		Labels: map[string]string{
			"kiln.dev/pool":                 "default",
			"topology.kubernetes.io/zone":   "rack-2",
			"node.kubernetes.io/disk":       "ssd",
			"team":                          "payments",
			"example.com/gpu":               "",
			"kubelet.kubernetes.io/managed": "kiln",
		},
	}
	workerJoin.Join = kubeadm.JoinMaterial{Token: Token, CACertHashes: []string{CACertHash}}

	proxy := FirstControlPlane()
	proxy.Proxy = &v1.Proxy{
		HTTPProxy:  "http://proxy.corp.example:3128",
		HTTPSProxy: "http://user:p%40ss@proxy.corp.example:3128",
		NoProxy:    "corp.example, .internal,10.0.0.0/8,localhost",
		RootCA:     ProxyCA(),
	}

	withClusterCA := FirstControlPlane()
	withClusterCA.ClusterCA = ClusterCA(t)
	withClusterCA.Join = kubeadm.JoinMaterial{Token: Token, CertificateKey: CertificateKey}

	customSubnets := FirstControlPlane()
	customSubnets.KubernetesVersion = "v1.34.4"
	customSubnets.PodCIDR = "172.20.0.0/14"
	customSubnets.ServiceCIDR = "172.31.0.0/16"
	customSubnets.Node.Interface = "eth1"
	customSubnets.Join = kubeadm.JoinMaterial{Token: Token, CertificateKey: CertificateKey}

	kilnFirst := FirstControlPlane()
	kilnFirst.CNI = kubeadm.CNIBridge
	kilnFirst.ClusterCA = ClusterCA(t)
	kilnFirst.DedicatedControlPlane = true
	kilnFirst.Join = kubeadm.JoinMaterial{Token: Token, CertificateKey: CertificateKey}
	kilnFirst.KubeProxyKubeconfig = KubeProxyKubeconfig

	kilnWorker := workerJoin
	kilnWorker.CNI = kubeadm.CNIBridge
	kilnWorker.Node.Interface = ""
	kilnWorker.KubeProxyKubeconfig = KubeProxyKubeconfig

	return []Case{
		{Name: "kiln-first-dedicated", Input: kilnFirst},
		{Name: "kiln-worker-join", Input: kilnWorker},
		{Name: "converged-first-calico", Input: FirstControlPlane()},
		{Name: "dedicated-first-cilium", Input: dedicatedFirstCilium},
		{Name: "control-plane-join", Input: controlPlaneJoin},
		{Name: "worker-join-labels-interface", Input: workerJoin},
		{Name: "proxy-root-ca", Input: proxy},
		{Name: "first-with-cluster-ca", Input: withClusterCA},
		{Name: "custom-subnets", Input: customSubnets},
	}
}

// File is the content of the file p writes at path.
func File(t testing.TB, p *kubeadm.Plan, path string) string {
	t.Helper()
	for _, f := range p.Files {
		if f.Path == path {
			return f.Content
		}
	}
	t.Fatalf("the plan writes no %s", path)
	return ""
}
