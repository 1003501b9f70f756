// Package providertest is the provider contract as a conformance test. Every
// provider passes Run; docs/provider-contract.md states the same rules in
// prose.
package providertest

import (
	"context"
	"net"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	v1 "kiln.dev/kiln/api/v1"
	"kiln.dev/kiln/internal/provider"
)

// Run checks that p follows the provider contract. It creates infrastructure
// for clusters in project "providertest" and deletes it again.
//
// Options change the clusters it makes (a cloud provider's account).
func Run(t *testing.T, p provider.Provider, opts ...Option) {
	t.Helper()
	options = opts
	t.Run("NetworkEnsureIsIdempotent", func(t *testing.T) { testNetwork(t, p) })
	t.Run("DeleteOfNothingSucceeds", func(t *testing.T) { testDeleteNothing(t, p) })
	t.Run("MachineEnsureFindsByName", func(t *testing.T) { testMachines(t, p) })
	t.Run("ClustersAreIsolated", func(t *testing.T) { testIsolation(t, p) })
	if lbs, ok := p.(provider.LoadBalancers); ok {
		t.Run("LoadBalancerEnsureIsIdempotent", func(t *testing.T) { testLoadBalancer(t, p, lbs) })
	} else {
		t.Log("provider has no load balancers; skipping load balancer checks")
	}
	if slbs, ok := p.(provider.ServiceLoadBalancers); ok {
		t.Run("ServiceLoadBalancersFollowTheirService", func(t *testing.T) { testServiceLoadBalancers(t, p, slbs) })
	} else {
		t.Log("provider makes no Service load balancers; skipping their checks")
	}
	if prs, ok := p.(provider.PodRoutes); ok {
		t.Run("PodRoutesFollowTheNodes", func(t *testing.T) { testPodRoutes(t, p, prs) })
	} else {
		t.Log("provider's network needs no pod routes; skipping their checks")
	}
	var b *Bootstrap
	for _, o := range opts {
		if o.bootstrap != nil {
			b = o.bootstrap
		}
	}
	if b != nil {
		t.Run("BootstrapArrivesAndStaysSecret", func(t *testing.T) { testBootstrap(t, p, b) })
	} else {
		t.Log("provider's machines run no agent (no WithBootstrap); skipping bootstrap checks")
	}
}

// Networks is the network part of the contract: EnsureNetwork and
// DeleteNetwork. A provider whose machines are still to come (azure's
// network part before its machines came) is checked with RunNetworks.
type Networks interface {
	EnsureNetwork(ctx context.Context, c provider.Cluster) (provider.Network, error)
	DeleteNetwork(ctx context.Context, c provider.Cluster) error
}

// RunNetworks checks the rules of the contract that are about networks
// alone: an ensure run twice finds what the first made, a delete succeeds
// twice and when nothing was made.
func RunNetworks(t *testing.T, n Networks, opts ...Option) {
	t.Helper()
	options = opts
	t.Run("NetworkEnsureIsIdempotent", func(t *testing.T) { testNetwork(t, n) })
	t.Run("DeleteOfNothingSucceeds", func(t *testing.T) {
		if err := n.DeleteNetwork(t.Context(), cluster("nothing")); err != nil {
			t.Errorf("DeleteNetwork of a missing network: %v", err)
		}
	})
}

// Option changes what Run does.
type Option struct {
	cluster   func(*provider.Cluster)
	bootstrap *Bootstrap
}

// WithAccount gives every cluster the cloud account a.
func WithAccount(a *provider.Account) Option {
	return Option{cluster: func(c *provider.Cluster) { c.Account = a }}
}

// Bootstrap is how Run looks at a machine of a provider whose machines run
// an agent, for the bootstrap data the plan hands with it.
type Bootstrap struct {
	// Read returns the bootstrap data machine m's agent got.
	Read func(ctx context.Context, c provider.Cluster, m provider.Machine) (*provider.Bootstrap, error)
	// Viewable returns what a viewer of the infrastructure may read of
	// machine m without being the machine: tags, labels, user data,
	// command lines, environments.
	Viewable func(ctx context.Context, c provider.Cluster, m provider.Machine) ([]string, error)
}

// WithBootstrap checks that a machine's bootstrap data reaches it, as b
// reads it, and that none of its secrets is where a viewer reads.
func WithBootstrap(b Bootstrap) Option {
	return Option{bootstrap: &b}
}

// options are Run's; Run's subtests are not parallel.
var options []Option

