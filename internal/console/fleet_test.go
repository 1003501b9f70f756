package console_test

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	v1 "kiln.dev/kiln/api/v1"
	"kiln.dev/kiln/internal/provider/sim"
)

// The fleet page's tables say what GET /v1/fleet adds up, which is what
// the API's lists hold: clusters by state and provider (each count a link
// to the clusters it counts, which the list's filters show), operations
// by kind and result, the failure codes with their operations; a viewer
// sees only their projects'; the page updates live when a create ends.
func TestFleetPage(t *testing.T) {
	e := newEnv(t, true)
	ctx := t.Context()
	for _, name := range []string{"a", "b", "c"} {
		e.createCluster(name, v1.ClusterSpec{Provider: "sim", ControlPlane: v1.ControlPlane{Size: 1}})
	}
	e.createCluster("broken", v1.ClusterSpec{Provider: "sim", ControlPlane: v1.ControlPlane{Size: 1},
		Labels: map[string]string{sim.LabelFailTerminal: "ensure-network"}})
	if _, err := e.api.CreateProject(ctx, &v1.Project{Name: "team"}); err != nil {
		t.Fatal(err)
	}
	if _, _, err := e.api.CreateCluster(ctx, "team", &v1.Cluster{Name: "other", Spec: v1.ClusterSpec{Provider: "sim",
		ControlPlane: v1.ControlPlane{Size: 1}}}); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"a", "b", "c", "broken"} {
		e.wait(name)
	}
	wctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	if cl, err := e.api.GetCluster(ctx, "team", "other"); err != nil {
		t.Fatal(err)
	} else if _, err := e.api.WaitOperation(wctx, cl.Status.CurrentOperation, nil); err != nil {
		t.Fatal(err)
	}

	// What the API's lists hold, by state.
	states := map[string]int{}
	total := 0
	for _, p := range []string{"default", "team"} {
		cls, err := e.api.ListClusters(ctx, p)
		if err != nil {
			t.Fatal(err)
		}
		for _, cl := range cls {
			states[cl.Status.ProvisioningState]++
			total++
		}
	}
	if states[v1.StateSucceeded] != 4 || states[v1.StateFailed] != 1 {
		t.Fatalf("clusters by state %v, want 4 Succeeded and 1 Failed", states)
	}

	b := e.browser()
	b.login(ownerToken)
	p := b.get("/fleet")
	if p.status != http.StatusOK || !strings.Contains(p.body, `href="/fleet"`) {
		t.Fatalf("GET /fleet: %d, or no link to it in the navigation:\n%s", p.status, p.body)
	}
	got := map[string]string{}
	for _, r := range tableRows(t, p, "clusters-state-table") {
		got[r["data-label"]] = r["Clusters"]
	}
	for st, n := range states {
		if got[st] != fmt.Sprint(n) {
			t.Errorf("the state table says %s: %q; the API's lists hold %d", st, got[st], n)
		}
	}
	prov := tableRows(t, p, "clusters-provider-table")
	if len(prov) != 1 || prov[0]["data-label"] != "sim" || prov[0]["Total"] != fmt.Sprint(total) ||
		prov[0][v1.StateSucceeded] != "4" || prov[0][v1.StateFailed] != "1" {
		t.Errorf("the provider table %v, want sim: %d (4 Succeeded, 1 Failed)", prov, total)
	}
	// Each chart has its text table, named by the same caption.
	for _, id := range []string{"clusters-state", "clusters-provider", "clusters-version", "clusters-profile", "ops-day", "ops-week", "durations", "failures"} {
		if !strings.Contains(p.body, `aria-labelledby="`+id+`-caption" aria-describedby="`+id+`-table"`) {
			t.Errorf("chart %s has no role=img SVG labelled by its caption and described by its table", id)
		}
		tableRows(t, p, id+"-table")
	}

	// A count's link leads to the clusters it counts.
	list := b.get("/clusters?provider=sim&state=Failed")
	if rows := strings.Count(list.body, "<tr data-cluster="); rows != 1 || !strings.Contains(list.body, `data-cluster="broken"`) {
		t.Errorf("the Failed sim clusters' list has %d rows:\n%s", rows, list.body)
	}
	if !strings.Contains(p.body, `href="/clusters?provider=sim&amp;state=Failed"`) {
		t.Error("the provider table's Failed count does not link to the Failed sim clusters")
	}

	// Operations of the last 7 days: 5 creates, 4 Succeeded and 1 Failed.
	ops := tableRows(t, p, "ops-week-table")
	if len(ops) != 1 || ops[0]["data-label"] != v1.KindCreate || ops[0][v1.OpSucceeded] != "4" || ops[0][v1.OpFailed] != "1" || ops[0]["Total"] != "5" {
		t.Errorf("the week's operations %v, want 5 creates, 4 Succeeded, 1 Failed", ops)
	}
	if d := tableRows(t, p, "durations-table"); len(d) != 1 || d[0]["Operations"] != "4" || d[0]["Median"] == "—" {
		t.Errorf("durations %v, want the 4 creates that succeeded", d)
	}
	broken := e.cluster("broken")
	fails := tableRows(t, p, "failures-table")
	if len(fails) != 1 || fails[0]["data-label"] != v1.CodeProviderError || fails[0]["Operations"] != "1" {
		t.Errorf("failures %v, want ProviderError: 1", fails)
	}
	if want := `href="/projects/default/clusters/broken#op-` + broken.Status.CurrentOperation + `"`; !strings.Contains(p.body, want) {
		t.Errorf("the failure does not link to its operation (%s)", want)
	}

	// A viewer of default sees default's clusters alone.
	vb := e.browser()
	vb.login(e.user("vera", v1.RoleViewer))
	vp := vb.get("/fleet")
	if n, _ := vp.byID(t, "fleet-clusters-total"); !strings.HasPrefix(n, "4 clusters") {
		t.Errorf("a viewer of default: %q, want its 4 clusters", n)
	}

	// Live: a create that ends shows without a reload.
	live := attr(findElement(p.doc(t), "body"), "data-live")
	if live != "/fleet/live" {
		t.Fatalf("the page's stream is %q", live)
	}
	events := b.stream(live)
	if ev := <-events; !strings.Contains(ev.fragments["fleet"], "5 clusters") {
		t.Fatalf("first event: %+v", ev)
	}
	e.createCluster("d", v1.ClusterSpec{Provider: "sim", ControlPlane: v1.ControlPlane{Size: 1}})
	for ev := range events {
		if strings.Contains(ev.fragments["fleet"], `<tr data-label="Succeeded"><th scope="row"><a href="/clusters?state=Succeeded">Succeeded</a></th><td><a href="/clusters?state=Succeeded">5</a>`) {
			return
		}
	}
	t.Error("the stream ended before the new cluster showed as Succeeded")
}
