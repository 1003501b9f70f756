package servicelb

import (
	"context"
	"log/slog"
	"slices"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes/fake"

	"kiln.dev/kiln/internal/provider"
	"kiln.dev/kiln/test/waitfor"
)

// routesProvider records the route sets it was asked for.
type routesProvider struct {
	mu   sync.Mutex
	last []provider.PodRoute
	n    int
}

func (r *routesProvider) EnsurePodRoutes(_ context.Context, _ provider.Cluster, routes []provider.PodRoute) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.last, r.n = slices.Clone(routes), r.n+1
	return nil
}

func (r *routesProvider) get() []provider.PodRoute {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.last)
}

// The pod routes follow the nodes: each node with a pod range and an
// InternalIP, sorted by name; a node added, its range changed or the node
// deleted is a new set at once (not at the next 30 s pass).
func TestSyncRoutesFollowsNodes(t *testing.T) {
	node := func(name, ip, cidr string) *corev1.Node {
		return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: corev1.NodeSpec{PodCIDR: cidr},
			Status: corev1.NodeStatus{Addresses: []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: ip}}}}
	}
	cs := fake.NewClientset(node("w2", "10.0.48.4", "10.244.2.0/24"), node("w1", "10.0.16.4", "10.244.1.0/24"), node("new", "10.0.16.5", ""))
	f := informers.NewSharedInformerFactory(cs, 0)
	p := &routesProvider{}
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan struct{})
	nodes := f.Core().V1().Nodes()
	nodes.Informer()
	go func() {
		defer close(done)
		syncRoutes(ctx, p, provider.Cluster{Name: "c"}, nodes, slog.New(slog.DiscardHandler))
	}()
	f.Start(ctx.Done())
	t.Cleanup(func() {
		cancel()
		<-done
		f.Shutdown()
	})
	want := func(what string, routes ...provider.PodRoute) {
		t.Helper()
		waitfor.Cond(t, what, 5*time.Second, func() (bool, error) {
			return slices.Equal(p.get(), routes), nil
		})
	}
	w1 := provider.PodRoute{Node: "w1", Address: "10.0.16.4", CIDR: "10.244.1.0/24"}
	w2 := provider.PodRoute{Node: "w2", Address: "10.0.48.4", CIDR: "10.244.2.0/24"}
	want("the nodes with a pod range", w1, w2)

	n, err := cs.CoreV1().Nodes().Get(t.Context(), "new", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	n.Spec.PodCIDR = "10.244.3.0/24"
	if _, err := cs.CoreV1().Nodes().Update(t.Context(), n, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	want("the new node's range once it has one", provider.PodRoute{Node: "new", Address: "10.0.16.5", CIDR: "10.244.3.0/24"}, w1, w2)
	if err := cs.CoreV1().Nodes().Delete(t.Context(), "w2", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	want("w2 gone", provider.PodRoute{Node: "new", Address: "10.0.16.5", CIDR: "10.244.3.0/24"}, w1)
}
