package kubeadm

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	v1 "kiln.dev/kiln/api/v1"
	distrokubeadm "kiln.dev/kiln/internal/distro/kubeadm"
)

// The inputs of the golden cases of internal/distro/kubeadm (build_test.go,
// whose testdata holds the fixtures read here): the executor runs their
// plans, and every program they run must have a test double. A case added
// there is added here too.

// testdata is the controller side's: the fixtures are shared, not copied.
var testdata = filepath.Join("..", "..", "..", "distro", "kubeadm", "testdata")

// Join material as the controller would produce it (not real secrets).
const (
	testToken          = "abcdef.0123456789abcdef"
	testCertificateKey = "0d5b7c1e9f3a2b4c6d8e0f1a3b5c7d9e1f2a4b6c8d0e2f4a6b8c0d2e4f6a8b0c"
	testCACertHash     = "sha256:7c1b0f2e3d4a5968778695a4b3c2d1e0f9e8d7c6b5a49382716059483726150f"
)

// firstControlPlane is a converged cluster's first control-plane node with
// every default: Calico, 10.244.0.0/16 and 10.96.0.0/12, no proxy.
func firstControlPlane() distrokubeadm.Input {
	return distrokubeadm.Input{
		ClusterName:       "demo",
		KubernetesVersion: "v1.36.3",
		Endpoint:          "10.0.0.5:6443",
		Node:              distrokubeadm.Node{Name: "demo-cp-1", Address: "10.0.0.11", Role: v1.RoleControlPlane},
		FirstControlPlane: true,
	}
}

func readCA(t *testing.T) string {
	t.Helper()
	return readTestdata(t, "proxy-ca.pem")
}

// clusterCA is a test cluster CA (testdata/cluster-ca.pem: made with
// pki.NewCA, certificate then key).
func clusterCA(t *testing.T) *distrokubeadm.ClusterCA {
	t.Helper()
	pair := readTestdata(t, "cluster-ca.pem")
	i := strings.Index(pair, "-----BEGIN EC PRIVATE KEY-----")
	if i < 0 {
		t.Fatal("testdata/cluster-ca.pem has no EC private key")
	}
	return &distrokubeadm.ClusterCA{CertPEM: pair[:i], KeyPEM: pair[i:]}
}

func readTestdata(t *testing.T, name string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(testdata, name))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

type goldenCase struct {
	name string
	in   func(t *testing.T) distrokubeadm.Input
}

var goldenCases = []goldenCase{
	{
		name: "converged-first-calico",
		in:   func(*testing.T) distrokubeadm.Input { return firstControlPlane() },
	},
	{
		name: "dedicated-first-cilium",
		in: func(*testing.T) distrokubeadm.Input {
			in := firstControlPlane()
			in.KubernetesVersion = "v1.35.4"
			in.CNI = distrokubeadm.CNICilium
			in.DedicatedControlPlane = true
			in.Node.Arch = "arm64"
			in.Join = distrokubeadm.JoinMaterial{Token: testToken, CertificateKey: testCertificateKey}
			return in
		},
	},
	{
		name: "control-plane-join",
		in: func(*testing.T) distrokubeadm.Input {
			in := firstControlPlane()
			in.Endpoint = "api.demo.example.com:443"
			in.DedicatedControlPlane = true
			in.FirstControlPlane = false
			in.Node = distrokubeadm.Node{Name: "demo-cp-2", Address: "10.0.0.12", Role: v1.RoleControlPlane}
			in.Join = distrokubeadm.JoinMaterial{Token: testToken, CACertHashes: []string{testCACertHash}, CertificateKey: testCertificateKey}
			return in
		},
	},
	{
		name: "worker-join-labels-interface",
		in: func(*testing.T) distrokubeadm.Input {
			in := firstControlPlane()
			in.FirstControlPlane = false
			in.Node = distrokubeadm.Node{
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
			in.Join = distrokubeadm.JoinMaterial{Token: testToken, CACertHashes: []string{testCACertHash}}
			return in
		},
	},
	{
		name: "proxy-root-ca",
		in: func(t *testing.T) distrokubeadm.Input {
			in := firstControlPlane()
			in.Proxy = &v1.Proxy{
				HTTPProxy:  "http://proxy.corp.example:3128",
				HTTPSProxy: "http://user:p%40ss@proxy.corp.example:3128",
				NoProxy:    "corp.example, .internal,10.0.0.0/8,localhost",
				RootCA:     readCA(t),
			}
			return in
		},
	},
	{
		name: "first-with-cluster-ca",
		in: func(t *testing.T) distrokubeadm.Input {
			in := firstControlPlane()
			in.ClusterCA = clusterCA(t)
			in.Join = distrokubeadm.JoinMaterial{Token: testToken, CertificateKey: testCertificateKey}
			return in
		},
	},
	{
		name: "custom-subnets",
		in: func(*testing.T) distrokubeadm.Input {
			in := firstControlPlane()
			in.KubernetesVersion = "v1.34.4"
			in.PodCIDR = "172.20.0.0/14"
			in.ServiceCIDR = "172.31.0.0/16"
			in.Node.Interface = "eth1"
			in.Join = distrokubeadm.JoinMaterial{Token: testToken, CertificateKey: testCertificateKey}
			return in
		},
	},
}

// fileContent is the content of the file p writes at path.
func fileContent(t *testing.T, p *distrokubeadm.Plan, path string) string {
	t.Helper()
	for _, f := range p.Files {
		if f.Path == path {
			return f.Content
		}
	}
	t.Fatalf("the plan writes no %s", path)
	return ""
}

// The cases here are the controller side's: one for each of its golden
// files but the reset plan's (which the executor tests build themselves).
func TestCasesAreTheGoldenCases(t *testing.T) {
	files, err := filepath.Glob(filepath.Join(testdata, "*.golden"))
	if err != nil {
		t.Fatal(err)
	}
	var want, got []string
	for _, f := range files {
		if name := strings.TrimSuffix(filepath.Base(f), ".golden"); name != "reset" {
			want = append(want, name)
		}
	}
	for _, c := range goldenCases {
		got = append(got, c.name)
	}
	slices.Sort(got)
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("cases (-golden files of internal/distro/kubeadm +here):\n%s", diff)
	}
}
