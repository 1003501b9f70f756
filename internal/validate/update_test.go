package validate_test

import (
	"slices"
	"testing"

	"github.com/google/go-cmp/cmp"

	v1 "kiln.dev/kiln/api/v1"
	"kiln.dev/kiln/internal/validate"
)

func immutable(target, msg string) v1.Error {
	return v1.Error{Code: v1.CodeImmutableField, Target: target, Message: msg}
}

func TestUpdate(t *testing.T) {
	tests := []struct {
		name string
		old  func(*v1.ClusterSpec)
		edit func(*v1.ClusterSpec)
		want []v1.Error
	}{
		{name: "nothing changes", edit: func(*v1.ClusterSpec) {}},
		{name: "what may change", edit: func(s *v1.ClusterSpec) {
			s.KubernetesVersion = "v1.37.0"
			s.ControlPlane.Size = 3
			s.ControlPlane.InstanceType = "large"
			s.WorkerPools = append(s.WorkerPools, v1.WorkerPool{Name: "gpu", Size: 1})
			s.WorkerPools[0].Size = 9
			s.Labels = map[string]string{"a": "b"}
			s.CertificateTTLDays = 30
			s.NodeApproval = "manual"
		}},
		{name: "upgrade by one minor", old: func(s *v1.ClusterSpec) { s.KubernetesVersion = "v1.35.4" },
			edit: func(s *v1.ClusterSpec) { s.KubernetesVersion = "v1.36.3" }},
		{name: "patch upgrade", old: func(s *v1.ClusterSpec) { s.KubernetesVersion = "v1.36.1" },
			edit: func(s *v1.ClusterSpec) { s.KubernetesVersion = "v1.36.3" }},
		{name: "downgrade", old: func(s *v1.ClusterSpec) { s.KubernetesVersion = "v1.36.3" },
			edit: func(s *v1.ClusterSpec) { s.KubernetesVersion = "v1.35.4" },
			want: []v1.Error{invalid("spec.kubernetesVersion", "Kubernetes cannot be downgraded from v1.36.3 to v1.35.4; keep v1.36.3 or upgrade")}},
		{name: "two minors at once", old: func(s *v1.ClusterSpec) { s.KubernetesVersion = "v1.34.4" },
			edit: func(s *v1.ClusterSpec) { s.KubernetesVersion = "v1.36.3" },
			want: []v1.Error{invalid("spec.kubernetesVersion", "upgrade one minor version at a time: from v1.34.4 to a v1.35 release first, then to v1.36.3")}},
		{name: "nil and empty DNS servers are the same", old: func(s *v1.ClusterSpec) { s.Network.DNSServers = []string{} },
			edit: func(s *v1.ClusterSpec) { s.Network.DNSServers = nil }},
		{name: "provider, account and region", edit: func(s *v1.ClusterSpec) {
			s.Provider, s.CloudAccount, s.Region = "sim", "acct", "sim-west"
		}, want: []v1.Error{
			immutable("spec.provider", `spec.provider cannot change after the cluster is created (it is "local"); create a new cluster for a different value`),
			immutable("spec.cloudAccount", `spec.cloudAccount cannot change after the cluster is created (it is ""); create a new cluster for a different value`),
			immutable("spec.region", `spec.region cannot change after the cluster is created (it is ""); create a new cluster for a different value`),
		}},
		{name: "network", edit: func(s *v1.ClusterSpec) {
			s.Network = v1.Network{PodCIDR: "10.200.0.0/16", ServiceCIDR: "10.100.0.0/16", CNI: "cilium",
				NodeCIDR: "192.168.0.0/24", Name: "dc1", DNSServers: []string{"10.0.0.2"}}
		}, want: []v1.Error{
			immutable("spec.network.podCIDR", `spec.network.podCIDR cannot change after the cluster is created (it is "10.244.0.0/16"); create a new cluster for a different value`),
			immutable("spec.network.serviceCIDR", `spec.network.serviceCIDR cannot change after the cluster is created (it is "10.96.0.0/12"); create a new cluster for a different value`),
			immutable("spec.network.cni", `spec.network.cni cannot change after the cluster is created (it is "calico"); create a new cluster for a different value`),
			immutable("spec.network.nodeCIDR", `spec.network.nodeCIDR cannot change after the cluster is created (it is ""); create a new cluster for a different value`),
			immutable("spec.network.name", `spec.network.name cannot change after the cluster is created (it is ""); create a new cluster for a different value`),
			immutable("spec.network.dnsServers", `spec.network.dnsServers cannot change after the cluster is created (it is null); create a new cluster for a different value`),
		}},
		{name: "proxy added", edit: func(s *v1.ClusterSpec) { s.Proxy = &v1.Proxy{HTTPProxy: "http://p:3128"} },
			want: []v1.Error{immutable("spec.proxy", `spec.proxy cannot change after the cluster is created (it is null); create a new cluster for a different value`)}},
		{name: "proxy changed, its root CA not echoed",
			old: func(s *v1.ClusterSpec) {
				s.Proxy = &v1.Proxy{HTTPProxy: "http://p:3128", RootCA: "-----BEGIN CERTIFICATE-----..."}
			},
			edit: func(s *v1.ClusterSpec) { s.Proxy = &v1.Proxy{HTTPProxy: "http://q:3128"} },
			want: []v1.Error{immutable("spec.proxy", `spec.proxy cannot change after the cluster is created (it is {"httpProxy":"http://p:3128","httpsProxy":"","noProxy":"","rootCA":"<PEM>"}); create a new cluster for a different value`)}},
		{name: "dedicated control plane", edit: func(s *v1.ClusterSpec) { s.ControlPlane.Dedicated = true },
			want: []v1.Error{immutable("spec.controlPlane.dedicated", `spec.controlPlane.dedicated cannot change after the cluster is created (it is false); create a new cluster for a different value`)}},
		{name: "control plane shrinks from 5 to 3", old: func(s *v1.ClusterSpec) { s.ControlPlane.Size = 5 },
			edit: func(s *v1.ClusterSpec) { s.ControlPlane.Size = 3 }},
		{name: "control plane shrinks from 5 to 1", old: func(s *v1.ClusterSpec) { s.ControlPlane.Size = 5 },
			edit: func(s *v1.ClusterSpec) { s.ControlPlane.Size = 1 }},
		{name: "control plane shrinks from 3 to 1", old: func(s *v1.ClusterSpec) { s.ControlPlane.Size = 3 },
			edit: func(s *v1.ClusterSpec) { s.ControlPlane.Size = 1 }},
		{name: "kiln distribution's control plane shrinks", old: func(s *v1.ClusterSpec) {
			s.Provider, s.Distribution, s.ControlPlane.Size = "docker", v1.DistroKiln, 5
		}, edit: func(s *v1.ClusterSpec) { s.ControlPlane.Size = 3 }},
		{name: "kubeadm's control plane does not shrink", old: func(s *v1.ClusterSpec) {
			s.Provider, s.Distribution, s.ControlPlane.Size = "edge", v1.DistroKubeadm, 3
		}, edit: func(s *v1.ClusterSpec) { s.ControlPlane.Size = 1 },
			want: []v1.Error{invalid("spec.controlPlane.size", "spec.controlPlane.size cannot go down from 3 to 1 on a cluster of the kubeadm distribution: "+
				"its control-plane nodes are hosts, which leave one at a time with `kiln node remove` (its etcd member first); keep 3")}},
		{name: "edge hosts' control plane does not shrink", old: func(s *v1.ClusterSpec) {
			s.Provider, s.Distribution, s.ControlPlane.Size = "edge", v1.DistroLocal, 5
		}, edit: func(s *v1.ClusterSpec) { s.ControlPlane.Size = 3 },
			want: []v1.Error{invalid("spec.controlPlane.size", "spec.controlPlane.size cannot go down from 5 to 3 on a cluster of the edge provider: "+
				"its control-plane nodes are hosts, which leave one at a time with `kiln node remove` (its etcd member first); keep 5")}},
		{name: "an invalid size is left to Cluster", old: func(s *v1.ClusterSpec) { s.ControlPlane.Size = 3 },
			edit: func(s *v1.ClusterSpec) { s.ControlPlane.Size = 2 }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			old, next := valid(), valid()
			if tt.old != nil {
				tt.old(&old)
				tt.old(&next)
			}
			tt.edit(&next)
			if diff := cmp.Diff(tt.want, validate.Update(&old, &next)); diff != "" {
				t.Errorf("Update() (-want +got):\n%s", diff)
			}
		})
	}
}

