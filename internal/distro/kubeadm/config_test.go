package kubeadm_test

import (
	"maps"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"sigs.k8s.io/yaml"

	"kiln.dev/kiln/internal/distro/kubeadm"
	"kiln.dev/kiln/internal/distro/kubeadm/kubeadmtest"
)

// documents parses a multi-document YAML file into one map per document.
func documents(t *testing.T, content string) map[string]map[string]any {
	t.Helper()
	docs := map[string]map[string]any{}
	for _, d := range strings.Split(content, "\n---\n") {
		var m map[string]any
		if err := yaml.UnmarshalStrict([]byte(d), &m); err != nil {
			t.Fatalf("document does not parse: %v\n%s", err, d)
		}
		kind, _ := m["kind"].(string)
		if _, dup := docs[kind]; dup || kind == "" {
			t.Fatalf("kind %q missing or repeated:\n%s", kind, content)
		}
		docs[kind] = m
	}
	return docs
}

// at follows a path of keys and list indexes through parsed YAML.
func at(t *testing.T, v any, path ...any) any {
	t.Helper()
	for _, p := range path {
		switch k := p.(type) {
		case string:
			m, ok := v.(map[string]any)
			if !ok {
				t.Fatalf("%v: not a map at %q", path, k)
			}
			v = m[k]
		case int:
			l, ok := v.([]any)
			if !ok || k >= len(l) {
				t.Fatalf("%v: no item %d", path, k)
			}
			v = l[k]
		}
	}
	return v
}

// The golden files pin the text; this pins what kubeadm and the Tigera
// operator read from it: that each document parses and holds the input.
func TestConfigsParse(t *testing.T) {
	noTaints := []any{}
	dedicated := []any{map[string]any{"key": "node-role.kubernetes.io/control-plane", "effect": "NoSchedule"}}
	t.Run("converged first control plane", func(t *testing.T) {
		in := kubeadmtest.FirstControlPlane()
		in.PodCIDR, in.ServiceCIDR = "172.20.0.0/14", "172.31.0.0/16"
		p := mustBuild(t, in)
		docs := documents(t, kubeadmtest.File(t, p, kubeadm.KubeadmConfigPath))
		if diff := cmp.Diff([]string{"ClusterConfiguration", "InitConfiguration", "KubeletConfiguration"}, sortedKeys(docs)); diff != "" {
			t.Errorf("kinds (-want +got):\n%s", diff)
		}
		expect(t, docs["InitConfiguration"], noTaints, "nodeRegistration", "taints")
		expect(t, docs["InitConfiguration"], "10.0.0.11", "localAPIEndpoint", "advertiseAddress")
		expect(t, docs["InitConfiguration"], nil, "bootstrapTokens")
		expect(t, docs["ClusterConfiguration"], "172.20.0.0/14", "networking", "podSubnet")
		expect(t, docs["ClusterConfiguration"], "172.31.0.0/16", "networking", "serviceSubnet")
		expect(t, docs["ClusterConfiguration"], "10.0.0.5:6443", "controlPlaneEndpoint")
		expect(t, docs["ClusterConfiguration"], "v1.36.3", "kubernetesVersion")
		expect(t, docs["KubeletConfiguration"], "systemd", "cgroupDriver")
		expect(t, docs["KubeletConfiguration"], true, "serverTLSBootstrap")
		expect(t, docs["ClusterConfiguration"], "kubelet-certificate-authority", "apiServer", "extraArgs", 0, "name")
		expect(t, docs["ClusterConfiguration"], "/etc/kubernetes/pki/ca.crt", "apiServer", "extraArgs", 0, "value")
		calico := documents(t, kubeadmtest.File(t, p, kubeadm.CalicoInstallation))
		expect(t, calico["Installation"], "172.20.0.0/14", "spec", "calicoNetwork", "ipPools", 0, "cidr")
		expect(t, calico["Installation"], "NodeInternalIP", "spec", "calicoNetwork", "nodeAddressAutodetectionV4", "kubernetes")
	})
	t.Run("dedicated first control plane with join material", func(t *testing.T) {
		in := kubeadmtest.FirstControlPlane()
		in.DedicatedControlPlane = true
		in.Node.Interface = "eth1.100"
		in.Join = kubeadm.JoinMaterial{Token: kubeadmtest.Token, CertificateKey: kubeadmtest.CertificateKey}
		p := mustBuild(t, in)
		docs := documents(t, kubeadmtest.File(t, p, kubeadm.KubeadmConfigPath))
		expect(t, docs["InitConfiguration"], dedicated, "nodeRegistration", "taints")
		expect(t, docs["InitConfiguration"], kubeadmtest.Token, "bootstrapTokens", 0, "token")
		expect(t, docs["InitConfiguration"], kubeadmtest.CertificateKey, "certificateKey")
		calico := documents(t, kubeadmtest.File(t, p, kubeadm.CalicoInstallation))
		expect(t, calico["Installation"], `^eth1\.100$`, "spec", "calicoNetwork", "nodeAddressAutodetectionV4", "interface")
	})
	t.Run("control-plane join", func(t *testing.T) {
		in := controlPlaneJoin()
		in.DedicatedControlPlane = true
		docs := documents(t, kubeadmtest.File(t, mustBuild(t, in), kubeadm.KubeadmConfigPath))
		j := docs["JoinConfiguration"]
		expect(t, j, "10.0.0.5:6443", "discovery", "bootstrapToken", "apiServerEndpoint")
		expect(t, j, kubeadmtest.Token, "discovery", "bootstrapToken", "token")
		expect(t, j, []any{kubeadmtest.CACertHash}, "discovery", "bootstrapToken", "caCertHashes")
		expect(t, j, kubeadmtest.CertificateKey, "controlPlane", "certificateKey")
		expect(t, j, "10.0.0.12", "controlPlane", "localAPIEndpoint", "advertiseAddress")
		expect(t, j, dedicated, "nodeRegistration", "taints")
	})
	t.Run("worker join", func(t *testing.T) {
		in := workerJoin()
		in.DedicatedControlPlane = true // not for workers
		in.Node.Labels = map[string]string{"team": "a", "kiln.dev/pool": "gpu"}
		docs := documents(t, kubeadmtest.File(t, mustBuild(t, in), kubeadm.KubeadmConfigPath))
		j := docs["JoinConfiguration"]
		expect(t, j, nil, "controlPlane")
		expect(t, j, noTaints, "nodeRegistration", "taints")
		expect(t, j, []any{
			map[string]any{"name": "node-ip", "value": "10.0.0.21"},
			map[string]any{"name": "node-labels", "value": "kiln.dev/pool=gpu,team=a"},
		}, "nodeRegistration", "kubeletExtraArgs")
	})
}

func mustBuild(t *testing.T, in kubeadm.Input) *kubeadm.Plan {
	t.Helper()
	p, err := kubeadm.Build(in)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func expect(t *testing.T, doc map[string]any, want any, path ...any) {
	t.Helper()
	if diff := cmp.Diff(want, at(t, doc, path...)); diff != "" {
		t.Errorf("%v (-want +got):\n%s", path, diff)
	}
}

func sortedKeys(m map[string]map[string]any) []string {
	return slices.Sorted(maps.Keys(m))
}
