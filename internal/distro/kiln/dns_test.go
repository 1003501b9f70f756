package kiln_test

import (
	"testing"

	"kiln.dev/kiln/internal/distro/kiln"
)

func TestClusterDNSAddress(t *testing.T) {
	for cidr, want := range map[string]string{"10.96.0.0/12": "10.96.0.10", "10.100.7.0/24": "10.100.7.10", "192.168.0.16/28": "192.168.0.26"} {
		if got, err := kiln.ClusterDNSAddress(cidr); err != nil || got != want {
			t.Errorf("ClusterDNSAddress(%s) = %q, %v; want %s", cidr, got, err, want)
		}
	}
	for _, cidr := range []string{"10.0.0.0/29", "nonsense", ""} {
		if got, err := kiln.ClusterDNSAddress(cidr); err == nil {
			t.Errorf("ClusterDNSAddress(%q) = %q, want an error", cidr, got)
		}
	}
}
