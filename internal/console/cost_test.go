package console_test

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/net/html"

	v1 "kiln.dev/kiln/api/v1"
	"kiln.dev/kiln/internal/store"
)

// The cost page says what the API estimates (status.cost), cluster by
// cluster, dearest first, and by project; what hibernating each running
// cluster would save; and what it cannot show. The CLI's COST/H says the
// same figures.
func TestCostPage(t *testing.T) {
	e := newEnv(t, true)
	ctx := t.Context()
	if _, err := e.api.CreateProject(ctx, &v1.Project{Name: "team"}); err != nil {
		t.Fatal(err)
	}
	e.createCluster("big", v1.ClusterSpec{Provider: "sim", ControlPlane: v1.ControlPlane{Size: 1},
		WorkerPools: []v1.WorkerPool{{Name: "w", Size: 2, InstanceType: "medium"}}})
	e.createCluster("asleep", v1.ClusterSpec{Provider: "sim", ControlPlane: v1.ControlPlane{Size: 1},
		WorkerPools: []v1.WorkerPool{{Name: "w", Size: 1}}})
	if _, _, err := e.api.CreateCluster(ctx, "team", &v1.Cluster{Name: "small", Spec: v1.ClusterSpec{Provider: "sim",
		ControlPlane: v1.ControlPlane{Size: 1}}}); err != nil {
		t.Fatal(err)
	}
	e.wait("big")
	e.wait("asleep")
	if _, op, err := e.api.HibernateCluster(ctx, "default", "asleep"); err != nil {
		t.Fatal(err)
	} else {
		wctx, cancel := context.WithTimeout(ctx, time.Minute)
		defer cancel()
		if _, err := e.api.WaitOperation(wctx, op, nil); err != nil {
			t.Fatal(err)
		}
	}

	clusters := map[string]v1.Cluster{}
	for _, p := range []string{"default", "team"} {
		cls, err := e.api.ListClusters(ctx, p)
		if err != nil {
			t.Fatal(err)
		}
		for _, cl := range cls {
			clusters[p+"/"+cl.Name] = cl
		}
	}
	if st := clusters["default/asleep"].Status; st.ProvisioningState != v1.StateHibernated || st.Cost.Basis != v1.CostHibernated {
		t.Fatalf("asleep: %s, cost %+v", st.ProvisioningState, st.Cost)
	}

	b := e.browser()
	b.login(ownerToken)
	p := b.get("/cost")
	if p.status != 200 || !strings.Contains(p.body, `href="/cost"`) {
		t.Fatalf("GET /cost: %d, or no link to it in the navigation:\n%s", p.status, p.body)
	}
	rows := tableRows(t, p, "cost-clusters")
	var order []string
	for _, r := range rows {
		order = append(order, r["data-cluster"])
		cl := clusters[r["data-cluster"]]
		c := cl.Status.Cost
		if want := dollarsOf(c.PerHour); r["Per hour"] != want {
			t.Errorf("%s: the page says %q an hour; the API %v (%s)", r["data-cluster"], r["Per hour"], c.PerHour, want)
		}
		if want := fmt.Sprintf("$%.2f", c.PerMonth); r["Per month"] != want {
			t.Errorf("%s: the page says %q a month; the API %v", r["data-cluster"], r["Per month"], c.PerMonth)
		}
		save := "—"
		if h := c.HibernatedPerHour; h != nil {
			save = dollarsOf(c.PerHour-*h) + " an hour"
		}
		if r["Hibernating would save"] != save || r["State"] != cl.Status.ProvisioningState {
			t.Errorf("%s: saving %q, state %q; want %q, %s", r["data-cluster"], r["Hibernating would save"], r["State"], save, cl.Status.ProvisioningState)
		}
	}
	if want := []string{"default/big", "team/small", "default/asleep"}; strings.Join(order, " ") != strings.Join(want, " ") {
		t.Errorf("clusters in the order %v; want the dearest first, %v", order, want)
	}

	// By project: the sums of the clusters' figures.
	for _, r := range tableRows(t, p, "cost-projects") {
		var sum, saving float64
		for key, cl := range clusters {
			if r["data-project"] == "All projects" || strings.HasPrefix(key, r["data-project"]+"/") {
				sum += cl.Status.Cost.PerHour
				if h := cl.Status.Cost.HibernatedPerHour; h != nil {
					saving += cl.Status.Cost.PerHour - *h
				}
			}
		}
		if r["Per hour"] != dollarsOf(sum) || r["Hibernating would save, an hour"] != dollarsOf(saving) {
			t.Errorf("project %s: %q an hour, saving %q; the clusters add up to %s, %s", r["data-project"], r["Per hour"],
				r["Hibernating would save, an hour"], dollarsOf(sum), dollarsOf(saving))
		}
	}
	for _, id := range []string{"cost-history", "cost-idle"} {
		if _, ok := p.byID(t, id); !ok {
			t.Errorf("the page has no section #%s", id)
		}
	}

	// The cluster's page says it too.
	big := clusters["default/big"].Status.Cost
	if msg, ok := b.get("/projects/default/clusters/big").byID(t, "cluster-cost"); !ok ||
		!strings.HasPrefix(msg, dollarsOf(big.PerHour)+" an hour, "+fmt.Sprintf("$%.2f", big.PerMonth)+" a month; hibernated, "+dollarsOf(*big.HibernatedPerHour)) {
		t.Errorf("the cluster's page says it costs %q; the API %+v", msg, big)
	}

	// The CLI's COST/H is the page's figure.
	for line := range strings.Lines(e.kiln("cluster", "list")) {
		f := strings.Fields(line)
		if len(f) < 8 || f[0] == "NAME" {
			continue
		}
		if want := dollarsOf(clusters["default/"+f[0]].Status.Cost.PerHour); f[7] != want {
			t.Errorf("kiln cluster list says %s costs %s an hour; the page %s", f[0], f[7], want)
		}
	}

	// The create form's dry run says what the cluster would cost.
	csrf := b.csrf()
	d := b.post("/clusters/new", map[string][]string{"csrf": {csrf}, "project": {"default"}, "name": {"plan"}, "provider": {"sim"},
		"controlPlane": {"1"}, "workers": {"2"}, "nodeApproval": {"auto"}, "dryRun": {"1"}})
	if msg, ok := d.byID(t, "dry-run-cost"); !ok || !strings.Contains(msg, "It would cost $0.178 an hour, $130.10 a month") {
		t.Errorf("the dry run's cost: %q", msg)
	}
}