func cluster(name string) provider.Cluster {
	c := provider.Cluster{
		Project: "providertest",
		Name:    name,
		Spec: v1.ClusterSpec{
			ControlPlane: v1.ControlPlane{Size: 1},
			WorkerPools:  []v1.WorkerPool{{Name: "default", Size: 1}},
			Labels:       map[string]string{},
		},
	}
	for _, o := range options {
		if o.cluster != nil {
			o.cluster(&c)
		}
	}
	return c
}

// cleanup deletes everything of c when the test ends.
func cleanup(t *testing.T, p Networks, c provider.Cluster) {
	t.Cleanup(func() {
		// t.Context is cancelled before cleanups run.
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if mp, ok := p.(provider.Provider); ok {
			ms, err := mp.ListMachines(ctx, c)
			if err != nil {
				t.Errorf("cleanup: list machines: %v", err)
			}
			for _, m := range ms {
				if err := mp.DeleteMachine(ctx, c, m.Name); err != nil {
					t.Errorf("cleanup: delete machine %q: %v", m.Name, err)
				}
			}
		}
		if lbs, ok := p.(provider.LoadBalancers); ok {
			if err := lbs.DeleteLoadBalancer(ctx, c); err != nil {
				t.Errorf("cleanup: delete load balancer: %v", err)
			}
		}
		if err := p.DeleteNetwork(ctx, c); err != nil {
			t.Errorf("cleanup: delete network: %v", err)
		}
	})
}

func testNetwork(t *testing.T, p Networks) {
	ctx := t.Context()
	c := cluster("network")
	cleanup(t, p, c)
	first, err := p.EnsureNetwork(ctx, c)
	if err != nil {
		t.Fatalf("EnsureNetwork: %v", err)
	}
	if first.ID == "" {
		t.Errorf("EnsureNetwork returned an empty ID")
	}
	second, err := p.EnsureNetwork(ctx, c)
	if err != nil {
		t.Fatalf("EnsureNetwork again: %v", err)
	}
	if diff := cmp.Diff(first, second); diff != "" {
		t.Errorf("EnsureNetwork is not idempotent (-first +second):\n%s", diff)
	}
	if err := p.DeleteNetwork(ctx, c); err != nil {
		t.Fatalf("DeleteNetwork: %v", err)
	}
	if err := p.DeleteNetwork(ctx, c); err != nil {
		t.Errorf("DeleteNetwork of a deleted network: %v", err)
	}
}

func testDeleteNothing(t *testing.T, p provider.Provider) {
	ctx := t.Context()
	c := cluster("nothing")
	if err := p.DeleteMachine(ctx, c, "nothing-cp-0"); err != nil {
		t.Errorf("DeleteMachine of a missing machine: %v", err)
	}
	if err := p.DeleteNetwork(ctx, c); err != nil {
		t.Errorf("DeleteNetwork of a missing network: %v", err)
	}
	if lbs, ok := p.(provider.LoadBalancers); ok {
		if err := lbs.DeleteLoadBalancer(ctx, c); err != nil {
			t.Errorf("DeleteLoadBalancer of a missing load balancer: %v", err)
		}
	}
	ms, err := p.ListMachines(ctx, c)
	if err != nil {
		t.Fatalf("ListMachines of an empty cluster: %v", err)
	}
	if len(ms) != 0 {
		t.Errorf("ListMachines of an empty cluster = %v, want none", ms)
	}
}

