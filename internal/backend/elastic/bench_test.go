package elastic

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	v1 "kiln.dev/kiln/api/v1"
	"kiln.dev/kiln/internal/backend/check"
	"kiln.dev/kiln/internal/kubeapi"
	"kiln.dev/kiln/internal/store"
	"kiln.dev/kiln/internal/store/sqlite"
)

// BenchmarkCheckAll1000 is the autoscaler's cost with 1,000 autoscaled
// clusters (issue 24): one pass of the elastic loop over a SQLite store of
// 1,000 Succeeded sim clusters, each with a pool autoscaling 1-10 at 4
// nodes, 40 pods and a budget, and idleStop set, judged as kilnd's backend
// does every --autoscale-interval (10 s). It reports the pass's time as the
// share of one core it takes at that interval. The clusters' Kubernetes
// reads are served from memory: their round trips wait on the clusters,
// not on kilnd's CPU (decoding their answers is not counted).
func BenchmarkCheckAll1000(b *testing.B) {
	ctx := b.Context()
	st, err := sqlite.Open(ctx, filepath.Join(b.TempDir(), "kiln.db"))
	if err != nil {
		b.Fatal(err)
	}
	defer st.Close()
	if err := st.PutProject(ctx, &v1.Project{Name: "p"}, store.Cond{}); err != nil {
		b.Fatal(err)
	}
	const clusters = 1000
	for i := range clusters {
		cl := &store.Cluster{Project: "p", Name: fmt.Sprintf("c%04d", i), Spec: v1.ClusterSpec{Provider: "sim",
			WorkerPools: []v1.WorkerPool{{Name: "default", Size: 4, Autoscale: &v1.Autoscale{Min: 1, Max: 10}}},
			IdleStop:    &v1.IdleStop{After: "30m"}},
			Status: v1.ClusterStatus{ProvisioningState: v1.StateSucceeded, Endpoint: "10.0.0.1:6443"}}
		op := &store.Operation{ID: fmt.Sprintf("op-%04d", i), Project: "p", Cluster: cl.Name, Kind: v1.KindCreate, Status: v1.OpSucceeded}
		if err := st.BeginOperation(ctx, cl, op, store.Cond{}); err != nil {
			b.Fatal(err)
		}
	}
	state := benchState()
	began := 0
	c := NewController(Options{
		Store:   st,
		Watched: func(string) bool { return true },
		Observe: func(context.Context, *store.Cluster) (State, error) { return state, nil },
		Submit:  func(context.Context, *store.Cluster, v1.Job) error { return nil },
		Base:    check.Base{Steps: func(string) []v1.Step { began++; return nil }},
	})
	for b.Loop() {
		if err := c.CheckAll(ctx); err != nil {
			b.Fatal(err)
		}
	}
	if began > 0 {
		b.Fatalf("%d operations begun; the benchmark's clusters need none", began)
	}
	perPass := b.Elapsed() / time.Duration(b.N)
	b.ReportMetric(float64(perPass.Milliseconds()), "ms/pass")
	b.ReportMetric(100*perPass.Seconds()/DefaultInterval.Seconds(), "core-%")
}

// benchState is a cluster of 4 busy nodes of pool default with 10 pods
// each and a budget: nothing to grow or shrink, so every pass judges it
// all.
func benchState() State {
	var s State
	for n := range 4 {
		node := fmt.Sprintf("n%d", n)
		s.Nodes = append(s.Nodes, kubeapi.Node{Name: node, Labels: map[string]string{v1.LabelPool: "default"},
			Allocatable: kubeapi.Resources{MilliCPU: 4000, Memory: 16 << 30, Pods: 110},
			Conditions:  []kubeapi.Condition{{Type: "Ready", Status: "True"}}})
		for p := range 10 {
			s.Pods = append(s.Pods, kubeapi.Pod{PodRef: kubeapi.PodRef{Namespace: "shop", Name: fmt.Sprintf("web-%d-%d", n, p)},
				NodeName: node, Phase: "Running", OwnerKind: "ReplicaSet", Labels: map[string]string{"app": "web"},
				Requests: kubeapi.Resources{MilliCPU: 300, Memory: 1 << 30, Pods: 1}})
		}
	}
	s.Budgets = []kubeapi.PodDisruptionBudget{{Namespace: "shop", Name: "web", DisruptionsAllowed: 1,
		Selector: &kubeapi.LabelSelector{MatchLabels: map[string]string{"app": "web"}}}}
	return s
}
