package lbpoolcheck_test

import (
	"context"
	"strings"
	"testing"

	v1 "kiln.dev/kiln/api/v1"
	"kiln.dev/kiln/internal/backend/check/checktest"
	"kiln.dev/kiln/internal/backend/lbpoolcheck"
	"kiln.dev/kiln/internal/kubeapi"
	"kiln.dev/kiln/internal/store"
)

// TestLoadBalancerPoolExhausted: a cluster whose two-address pool is held
// while a Service waits says the pool is exhausted, naming it and the
// Service, with a Warning event; an address free again turns it False
// with a Normal event. An address held outside the pool does not count;
// a cluster without a pool is left alone and its API not asked.
func TestLoadBalancerPoolExhausted(t *testing.T) {
	st := checktest.Store(t)
	checktest.Idle(t, st, "pooled", v1.ClusterSpec{Provider: "edge", Distribution: v1.DistroKubeadm,
		Network: v1.Network{LoadBalancerPool: "192.168.1.240-192.168.1.241"}})
	checktest.Idle(t, st, "plain", v1.ClusterSpec{Provider: "edge", Distribution: v1.DistroKubeadm})

	svcs := []kubeapi.LoadBalancerService{{Name: "a/web", Address: "192.168.1.240"}, {Name: "b/api", Address: "10.0.0.7"}, {Name: "b/more"}}
	asked := map[string]int{}
	l := lbpoolcheck.New(lbpoolcheck.Options{Store: st, Services: func(_ context.Context, cl *store.Cluster) ([]kubeapi.LoadBalancerService, error) {
		asked[cl.Name]++
		return svcs, nil
	}})
	pass := func() v1.Condition {
		t.Helper()
		for _, name := range []string{"pooled", "plain"} {
			if err := l.Periodic().Check.Check(t.Context(), checktest.Get(t, st, name)); err != nil {
				t.Fatal(err)
			}
		}
		return checktest.Condition(t, st, "pooled", v1.ConditionLoadBalancerPoolExhausted)
	}

	if c := pass(); c.Status != "False" || c.Reason != "AddressesFree" {
		t.Errorf("one of two addresses held (the other Service's is not the pool's): %+v", c)
	}
	svcs = append(svcs, kubeapi.LoadBalancerService{Name: "c/shop", Address: "192.168.1.241"})
	c := pass()
	if c.Status != "True" || c.Reason != "PoolExhausted" || !strings.Contains(c.Message, "192.168.1.240-192.168.1.241 (2)") || !strings.Contains(c.Message, "(b/more)") {
		t.Errorf("both addresses held, b/more waiting: %+v", c)
	}
	svcs = svcs[:3]
	if c := pass(); c.Status != "False" {
		t.Errorf("an address free again: %+v", c)
	}
	if got := checktest.Events(t, st, "pooled"); strings.Join(got, ", ") != "Warning LoadBalancerPoolExhaustedTrue, Normal LoadBalancerPoolExhaustedFalse" {
		t.Errorf("events %v", got)
	}
	if asked["plain"] != 0 || checktest.Condition(t, st, "plain", v1.ConditionLoadBalancerPoolExhausted).Type != "" {
		t.Errorf("the cluster without a pool was looked at (%d) or given the condition", asked["plain"])
	}
}