func testMachines(t *testing.T, p provider.Provider) {
	ctx := t.Context()
	c := cluster("machines")
	cleanup(t, p, c)
	if _, err := p.EnsureNetwork(ctx, c); err != nil {
		t.Fatalf("EnsureNetwork: %v", err)
	}
	specs := []provider.MachineSpec{
		{Name: "machines-cp-0", Role: v1.RoleControlPlane},
		{Name: "machines-default-0", Role: v1.RoleWorker, Pool: "default", Revision: "r1"},
	}
	created := map[string]provider.Machine{}
	pools, grouped := p.(provider.Pools)
	for i, s := range specs {
		if grouped && s.Pool != "" {
			m := growPool(t, pools, c, s)
			specs[i].Name = m.Name
			created[m.Name] = m
			continue
		}
		m, err := p.EnsureMachine(ctx, c, s)
		if err != nil {
			t.Fatalf("EnsureMachine(%q): %v", s.Name, err)
		}
		if m.ID == "" {
			t.Errorf("EnsureMachine(%q) returned an empty ID", s.Name)
		}
		if m.Name != s.Name || m.Role != s.Role || m.Pool != s.Pool || m.Revision != s.Revision {
			t.Errorf("EnsureMachine(%q) = name %q role %q pool %q revision %q, want the spec's", s.Name, m.Name, m.Role, m.Pool, m.Revision)
		}
		created[s.Name] = m
	}
	for _, s := range specs {
		again, err := p.EnsureMachine(ctx, c, s)
		if err != nil {
			t.Fatalf("EnsureMachine(%q) again: %v", s.Name, err)
		}
		if again.ID != created[s.Name].ID {
			t.Errorf("EnsureMachine(%q) again made a new machine %q; it must find %q by name", s.Name, again.ID, created[s.Name].ID)
		}
	}
	if got, want := listNames(t, p, c), slices.Sorted(slices.Values(names(specs))); !slices.Equal(got, want) {
		t.Errorf("ListMachines = %v, want both machines %v", got, want)
	}
	// The revision is the machine's tag: listed as it was made, and not
	// changed by an ensure with another (a rollout makes a new machine).
	again := specs[1]
	again.Revision = "r2"
	if m, err := p.EnsureMachine(ctx, c, again); err != nil || m.Revision != "r1" {
		t.Errorf("EnsureMachine with another revision = %q, %v; want the machine as made (r1)", m.Revision, err)
	}
	ms, err := p.ListMachines(ctx, c)
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range ms {
		if m.Name == specs[1].Name && m.Revision != "r1" {
			t.Errorf("ListMachines: revision %q, want r1", m.Revision)
		}
	}
	for _, s := range specs {
		if err := p.DeleteMachine(ctx, c, s.Name); err != nil {
			t.Fatalf("DeleteMachine(%q): %v", s.Name, err)
		}
		if err := p.DeleteMachine(ctx, c, s.Name); err != nil {
			t.Errorf("DeleteMachine(%q) twice: %v", s.Name, err)
		}
	}
	if got := listNames(t, p, c); len(got) != 0 {
		t.Errorf("ListMachines after deleting all = %v, want none", got)
	}
}

// growPool makes the pool machine s with GrowPool, as the plan does on a
// provider whose pools are groups, and returns it as named by the cloud.
// The same call repeated (a step retried after a crash, the plan knowing
// none of the pool's machines) finds it; one that knows it adds none.
func growPool(t *testing.T, pools provider.Pools, c provider.Cluster, s provider.MachineSpec) provider.Machine {
	t.Helper()
	ctx := t.Context()
	ms, err := pools.GrowPool(ctx, c, s, nil, 1)
	if err != nil {
		t.Fatalf("GrowPool(%s): %v", s.Pool, err)
	}
	if len(ms) != 1 || ms[0].Name == "" || ms[0].ID == "" {
		t.Fatalf("GrowPool(%s, add 1) = %+v; want one machine with a name and an ID", s.Pool, ms)
	}
	m := ms[0]
	if m.Role != s.Role || m.Pool != s.Pool || m.Revision != s.Revision {
		t.Errorf("GrowPool(%s) = role %q pool %q revision %q, want the spec's", s.Pool, m.Role, m.Pool, m.Revision)
	}
	again, err := pools.GrowPool(ctx, c, s, nil, 1)
	if err != nil || len(again) != 1 || again[0].ID != m.ID {
		t.Errorf("GrowPool(%s) repeated = %+v, %v; want the machine the first made (%s)", s.Pool, again, err, m.ID)
	}
	if more, err := pools.GrowPool(ctx, c, s, []string{m.Name}, 0); err != nil || len(more) != 0 {
		t.Errorf("GrowPool(%s, add 0) = %+v, %v; want nothing", s.Pool, more, err)
	}
	found, err := pools.(provider.Provider).EnsureMachine(ctx, c, provider.MachineSpec{Name: m.Name, Role: s.Role, Pool: s.Pool, Revision: s.Revision})
	if err != nil || found.ID != m.ID {
		t.Errorf("EnsureMachine(%q) of the pool's machine = %+v, %v; want it found by its name", m.Name, found, err)
	}
	return m
}

func names(ms []provider.MachineSpec) []string {
	var out []string
	for _, m := range ms {
		out = append(out, m.Name)
	}
	return out
}

func testIsolation(t *testing.T, p provider.Provider) {
	ctx := t.Context()
	a, b := cluster("iso-a"), cluster("iso-b")
	cleanup(t, p, a)
	cleanup(t, p, b)
	if _, err := p.EnsureMachine(ctx, a, provider.MachineSpec{Name: "iso-a-cp-0", Role: v1.RoleControlPlane}); err != nil {
		t.Fatalf("EnsureMachine: %v", err)
	}
	if got := listNames(t, p, b); len(got) != 0 {
		t.Errorf("ListMachines of cluster iso-b = %v; it shows machines of iso-a", got)
	}
	if err := p.DeleteMachine(ctx, b, "iso-a-cp-0"); err != nil {
		t.Fatalf("DeleteMachine: %v", err)
	}
	if got := listNames(t, p, a); !slices.Equal(got, []string{"iso-a-cp-0"}) {
		t.Errorf("ListMachines of iso-a = %v after deleting the name in iso-b; want [iso-a-cp-0]", got)
	}
}

