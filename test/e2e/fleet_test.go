package e2e

import (
	"context"
	"fmt"
	"testing"
	"time"

	v1 "kiln.dev/kiln/api/v1"
	"kiln.dev/kiln/test/waitfor"
)

// fleetTable reads a fleet chart's table as the browser shows it: each
// row's label, then column name to the cell's text.
const fleetTable = `((id) => {
	const t = document.getElementById(id + '-table');
	if (!t) return null;
	const heads = [...t.querySelectorAll('thead th')].map(th => th.textContent.trim());
	const out = {};
	for (const tr of t.querySelectorAll('tbody tr')) {
		const cells = [...tr.children].map(c => c.textContent.trim());
		const row = {};
		heads.forEach((h, i) => { row[h] = cells[i]; });
		out[tr.dataset.label] = row;
	}
	return out;
})`

// chartsReadable lists the charts whose SVG a screen reader cannot name
// or whose text table is missing: each is role=img, labelled by its
// caption and described by a table with a caption and header cells.
const chartsReadable = `(() => {
	const bad = [];
	for (const fig of document.querySelectorAll('figure.chart')) {
		const svg = fig.querySelector('svg');
		if (!svg) continue; // a chart with nothing to draw says so in words
		const label = document.getElementById(svg.getAttribute('aria-labelledby') || '-');
		const table = document.getElementById(svg.getAttribute('aria-describedby') || '-');
		if (svg.getAttribute('role') !== 'img' || !label || !label.textContent.trim()) bad.push(fig.id + ': svg not named');
		if (!table || table.tagName !== 'TABLE' || !table.querySelector('caption') || !table.querySelector('th[scope=col]')) bad.push(fig.id + ': no table');
	}
	return bad;
})()`

