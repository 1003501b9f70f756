package server_test

import (
	"math"
	"net/http"
	"testing"
	"time"

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

// GET /v1/cost answers the store's cost history over the last 30 days (or
// ?days=): each cluster's intervals at the estimate status.cost said, its
// total what they add up to, a deleted cluster kept and marked, a viewer
// seeing only the projects they are in; days out of 1 to 31 is refused.
func TestCostHistory(t *testing.T) {
	h := newHarness(t, nil)
	h.project("p")
	h.project("q")
	const body = `{"spec": {"provider": "sim", "controlPlane": {"size": 1}, "workerPools": [{"name": "w", "size": 1}]}}`
	_, opC := h.createCluster("p", "c", body)
	h.finish(h.claim(), opC, v1.OpSucceeded, nil)
	_, opD := h.createCluster("q", "d", body)
	h.finish(h.claim(), opD, v1.OpSucceeded, nil)
	running := h.cluster("p", "c").Status.Cost
	uid := h.cluster("p", "c").UID

	// p/c is deleted.
	r := h.must(http.StatusAccepted, "DELETE", "/v1/projects/p/clusters/c", "")
	var deleting v1.Cluster
	r.decode(t, &deleting)
	cl := h.claim()
	op, err := h.store.GetOperation(t.Context(), deleting.Status.CurrentOperation)
	if err != nil {
		t.Fatal(err)
	}
	op.Status = v1.OpSucceeded
	for i := range op.Steps {
		op.Steps[i].State = v1.StepSucceeded
	}
	if err := h.store.FinishOperation(t.Context(), nil, op, cl.Lease.Fence(), true); err != nil {
		t.Fatal(err)
	}

	var all v1.CostHistory
	h.must(http.StatusOK, "GET", "/v1/cost", "").decode(t, &all)
	if all.Days != 30 || all.To.Sub(all.From) != 30*24*time.Hour || all.Currency != "USD" {
		t.Errorf("the window: %d days from %s to %s in %q; want the last 30 in USD", all.Days, all.From, all.To, all.Currency)
	}
	byName := map[string]v1.ClusterCostHistory{}
	var sum float64
	for _, c := range all.Clusters {
		byName[c.Project+"/"+c.Name] = c
		var total float64
		for _, iv := range c.Intervals {
			total += iv.Cost
			if iv.PerHour != running.PerHour || iv.Basis != v1.CostRunning || iv.Cost != iv.PerHour*iv.Hours {
				t.Errorf("%s/%s: interval %+v; want status.cost's %v an hour, running", c.Project, c.Name, iv, running.PerHour)
			}
		}
		if c.Total != total || len(c.Intervals) != 1 {
			t.Errorf("%s/%s: total %v of %d intervals; they add up to %v", c.Project, c.Name, c.Total, len(c.Intervals), total)
		}
		sum += c.Total
	}
	if c := byName["p/c"]; !c.Deleted || c.UID != uid || c.Intervals[0].Open {
		t.Errorf("the deleted p/c: %+v; want it marked deleted, its interval ended", c)
	}
	if d := byName["q/d"]; d.Deleted || !d.Intervals[0].Open || !d.Intervals[0].To.Equal(all.To) {
		t.Errorf("the live q/d: %+v; want its interval in force to the window's end", d)
	}
	if len(all.Clusters) != 2 || len(all.Projects) != 2 || math.Abs(all.Total-sum) > 1e-12 {
		t.Errorf("the owner's answer: %d clusters, %d projects, total %v (the clusters' %v)", len(all.Clusters), len(all.Projects), all.Total, sum)
	}

	viewer := "Authorization: Bearer " + h.tokenFor("val", "q", v1.RoleViewer)
	var mine v1.CostHistory
	h.must(http.StatusOK, "GET", "/v1/cost?days=7", "", viewer).decode(t, &mine)
	if mine.Days != 7 || len(mine.Clusters) != 1 || mine.Clusters[0].Name != "d" || len(mine.Projects) != 1 || mine.Projects[0].Project != "q" {
		t.Errorf("a viewer of q, 7 days: %d days, %+v", mine.Days, mine.Clusters)
	}
	for _, days := range []string{"0", "32", "x"} {
		if e := h.must(http.StatusBadRequest, "GET", "/v1/cost?days="+days, "").errorBody(t); e.Target != "days" {
			t.Errorf("days=%s: %+v", days, e)
		}
	}
}
