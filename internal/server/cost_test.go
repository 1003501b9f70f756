package server_test

import (
	"math"
	"net/http"
	"testing"

	"github.com/google/go-cmp/cmp"

	v1 "kiln.dev/kiln/api/v1"
	"kiln.dev/kiln/internal/cost"
	"kiln.dev/kiln/internal/store"
)

// status.cost is the price table's estimate of the cluster's spec, in the
// cluster's answers and the list's, at its disks and kept parts once
// hibernated; the dry run says what a create would cost.
func TestClusterCost(t *testing.T) {
	h := newHarness(t, nil)
	h.project("p")
	const body = `{"spec": {"provider": "sim", "region": "sim-west", "controlPlane": {"size": 1},
		"workerPools": [{"name": "w", "size": 2, "instanceType": "medium"}]}}`

	// The sim's nominal prices: small $0.05 and medium $0.20 an hour, a
	// 20 GB disk at $0.10 per GB-month, a load balancer at $0.02 an hour.
	const running = 0.05 + 2*0.2 + 3*20*0.1/730 + 0.02
	r := h.must(http.StatusOK, "POST", "/v1/projects/p/clusters/c/validate", body)
	var dry v1.ClusterValidation
	r.decode(t, &dry)
	if dry.Cost == nil || dry.Cost.PerHour != math.Round(running*1e4)/1e4 || dry.Cost.Region != "sim-west" || dry.Cost.Basis != v1.CostRunning {
		t.Fatalf("the dry run's cost: %+v; want %v an hour in sim-west", dry.Cost, running)
	}

	created, opID := h.createCluster("p", "c", body)
	if diff := cmp.Diff(dry.Cost, created.Status.Cost); diff != "" {
		t.Errorf("the create's answer costs other than its dry run (-dry +create):\n%s", diff)
	}
	got := h.cluster("p", "c")
	want := cost.Default().Estimate(&got.Spec, got.Status.ProvisioningState)
	// The sim can hibernate a cluster: what it would cost then is said.
	hibernated := math.Round((20*0.1/730+0.02)*1e4) / 1e4
	want.HibernatedPerHour = &hibernated
	if diff := cmp.Diff(want, got.Status.Cost); diff != "" {
		t.Errorf("GET's status.cost is not the estimate (-want +got):\n%s", diff)
	}
	var list v1.List[v1.Cluster]
	h.must(http.StatusOK, "GET", "/v1/projects/p/clusters", "").decode(t, &list)
	if len(list.Value) != 1 || !cmp.Equal(list.Value[0].Status.Cost, got.Status.Cost) {
		t.Errorf("the list's status.cost is not GET's: %+v", list.Value)
	}

	h.finish(h.claim(), opID, v1.OpSucceeded, func(cl *store.Cluster) { cl.Status.ProvisioningState = v1.StateHibernated })
	hib := h.cluster("p", "c").Status.Cost
	if hib == nil || hib.Basis != v1.CostHibernated || hib.PerHour != hibernated || hib.HibernatedPerHour != nil {
		t.Errorf("a hibernated cluster's cost: %+v; want its one disk and its load balancer", hib)
	}

	// Machines on kilnd's host cost nothing; the estimate says so, not
	// nothing at all.
	local, _ := h.createCluster("p", "l", `{"spec": {"provider": "local", "controlPlane": {"size": 1}, "workerPools": [{"name": "default", "size": 1}]}}`)
	if c := local.Status.Cost; c == nil || c.PerHour != 0 || !c.Complete || len(c.Items) != 2 {
		t.Errorf("a local cluster's cost: %+v; want 0 with its machines listed", c)
	}
}
