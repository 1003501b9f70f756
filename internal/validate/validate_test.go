package validate_test

import (
	"testing"

	"github.com/google/go-cmp/cmp"

	v1 "kiln.dev/kiln/api/v1"
	"kiln.dev/kiln/internal/validate"
)

var providers = []string{"local", "sim"}

// valid returns a spec that passes, with defaults filled in.
func valid() v1.ClusterSpec {
	return v1.ClusterSpec{
		Provider:          "local",
		KubernetesVersion: "v1.36.3",
		Network:           v1.Network{PodCIDR: "10.244.0.0/16", ServiceCIDR: "10.96.0.0/12", CNI: "calico"},
		ControlPlane:      v1.ControlPlane{Size: 1},
		WorkerPools: []v1.WorkerPool{
			{Name: "default", Size: 2, Rollout: v1.Rollout{MaxSurge: 1}},
		},
		NodeApproval:       "auto",
		CertificateTTLDays: 365,
	}
}

func invalid(target, msg string) v1.Error {
	return v1.Error{Code: v1.CodeInvalidParameter, Target: target, Message: msg}
}

func TestCluster(t *testing.T) {
	tests := []struct {
		name    string
		cluster string
		edit    func(s *v1.ClusterSpec)
		want    []v1.Error
	}{
		{name: "valid", cluster: "c1", edit: func(*v1.ClusterSpec) {}},
		{
			name: "valid everything", cluster: "prod-eu-1",
			edit: func(s *v1.ClusterSpec) {
				s.Provider = "sim"
				s.CloudAccount = "acct"
				s.Network = v1.Network{PodCIDR: "fd00:10::/56", ServiceCIDR: "fd00:20::/108", CNI: "cilium"}
				s.ControlPlane.Size = 5
				s.WorkerPools = append(s.WorkerPools, v1.WorkerPool{
					Name: "gpu", Size: 1000, Zones: []string{"a"},
					Labels:    map[string]string{"kiln.dev/pool": "gpu", "tier": ""},
					Taints:    []string{"gpu=true:NoSchedule", "dedicated:NoExecute"},
					Spot:      &v1.Spot{MaxPricePercent: 40},
					Autoscale: &v1.Autoscale{Min: 0, Max: 10},
					Rollout:   v1.Rollout{MaxUnavailable: 1},
				})
				s.NodeApproval = "manual"
				s.Proxy = &v1.Proxy{HTTPProxy: "http://proxy:3128", HTTPSProxy: "https://proxy:3128"}
				s.CertificateTTLDays = 3650
				s.Labels = map[string]string{"app.kubernetes.io/name": "x"}
			},
		},
		{
			name: "cluster name too long", cluster: "a234567890123456789012345678901234567890x",
			edit: func(*v1.ClusterSpec) {},
			want: []v1.Error{invalid("name", `"a234567890123456789012345678901234567890x" must be a lower-case DNS-1123 label of at most 40 characters (a-z, 0-9 and '-', starting and ending with a letter or digit)`)},
		},
		{
			name: "pool named like the control plane", cluster: "c1",
			edit: func(s *v1.ClusterSpec) { s.WorkerPools[0].Name = "cp" },
			want: []v1.Error{invalid("spec.workerPools[0].name", `"cp" is reserved: control-plane machines are named <cluster>-cp-<n>`)},
		},
		{
			name: "cluster name upper case", cluster: "Prod",
			edit: func(*v1.ClusterSpec) {},
			want: []v1.Error{invalid("name", `"Prod" must be a lower-case DNS-1123 label of at most 40 characters (a-z, 0-9 and '-', starting and ending with a letter or digit)`)},
		},
		{
			name: "unknown provider", cluster: "c",
			edit: func(s *v1.ClusterSpec) { s.Provider = "aws" },
			want: []v1.Error{invalid("spec.provider", `unknown provider "aws"; one of local, sim`)},
		},
		{
			name: "missing provider", cluster: "c",
			edit: func(s *v1.ClusterSpec) { s.Provider = "" },
			want: []v1.Error{{Code: v1.CodeMissingParameter, Target: "spec.provider", Message: "spec.provider is required; one of local, sim"}},
		},
		{
			name: "bad version", cluster: "c",
			edit: func(s *v1.ClusterSpec) { s.KubernetesVersion = "1.36" },
			want: []v1.Error{invalid("spec.kubernetesVersion", `"1.36" must look like vMAJOR.MINOR.PATCH, for example v1.36.3`)},
		},
		{
			name: "control plane size", cluster: "c",
			edit: func(s *v1.ClusterSpec) { s.ControlPlane.Size = 2 },
			want: []v1.Error{invalid("spec.controlPlane.size", "2 must be 1, 3 or 5")},
		},
		{
			name: "cidr does not parse", cluster: "c",
			edit: func(s *v1.ClusterSpec) { s.Network.PodCIDR = "10.244.0.0" },
			want: []v1.Error{invalid("spec.network.podCIDR", `"10.244.0.0" is not a CIDR such as 10.244.0.0/16`)},
		},
		{
			name: "cidr host bits", cluster: "c",
			edit: func(s *v1.ClusterSpec) { s.Network.PodCIDR = "10.244.1.0/16" },
			want: []v1.Error{invalid("spec.network.podCIDR", `"10.244.1.0/16" has host bits set; did you mean 10.244.0.0/16?`)},
		},
		{
			name: "cidrs overlap", cluster: "c",
			edit: func(s *v1.ClusterSpec) { s.Network.ServiceCIDR = "10.244.128.0/20" },
			want: []v1.Error{invalid("spec.network.serviceCIDR", "10.244.128.0/20 overlaps the pod CIDR 10.244.0.0/16")},
		},
		{
			name: "cidr families differ", cluster: "c",
			edit: func(s *v1.ClusterSpec) { s.Network.ServiceCIDR = "fd00::/108" },
			want: []v1.Error{invalid("spec.network.serviceCIDR", "fd00::/108 and the pod CIDR 10.244.0.0/16 must both be IPv4 or both IPv6")},
		},
		{
			name: "cni", cluster: "c",
			edit: func(s *v1.ClusterSpec) { s.Network.CNI = "weave" },
			want: []v1.Error{invalid("spec.network.cni", `"weave" must be one of calico, cilium, flannel`)},
		},
		{
			name: "node approval and ttl", cluster: "c",
			edit: func(s *v1.ClusterSpec) { s.NodeApproval = "always"; s.CertificateTTLDays = 3651 },
			want: []v1.Error{
				invalid("spec.nodeApproval", `"always" must be one of auto, manual`),
				invalid("spec.certificateTTLDays", "3651 must be between 1 and 3650"),
			},
		},
		{
			name: "pools", cluster: "c",
			edit: func(s *v1.ClusterSpec) {
				s.WorkerPools = []v1.WorkerPool{
					{Name: "a", Size: 1001, Rollout: v1.Rollout{MaxSurge: 1}},
					{Name: "", Size: -1, Rollout: v1.Rollout{MaxSurge: -1}},
					{Name: "a", Rollout: v1.Rollout{}},
					{Name: "B_", Rollout: v1.Rollout{MaxSurge: 1}, Autoscale: &v1.Autoscale{Min: 3, Max: 2}, Spot: &v1.Spot{}},
				}
			},
			want: []v1.Error{
				invalid("spec.workerPools[0].size", "1001 must be between 0 and 1000"),
				{Code: v1.CodeMissingParameter, Target: "spec.workerPools[1].name", Message: "spec.workerPools[1].name is required"},
				invalid("spec.workerPools[1].size", "-1 must be between 0 and 1000"),
				invalid("spec.workerPools[1].rollout.maxSurge", "-1 must not be negative"),
				invalid("spec.workerPools[2].name", `"a" is also the name of spec.workerPools[0]; pool names must be unique`),
				invalid("spec.workerPools[2].rollout", "maxSurge and maxUnavailable must not both be 0, or a rollout could never progress"),
				invalid("spec.workerPools[3].name", `"B_" must be a lower-case DNS-1123 label of at most 63 characters (a-z, 0-9 and '-', starting and ending with a letter or digit)`),
				invalid("spec.workerPools[3].spot.maxPricePercent", "0 must be between 1 and 100"),
				invalid("spec.workerPools[3].autoscale", "min 3 and max 2 must satisfy 0 <= min <= max <= 1000"),
			},
		},
		{
			name: "labels and taints", cluster: "c",
			edit: func(s *v1.ClusterSpec) {
				s.Labels = map[string]string{"Bad.Prefix/x": "v", "-x": "v", "ok": "-bad"}
				s.WorkerPools[0].Taints = []string{"k=v"}
			},
			want: []v1.Error{
				invalid(`spec.workerPools[0].taints[0]`, `"k=v": a taint is key[=value]:Effect with Effect one of NoSchedule, PreferNoSchedule, NoExecute`),
				invalid(`spec.labels["-x"]`, `"-x": a label key's name must be 1-63 alphanumerics, '-', '_' or '.', beginning and ending with an alphanumeric`),
				invalid(`spec.labels["Bad.Prefix/x"]`, `"Bad.Prefix/x": the prefix of a label key must be a lower-case DNS subdomain`),
				invalid(`spec.labels["ok"]`, `"-bad": a label value must be empty or 1-63 alphanumerics, '-', '_' or '.', beginning and ending with an alphanumeric`),
			},
		},
		{
			name: "proxy", cluster: "c",
			edit: func(s *v1.ClusterSpec) { s.Proxy = &v1.Proxy{HTTPProxy: "proxy:3128"} },
			want: []v1.Error{invalid("spec.proxy.httpProxy", "must be an http:// or https:// URL with a host")},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			spec := valid()
			tt.edit(&spec)
			got := validate.Cluster(tt.cluster, &spec, providers)
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("Cluster() mismatch (-want +got):\n%s", diff)
			}
		})
	}
}