// TestUpgrades: the versions offered as upgrades are exactly those Update
// accepts as a change of spec.kubernetesVersion.
func TestUpgrades(t *testing.T) {
	offered := []string{"v1.34.8", "v1.35.4", "v1.35.5", "v1.36.3", "v1.38.0"}
	tests := []struct {
		name, current string
		offered       []string
		want          []string
		why           string
	}{
		{name: "one minor up and patches", current: "v1.35.4", want: []string{"v1.35.5", "v1.36.3"}},
		{name: "oldest", current: "v1.34.8", want: []string{"v1.35.4", "v1.35.5"}},
		{name: "a minor is missing", current: "v1.36.3",
			why: "the sim provider offers no v1.37 release, and Kubernetes is upgraded one minor version at a time"},
		{name: "not offered itself", current: "v1.37.1", want: []string{"v1.38.0"}},
		{name: "newest", current: "v1.38.0", why: "the sim provider offers no Kubernetes version newer than v1.38.0"},
		{name: "nothing listed", current: "v1.36.3", offered: []string{},
			why: "the sim provider does not list the Kubernetes versions it offers"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if tt.offered == nil {
				tt.offered = offered
			}
			spec := &v1.ClusterSpec{Provider: "sim", KubernetesVersion: tt.current}
			got, why := validate.Upgrades(spec, tt.offered)
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("Upgrades(%s) (-want +got):\n%s", tt.current, diff)
			}
			if why != tt.why {
				t.Errorf("why = %q, want %q", why, tt.why)
			}
			for _, v := range tt.offered {
				next := *spec
				next.KubernetesVersion = v
				accepted := v != tt.current && len(validate.Update(spec, &next)) == 0
				if accepted != slices.Contains(got, v) {
					t.Errorf("%s -> %s: Update accepts it: %t; Upgrades lists it: %t", tt.current, v, accepted, !accepted)
				}
			}
		})
	}
}

func TestCloudAccountQuotas(t *testing.T) {
	n := func(v int) *int { return &v }
	tests := []struct {
		name   string
		quotas []v1.Quota
		want   []v1.Error
	}{
		{name: "none"},
		{name: "every region and one", quotas: []v1.Quota{{Machines: n(10)}, {Region: "sim-west", VCPUs: n(0), LoadBalancers: n(3)}}},
		{name: "bad values", quotas: []v1.Quota{
			{Region: "West", Machines: n(-1)},
			{Region: "", VCPUs: n(1_000_001)},
			{Region: "", LoadBalancers: n(1)},
		}, want: []v1.Error{
			invalid("quotas[0].region", `"West" must be a region name, or empty for every region without its own entry`),
			invalid("quotas[0].machines", "-1 must be between 0 and 1000000; leave it out for no limit"),
			invalid("quotas[1].vcpus", "1000001 must be between 0 and 1000000; leave it out for no limit"),
			invalid("quotas[2].region", `region "" already has quotas[1]; one entry per region`),
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := validate.CloudAccount("a", &v1.CloudAccount{Provider: "sim", Quotas: tt.quotas}, catalog)
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("CloudAccount() (-want +got):\n%s", diff)
			}
		})
	}
}
