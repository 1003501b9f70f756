package e2e

import (
	"context"
	"testing"
	"time"

	v1 "kiln.dev/kiln/api/v1"
)

// costHistoryRows reads the cost page's last 30 days by cluster as the
// browser shows it: by each row's cluster uid, its state's text, its
// total's text, and whether its name is a link.
const costHistoryRows = `(() => {
	const out = {};
	for (const tr of document.querySelectorAll('#cost-history-clusters tbody tr')) {
		out[tr.dataset.uid] = {state: tr.children[3].textContent.trim(), total: tr.children[6].textContent.trim(),
			linked: !!tr.children[0].querySelector('a')};
	}
	return out;
})()`

// The cost page in Chromium (issue 52): a sim cluster hibernated and one
// deleted appear in the last 30 days as the API's GET /v1/cost has them,
// the deleted one marked Deleted and not linked, the hibernated one with
// its state; the page passes the accessibility checks the other pages do.
// (Written where Chromium was not at hand; CI runs it.)
func TestConsoleCostPage(t *testing.T) {
	t.Parallel()
	e := startWithoutKube(t, "kilnd")
	ctx := t.Context()
	spec := v1.ClusterSpec{Provider: "sim", WorkerPools: []v1.WorkerPool{{Name: "default", Size: 1}}}
	for _, name := range []string{"kept", "gone"} {
		_, op, err := e.c.CreateCluster(ctx, "default", &v1.Cluster{Name: name, Spec: spec})
		if err != nil {
			t.Fatal(err)
		}
		e.wait(name, op)
	}
	gone, err := e.c.GetCluster(ctx, "default", "gone")
	if err != nil {
		t.Fatal(err)
	}
	kept, err := e.c.GetCluster(ctx, "default", "kept")
	if err != nil {
		t.Fatal(err)
	}
	if _, op, err := e.c.HibernateCluster(ctx, "default", "kept"); err != nil {
		t.Fatal(err)
	} else {
		e.wait("kept", op)
	}
	op, err := e.c.DeleteCluster(ctx, "default", "gone")
	if err != nil {
		t.Fatal(err)
	}
	e.wait("gone", op)

	b := e.browser(t)
	b.navigate("/cost", "#cost-history-clusters")
	b.checkAccessible("the cost page")
	rows := eval[map[string]struct {
		State  string `json:"state"`
		Total  string `json:"total"`
		Linked bool   `json:"linked"`
	}](b, costHistoryRows)
	wctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	history, err := e.c.CostHistory(wctx, 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(rows) != len(history.Clusters) || len(rows) != 2 {
		t.Fatalf("the page's last 30 days: %v; the API's clusters: %+v", rows, history.Clusters)
	}
	if r := rows[gone.UID]; r.State != "Deleted" || r.Linked {
		t.Errorf("the deleted cluster's row: %+v; want it marked Deleted, not linked", r)
	}
	if r := rows[kept.UID]; r.State != v1.StateHibernated || !r.Linked {
		t.Errorf("the hibernated cluster's row: %+v; want Hibernated, linked", r)
	}
	for _, c := range history.Clusters {
		if c.UID == kept.UID && (len(c.Intervals) != 2 || c.Intervals[1].Basis != v1.CostHibernated || !c.Intervals[1].Open) {
			t.Errorf("the hibernated cluster's intervals: %+v; want running, then hibernated in force", c.Intervals)
		}
	}
}
