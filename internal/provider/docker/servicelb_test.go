package docker

import (
	"encoding/json"
	"errors"
	"net/netip"
	"strings"
	"testing"

	v1 "kiln.dev/kiln/api/v1"
	"kiln.dev/kiln/internal/failure"
	"kiln.dev/kiln/internal/lb"
	"kiln.dev/kiln/internal/provider"
)

// TestServiceLBFile: each port of a Service forwards to its NodePort on
// every node; a UDP port is refused, naming the Service and the port.
func TestServiceLBFile(t *testing.T) {
	s := provider.ServiceLoadBalancer{Name: "a1", Service: "shop/web", Nodes: []string{"172.30.0.3", "172.30.0.4"},
		Ports: []provider.ServicePort{{Protocol: "TCP", Port: 80, NodePort: 30080}, {Protocol: "TCP", Port: 443, NodePort: 30443}}}
	b, err := serviceLBFile(s)
	if err != nil {
		t.Fatal(err)
	}
	var c lb.Config
	if err := json.Unmarshal(b, &c); err != nil {
		t.Fatal(err)
	}
	if len(c.Ports) != 2 || c.Ports[0].Port != 80 || strings.Join(c.Ports[0].Backends, " ") != "172.30.0.3:30080 172.30.0.4:30080" ||
		c.Ports[1].Port != 443 || strings.Join(c.Ports[1].Backends, " ") != "172.30.0.3:30443 172.30.0.4:30443" {
		t.Errorf("config %s", b)
	}
	s.Ports = append(s.Ports, provider.ServicePort{Protocol: "UDP", Port: 53, NodePort: 30053})
	var fe *failure.Error
	if _, err := serviceLBFile(s); !errors.As(err, &fe) || fe.Code != v1.CodeInvalidParameter || fe.Retryable {
		t.Errorf("a UDP port: %v, want a terminal InvalidParameter", err)
	}
}

// TestLastFreeAddress: Service load balancers take addresses from the top
// of the cluster's subnet, below its broadcast address, skipping used ones.
func TestLastFreeAddress(t *testing.T) {
	p := netip.MustParsePrefix("172.30.1.0/24")
	used := map[netip.Addr]bool{netip.MustParseAddr("172.30.1.254"): true}
	if a, ok := lastFreeAddress(p, used); !ok || a.String() != "172.30.1.253" {
		t.Errorf("lastFreeAddress = %v %v, want 172.30.1.253", a, ok)
	}
	small := netip.MustParsePrefix("10.0.0.0/30") // .1 gateway, .2 the one host, .3 broadcast
	if _, ok := lastFreeAddress(small, map[netip.Addr]bool{netip.MustParseAddr("10.0.0.2"): true}); ok {
		t.Error("lastFreeAddress found an address in a full subnet")
	}
}