func TestIsDNSLabel(t *testing.T) {
	tests := []struct {
		name string
		in   string
		max  int
		want bool
	}{
		{"simple", "abc", 63, true},
		{"digits first", "0abc", 63, true},
		{"uuid", "0196f3c2-8a4e-7c3b-9d2a-1b2c3d4e5f60", 63, true},
		{"empty", "", 63, false},
		{"upper", "Abc", 63, false},
		{"leading dash", "-a", 63, false},
		{"trailing dash", "a-", 63, false},
		{"dot", "a.b", 63, false},
		{"at max", "abcde", 5, true},
		{"over max", "abcdef", 5, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := validate.IsDNSLabel(tt.in, tt.max); got != tt.want {
				t.Errorf("IsDNSLabel(%q, %d) = %v, want %v", tt.in, tt.max, got, tt.want)
			}
		})
	}
}

func TestLabelKey(t *testing.T) {
	tests := []struct {
		name string
		key  string
		ok   bool
	}{
		{"plain", "app", true},
		{"prefixed", "kiln.dev/pool", true},
		{"mixed case name", "App_Name.v2", true},
		{"empty", "", false},
		{"empty name", "kiln.dev/", false},
		{"empty prefix", "/x", false},
		{"two slashes", "a/b/c", false},
		{"too long", "a234567890123456789012345678901234567890123456789012345678901234", false},
		{"space", "a b", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := validate.LabelKey(tt.key) == ""; got != tt.ok {
				t.Errorf("LabelKey(%q) ok = %v, want %v", tt.key, got, tt.ok)
			}
		})
	}
}

