package gateway

import (
	"testing"

	v1 "kiln.dev/kiln/api/v1"
)

func TestNodeAddress(t *testing.T) {
	itf := func(name string, addrs ...string) v1.Interface { return v1.Interface{Name: name, Addresses: addrs} }
	tests := []struct {
		name   string
		itfs   []v1.Interface
		remote string
		want   string
	}{
		{name: "local machine on its loopback address", itfs: []v1.Interface{itf("lo", "127.0.0.5/8")}, remote: "127.0.0.5", want: "127.0.0.5"},
		{name: "host on its network", itfs: []v1.Interface{itf("lo", "127.0.0.1/8"), itf("eth0", "192.168.1.20/24")}, remote: "192.168.1.20", want: "192.168.1.20"},
		{name: "host behind NAT", itfs: []v1.Interface{itf("lo", "127.0.0.1/8"), itf("eth0", "10.1.2.3/24")}, remote: "203.0.113.9", want: "10.1.2.3"},
		{name: "docker node through a forward on kilnd's host", itfs: []v1.Interface{itf("lo", "127.0.0.1/8"), itf("eth0", "172.30.0.2/24")}, remote: "127.0.0.1", want: "172.30.0.2"},
		{name: "no facts", remote: "198.51.100.7", want: "198.51.100.7"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := nodeAddress(&v1.NodeFacts{Interfaces: tt.itfs}, tt.remote); got != tt.want {
				t.Errorf("nodeAddress = %q, want %q", got, tt.want)
			}
		})
	}
}
