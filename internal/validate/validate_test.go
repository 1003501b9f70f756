package validate_test

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	v1 "kiln.dev/kiln/api/v1"
	"kiln.dev/kiln/internal/validate"
)

// catalog is two providers, one with a version list.
var catalog = validate.Catalog{
	"local": {"local": {"v1.36.3"}},
	"sim":   {"": {"v1.35.5", "v1.36.3"}},
	"edge":  {"local": {"v1.36.3"}, "kubeadm": nil},
	// attached: any version, no distribution (the provider installs none).
	"attached": {"": nil},
}

// valid returns a spec that passes, with defaults filled in.
func valid() v1.ClusterSpec {
	return v1.ClusterSpec{
		Provider:          "local",
		Distribution:      "local",
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

func TestDrainTimeout(t *testing.T) {
	for _, tt := range []struct {
		in   string
		want time.Duration
	}{{"", 5 * time.Minute}, {"90s", 90 * time.Second}, {"1h", time.Hour}, {"junk", 5 * time.Minute}, {"0s", 5 * time.Minute}} {
		if got := validate.DrainTimeout(v1.WorkerPool{DrainTimeout: tt.in}); got != tt.want {
			t.Errorf("DrainTimeout(%q) = %s, want %s", tt.in, got, tt.want)
		}
	}
}

// A percentage allows at least one node (a pool of one or two has its
// dead node replaced) unless it is 0%; a count is a count.
func TestMaxUnhealthy(t *testing.T) {
	for _, tt := range []struct {
		in         string
		size, want int
	}{{"", 1, 1}, {"", 2, 1}, {"", 5, 2}, {"40%", 10, 4}, {"0%", 3, 0}, {"100%", 3, 3}, {"0", 3, 0}, {"2", 1, 2}, {"junk", 1, 1}} {
		if got := validate.MaxUnhealthy(v1.WorkerPool{MaxUnhealthy: tt.in}, tt.size); got != tt.want {
			t.Errorf("MaxUnhealthy(%q) of %d = %d, want %d", tt.in, tt.size, got, tt.want)
		}
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
				s.Provider, s.Distribution = "sim", ""
				s.CloudAccount = "acct"
				s.Network = v1.Network{PodCIDR: "fd00:10::/48", ServiceCIDR: "fd00:20::/108", CNI: "cilium",
					NodeCIDR: "fd00:30::/64", Name: "dc1", DNSServers: []string{"10.0.0.2", "[fd00::53]:5353"}}
				s.ControlPlane.Size = 5
				s.WorkerPools = append(s.WorkerPools, v1.WorkerPool{
					Name: "gpu", Size: 1000, Zones: []string{"a"},
					Labels:       map[string]string{"kiln.dev/pool": "gpu", "tier": ""},
					Taints:       []string{"gpu=true:NoSchedule", "dedicated:NoExecute"},
					Spot:         &v1.Spot{MaxPricePercent: 40},
					Autoscale:    &v1.Autoscale{Min: 0, Max: 1000},
					InstanceType: "m5.large",
					Rollout:      v1.Rollout{MaxUnavailable: 1},
				})
				s.NodeApproval = "manual"
				s.Proxy = &v1.Proxy{HTTPProxy: "http://proxy:3128", HTTPSProxy: "https://proxy:3128",
					NoProxy: "localhost,.svc,10.0.0.0/8,192.168.1.1,*", RootCA: testCA(t) + testCA(t)}
				s.Region = "eu-west-1"
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
			want: []v1.Error{invalid("spec.provider", `unknown provider "aws"; one of attached, edge, local, sim`)},
		},
		{
			name: "missing provider", cluster: "c",
			edit: func(s *v1.ClusterSpec) { s.Provider = "" },
			want: []v1.Error{{Code: v1.CodeMissingParameter, Target: "spec.provider", Message: "spec.provider is required; one of attached, edge, local, sim"}},
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
			want: []v1.Error{invalid("spec.network.serviceCIDR", "10.244.128.0/20 overlaps the pod CIDR 10.244.0.0/16; pick ranges that do not share addresses")},
		},
		{
			name: "cidr families differ", cluster: "c",
			edit: func(s *v1.ClusterSpec) { s.Network.ServiceCIDR = "fd00::/108" },
			want: []v1.Error{invalid("spec.network.serviceCIDR", "fd00::/108 and the pod CIDR 10.244.0.0/16 must both be IPv4 or both IPv6")},
		},
		{
			name: "cni", cluster: "c",
			edit: func(s *v1.ClusterSpec) { s.Network.CNI = "weave" },
			want: []v1.Error{invalid("spec.network.cni", `"weave" must be one of calico, cilium, flannel, bridge, kube-router`)},
		},
		{
			name: "node approval and ttl", cluster: "c",
			edit: func(s *v1.ClusterSpec) {
				s.NodeApproval = "always"
				s.CertificateTTLDays = 3651
				s.CertificateRenewal = "yearly"
				s.Backup = &v1.BackupSchedule{Schedule: "every hour", Keep: -1}
			},
			want: []v1.Error{
				invalid("spec.nodeApproval", `"always" must be one of auto, manual`),
				invalid("spec.certificateTTLDays", "3651 must be between 1 and 3650"),
				invalid("spec.certificateRenewal", `"yearly" must be auto or manual`),
				invalid("spec.backup.schedule", `"every hour" is not a schedule of five cron fields, in UTC, such as "0 */6 * * *" (every six hours), or a descriptor such as "@every 6h": expected exactly 5 fields, found 2: [every hour]`),
				invalid("spec.backup.keep", "-1 must be between 1 and 1000 (0: 7)"),
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
				invalid("spec.network.podCIDR", "10.244.0.0/16 holds 256 node pod ranges (/24 each) but the cluster can have 1003 nodes; use a /14 or larger"),
				invalid("spec.workerPools[0].size", "1001 must be between 0 and 1000"),
				{Code: v1.CodeMissingParameter, Target: "spec.workerPools[1].name", Message: "spec.workerPools[1].name is required"},
				invalid("spec.workerPools[1].size", "-1 must be between 0 and 1000"),
				invalid("spec.workerPools[1].rollout.maxSurge", "-1 must not be negative"),
				invalid("spec.workerPools[2].name", `"a" is also the name of spec.workerPools[0]; pool names must be unique`),
				invalid("spec.workerPools[2].rollout", "maxSurge and maxUnavailable must not both be 0, or a rollout could never progress"),
				invalid("spec.workerPools[3].name", `"B_" must be a lower-case DNS-1123 label of at most 63 characters (a-z, 0-9 and '-', starting and ending with a letter or digit)`),
				invalid("spec.workerPools[3].spot.maxPricePercent", "0 must be between 1 and 100 (percent of the on-demand price)"),
				invalid("spec.workerPools[3].autoscale", "min 3 and max 2 must satisfy 0 <= min <= max <= 1000"),
			},
		},
		{
			name: "drain timeouts", cluster: "c",
			edit: func(s *v1.ClusterSpec) {
				s.WorkerPools = []v1.WorkerPool{
					{Name: "a", Rollout: v1.Rollout{MaxSurge: 1}, DrainTimeout: "5m"},
					{Name: "b", Rollout: v1.Rollout{MaxSurge: 1}, DrainTimeout: "300"},
					{Name: "c", Rollout: v1.Rollout{MaxSurge: 1}, DrainTimeout: "500ms"},
					{Name: "d", Rollout: v1.Rollout{MaxSurge: 1}, DrainTimeout: "25h"},
					{Name: "e", Rollout: v1.Rollout{MaxSurge: 1}, DrainTimeout: "-1m"},
					{Name: "f", Rollout: v1.Rollout{MaxSurge: 1}, DrainTimeout: "1h30m"},
				}
			},
			want: []v1.Error{
				invalid("spec.workerPools[1].drainTimeout", `"300" must be a duration such as 90s, 5m or 1h30m`),
				invalid("spec.workerPools[2].drainTimeout", "500ms must be between 1s and 24h"),
				invalid("spec.workerPools[3].drainTimeout", "25h must be between 1s and 24h"),
				invalid("spec.workerPools[4].drainTimeout", "-1m must be between 1s and 24h"),
			},
		},
		{
			name: "health check", cluster: "c",
			edit: func(s *v1.ClusterSpec) {
				s.WorkerPools = []v1.WorkerPool{
					{Name: "a", Rollout: v1.Rollout{MaxSurge: 1}, UnhealthyTimeout: "5m", MaxUnhealthy: "40%"},
					{Name: "b", Rollout: v1.Rollout{MaxSurge: 1}, UnhealthyTimeout: "5s", MaxUnhealthy: "2"},
					{Name: "c", Rollout: v1.Rollout{MaxSurge: 1}, UnhealthyTimeout: "soon", MaxUnhealthy: "101%"},
					{Name: "d", Rollout: v1.Rollout{MaxSurge: 1}, UnhealthyTimeout: "25h", MaxUnhealthy: "-1"},
					{Name: "e", Rollout: v1.Rollout{MaxSurge: 1}, MaxUnhealthy: "half"},
				}
			},
			want: []v1.Error{
				invalid("spec.workerPools[1].unhealthyTimeout", "5s must be between 10s and 24h"),
				invalid("spec.workerPools[2].unhealthyTimeout", `"soon" must be a duration such as 90s, 5m or 1h`),
				invalid("spec.workerPools[2].maxUnhealthy", `"101%": a percentage must be a whole number from 0% to 100%`),
				invalid("spec.workerPools[3].unhealthyTimeout", "25h must be between 10s and 24h"),
				invalid("spec.workerPools[3].maxUnhealthy", `"-1" must be a count of nodes (0 or more) or a percentage such as 40%`),
				invalid("spec.workerPools[4].maxUnhealthy", `"half" must be a count of nodes (0 or more) or a percentage such as 40%`),
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
			want: []v1.Error{invalid("spec.proxy.httpProxy", `"proxy:3128" must be an http:// or https:// URL with a host, for example http://proxy.example.com:3128`)},
		},
		{
			name: "version not offered", cluster: "c",
			edit: func(s *v1.ClusterSpec) { s.KubernetesVersion = "v1.30.0" },
			want: []v1.Error{{Code: v1.CodeUnsupportedVersion, Target: "spec.kubernetesVersion",
				Message: "Kubernetes v1.30.0 is not offered by the local distribution of the local provider; use one of v1.36.3"}},
		},
		{
			name: "distribution the provider does not install", cluster: "c",
			edit: func(s *v1.ClusterSpec) { s.Distribution = "kubeadm" },
			want: []v1.Error{invalid("spec.distribution", `"kubeadm" is not a distribution the local provider installs; one of local`)},
		},
		{
			name: "a distribution for the sim", cluster: "c",
			edit: func(s *v1.ClusterSpec) { s.Provider = "sim" },
			want: []v1.Error{invalid("spec.distribution", "the sim provider installs no distribution; leave spec.distribution empty")},
		},
		{
			name: "edge with kubeadm takes any version", cluster: "c",
			edit: func(s *v1.ClusterSpec) {
				s.Provider, s.Distribution, s.KubernetesVersion = "edge", "kubeadm", "v1.35.0"
			},
		},
		{
			name: "kubeadm installs IPv4 with calico or cilium", cluster: "c",
			edit: func(s *v1.ClusterSpec) {
				s.Provider, s.Distribution, s.KubernetesVersion = "edge", "kubeadm", "v1.35.0"
				s.Network = v1.Network{PodCIDR: "fd00:10::/48", ServiceCIDR: "fd00:20::/108", CNI: "flannel"}
			},
			want: []v1.Error{
				invalid("spec.network.cni", "the kubeadm distribution installs bridge or kube-router (from Kiln), calico or cilium (from the internet), not flannel"),
				invalid("spec.network.podCIDR", "fd00:10::/48: the kubeadm distribution installs IPv4 clusters only"),
				invalid("spec.network.serviceCIDR", "fd00:20::/108: the kubeadm distribution installs IPv4 clusters only"),
			},
		},
		{
			name: "region", cluster: "c",
			edit: func(s *v1.ClusterSpec) { s.Region = "EU West" },
			want: []v1.Error{invalid("spec.region", `"EU West" must be a region name: lower-case letters, digits and '-', at most 63 characters`)},
		},
		{
			name: "public ranges", cluster: "c",
			edit: func(s *v1.ClusterSpec) { s.Network.PodCIDR = "8.8.0.0/16"; s.Network.ServiceCIDR = "2001:db8::/108" },
			want: []v1.Error{
				invalid("spec.network.podCIDR", "8.8.0.0/16 is not a private range; use one inside 10.0.0.0/8, 172.16.0.0/12, 192.168.0.0/16, 100.64.0.0/10 or fc00::/7"),
				invalid("spec.network.serviceCIDR", "2001:db8::/108 is not a private range; use one inside 10.0.0.0/8, 172.16.0.0/12, 192.168.0.0/16, 100.64.0.0/10 or fc00::/7"),
				invalid("spec.network.serviceCIDR", "2001:db8::/108 and the pod CIDR 8.8.0.0/16 must both be IPv4 or both IPv6"),
			},
		},
		{
			name: "pod range too small for the nodes", cluster: "c",
			edit: func(s *v1.ClusterSpec) { s.Network.PodCIDR = "10.244.0.0/23" },
			want: []v1.Error{invalid("spec.network.podCIDR", "10.244.0.0/23 holds 2 node pod ranges (/24 each) but the cluster can have 3 nodes; use a /22 or larger")},
		},
		{
			name: "pod range counts autoscale maximum", cluster: "c",
			edit: func(s *v1.ClusterSpec) {
				s.Network.PodCIDR = "10.244.0.0/22"
				s.WorkerPools[0].Autoscale = &v1.Autoscale{Min: 1, Max: 9}
			},
			want: []v1.Error{invalid("spec.network.podCIDR", "10.244.0.0/22 holds 4 node pod ranges (/24 each) but the cluster can have 10 nodes; use a /20 or larger")},
		},
		{
			name: "pod range smaller than a node's", cluster: "c",
			edit: func(s *v1.ClusterSpec) { s.Network.PodCIDR = "10.244.0.0/25" },
			want: []v1.Error{invalid("spec.network.podCIDR", "10.244.0.0/25 is smaller than one node's pod range (/24); use a /20 or larger (/16 is usual)")},
		},
		{
			name: "service range at kube-apiserver's limit", cluster: "c",
			edit: func(s *v1.ClusterSpec) { s.Network.ServiceCIDR = "172.16.0.0/12"; s.Network.PodCIDR = "192.168.0.0/16" },
		},
		{
			name: "service range beyond kube-apiserver's limit", cluster: "c",
			edit: func(s *v1.ClusterSpec) { s.Network.ServiceCIDR = "10.0.0.0/11"; s.Network.PodCIDR = "192.168.0.0/16" },
			want: []v1.Error{invalid("spec.network.serviceCIDR", "10.0.0.0/11 is larger than Kubernetes allows; use a /12 or smaller")},
		},
		{
			name: "service range too small", cluster: "c",
			edit: func(s *v1.ClusterSpec) { s.Network.ServiceCIDR = "10.96.0.0/29" },
			want: []v1.Error{invalid("spec.network.serviceCIDR", "10.96.0.0/29 is too small for a cluster's services; use a /28 or larger")},
		},
		{
			name: "node network", cluster: "c",
			edit: func(s *v1.ClusterSpec) { s.Network.NodeCIDR = "10.244.0.0/30" },
			want: []v1.Error{
				invalid("spec.network.nodeCIDR", "10.244.0.0/30 holds 2 machine addresses but the cluster can have 3 nodes; use a larger range"),
				invalid("spec.network.podCIDR", "10.244.0.0/16 overlaps the node network 10.244.0.0/30 (spec.network.nodeCIDR); pick ranges that do not share addresses"),
			},
		},
		{
			name: "an existing VPC", cluster: "c",
			edit: func(s *v1.ClusterSpec) {
				s.Network.VPCID = "vpc-0123456789abcdef0"
				s.Network.SubnetIDs = []string{"subnet-0123456789abcdef0", "subnet-0123456789abcdef1"}
			},
		},
		{
			name: "an existing VPC, badly named", cluster: "c",
			edit: func(s *v1.ClusterSpec) {
				s.Network.VPCID = "vpc-xyz"
				s.Network.SubnetIDs = []string{"subnet-0123456789abcdef0", "sn-1", "subnet-0123456789abcdef0"}
				s.Network.NodeCIDR = "10.0.0.0/16"
			},
			want: []v1.Error{
				invalid("spec.network.vpcID", `"vpc-xyz" is not a VPC id such as vpc-0123456789abcdef0`),
				invalid("spec.network.subnetIDs[1]", `"sn-1" is not a subnet id such as subnet-0123456789abcdef0`),
				invalid("spec.network.subnetIDs[2]", "subnet-0123456789abcdef0 is named twice"),
				invalid("spec.network.nodeCIDR", "with spec.network.vpcID the nodes are in the VPC's range: remove spec.network.nodeCIDR"),
			},
		},
		{
			name: "subnets without their VPC", cluster: "c",
			edit: func(s *v1.ClusterSpec) { s.Network.SubnetIDs = []string{"subnet-0123456789abcdef0"} },
			want: []v1.Error{invalid("spec.network.subnetIDs", "subnets are those of an existing VPC: set spec.network.vpcID too, or remove them to let the provider make the network")},
		},
		{
			name: "node network overlaps services", cluster: "c",
			edit: func(s *v1.ClusterSpec) { s.Network.NodeCIDR = "10.96.0.0/24" },
			want: []v1.Error{invalid("spec.network.serviceCIDR", "10.96.0.0/12 overlaps the node network 10.96.0.0/24 (spec.network.nodeCIDR); pick ranges that do not share addresses")},
		},
		{
			name: "network name and dns servers", cluster: "c",
			edit: func(s *v1.ClusterSpec) {
				s.Network.Name = "DC_1"
				s.Network.DNSServers = []string{"dns.example.com", "10.0.0.2", "10.0.0.2:53", "10.0.0.3:0"}
			},
			want: []v1.Error{
				invalid("spec.network.name", `"DC_1" must be a network name: a lower-case DNS-1123 label of at most 63 characters`),
				invalid("spec.network.dnsServers", "4 servers; at most 3 are used by a node's resolver"),
			},
		},
		{
			name: "dns server entries", cluster: "c",
			edit: func(s *v1.ClusterSpec) { s.Network.DNSServers = []string{"dns.example.com", "10.0.0.2", "10.0.0.2:53"} },
			want: []v1.Error{
				invalid("spec.network.dnsServers[0]", `"dns.example.com" must be an IP address, or IP:port, of a DNS server`),
				invalid("spec.network.dnsServers[2]", "10.0.0.2:53 is listed twice"),
			},
		},
		{
			name: "autoscale bounds the size", cluster: "c",
			edit: func(s *v1.ClusterSpec) { s.WorkerPools[0].Autoscale = &v1.Autoscale{Min: 3, Max: 5} },
			want: []v1.Error{invalid("spec.workerPools[0].size", "2 must be between autoscale.min 3 and autoscale.max 5")},
		},
		{
			name: "autoscale scale-down delay", cluster: "c",
			edit: func(s *v1.ClusterSpec) {
				s.WorkerPools[0].Autoscale = &v1.Autoscale{Min: 1, Max: 5, ScaleDownAfter: "5s"}
				s.WorkerPools = append(s.WorkerPools, v1.WorkerPool{Name: "b", Size: 1, Rollout: s.WorkerPools[0].Rollout,
					Autoscale: &v1.Autoscale{Min: 1, Max: 2, ScaleDownAfter: "soon"}})
			},
			want: []v1.Error{
				invalid("spec.workerPools[0].autoscale.scaleDownAfter", "5s must be between 10s and 24h"),
				invalid("spec.workerPools[1].autoscale.scaleDownAfter", `"soon" must be a duration such as 90s, 10m or 1h`),
			},
		},
		{
			name: "attached", cluster: "c",
			edit: func(s *v1.ClusterSpec) {
				s.Provider, s.Distribution, s.KubernetesVersion, s.WorkerPools = "attached", "", "", nil
				s.Attach = &v1.Attach{Secret: "attach-c"}
			},
		},
		{
			name: "attached with machines", cluster: "c",
			edit: func(s *v1.ClusterSpec) {
				s.Provider, s.Distribution = "attached", ""
				s.ControlPlane.Size = 3
				s.IdleStop = &v1.IdleStop{After: "1h"}
			},
			want: []v1.Error{
				{Code: v1.CodeMissingParameter, Target: "spec.attach.secret",
					Message: `an attached cluster names the project secret that holds its kubeconfig (key "kubeconfig"): kiln cluster attach NAME --kubeconfig FILE makes both`},
				invalid("spec.workerPools", "an attached cluster's machines are not Kiln's: it has no worker pools to make or scale; change its nodes with what made it"),
				invalid("spec.controlPlane", "an attached cluster's control plane is not Kiln's: leave spec.controlPlane as it is"),
				invalid("spec.idleStop", "an attached cluster's machines are not Kiln's to stop"),
			},
		},
		{
			name: "attach of a cluster Kiln makes", cluster: "c",
			edit: func(s *v1.ClusterSpec) { s.Attach = &v1.Attach{Secret: "k"} },
			want: []v1.Error{invalid("spec.attach", "only a cluster of provider attached is attached; local makes its clusters")},
		},
		{
			name: "idle stop", cluster: "c",
			edit: func(s *v1.ClusterSpec) { s.IdleStop = &v1.IdleStop{After: "1s"} },
			want: []v1.Error{invalid("spec.idleStop.after", "1s must be between 10s and 168h")},
		},
		{
			name: "credential TTL too long", cluster: "c",
			edit: func(s *v1.ClusterSpec) { s.Access = &v1.Access{CredentialTTL: "48h"} },
			want: []v1.Error{invalid("spec.access.credentialTTL", "48h must be between 1m and 24h")},
		},
		{
			name: "credential TTL not a duration", cluster: "c",
			edit: func(s *v1.ClusterSpec) { s.Access = &v1.Access{CredentialTTL: "an hour"} },
			want: []v1.Error{invalid("spec.access.credentialTTL", `"an hour" must be a duration such as 15m or 1h`)},
		},
		{
			name: "idle stop not a duration", cluster: "c",
			edit: func(s *v1.ClusterSpec) { s.IdleStop = &v1.IdleStop{} },
			want: []v1.Error{invalid("spec.idleStop.after", `"" must be a duration such as 30m or 2h`)},
		},
		{
			name: "spot price above 100", cluster: "c",
			edit: func(s *v1.ClusterSpec) { s.WorkerPools[0].Spot = &v1.Spot{MaxPricePercent: 101} },
			want: []v1.Error{invalid("spec.workerPools[0].spot.maxPricePercent", "101 must be between 1 and 100 (percent of the on-demand price)")},
		},
		{
			name: "certificate ttl zero", cluster: "c",
			edit: func(s *v1.ClusterSpec) { s.CertificateTTLDays = 0 },
			want: []v1.Error{invalid("spec.certificateTTLDays", "0 must be between 1 and 3650")},
		},
		{
			name: "zones and instance types", cluster: "c",
			edit: func(s *v1.ClusterSpec) {
				s.ControlPlane.Zones = []string{"a", "a", "Zone 1"}
				s.ControlPlane.InstanceType = "m5 large"
				s.WorkerPools[0].Zones = make([]string, 17)
			},
			want: []v1.Error{
				invalid("spec.controlPlane.instanceType", `"m5 large" must be an instance type name: at most 63 letters, digits, '-', '_' or '.'`),
				invalid("spec.controlPlane.zones[1]", `zone "a" is listed twice`),
				invalid("spec.controlPlane.zones[2]", `"Zone 1" must be a zone name: lower-case letters, digits and '-', at most 63 characters`),
				invalid("spec.workerPools[0].zones", "17 zones; at most 16 are supported"),
			},
		},
		{
			name: "too many pools, labels and taints", cluster: "c",
			edit: func(s *v1.ClusterSpec) {
				s.Labels = map[string]string{}
				for i := range 65 {
					s.Labels[fmt.Sprintf("l%d", i)] = ""
				}
				s.WorkerPools[0].Taints = make([]string, 33)
			},
			want: []v1.Error{
				invalid("spec.workerPools[0].taints", "33 taints; at most 32 are supported"),
				invalid("spec.labels", "65 labels; at most 64 are supported"),
			},
		},
		{
			name: "too many pools", cluster: "c",
			edit: func(s *v1.ClusterSpec) { s.WorkerPools = make([]v1.WorkerPool, 51) },
			want: []v1.Error{invalid("spec.workerPools", "51 pools; at most 50 are supported")},
		},
		{
			name: "too many nodes", cluster: "c",
			edit: func(s *v1.ClusterSpec) {
				s.Network.PodCIDR = "100.64.0.0/10"
				s.WorkerPools = nil
				for i := range 6 {
					s.WorkerPools = append(s.WorkerPools, v1.WorkerPool{Name: fmt.Sprintf("p%d", i), Size: 1000, Rollout: v1.Rollout{MaxSurge: 1}})
				}
			},
			want: []v1.Error{invalid("spec.workerPools", "the cluster would have up to 6001 nodes; at most 5000 are supported")},
		},
		{
			name: "proxy without a URL", cluster: "c",
			edit: func(s *v1.ClusterSpec) { s.Proxy = &v1.Proxy{NoProxy: "localhost"} },
			want: []v1.Error{{Code: v1.CodeMissingParameter, Target: "spec.proxy", Message: "a proxy needs httpProxy or httpsProxy; set one, or set proxy to null"}},
		},
		{
			name: "proxy url without a host", cluster: "c",
			edit: func(s *v1.ClusterSpec) { s.Proxy = &v1.Proxy{HTTPSProxy: "https://:3128", NoProxy: "a b,,10.0.0.0/8"} },
			want: []v1.Error{
				invalid("spec.proxy.httpsProxy", `"https://:3128" must be an http:// or https:// URL with a host, for example http://proxy.example.com:3128`),
				invalid("spec.proxy.noProxy", `entry 1 "a b" must be a host name, a domain (.example.com), an IP address, a CIDR or *`),
				invalid("spec.proxy.noProxy", `entry 2 "" must be a host name, a domain (.example.com), an IP address, a CIDR or *`),
			},
		},
		{
			name: "root CA not PEM", cluster: "c",
			edit: func(s *v1.ClusterSpec) { s.Proxy = &v1.Proxy{HTTPProxy: "http://p:1", RootCA: "MIIB..."} },
			want: []v1.Error{invalid("spec.proxy.rootCA", "must be a PEM certificate (-----BEGIN CERTIFICATE-----)")},
		},
		{
			name: "root CA is a key", cluster: "c",
			edit: func(s *v1.ClusterSpec) {
				s.Proxy = &v1.Proxy{HTTPProxy: "http://p:1", RootCA: "-----BEGIN PRIVATE KEY-----\nAAAA\n-----END PRIVATE KEY-----\n"}
			},
			want: []v1.Error{invalid("spec.proxy.rootCA", `must hold PEM certificates only, not a "PRIVATE KEY" block`)},
		},
		{
			name: "root CA with trailing data", cluster: "c",
			edit: func(s *v1.ClusterSpec) { s.Proxy = &v1.Proxy{HTTPProxy: "http://p:1", RootCA: testCA(t) + "junk"} },
			want: []v1.Error{invalid("spec.proxy.rootCA", "has data after its last PEM certificate")},
		},
		{
			name: "root CA does not parse", cluster: "c",
			edit: func(s *v1.ClusterSpec) {
				s.Proxy = &v1.Proxy{HTTPProxy: "http://p:1", RootCA: "-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n"}
			},
			want: []v1.Error{invalid("spec.proxy.rootCA", "certificate 1 does not parse: x509: malformed certificate")},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			spec := valid()
			tt.edit(&spec)
			got := validate.Cluster(tt.cluster, &spec, catalog)
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
			name: "profile with secret references",
			got: validate.Profile("p", &v1.Profile{Version: 1, KubernetesVersion: "v1.36.3", Packs: []v1.Pack{
				{Name: "ok", Version: "1", Values: map[string]any{"password": "${secret.db.password}", "cert": "${secret.tls.tls.crt}"}},
				{Name: "values", Version: "1", Values: map[string]any{"db": map[string]any{"urls": []any{"${secret.db}"}}}},
				{Name: "manifests", Version: "1", Manifests: "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: x\ndata:\n  a: ${secret.Db.password}\n"},
			}}),
			want: []v1.Error{
				invalid("packs[1].values.db.urls[0]", `"${secret.db}": want ${secret.NAME.KEY}, NAME a secret's name (a lower-case DNS label) and KEY one of its keys ([A-Za-z0-9._-])`),
				invalid("packs[2].manifests", `"${secret.Db.password}": want ${secret.NAME.KEY}, NAME a secret's name (a lower-case DNS label) and KEY one of its keys ([A-Za-z0-9._-])`),
			},
		},
		{
			name: "secret valid",
			got:  validate.Secret("db", &v1.Secret{Data: map[string]string{"password": "x", "tls.crt": "y", "A_b-1": ""}}),
		},
		{
			name: "secret without data",
			got:  validate.Secret("Db", &v1.Secret{}),
			want: []v1.Error{
				invalid("name", `"Db" must be a lower-case DNS-1123 label of at most 63 characters (a-z, 0-9 and '-', starting and ending with a letter or digit)`),
				{Code: v1.CodeMissingParameter, Target: "data", Message: `data is required: a map of at least one key to its value, {"data": {"KEY": "value"}}`},
			},
		},
		{
			name: "secret bad keys and sizes",
			got: validate.Secret("db", &v1.Secret{Data: map[string]string{
				"":          "x",
				"pass word": "x",
				"big":       strings.Repeat("s", 64<<10+1),
				"b1":        strings.Repeat("s", 64<<10),
				"b2":        strings.Repeat("s", 64<<10),
				"b3":        strings.Repeat("s", 64<<10),
			}}),
			want: []v1.Error{
				invalid("data", "a key must not be empty"),
				invalid("data.big", "the value is 65537 bytes; at most 65536"),
				invalid("data.pass word", `key "pass word" must be at most 253 characters of A-Z, a-z, 0-9, '.', '_' and '-'`),
				invalid("data", "keys and values are 262165 bytes in all; at most 262144"),
			},
		},
		{
			name: "cloud account valid",
			got:  validate.CloudAccount("a", &v1.CloudAccount{Provider: "sim"}, catalog),
		},
		{
			name: "cloud account unknown provider",
			got:  validate.CloudAccount("a", &v1.CloudAccount{Provider: "gcp"}, catalog),
			want: []v1.Error{invalid("provider", `unknown provider "gcp"; one of attached, edge, local, sim`)},
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

// testCA returns a self-signed CA certificate in PEM.
func testCA(t *testing.T) string {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "proxy CA"},
		NotBefore: time.Now(), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	return string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}))
}

// The kiln distribution installs the bridge pod network over IPv4, a /24
// per node, alone or with kube-router's policy controller, and refuses
// anything else up front; kubeadm installs both from Kiln; the local
// distribution (hollow nodes, no pod network) refuses kube-router.
func TestKilnDistribution(t *testing.T) {
	catalog := validate.Catalog{"docker": {"kiln": {"v1.36.3"}}, "edge": {"kubeadm": nil}, "local": {"local": {"v1.36.3"}}}
	tests := []struct {
		name    string
		cluster string
		edit    func(s *v1.ClusterSpec)
		want    []v1.Error
	}{
		{
			name: "kiln installs the bridge network", cluster: "c",
			edit: func(s *v1.ClusterSpec) {
				s.Provider, s.Distribution = "docker", "kiln"
				s.Network.CNI = "bridge"
			},
		},
		{
			name: "kiln refuses other networks and IPv6", cluster: "c",
			edit: func(s *v1.ClusterSpec) {
				s.Provider, s.Distribution = "docker", "kiln"
				s.Network = v1.Network{PodCIDR: "fd00:10::/48", ServiceCIDR: "fd00:20::/108", CNI: "calico"}
			},
			want: []v1.Error{
				invalid("spec.network.cni", `the kiln distribution installs the bridge pod network, or kube-router (the bridge network with kube-router's network policy controller, which enforces NetworkPolicy), not "calico": leave spec.network.cni empty (bridge) or set it to one of them`),
				invalid("spec.network.podCIDR", "fd00:10::/48: the kiln distribution installs IPv4 clusters only"),
				invalid("spec.network.serviceCIDR", "fd00:20::/108: the kiln distribution installs IPv4 clusters only"),
			},
		},
		{
			name: "kubeadm installs the bridge network from Kiln", cluster: "c",
			edit: func(s *v1.ClusterSpec) {
				s.Provider, s.Distribution, s.KubernetesVersion = "edge", "kubeadm", "v1.35.4"
				s.Network.CNI = "bridge"
			},
		},
		{
			name: "kiln installs kube-router", cluster: "c",
			edit: func(s *v1.ClusterSpec) {
				s.Provider, s.Distribution = "docker", "kiln"
				s.Network.CNI = "kube-router"
			},
		},
		{
			name: "kubeadm installs kube-router from Kiln, with a load balancer pool", cluster: "c",
			edit: func(s *v1.ClusterSpec) {
				s.Provider, s.Distribution, s.KubernetesVersion = "edge", "kubeadm", "v1.35.4"
				s.Network.CNI = "kube-router"
				s.Network.LoadBalancerPool = "192.168.1.240-192.168.1.250"
			},
		},
		{
			name: "local refuses kube-router", cluster: "c",
			edit: func(s *v1.ClusterSpec) {
				s.Provider, s.Distribution = "local", "local"
				s.Network.CNI = "kube-router"
			},
			want: []v1.Error{
				invalid("spec.network.cni", "kube-router (the bridge pod network with kube-router's network policy controller) is installed by the kiln distribution and the kubeadm distribution's install from Kiln; "+
					"the local distribution of the local provider does not install it"),
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := valid()
			tt.edit(&s)
			got := validate.Cluster(tt.cluster, &s, catalog)
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("Cluster() mismatch (-want +got):\n%s", diff)
			}
		})
	}
}