func testLoadBalancer(t *testing.T, p provider.Provider, lbs provider.LoadBalancers) {
	ctx := t.Context()
	c := cluster("lb")
	cleanup(t, p, c)
	first, err := lbs.EnsureLoadBalancer(ctx, c)
	if err != nil {
		t.Fatalf("EnsureLoadBalancer: %v", err)
	}
	if _, _, err := net.SplitHostPort(first.Address); err != nil || first.ID == "" {
		t.Errorf("EnsureLoadBalancer = %+v; want an ID and a host:port address", first)
	}
	second, err := lbs.EnsureLoadBalancer(ctx, c)
	if err != nil {
		t.Fatalf("EnsureLoadBalancer again: %v", err)
	}
	if diff := cmp.Diff(first, second); diff != "" {
		t.Errorf("EnsureLoadBalancer is not idempotent (-first +second):\n%s", diff)
	}
	if err := lbs.DeleteLoadBalancer(ctx, c); err != nil {
		t.Fatalf("DeleteLoadBalancer: %v", err)
	}
	if err := lbs.DeleteLoadBalancer(ctx, c); err != nil {
		t.Errorf("DeleteLoadBalancer twice: %v", err)
	}
}

// testServiceLoadBalancers: a Service's load balancer is made once and
// keeps its address when its ports or nodes change; it is found by name
// until deleted; deleting one twice, or all of a cluster's, succeeds.
func testServiceLoadBalancers(t *testing.T, p provider.Provider, slbs provider.ServiceLoadBalancers) {
	ctx := t.Context()
	c := cluster("slb")
	cleanup(t, p, c)
	if _, err := p.EnsureNetwork(ctx, c); err != nil {
		t.Fatal(err)
	}
	lb := provider.ServiceLoadBalancer{Name: "a0c7b1c2e5d4f4a8b", Service: "shop/web", Nodes: []string{"10.0.0.2", "10.0.0.3"},
		Ports: []provider.ServicePort{{Name: "http", Protocol: "TCP", Port: 80, NodePort: 30080}}}
	first, err := slbs.EnsureServiceLoadBalancer(ctx, c, lb)
	if err != nil || len(first) == 0 {
		t.Fatalf("EnsureServiceLoadBalancer = %v, %v; want its addresses", first, err)
	}
	lb.Ports = append(lb.Ports, provider.ServicePort{Name: "https", Protocol: "TCP", Port: 443, NodePort: 30443})
	lb.Nodes = lb.Nodes[:1]
	second, err := slbs.EnsureServiceLoadBalancer(ctx, c, lb)
	if err != nil || !slices.Equal(first, second) {
		t.Errorf("EnsureServiceLoadBalancer with other ports and nodes = %v, %v; want the same addresses %v", second, err, first)
	}
	if got, ok, err := slbs.ServiceLoadBalancer(ctx, c, lb.Name); err != nil || !ok || !slices.Equal(got, first) {
		t.Errorf("ServiceLoadBalancer(%s) = %v %v %v; want %v", lb.Name, got, ok, err, first)
	}
	if _, ok, err := slbs.ServiceLoadBalancer(ctx, c, "anothername"); err != nil || ok {
		t.Errorf("ServiceLoadBalancer of a name never made = %v, %v; want none", ok, err)
	}
	for range 2 {
		if err := slbs.DeleteServiceLoadBalancer(ctx, c, lb.Name); err != nil {
			t.Fatalf("DeleteServiceLoadBalancer: %v", err)
		}
	}
	if _, ok, err := slbs.ServiceLoadBalancer(ctx, c, lb.Name); err != nil || ok {
		t.Errorf("ServiceLoadBalancer after its delete = %v, %v; want none", ok, err)
	}
	if _, err := slbs.EnsureServiceLoadBalancer(ctx, c, lb); err != nil {
		t.Fatal(err)
	}
	if err := slbs.DeleteServiceLoadBalancers(ctx, c); err != nil {
		t.Fatalf("DeleteServiceLoadBalancers: %v", err)
	}
	if _, ok, err := slbs.ServiceLoadBalancer(ctx, c, lb.Name); err != nil || ok {
		t.Errorf("ServiceLoadBalancer after the cluster's were deleted = %v, %v; want none", ok, err)
	}
}