func TestProfileAndCloudAccount(t *testing.T) {
	tests := []struct {
		name string
		got  []v1.Error
		want []v1.Error
	}{
		{
			name: "profile valid",
			got:  validate.Profile("p", &v1.Profile{Version: 1, KubernetesVersion: "v1.36.3", CNI: "cilium"}),
		},
		{
			name: "profile invalid",
			got:  validate.Profile("p", &v1.Profile{Packs: []v1.Pack{{Name: "x"}}}),
			want: []v1.Error{
				invalid("version", "0 must be 1 or more"),
				{Code: v1.CodeMissingParameter, Target: "kubernetesVersion", Message: "kubernetesVersion is required, for example v1.36.3"},
				{Code: v1.CodeMissingParameter, Target: "packs[0].version", Message: "packs[0].version is required"},
			},
		},
		{
			name: "cloud account valid",
			got:  validate.CloudAccount("a", &v1.CloudAccount{Provider: "sim"}, providers),
		},
		{
			name: "cloud account unknown provider",
			got:  validate.CloudAccount("a", &v1.CloudAccount{Provider: "gcp"}, providers),
			want: []v1.Error{invalid("provider", `unknown provider "gcp"; one of local, sim`)},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if diff := cmp.Diff(tt.want, tt.got); diff != "" {
				t.Errorf("mismatch (-want +got):\n%s", diff)
			}
		})
	}
}
