package servicelb

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	v1 "kiln.dev/kiln/api/v1"
	"kiln.dev/kiln/internal/backend/check/checktest"
	"kiln.dev/kiln/internal/failure"
	"kiln.dev/kiln/internal/provider"
	"kiln.dev/kiln/internal/provider/sim"
	"kiln.dev/kiln/test/waitfor"
)

// quotaProvider refuses every load balancer for a quota while full.
type quotaProvider struct {
	lbProvider
	full bool
}

func (q *quotaProvider) EnsureServiceLoadBalancer(context.Context, provider.Cluster, provider.ServiceLoadBalancer) ([]string, error) {
	if q.full {
		return nil, failure.Terminal(v1.CodeQuotaExceeded, "the region's quota of network load balancers (L-69A177A2) is reached")
	}
	return []string{"kiln-lb.example"}, nil
}

// A Service refused for a quota makes the cluster's condition
// ServiceLoadBalancerQuotaExceeded True naming it and the quota, with an
// event; once it has its load balancer the condition is False again, with
// an event. A cluster that never had it is not written. A DNS name is the
// Service's hostname, an address its IP.
func TestQuotaCondition(t *testing.T) {
	st := checktest.Store(t)
	checktest.Idle(t, st, "c", v1.ClusterSpec{Provider: "docker"})
	m := New(Options{Store: st, Writer: st, Providers: map[string]provider.Provider{}})
	p := &quotaProvider{lbProvider: lbProvider{sim.New()}, full: true}
	q := newQuotaWatch()
	cp := cloud{lbs: p, quota: q}
	svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "web", UID: "0c7b1c2e-5d4f-4a8b-9c3d-1e2f3a4b5c6d"},
		Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeLoadBalancer, Ports: []corev1.ServicePort{{Port: 80, NodePort: 30080}}}}

	m.setQuotaCondition(t.Context(), checktest.Get(t, st, "c"), q)
	if got := checktest.Get(t, st, "c").Status.Conditions; len(got) != 0 {
		t.Fatalf("conditions %+v of a cluster never refused; want none written", got)
	}
	if _, err := cp.EnsureLoadBalancer(t.Context(), "c", svc, nil); err == nil {
		t.Fatal("EnsureLoadBalancer beyond the quota succeeded")
	}
	m.setQuotaCondition(t.Context(), checktest.Get(t, st, "c"), q)
	cond := checktest.Condition(t, st, "c", v1.ConditionServiceLoadBalancerQuotaExceeded)
	if cond.Status != "True" || !strings.Contains(cond.Message, "shop/web") || !strings.Contains(cond.Message, "L-69A177A2") {
		t.Errorf("condition %+v; want True naming shop/web and the quota", cond)
	}
	p.full = false
	st2, err := cp.EnsureLoadBalancer(t.Context(), "c", svc, nil)
	if err != nil || len(st2.Ingress) != 1 || st2.Ingress[0].Hostname != "kiln-lb.example" || st2.Ingress[0].IP != "" {
		t.Errorf("status %+v, %v; want the DNS name as hostname", st2, err)
	}
	m.setQuotaCondition(t.Context(), checktest.Get(t, st, "c"), q)
	if cond := checktest.Condition(t, st, "c", v1.ConditionServiceLoadBalancerQuotaExceeded); cond.Status != "False" {
		t.Errorf("condition %+v once the Service has its load balancer; want False", cond)
	}
	got := checktest.Events(t, st, "c")
	if want := []string{"Warning ServiceLoadBalancerQuotaExceededTrue", "Normal ServiceLoadBalancerQuotaExceededFalse"}; strings.Join(got, ",") != strings.Join(want, ",") {
		t.Errorf("events %v; want %v", got, want)
	}
}

// A Service refused for a quota and then deleted, or changed to another
// type, while the controller still retried it (its node sync can ask
// once more after the delete) is forgotten: the condition follows the
// cluster's Services, not only the controller's calls. Until the
// informer has synced, nothing is forgotten.
func TestQuotaConditionForgetsServicesGone(t *testing.T) {
	refused := failure.Terminal(v1.CodeQuotaExceeded, "the region's quota of network load balancers (L-69A177A2) is reached")
	lb := func(name string, typ corev1.ServiceType) *corev1.Service {
		return &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: name}, Spec: corev1.ServiceSpec{Type: typ}}
	}
	cs := fake.NewClientset(lb("kept", corev1.ServiceTypeLoadBalancer), lb("now-clusterip", corev1.ServiceTypeClusterIP))
	// The fake's watch starts after its list, and a change made between
	// the two never reaches the informer (a loaded machine showed it):
	// the delete below waits until the informer watches.
	watching := make(chan struct{})
	var once sync.Once
	cs.PrependWatchReactor("services", func(a k8stesting.Action) (bool, watch.Interface, error) {
		var opts metav1.ListOptions
		if wa, ok := a.(k8stesting.WatchActionImpl); ok {
			opts = wa.ListOptions
		}
		w, err := cs.Tracker().Watch(a.GetResource(), a.GetNamespace(), opts)
		once.Do(func() { close(watching) })
		return true, w, err
	})
	f := informers.NewSharedInformerFactory(cs, 0)
	services := f.Core().V1().Services()
	q := newQuotaWatch()
	q.follow(asksForLoadBalancer(services))
	for _, svc := range []string{"shop/kept", "shop/now-clusterip", "shop/deleted"} {
		q.saw(svc, refused)
	}
	if c := q.condition(); c.Status != "True" || !strings.Contains(c.Message, "3 Services") {
		t.Errorf("before the informer synced: %+v; want all three still waiting", c)
	}
	f.Start(t.Context().Done())
	t.Cleanup(f.Shutdown)
	f.WaitForCacheSync(t.Context().Done())
	c := q.condition()
	if c.Status != "True" || !strings.Contains(c.Message, "1 Service of type LoadBalancer waits") || !strings.Contains(c.Message, "(shop/kept)") {
		t.Errorf("once synced: %+v; want only shop/kept waiting", c)
	}
	select {
	case <-watching:
	case <-time.After(30 * time.Second):
		t.Fatal("the informer did not start watching Services within 30 s")
	}
	if err := cs.CoreV1().Services("shop").Delete(t.Context(), "kept", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	waitfor.Cond(t, "the condition False once shop/kept is deleted", 5*time.Second, func() (bool, error) {
		c := q.condition()
		return c.Status == "False", waitfor.NotYet(fmt.Errorf("%s: %s", c.Status, c.Message))
	})
}