// The cost page's last 30 days are the API's (GET /v1/cost): every
// cluster that had an estimate in force, a deleted one marked and counted
// for the hours it ran, each project's clusters; and the running clusters
// idle for an hour (their Idle condition) are flagged with what
// hibernating them would save, a busy one is not.
func TestCostPageHistoryAndIdle(t *testing.T) {
	e := newEnv(t, true)
	ctx := t.Context()
	spec := v1.ClusterSpec{Provider: "sim", ControlPlane: v1.ControlPlane{Size: 1}, WorkerPools: []v1.WorkerPool{{Name: "w", Size: 1}}}
	for _, name := range []string{"idle", "busy", "gone"} {
		e.createCluster(name, spec)
	}
	for _, name := range []string{"idle", "busy", "gone"} {
		e.wait(name)
	}
	goneUID := e.cluster("gone").UID
	op, err := e.api.DeleteCluster(ctx, "default", "gone")
	if err != nil {
		t.Fatal(err)
	}
	wctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	if _, err := e.api.WaitOperation(wctx, op, nil); err != nil {
		t.Fatal(err)
	}

	// What the elastic loop writes: idle for three hours since a change
	// four hours ago; busy.
	now := time.Now().UTC()
	for name, status := range map[string]string{"idle": "True", "busy": "False"} {
		cl, err := e.store.GetCluster(ctx, store.Key{Project: "default", Name: name})
		if err != nil {
			t.Fatal(err)
		}
		cl.Status.UpdatedAt = now.Add(-4 * time.Hour)
		cl.Status.Conditions = append(cl.Status.Conditions, v1.Condition{Type: v1.ConditionIdle, Status: status,
			LastTransitionTime: now.Add(-3 * time.Hour)})
		if err := e.store.PutClusterStatus(ctx, cl, store.Cond{IfMatch: cl.ETag}); err != nil {
			t.Fatal(err)
		}
	}

	b := e.browser()
	b.login(ownerToken)
	p := b.get("/cost")
	if p.status != 200 {
		t.Fatalf("GET /cost: %d\n%s", p.status, p.body)
	}
	history, err := e.api.CostHistory(ctx, 0) // after the page: open intervals only grew
	if err != nil {
		t.Fatal(err)
	}

	idle := e.cluster("idle").Status.Cost
	idleRows := tableRows(t, p, "cost-idle-clusters")
	if len(idleRows) != 1 || idleRows[0]["data-cluster"] != "default/idle" {
		t.Fatalf("idle clusters %v, want default/idle alone", idleRows)
	}
	if r := idleRows[0]; r["Idle for"] != "3 hours" || r["Hibernating would save"] != dollarsOf(idle.PerHour-*idle.HibernatedPerHour)+" an hour" ||
		r["Per hour"] != dollarsOf(idle.PerHour) {
		t.Errorf("the idle cluster's row %v; the API: %v an hour, %v hibernated", r, idle.PerHour, *idle.HibernatedPerHour)
	}
	for _, r := range tableRows(t, p, "cost-clusters") {
		want := "—"
		if r["data-cluster"] == "default/idle" {
			want = "idle 3 hours"
		}
		if r["Idle"] != want {
			t.Errorf("%s: Idle %q, want %q", r["data-cluster"], r["Idle"], want)
		}
	}

	byUID := map[string]v1.ClusterCostHistory{}
	for _, c := range history.Clusters {
		byUID[c.UID] = c
	}
	rows := tableRows(t, p, "cost-history-clusters")
	if len(rows) != 3 || len(history.Clusters) != 3 {
		t.Fatalf("the last 30 days: %d rows, the API %d clusters; want idle, busy and the deleted gone", len(rows), len(history.Clusters))
	}
	for _, r := range rows {
		c, ok := byUID[r["data-uid"]]
		if !ok {
			t.Errorf("row %v is no cluster of the API's", r)
			continue
		}
		total, err := strconv.ParseFloat(r["data-total"], 64)
		if err != nil {
			t.Fatal(err)
		}
		switch {
		case c.UID == goneUID:
			if r["State"] != "Deleted" || r["link"] != "" || total != c.Total || r["Last 30 days"] != fmt.Sprintf("$%.2f", c.Total) || c.Total <= 0 {
				t.Errorf("the deleted cluster's row %v (total %v); want it marked, unlinked, at the API's %v", r, total, c.Total)
			}
		case r["State"] != v1.StateSucceeded || r["link"] == "" || total > c.Total || total <= 0:
			t.Errorf("%s: row %v (total %v); want it running, linked, at most the API's later %v", c.Name, r, total, c.Total)
		}
	}
	prows := tableRows(t, p, "cost-history-projects")
	if len(prows) != 2 || prows[0]["data-project"] != "default" || prows[0]["Clusters"] != "3" || prows[0]["Deleted"] != "1" ||
		prows[1]["data-project"] != "All projects" || prows[1]["Clusters"] != "3" || prows[1]["Deleted"] != "1" {
		t.Errorf("the last 30 days by project: %v; want default's 3 clusters, 1 deleted, then every project's", prows)
	}
}