// testPodRoutes: pod routes to the cluster's machines are ensured twice
// alike, changed, and taken away when no node is left; a node that is no
// machine of the cluster is no error.
func testPodRoutes(t *testing.T, p provider.Provider, prs provider.PodRoutes) {
	ctx := t.Context()
	c := cluster("routes")
	cleanup(t, p, c)
	if c.Spec.Network.PodCIDR == "" {
		c.Spec.Network.PodCIDR = "10.244.0.0/16"
	}
	if _, err := p.EnsureNetwork(ctx, c); err != nil {
		t.Fatal(err)
	}
	m, err := p.EnsureMachine(ctx, c, provider.MachineSpec{Name: "routes-cp-0", Role: v1.RoleControlPlane})
	if err != nil {
		t.Fatal(err)
	}
	routes := []provider.PodRoute{{Node: m.Name, Address: m.Address, CIDR: "10.244.0.0/24"},
		{Node: "not-a-machine", Address: "192.0.2.1", CIDR: "10.244.1.0/24"}}
	for range 2 {
		if err := prs.EnsurePodRoutes(ctx, c, routes); err != nil {
			t.Fatalf("EnsurePodRoutes: %v", err)
		}
	}
	routes[0].CIDR = "10.244.7.0/24"
	if err := prs.EnsurePodRoutes(ctx, c, routes[:1]); err != nil {
		t.Errorf("EnsurePodRoutes with a range moved: %v", err)
	}
	if err := prs.EnsurePodRoutes(ctx, c, nil); err != nil {
		t.Errorf("EnsurePodRoutes with no node left: %v", err)
	}
}

func listNames(t *testing.T, p provider.Provider, c provider.Cluster) []string {
	t.Helper()
	ms, err := p.ListMachines(t.Context(), c)
	if err != nil {
		t.Fatalf("ListMachines: %v", err)
	}
	var names []string
	for _, m := range ms {
		names = append(names, m.Name)
	}
	slices.Sort(names)
	return names
}

// testBootstrap makes a machine with bootstrap data of its own and reads
// it back from the machine; neither the credential's secret nor the
// passphrase may be in what a viewer reads.
func testBootstrap(t *testing.T, p provider.Provider, b *Bootstrap) {
	ctx := t.Context()
	c := cluster("boot")
	cleanup(t, p, c)
	if _, err := p.EnsureNetwork(ctx, c); err != nil {
		t.Fatalf("EnsureNetwork: %v", err)
	}
	want := &provider.Bootstrap{
		Credentials: v1.AgentCredentials{Controller: "https://controller.example:7443", ControllerCA: "ca-pem",
			Cluster: "/v1/projects/providertest/clusters/boot", ID: "cred-boot", Secret: "providertest-secret-8d1f"},
		Passphrase: "providertest-passphrase-41c7",
	}
	m, err := p.EnsureMachine(ctx, c, provider.MachineSpec{Name: "boot-cp-0", Role: v1.RoleControlPlane, Bootstrap: want})
	if err != nil {
		t.Fatalf("EnsureMachine with bootstrap data: %v", err)
	}
	if m.Bootstrap != nil {
		t.Errorf("EnsureMachine reported the bootstrap data back; a Machine never carries it")
	}
	got, err := b.Read(ctx, c, m)
	if err != nil {
		t.Fatalf("reading the machine's bootstrap data: %v", err)
	}
	// The controller's address is the provider's to give (the address its
	// machines reach the gateway at): the rest arrives as handed.
	gotCreds, wantCreds := got.Credentials, want.Credentials
	gotCreds.Controller, wantCreds.Controller = "", ""
	if diff := cmp.Diff(wantCreds, gotCreds); diff != "" || got.Passphrase != want.Passphrase {
		t.Errorf("the machine's bootstrap data differs from the spec's (-want +got):\n%s\npassphrase %q, want %q", diff, got.Passphrase, want.Passphrase)
	}
	seen, err := b.Viewable(ctx, c, m)
	if err != nil {
		t.Fatalf("reading what a viewer sees of the machine: %v", err)
	}
	for _, text := range seen {
		for _, secret := range []string{want.Credentials.Secret, want.Passphrase} {
			if i := strings.Index(text, secret); i >= 0 {
				t.Errorf("a viewer of the infrastructure reads a secret of the bootstrap data: …%q…", text[max(0, i-60):min(len(text), i+len(secret)+20)])
			}
		}
	}
}
