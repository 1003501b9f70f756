package kiln

import (
	"slices"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"

	"kiln.dev/kiln/internal/agent/distro/local"
	distrokiln "kiln.dev/kiln/internal/distro/kiln"
	distrolocal "kiln.dev/kiln/internal/distro/local"
)

// The real kubelet's configuration is the kubelet's own format: what a
// node in Kiln's node image needs (cgroup v1 with cgroupfs under the node's
// cgroup, containerd, Webhook authorization, the cluster DNS).
func TestRealKubeletConfiguration(t *testing.T) {
	p := distrolocal.InstallParams{
		Node:       distrolocal.Node{Name: "w0", Role: "worker", Address: "172.30.0.3"},
		PodCIDR:    "10.244.0.0/16",
		Taints:     []string{"a=b:NoSchedule"},
		Containers: &distrokiln.ContainerParams{ClusterDNS: "10.96.0.10", ClusterDomain: "cluster.local"},
	}
	f := func(rel string) string { return "/" + rel }
	kubelet, proxy := realKubelet(p, f, "/docker/abc/kubelet"), kubeProxy(p, f)
	if kubelet.Name != local.Kubelet || kubelet.Command != "kubelet" || proxy.Name != local.KubeProxy || proxy.Command != "" {
		t.Fatalf("components %s (%q), %s (%q): want the real kubelet and kube-proxy (named after it)",
			kubelet.Name, kubelet.Command, proxy.Name, proxy.Command)
	}
	var cfg struct {
		FailCgroupV1   *bool    `json:"failCgroupV1"`
		CgroupDriver   string   `json:"cgroupDriver"`
		CgroupRoot     string   `json:"cgroupRoot"`
		Runtime        string   `json:"containerRuntimeEndpoint"`
		ClusterDNS     []string `json:"clusterDNS"`
		ReadOnlyPort   int      `json:"readOnlyPort"`
		Authentication struct {
			Anonymous struct{ Enabled bool } `json:"anonymous"`
			Webhook   struct{ Enabled bool } `json:"webhook"`
			X509      struct {
				ClientCAFile string `json:"clientCAFile"`
			} `json:"x509"`
		} `json:"authentication"`
		Authorization struct{ Mode string } `json:"authorization"`
		TLSCertFile   string                `json:"tlsCertFile"`
	}
	config := kubelet.Files[f(local.DirKubelet+"/config.yaml")]
	if err := yaml.Unmarshal([]byte(config), &cfg); err != nil {
		t.Fatalf("kubelet configuration does not parse: %v\n%s", err, config)
	}
	if cfg.FailCgroupV1 == nil || *cfg.FailCgroupV1 || cfg.CgroupDriver != "cgroupfs" || cfg.CgroupRoot != "/docker/abc/kubelet" ||
		cfg.Runtime != "unix:///run/containerd/containerd.sock" || !slices.Equal(cfg.ClusterDNS, []string{"10.96.0.10"}) ||
		cfg.ReadOnlyPort != 0 || cfg.Authentication.Anonymous.Enabled || !cfg.Authentication.Webhook.Enabled ||
		cfg.Authentication.X509.ClientCAFile != f(distrolocal.FileCA) || cfg.Authorization.Mode != "Webhook" ||
		cfg.TLSCertFile != f(distrolocal.FileKubeletServingCert) {
		t.Errorf("kubelet configuration:\n%s", config)
	}
	if !slices.Contains(kubelet.Args, "--register-with-taints") || !slices.Contains(kubelet.Args, "a=b:NoSchedule") {
		t.Errorf("kubelet args %q: want the taints", kubelet.Args)
	}
	pc := proxy.Files[f(dirKubeProxy+"/config.yaml")]
	for _, want := range []string{"mode: iptables", `clusterCIDR: "10.244.0.0/16"`, "maxPerCore: 0", `hostnameOverride: "w0"`} {
		if !strings.Contains(pc, want) {
			t.Errorf("kube-proxy configuration lacks %q:\n%s", want, pc)
		}
	}
	// The cgroup root is in the kubelet's configuration file, which the
	// executor hashes: another one restarts the kubelet.
	other := realKubelet(p, f, "/docker/def/kubelet")
	if other.Files[f(local.DirKubelet+"/config.yaml")] == config {
		t.Error("another cgroup root gives the kubelet the same configuration")
	}
}
