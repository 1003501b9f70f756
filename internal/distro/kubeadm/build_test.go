package kubeadm

import (
	"flag"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	v1 "kiln.dev/kiln/api/v1"
)

var update = flag.Bool("update", false, "rewrite the golden files under testdata")

// Join material as the controller would produce it (not real secrets).
const (
	testToken          = "abcdef.0123456789abcdef"
	testCertificateKey = "0d5b7c1e9f3a2b4c6d8e0f1a3b5c7d9e1f2a4b6c8d0e2f4a6b8c0d2e4f6a8b0c"
	testCACertHash     = "sha256:7c1b0f2e3d4a5968778695a4b3c2d1e0f9e8d7c6b5a49382716059483726150f"
)

// firstControlPlane is a converged cluster's first control-plane node with
// every default: Calico, 10.244.0.0/16 and 10.96.0.0/12, no proxy.
func firstControlPlane() Input {
	return Input{
		ClusterName:       "demo",
		KubernetesVersion: "v1.36.3",
		Endpoint:          "10.0.0.5:6443",
		Node:              Node{Name: "demo-cp-1", Address: "10.0.0.11", Role: v1.RoleControlPlane},
		FirstControlPlane: true,
	}
}

func readCA(t *testing.T) string {
	t.Helper()
	return readTestdata(t, "proxy-ca.pem")
}

// clusterCA is a test cluster CA (testdata/cluster-ca.pem: made with
// pki.NewCA, certificate then key).
func clusterCA(t *testing.T) *ClusterCA {
	t.Helper()
	pair := readTestdata(t, "cluster-ca.pem")
	i := strings.Index(pair, "-----BEGIN EC PRIVATE KEY-----")
	if i < 0 {
		t.Fatal("testdata/cluster-ca.pem has no EC private key")
	}
	return &ClusterCA{CertPEM: pair[:i], KeyPEM: pair[i:]}
}

func readTestdata(t *testing.T, name string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

type goldenCase struct {
	name  string
	in    func(t *testing.T) Input
	steps []string
}

var (
	stepsInit = []string{StepWriteFiles, StepPrepareKernel, StepInstallPrerequisites, StepAddKubernetesRepository,
		StepInstallPackages, StepEnableServices, StepKubeadmInit, StepInstallCNI}
	stepsJoin = []string{StepWriteFiles, StepPrepareKernel, StepInstallPrerequisites, StepAddKubernetesRepository,
		StepInstallPackages, StepEnableServices, StepKubeadmJoin}
)

var goldenCases = []goldenCase{
	{
		name:  "converged-first-calico",
		in:    func(*testing.T) Input { return firstControlPlane() },
		steps: stepsInit,
	},
	{
		name: "dedicated-first-cilium",
		in: func(*testing.T) Input {
			in := firstControlPlane()
			in.KubernetesVersion = "v1.35.4"
			in.CNI = CNICilium
			in.DedicatedControlPlane = true
			in.Node.Arch = "arm64"
			in.Join = JoinMaterial{Token: testToken, CertificateKey: testCertificateKey}
			return in
		},
		steps: stepsInit,
	},
	{
		name: "control-plane-join",
		in: func(*testing.T) Input {
			in := firstControlPlane()
			in.Endpoint = "api.demo.example.com:443"
			in.DedicatedControlPlane = true
			in.FirstControlPlane = false
			in.Node = Node{Name: "demo-cp-2", Address: "10.0.0.12", Role: v1.RoleControlPlane}
			in.Join = JoinMaterial{Token: testToken, CACertHashes: []string{testCACertHash}, CertificateKey: testCertificateKey}
			return in
		},
		steps: stepsJoin,
	},
	{
		name: "worker-join-labels-interface",
		in: func(*testing.T) Input {
			in := firstControlPlane()
			in.FirstControlPlane = false
			in.Node = Node{
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
			in.Join = JoinMaterial{Token: testToken, CACertHashes: []string{testCACertHash}}
			return in
		},
		steps: append([]string{StepWriteFiles, StepCheckInterface}, stepsJoin[1:]...),
	},
	{
		name: "proxy-root-ca",
		in: func(t *testing.T) Input {
			in := firstControlPlane()
			in.Proxy = &v1.Proxy{
				HTTPProxy:  "http://proxy.corp.example:3128",
				HTTPSProxy: "http://user:p%40ss@proxy.corp.example:3128",
				NoProxy:    "corp.example, .internal,10.0.0.0/8,localhost",
				RootCA:     readCA(t),
			}
			return in
		},
		steps: []string{StepWriteFiles, StepPrepareKernel, StepInstallPrerequisites, StepTrustProxyCA,
			StepAddKubernetesRepository, StepInstallPackages, StepEnableServices, StepKubeadmInit, StepInstallCNI},
	},
	{
		name: "first-with-cluster-ca",
		in: func(t *testing.T) Input {
			in := firstControlPlane()
			in.ClusterCA = clusterCA(t)
			in.Join = JoinMaterial{Token: testToken, CertificateKey: testCertificateKey}
			return in
		},
		steps: stepsInit,
	},
	{
		name: "custom-subnets",
		in: func(*testing.T) Input {
			in := firstControlPlane()
			in.KubernetesVersion = "v1.34.4"
			in.PodCIDR = "172.20.0.0/14"
			in.ServiceCIDR = "172.31.0.0/16"
			in.Node.Interface = "eth1"
			in.Join = JoinMaterial{Token: testToken, CertificateKey: testCertificateKey}
			return in
		},
		steps: append([]string{StepWriteFiles, StepCheckInterface}, stepsInit[1:]...),
	},
}

// Each case's script is pinned by testdata/<case>.golden (go test -update
// rewrites them), and its steps by the table.
func TestGolden(t *testing.T) {
	for _, tt := range goldenCases {
		t.Run(tt.name, func(t *testing.T) {
			p, err := Build(tt.in(t))
			if err != nil {
				t.Fatalf("Build: %v", err)
			}
			if diff := cmp.Diff(tt.steps, p.Steps()); diff != "" {
				t.Errorf("steps (-want +got):\n%s", diff)
			}
			golden(t, tt.name, p.Script())
		})
	}
}

// The scripts are valid POSIX shell (checked by sh -n, which runs nothing).
func TestScriptParses(t *testing.T) {
	sh, err := exec.LookPath("sh")
	if err != nil {
		t.Skip("no sh on PATH")
	}
	for _, tt := range goldenCases {
		t.Run(tt.name, func(t *testing.T) {
			p, err := Build(tt.in(t))
			if err != nil {
				t.Fatal(err)
			}
			path := filepath.Join(t.TempDir(), "plan.sh")
			if err := os.WriteFile(path, []byte(p.Script()), 0o600); err != nil {
				t.Fatal(err)
			}
			if out, err := exec.CommandContext(t.Context(), sh, "-n", path).CombinedOutput(); err != nil {
				t.Errorf("sh -n: %v\n%s", err, out)
			}
		})
	}
}

// golden compares got with testdata/<name>.golden.
func golden(t *testing.T, name, got string) {
	t.Helper()
	path := filepath.Join("testdata", name+".golden")
	if *update {
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run with -update to create it)", err)
	}
	if diff := cmp.Diff(string(want), got); diff != "" {
		t.Errorf("%s mismatch (-want +got):\n%s", path, diff)
	}
}
