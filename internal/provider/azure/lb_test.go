package azure_test

import (
	"net"
	"net/http"
	"testing"

	v1 "kiln.dev/kiln/api/v1"
	"kiln.dev/kiln/internal/provider"
	"kiln.dev/kiln/internal/provider/azure"
	azurelocal "kiln.dev/kiln/test/cloud/azure"
)

// TestAPILoadBalancer: the API's load balancer on a public IP at port
// 6443, the control-plane machines in its pool whether made before or
// after it, a second ensure that only reads, and a delete that takes it,
// its IP and the pool's members out.
func TestAPILoadBalancer(t *testing.T) {
	t.Parallel()
	l := newLocal(t, azurelocal.Options{Images: []string{version}})
	p := newNetwork()
	ctx := t.Context()
	c := cluster(l, "lb1")
	if _, err := p.EnsureMachine(ctx, c, provider.MachineSpec{Name: "lb1-cp-0", Role: v1.RoleControlPlane}); err != nil {
		t.Fatal(err)
	}
	got, err := p.EnsureLoadBalancer(ctx, c)
	if err != nil {
		t.Fatal(err)
	}
	host, port, err := net.SplitHostPort(got.Address)
	if err != nil || port != "6443" || net.ParseIP(host) == nil {
		t.Errorf("load balancer address %q: want PUBLIC-IP:6443", got.Address)
	}
	if _, err := p.EnsureMachine(ctx, c, provider.MachineSpec{Name: "lb1-cp-1", Role: v1.RoleControlPlane}); err != nil {
		t.Fatal(err)
	}
	group := azure.GroupName("p", "lb1")
	lbs := l.clients(t).net.NewLoadBalancersClient()
	lb, err := lbs.Get(ctx, group, "kiln-api-lb", nil)
	if err != nil {
		t.Fatal(err)
	}
	if m := lb.Properties.BackendAddressPools[0].Properties.BackendIPConfigurations; len(m) != 2 {
		t.Errorf("the API pool's members: %d; want both control-plane machines' interfaces", len(m))
	}
	l.reset()
	again, err := p.EnsureLoadBalancer(ctx, c)
	if err != nil || again != got {
		t.Errorf("EnsureLoadBalancer again = %+v, %v; want %+v", again, err, got)
	}
	if w := l.writes(); w[http.MethodPut] != 0 {
		t.Errorf("the second ensure wrote %v; want only reads", w)
	}
	for range 2 {
		if err := p.DeleteLoadBalancer(ctx, c); err != nil {
			t.Fatalf("DeleteLoadBalancer: %v", err)
		}
	}
	if _, err := lbs.Get(ctx, group, "kiln-api-lb", nil); err == nil {
		t.Errorf("the API load balancer is left after its delete")
	}
	if _, err := l.clients(t).net.NewPublicIPAddressesClient().Get(ctx, group, "kiln-api-ip", nil); err == nil {
		t.Errorf("the API's public IP is left after the load balancer's delete")
	}
}