// dollarsOf is a figure as the console and the CLI print it.
func dollarsOf(x float64) string { return v1.Dollars(x) }

// tableRows are the body and foot rows of the table of id: each cell's
// text by its column's heading, and the row's data-cluster or
// data-project.
func tableRows(t *testing.T, p page, id string) []map[string]string {
	t.Helper()
	var table *html.Node
	for n := range p.doc(t).Descendants() {
		if n.Type == html.ElementNode && n.Data == "table" && attr(n, "id") == id {
			table = n
		}
	}
	if table == nil {
		t.Fatalf("no table #%s", id)
	}
	var heads []string
	var out []map[string]string
	for n := range table.Descendants() {
		if n.Type != html.ElementNode || n.Data != "tr" {
			continue
		}
		var cells []string
		for c := n.FirstChild; c != nil; c = c.NextSibling {
			if c.Type == html.ElementNode && (c.Data == "td" || c.Data == "th") {
				cells = append(cells, text(c))
			}
		}
		if n.Parent.Data == "thead" {
			heads = cells
			continue
		}
		r := map[string]string{"data-cluster": attr(n, "data-cluster"), "data-project": attr(n, "data-project"), "data-label": attr(n, "data-label"),
			"data-uid": attr(n, "data-uid"), "data-total": attr(n, "data-total"), "link": ""}
		for a := range n.Descendants() {
			if a.Type == html.ElementNode && a.Data == "a" {
				r["link"] = attr(a, "href")
				break
			}
		}
		for i, c := range cells {
			if i < len(heads) {
				r[heads[i]] = c
			}
		}
		out = append(out, r)
	}
	return out
}