// The fleet page in Chromium (issue 52): sim clusters that succeed, one
// that fails for good (the sim provider's injected failure) and one held
// at a step; the page's tables show what the API counts (GET /v1/fleet and
// the cluster lists), each chart is readable by a screen reader, and the
// page updates without a reload when a create finishes.
func TestConsoleFleetPage(t *testing.T) {
	t.Parallel()
	e := startWithoutKube(t, "kilnd")
	ctx := t.Context()
	create := func(name string, labels map[string]string) string {
		t.Helper()
		_, op, err := e.c.CreateCluster(ctx, "default", &v1.Cluster{Name: name, Spec: v1.ClusterSpec{Provider: "sim",
			WorkerPools: []v1.WorkerPool{{Name: "default", Size: 1}}, Labels: labels}})
		if err != nil {
			t.Fatal(err)
		}
		return op
	}
	const hang = "ensure-worker-machines"
	for _, name := range []string{"ok-1", "ok-2", "ok-3"} {
		e.wait(name, create(name, nil))
	}
	perm := create("perm", map[string]string{"sim.kiln.dev/fail-terminal": hang})
	wctx, cancel := context.WithTimeout(ctx, 3*time.Minute)
	defer cancel()
	if o, err := e.c.WaitOperation(wctx, perm, nil); err != nil || o.Status != v1.OpFailed {
		t.Fatalf("perm's create: %+v, %v; want it Failed", o, err)
	}
	running := create("running", map[string]string{"sim.kiln.dev/hang-step": hang})
	t.Cleanup(func() { e.c.CancelOperation(context.Background(), running) })
	waitfor.Cond(t, "running's create to reach "+hang, time.Minute, func() (bool, error) {
		cl, err := e.c.GetCluster(ctx, "default", "running")
		return err == nil && cl.Status.ProvisioningState == v1.StateCreating, err
	})

	// counts is what the API says: the cluster list by state, and the
	// fleet's sums.
	counts := func() (map[string]int, *v1.Fleet) {
		t.Helper()
		cls, err := e.c.ListClusters(ctx, "default")
		if err != nil {
			t.Fatal(err)
		}
		byState := map[string]int{}
		for _, cl := range cls {
			byState[cl.Status.ProvisioningState]++
		}
		f, err := e.c.Fleet(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return byState, f
	}
	byState, fleet := counts()
	if byState[v1.StateSucceeded] != 3 || byState[v1.StateFailed] != 1 || byState[v1.StateCreating] != 1 {
		t.Fatalf("the clusters by state: %v; want 3 Succeeded, 1 Failed, 1 Creating", byState)
	}

	b := e.browser(t)
	b.navigate("/fleet", "#clusters-state-table")
	b.checkAccessible("the fleet page")
	if bad := eval[[]string](b, chartsReadable); len(bad) > 0 {
		t.Errorf("charts a screen reader cannot read: %v", bad)
	}
	table := func(id string) map[string]map[string]string {
		return eval[map[string]map[string]string](b, fleetTable+`(`+fmt.Sprintf("%q", id)+`)`)
	}
	states := table("clusters-state")
	for st, n := range byState {
		if states[st]["Clusters"] != fmt.Sprint(n) {
			t.Errorf("the page's state table says %s: %q; the API's list holds %d", st, states[st]["Clusters"], n)
		}
	}
	fromFleet := map[string]int{}
	for _, c := range fleet.Clusters {
		fromFleet[c.Provider+"/"+c.State] += c.Count
	}
	for st, row := range table("clusters-provider")["sim"] {
		if n, ok := fromFleet["sim/"+st]; ok && row != fmt.Sprint(n) {
			t.Errorf("the provider table says sim %s: %q; GET /v1/fleet %d", st, row, n)
		}
	}
	ops := map[string]int{}
	for _, o := range fleet.Operations {
		if o.Window == v1.WindowWeek && o.Kind == v1.KindCreate {
			ops[o.Status] = o.Count
		}
	}
	week := table("ops-week")[v1.KindCreate]
	for st, n := range ops {
		if week[st] != fmt.Sprint(n) {
			t.Errorf("the week's creates %s: %q on the page; GET /v1/fleet %d", st, week[st], n)
		}
	}
	if ops[v1.OpSucceeded] != 3 || ops[v1.OpFailed] != 1 || ops[v1.OpInProgress] != 1 {
		t.Errorf("GET /v1/fleet's creates of the week: %v; want 3 Succeeded, 1 Failed, 1 InProgress", ops)
	}
	if f := table("failures"); f[v1.CodeProviderError]["Operations"] != "1" {
		t.Errorf("the failures table: %v; want ProviderError: 1", f)
	}
	if href := eval[string](b, `document.querySelector('table.failure-ops[data-code=ProviderError] a').getAttribute('href')`); href !=
		"/projects/default/clusters/perm#op-"+e.cluster("perm").Status.CurrentOperation {
		t.Errorf("the failure links to %q, not to perm's operation", href)
	}
	b.screenshot("fleet")

	// Live: a create that finishes shows without a reload.
	eval[bool](b, "window.kilnTestMark = true")
	e.wait("late", create("late", nil))
	byState, _ = counts()
	b.waitJS("the new cluster counted Succeeded", fleetTable+`('clusters-state')?.Succeeded?.Clusters === '`+fmt.Sprint(byState[v1.StateSucceeded])+`'`, time.Minute)
	if !eval[bool](b, "window.kilnTestMark === true") {
		t.Error("the page was reloaded; it is to update live")
	}
	if got := table("ops-week")[v1.KindCreate][v1.OpSucceeded]; got != "4" {
		t.Errorf("after the create the week's Succeeded creates are %q, want 4", got)
	}

	// A count links to the clusters it counts.
	b.navigate("/clusters?provider=sim&state=Failed", "#cluster-filters")
	if n := eval[int](b, `document.querySelectorAll('tr[data-cluster]').length`); n != 1 {
		t.Errorf("the Failed sim clusters' list has %d rows, want perm's", n)
	}
}
