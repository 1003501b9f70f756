package validate_test

import (
	"net/netip"
	"testing"

	v1 "kiln.dev/kiln/api/v1"
	"kiln.dev/kiln/internal/validate"
)

// spec.network.loadBalancerPool: a CIDR or FIRST-LAST of IPv4 addresses,
// on the kubeadm distribution only, sharing no address with the pod,
// service and node ranges. Each refusal targets the field.
func TestLoadBalancerPool(t *testing.T) {
	for _, tt := range []struct {
		name string
		edit func(s *v1.ClusterSpec)
		ok   bool
	}{
		{"a CIDR", func(s *v1.ClusterSpec) { s.Network.LoadBalancerPool = "192.168.1.240/28" }, true},
		{"a range", func(s *v1.ClusterSpec) { s.Network.LoadBalancerPool = "192.168.1.240-192.168.1.250" }, true},
		{"one address", func(s *v1.ClusterSpec) { s.Network.LoadBalancerPool = "192.168.1.240-192.168.1.240" }, true},
		{"a public range", func(s *v1.ClusterSpec) { s.Network.LoadBalancerPool = "203.0.113.8/29" }, true},
		{"next to the node range", func(s *v1.ClusterSpec) {
			s.Network.NodeCIDR = "192.168.1.0/25"
			s.Network.LoadBalancerPool = "192.168.1.128/25"
		}, true},
		{"not an address", func(s *v1.ClusterSpec) { s.Network.LoadBalancerPool = "lb.example.com" }, false},
		{"host bits", func(s *v1.ClusterSpec) { s.Network.LoadBalancerPool = "192.168.1.241/28" }, false},
		{"backwards", func(s *v1.ClusterSpec) { s.Network.LoadBalancerPool = "192.168.1.250-192.168.1.240" }, false},
		{"IPv6", func(s *v1.ClusterSpec) { s.Network.LoadBalancerPool = "fd00::/120" }, false},
		{"loopback", func(s *v1.ClusterSpec) { s.Network.LoadBalancerPool = "127.0.0.0/30" }, false},
		{"too large", func(s *v1.ClusterSpec) { s.Network.LoadBalancerPool = "192.168.0.0/15" }, false},
		{"overlaps the pod range", func(s *v1.ClusterSpec) { s.Network.LoadBalancerPool = "10.244.3.0/28" }, false},
		{"holds the service range's start", func(s *v1.ClusterSpec) { s.Network.LoadBalancerPool = "10.95.255.250-10.96.0.5" }, false},
		{"overlaps the node range", func(s *v1.ClusterSpec) {
			s.Network.NodeCIDR = "192.168.1.0/24"
			s.Network.LoadBalancerPool = "192.168.1.240/28"
		}, false},
		{"an install from the internet", func(s *v1.ClusterSpec) {
			s.Network.CNI = "calico"
			s.Network.LoadBalancerPool = "192.168.1.240/28"
		}, false},
		{"not the kubeadm distribution", func(s *v1.ClusterSpec) {
			s.Distribution = "local"
			s.Network.LoadBalancerPool = "192.168.1.240/28"
		}, false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			s := valid()
			s.Provider, s.Distribution, s.Network.CNI = "edge", "kubeadm", "bridge"
			tt.edit(&s)
			errs := validate.Cluster("c", &s, catalog)
			if tt.ok {
				if len(errs) > 0 {
					t.Fatalf("refused: %v", errs)
				}
				return
			}
			if len(errs) != 1 || errs[0].Code != v1.CodeInvalidParameter || errs[0].Target != "spec.network.loadBalancerPool" {
				t.Fatalf("got %+v, want one InvalidParameter on spec.network.loadBalancerPool", errs)
			}
		})
	}
}

// ParseLoadBalancerPool gives a CIDR's every address, a range's ends.
func TestParseLoadBalancerPool(t *testing.T) {
	for _, tt := range []struct {
		in          string
		first, last string
		size        int
	}{
		{"192.168.1.240/28", "192.168.1.240", "192.168.1.255", 16},
		{"10.0.0.0/8", "", "", 0},
		{"192.168.0.0/16", "192.168.0.0", "192.168.255.255", 1 << 16},
		{"172.23.255.200-172.23.255.210", "172.23.255.200", "172.23.255.210", 11},
		{"172.23.254.255 - 172.23.255.0", "172.23.254.255", "172.23.255.0", 2},
	} {
		p, err := validate.ParseLoadBalancerPool(tt.in)
		if tt.size == 0 {
			if err == nil {
				t.Errorf("%s: parsed as %v, want a refusal", tt.in, p)
			}
			continue
		}
		if err != nil || p.First.String() != tt.first || p.Last.String() != tt.last || p.Size() != tt.size {
			t.Errorf("%s: %v %v (%d), %v; want %s-%s (%d)", tt.in, p.First, p.Last, p.Size(), err, tt.first, tt.last, tt.size)
		}
	}
	p, _ := validate.ParseLoadBalancerPool("172.23.255.200/29")
	if !p.Within(netip.MustParsePrefix("172.23.0.0/16")) || p.Within(netip.MustParsePrefix("172.23.255.200/30")) {
		t.Errorf("Within: %v", p)
	}
}
