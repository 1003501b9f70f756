package azure_test

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/Azure/azure-sdk-for-go/sdk/resourcemanager/network/armnetwork/v7"

	v1 "kiln.dev/kiln/api/v1"
	"kiln.dev/kiln/internal/provider"
	"kiln.dev/kiln/internal/provider/azure"
	azurelocal "kiln.dev/kiln/test/cloud/azure"
)

// TestServiceLoadBalancers: Services' load balancers are frontends of one
// load balancer, "kubernetes", each on a public IP of its own tagged with
// the Service, with a probe and a rule per port to the NodePort of the
// pool's nodes and a security rule letting the NodePort in, in the
// security groups of the nodes' subnets. Ports and nodes change in place
// (the address stays); a second ensure only reads; the network's ensure
// keeps the Services' security rules; deleting one Service leaves the
// other's; deleting all takes everything, even a public IP a failed call
// left.
func TestServiceLoadBalancers(t *testing.T) {
	t.Parallel()
	l := newLocal(t, azurelocal.Options{Images: []string{version}})
	p := newNetwork()
	ctx := t.Context()
	c := cluster(l, "svc")
	if _, err := p.EnsureNetwork(ctx, c); err != nil {
		t.Fatal(err)
	}
	cp, err := p.EnsureMachine(ctx, c, provider.MachineSpec{Name: "svc-cp-0", Role: v1.RoleControlPlane})
	if err != nil {
		t.Fatal(err)
	}
	workers, err := p.GrowPool(ctx, c, provider.MachineSpec{Role: v1.RoleWorker, Pool: "default"}, nil, 2)
	if err != nil || len(workers) != 2 {
		t.Fatalf("GrowPool = %v, %v", workers, err)
	}
	api := l.clients(t).net
	group := azure.GroupName("p", "svc")
	get := func() armnetwork.LoadBalancer {
		t.Helper()
		lb, err := api.NewLoadBalancersClient().Get(ctx, group, "kubernetes", nil)
		if err != nil {
			t.Fatalf("the load balancer of Services: %v", err)
		}
		return lb.LoadBalancer
	}
	// members are the pool's members' addresses, sorted.
	members := func() []string {
		t.Helper()
		addrs := map[string]string{}
		pages := api.NewInterfacesClient().NewListPager(group, nil)
		for pages.More() {
			page, err := pages.NextPage(ctx)
			if err != nil {
				t.Fatal(err)
			}
			for _, nic := range page.Value {
				cfg := nic.Properties.IPConfigurations[0]
				addrs[strings.ToLower(*cfg.ID)] = *cfg.Properties.PrivateIPAddress
			}
		}
		var out []string
		for _, m := range get().Properties.BackendAddressPools[0].Properties.BackendIPConfigurations {
			out = append(out, addrs[strings.ToLower(*m.ID)])
		}
		slices.Sort(out)
		return out
	}
	// rules are the load-balancing rules as NAME FRONTEND PORT>BACKEND PROBE-PORT.
	rules := func() []string {
		t.Helper()
		lb := get()
		probes := map[string]int32{}
		for _, pr := range lb.Properties.Probes {
			probes[strings.ToLower(*pr.ID)] = *pr.Properties.Port
		}
		var out []string
		for _, r := range lb.Properties.LoadBalancingRules {
			q := r.Properties
			fe := *q.FrontendIPConfiguration.ID
			out = append(out, fmt.Sprintf("%s %s %d>%d %d", *r.Name, fe[strings.LastIndexByte(fe, '/')+1:], *q.FrontendPort, *q.BackendPort, probes[strings.ToLower(*q.Probe.ID)]))
		}
		slices.Sort(out)
		return out
	}
	// security are the Services' security rules of a group as NAME PORT PRIORITY.
	security := func(nsg string) []string {
		t.Helper()
		g, err := api.NewSecurityGroupsClient().Get(ctx, group, nsg, nil)
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, r := range g.Properties.SecurityRules {
			if strings.HasSuffix(*r.Name, "-Internet") {
				out = append(out, fmt.Sprintf("%s %s %d", *r.Name, *r.Properties.DestinationPortRange, *r.Properties.Priority))
			}
		}
		slices.Sort(out)
		return out
	}
	want := func(what string, got, want []string) {
		t.Helper()
		if !slices.Equal(got, want) {
			t.Errorf("%s: %q; want %q", what, got, want)
		}
	}
	nodes := []string{workers[0].Address, workers[1].Address}
	slices.Sort(nodes)

	web := provider.ServiceLoadBalancer{Name: "a1111111111111111111111111111111", Service: "shop/web", Nodes: nodes,
		Ports: []provider.ServicePort{{Name: "http", Protocol: "TCP", Port: 80, NodePort: 30080}}}
	addrs, err := p.EnsureServiceLoadBalancer(ctx, c, web)
	if err != nil || len(addrs) != 1 {
		t.Fatalf("EnsureServiceLoadBalancer = %v, %v", addrs, err)
	}
	pip, err := api.NewPublicIPAddressesClient().Get(ctx, group, "kubernetes-"+web.Name, nil)
	if err != nil {
		t.Fatal(err)
	}
	if *pip.Properties.IPAddress != addrs[0] || *pip.SKU.Name != armnetwork.PublicIPAddressSKUNameStandard ||
		*pip.Properties.PublicIPAllocationMethod != armnetwork.IPAllocationMethodStatic ||
		*pip.Tags[azure.TagServiceName] != "shop/web" || *pip.Tags[azure.TagCluster] != "uid-svc" || *pip.Tags[azure.TagServiceLB] != web.Name {
		t.Errorf("web's public IP %s (%v), tags %v; want a Standard static IP tagged with the Service and the cluster", *pip.Properties.IPAddress, addrs, pip.Tags)
	}
	if lb := get(); *lb.SKU.Name != armnetwork.LoadBalancerSKUNameStandard || *lb.Tags[azure.TagCluster] != "uid-svc" || len(lb.Properties.FrontendIPConfigurations) != 1 {
		t.Errorf("the load balancer of Services: %+v; want a Standard one of the cluster with one frontend", lb)
	}
	want("rules", rules(), []string{web.Name + "-TCP-80 " + web.Name + " 80>30080 30080"})
	want("pool", members(), nodes)
	want("the nodes' security rules", security("kiln-node-nsg"), []string{web.Name + "-TCP-80-Internet 30080 500"})
	want("the control plane's security rules", security("kiln-control-plane-nsg"), nil)

	// A second ensure only reads.
	l.reset()
	if again, err := p.EnsureServiceLoadBalancer(ctx, c, web); err != nil || !slices.Equal(again, addrs) {
		t.Fatalf("EnsureServiceLoadBalancer again = %v, %v; want %v", again, err, addrs)
	}
	if w := l.writes(); len(w) != 0 {
		t.Errorf("the second ensure wrote %v; want only reads", w)
	}

	// Ports change (80 to another NodePort, 443 added), and the nodes: a
	// worker goes, the control plane comes.
	web.Ports = []provider.ServicePort{{Name: "http", Port: 80, NodePort: 30081}, {Name: "https", Port: 443, NodePort: 30443}}
	web.Nodes = []string{cp.Address, workers[1].Address}
	slices.Sort(web.Nodes)
	if again, err := p.EnsureServiceLoadBalancer(ctx, c, web); err != nil || !slices.Equal(again, addrs) {
		t.Fatalf("EnsureServiceLoadBalancer with other ports = %v, %v; want the same address %v", again, err, addrs)
	}
	want("rules after the change", rules(), []string{web.Name + "-TCP-443 " + web.Name + " 443>30443 30443", web.Name + "-TCP-80 " + web.Name + " 80>30081 30081"})
	want("pool after the change", members(), web.Nodes)
	want("the nodes' security rules after the change", security("kiln-node-nsg"),
		[]string{web.Name + "-TCP-443-Internet 30443 501", web.Name + "-TCP-80-Internet 30081 500"})
	want("the control plane's security rules after the change", security("kiln-control-plane-nsg"),
		[]string{web.Name + "-TCP-443-Internet 30443 501", web.Name + "-TCP-80-Internet 30081 500"})

	// A second Service: a frontend of its own on the same load balancer,
	// the same port on another address.
	shop := provider.ServiceLoadBalancer{Name: "a2222222222222222222222222222222", Service: "shop/api", Nodes: web.Nodes,
		Ports: []provider.ServicePort{{Name: "http", Protocol: "TCP", Port: 80, NodePort: 30090}}}
	other, err := p.EnsureServiceLoadBalancer(ctx, c, shop)
	if err != nil || len(other) != 1 || other[0] == addrs[0] {
		t.Fatalf("EnsureServiceLoadBalancer(api) = %v, %v; want another address than %v", other, err, addrs)
	}
	if n := len(get().Properties.FrontendIPConfigurations); n != 2 {
		t.Errorf("frontends with two Services: %d; want 2", n)
	}
	want("the nodes' security rules with two Services", security("kiln-node-nsg"),
		[]string{web.Name + "-TCP-443-Internet 30443 501", web.Name + "-TCP-80-Internet 30081 500", shop.Name + "-TCP-80-Internet 30090 502"})

	// The network's ensure keeps the Services' security rules, and writes nothing.
	l.reset()
	if _, err := p.EnsureNetwork(ctx, c); err != nil {
		t.Fatal(err)
	}
	if w := l.writes(); len(w) != 0 {
		t.Errorf("EnsureNetwork with Services wrote %v; want only reads", w)
	}
	if got := security("kiln-node-nsg"); len(got) != 3 {
		t.Errorf("the Services' security rules after EnsureNetwork: %q; want all 3 kept", got)
	}

	// Deleting web leaves api's frontend, rule and security rule.
	for range 2 {
		if err := p.DeleteServiceLoadBalancer(ctx, c, web.Name); err != nil {
			t.Fatalf("DeleteServiceLoadBalancer: %v", err)
		}
	}
	if _, ok, err := p.ServiceLoadBalancer(ctx, c, web.Name); ok || err != nil {
		t.Errorf("ServiceLoadBalancer(web) after its delete = %v, %v; want none", ok, err)
	}
	if got, ok, err := p.ServiceLoadBalancer(ctx, c, shop.Name); !ok || err != nil || !slices.Equal(got, other) {
		t.Errorf("ServiceLoadBalancer(api) = %v, %v, %v; want %v", got, ok, err, other)
	}
	want("rules after web's delete", rules(), []string{shop.Name + "-TCP-80 " + shop.Name + " 80>30090 30090"})
	want("the nodes' security rules after web's delete", security("kiln-node-nsg"), []string{shop.Name + "-TCP-80-Internet 30090 502"})
	if _, err := api.NewPublicIPAddressesClient().Get(ctx, group, "kubernetes-"+web.Name, nil); err == nil {
		t.Errorf("web's public IP is left after its delete")
	}

	// A call that failed half way (the load balancer's write failed after
	// the public IP was made) leaves the IP; deleting all takes it too.
	l.SetFaults(azurelocal.Faults{FailOperation: []azurelocal.FailedOperation{{Type: "Microsoft.Network/loadBalancers", Code: "InternalServerError", Message: "boom"}}})
	half := provider.ServiceLoadBalancer{Name: "a3333333333333333333333333333333", Service: "shop/half", Nodes: web.Nodes,
		Ports: []provider.ServicePort{{Port: 8080, NodePort: 30808}}}
	if _, err := p.EnsureServiceLoadBalancer(ctx, c, half); err == nil {
		t.Fatal("EnsureServiceLoadBalancer with the load balancer's write failing: no error")
	}
	l.SetFaults(azurelocal.Faults{})
	for range 2 {
		if err := p.DeleteServiceLoadBalancers(ctx, c); err != nil {
			t.Fatalf("DeleteServiceLoadBalancers: %v", err)
		}
	}
	if _, err := api.NewLoadBalancersClient().Get(ctx, group, "kubernetes", nil); err == nil {
		t.Errorf("the load balancer of Services is left after DeleteServiceLoadBalancers")
	}
	pages := api.NewPublicIPAddressesClient().NewListPager(group, nil)
	for pages.More() {
		page, err := pages.NextPage(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for _, ip := range page.Value {
			if strings.HasPrefix(*ip.Name, "kubernetes-") {
				t.Errorf("public IP %s is left after DeleteServiceLoadBalancers", *ip.Name)
			}
		}
	}
	for _, nsg := range []string{"kiln-node-nsg", "kiln-control-plane-nsg"} {
		want(nsg+"'s security rules after DeleteServiceLoadBalancers", security(nsg), nil)
	}
	// The API's load balancer still works with the network as it is.
	if _, err := p.EnsureLoadBalancer(ctx, c); err != nil {
		t.Errorf("EnsureLoadBalancer after the Services' are gone: %v", err)
	}
}
