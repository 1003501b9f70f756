package servicelb

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"

	v1 "kiln.dev/kiln/api/v1"
	"kiln.dev/kiln/internal/provider"
	"kiln.dev/kiln/internal/provider/sim"
	"kiln.dev/kiln/internal/store"
	"kiln.dev/kiln/test/waitfor"
)

// clusters is the store's cluster listing over a fixed set.
type clusters struct {
	mu  sync.Mutex
	all []*store.Cluster
}

func (c *clusters) ListClustersWhere(_ context.Context, f store.ClusterFilter, _ store.Page) ([]*store.Cluster, string, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []*store.Cluster
	for _, cl := range c.all {
		if cl.Status.ProvisioningState == f.State && (f.Providers == nil || slices.Contains(f.Providers, cl.Spec.Provider)) {
			out = append(out, cl)
		}
	}
	return out, "", nil
}

func (c *clusters) set(name, state string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, cl := range c.all {
		if cl.Name == name {
			cl.Status.ProvisioningState = state
		}
	}
}

// lbProvider is a provider that makes Service load balancers (sim's
// machines, none of its own).
type lbProvider struct{ *sim.Sim }

func (lbProvider) EnsureServiceLoadBalancer(context.Context, provider.Cluster, provider.ServiceLoadBalancer) ([]string, error) {
	return nil, nil
}
func (lbProvider) ServiceLoadBalancer(context.Context, provider.Cluster, string) ([]string, bool, error) {
	return nil, false, nil
}
func (lbProvider) DeleteServiceLoadBalancer(context.Context, provider.Cluster, string) error {
	return nil
}
func (lbProvider) DeleteServiceLoadBalancers(context.Context, provider.Cluster) error { return nil }

type noShard map[string]bool

func (n noShard) Owns(cl *store.Cluster) bool { return !n[cl.Name] }

// TestPassStartsAndStops: a controller runs for each cluster of a provider
// with Service load balancers that is Succeeded, Updating, Failed or Creating with an
// endpoint and that this replica is given; not for one
// without an endpoint or one of another provider; and it stops when its
// cluster is being deleted or is given to another replica.
func TestPassStartsAndStops(t *testing.T) {
	cl := func(name, prov, state, endpoint string) *store.Cluster {
		c := &store.Cluster{Project: "p", Name: name, Spec: v1.ClusterSpec{Provider: prov}}
		c.Status.ProvisioningState, c.Status.Endpoint = state, endpoint
		return c
	}
	cs := &clusters{all: []*store.Cluster{
		cl("idle", "docker", v1.StateSucceeded, "10.0.0.1:6443"),
		cl("upgrading", "docker", v1.StateUpdating, "10.0.0.2:6443"),
		cl("failed", "docker", v1.StateFailed, "10.0.0.3:6443"),
		cl("creating", "docker", v1.StateCreating, "10.0.0.4:6443"),
		cl("no-endpoint", "docker", v1.StateSucceeded, ""),
		cl("other", "sim", v1.StateSucceeded, "10.0.0.5:6443"),
	}}
	var mu sync.Mutex
	asked := map[string]int{}
	shard := noShard{}
	m := New(Options{
		Store:     cs,
		Providers: map[string]provider.Provider{"docker": lbProvider{sim.New()}, "sim": sim.New()},
		Shard:     shard,
		RESTConfig: func(_ context.Context, cl *store.Cluster) (*rest.Config, error) {
			mu.Lock()
			asked[cl.Name]++
			mu.Unlock()
			return nil, errors.New("unreachable")
		},
	})
	t.Cleanup(m.stopAll)
	running := func() []string {
		var out []string
		for _, name := range []string{"idle", "upgrading", "failed", "creating", "no-endpoint", "other"} {
			if m.Running(store.Key{Project: "p", Name: name}) {
				out = append(out, name)
			}
		}
		return out
	}
	if err := m.Pass(t.Context()); err != nil {
		t.Fatal(err)
	}
	if got, want := running(), []string{"idle", "upgrading", "failed", "creating"}; !slices.Equal(got, want) {
		t.Fatalf("controllers for %v, want %v", got, want)
	}
	waitfor.Cond(t, "each controller to reach for its cluster's API", 5*time.Second, func() (bool, error) {
		mu.Lock()
		defer mu.Unlock()
		return asked["idle"] > 0 && asked["upgrading"] > 0 && asked["failed"] > 0 && asked["creating"] > 0 && len(asked) == 4, nil
	})

	cs.set("idle", v1.StateDeleting)
	shard["upgrading"] = true
	if err := m.Pass(t.Context()); err != nil {
		t.Fatal(err)
	}
	if got, want := running(), []string{"failed", "creating"}; !slices.Equal(got, want) {
		t.Errorf("after a delete began and a cluster went to another replica: controllers for %v, want %v", got, want)
	}
}

// TestWanted: a Service's load balancer is its ports, each to its NodePort,
// over the nodes' InternalIP addresses (sorted), named as Kubernetes names
// it by default.
func TestWanted(t *testing.T) {
	s := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "web", UID: "0c7b1c2e-5d4f-4a8b-9c3d-1e2f3a4b5c6d"},
		Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeLoadBalancer, Ports: []corev1.ServicePort{
			{Name: "http", Protocol: corev1.ProtocolTCP, Port: 80, NodePort: 30080},
			{Name: "https", Protocol: corev1.ProtocolTCP, Port: 443, NodePort: 30443},
		}},
	}
	node := func(addrs ...corev1.NodeAddress) *corev1.Node {
		return &corev1.Node{Status: corev1.NodeStatus{Addresses: addrs}}
	}
	nodes := []*corev1.Node{
		node(corev1.NodeAddress{Type: corev1.NodeHostName, Address: "w2"}, corev1.NodeAddress{Type: corev1.NodeInternalIP, Address: "172.30.0.4"}),
		node(corev1.NodeAddress{Type: corev1.NodeInternalIP, Address: "172.30.0.3"}),
		node(corev1.NodeAddress{Type: corev1.NodeHostName, Address: "no-ip"}),
	}
	got := cloud{}.wanted(t.Context(), "c", s, nodes)
	want := provider.ServiceLoadBalancer{
		Name:    "a0c7b1c2e5d4f4a8b9c3d1e2f3a4b5c6",
		Service: "shop/web",
		Ports: []provider.ServicePort{
			{Name: "http", Protocol: "TCP", Port: 80, NodePort: 30080},
			{Name: "https", Protocol: "TCP", Port: 443, NodePort: 30443},
		},
		Nodes: []string{"172.30.0.3", "172.30.0.4"},
	}
	if got.Name != want.Name || got.Service != want.Service || !slices.Equal(got.Ports, want.Ports) || !slices.Equal(got.Nodes, want.Nodes) {
		t.Errorf("wanted:\n got %+v\nwant %+v", got, want)
	}
}

type accounts map[string]*store.CloudAccount

func (a accounts) GetCloudAccount(_ context.Context, project, name string) (*store.CloudAccount, error) {
	if name == "broken" {
		return nil, errors.New("database is locked")
	}
	if acc, ok := a[project+"/"+name]; ok {
		return acc, nil
	}
	return nil, store.ErrNotFound
}

// The service controller reaches a cloud as the cluster's own account, with
// its credentials (the aws provider refuses a cluster without): the
// account is read at each start; a missing one is left for the provider to
// name, and a store error keeps the controller from starting.
func TestControllerGetsTheClusterAccount(t *testing.T) {
	acc := &store.CloudAccount{Project: "p", CloudAccount: v1.CloudAccount{Name: "acme", Provider: "aws",
		Credentials: map[string]string{"accessKeyID": "AKIA1"}}}
	m := New(Options{Store: nil, Providers: map[string]provider.Provider{}, Accounts: accounts{"p/acme": acc}})
	pc := provider.Cluster{Project: "p", Name: "web", Spec: v1.ClusterSpec{CloudAccount: "acme"}}
	if err := m.withAccount(t.Context(), &pc); err != nil || pc.Account == nil || pc.Account.Name != "acme" || pc.Account.Credentials["accessKeyID"] != "AKIA1" {
		t.Errorf("account acme: %v, %+v; want its name and credentials", err, pc.Account)
	}
	pc.Spec.CloudAccount = "gone"
	if err := m.withAccount(t.Context(), &pc); err != nil || pc.Account != nil {
		t.Errorf("a missing account: %v, %+v; want none and no error", err, pc.Account)
	}
	pc.Spec.CloudAccount = "broken"
	if err := m.withAccount(t.Context(), &pc); err == nil || !strings.Contains(err.Error(), `"broken"`) {
		t.Errorf("a store error: %v, want it, naming the account", err)
	}
}
