package console

import (
	"math"
	"strings"
	"testing"
	"time"

	v1 "kiln.dev/kiln/api/v1"
)

// The fleet's charts are laid out from the API's sums: bars proportional
// to their counts, stacked by state in a fixed order, the week before as
// markers at its counts, durations overlaid, failures most frequent first,
// and each table cell linked to the clusters it counts.
func TestFleetCharts(t *testing.T) {
	now := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	f := &v1.Fleet{
		Time: now,
		Autoscaled: []v1.FleetPool{{Project: "p", Cluster: "c", Pool: "web", Changes: []v1.FleetPoolChange{
			{Time: now.Add(-7 * 24 * time.Hour / 2), From: 2, To: 4, Status: v1.OpSucceeded, Reason: "2 pods pending"},
			{Time: now.Add(-time.Hour), From: 4, To: 3, Status: v1.OpFailed},
		}}},
		Clusters: []v1.FleetClusterCount{
			{State: v1.StateFailed, Provider: "aws", KubernetesVersion: "v1.36.3", Count: 2},
			{State: v1.StateSucceeded, Provider: "aws", KubernetesVersion: "v1.36.3", Profile: "base", Count: 6},
			{State: v1.StateSucceeded, Provider: "sim", KubernetesVersion: "v1.35.4", Count: 4},
		},
		Operations: []v1.FleetOperationCount{
			{Window: v1.WindowWeek, Kind: v1.KindCreate, Status: v1.OpSucceeded, Count: 8},
			{Window: v1.WindowWeek, Kind: v1.KindCreate, Status: v1.OpFailed, Count: 2},
			{Window: v1.WindowPriorWeek, Kind: v1.KindCreate, Status: v1.OpSucceeded, Count: 5},
			{Window: v1.WindowPriorWeek, Kind: v1.KindDelete, Status: v1.OpSucceeded, Count: 3},
		},
		Durations: []v1.FleetDuration{
			{Window: v1.WindowWeek, Kind: v1.KindCreate, Count: 8, P50: 30, P95: 120},
			{Window: v1.WindowPriorWeek, Kind: v1.KindCreate, Count: 5, P50: 60, P95: 90},
		},
		Failures: []v1.FleetFailure{
			{Code: v1.CodeQuotaExceeded, Count: 2, Operations: []v1.FleetFailedOperation{{ID: "op-1", Project: "p", Cluster: "c", Diagnostics: "d-1"}}},
			{Code: v1.CodeProviderError, Count: 1},
		},
	}
	v := newFleetView(f)
	if v.Clusters != 12 || v.Operations != 10 {
		t.Errorf("%d clusters, %d operations of the week; want 12 and 10", v.Clusters, v.Operations)
	}
	near := func(what string, got, want float64) {
		t.Helper()
		if math.Abs(got-want) > 0.01 {
			t.Errorf("%s: %.2f, want %.2f", what, got, want)
		}
	}
	plot := barEnd - barPlotX

	states := v.ClusterCharts[0]
	if len(states.Rows) != 2 || states.Rows[0].Label != v1.StateSucceeded || states.Rows[1].Label != v1.StateFailed {
		t.Fatalf("by state: %+v; want Succeeded, then Failed", states.Rows)
	}
	near("Succeeded's bar", states.Rows[0].Segs[0].W, plot)
	near("Failed's bar", states.Rows[1].Segs[0].W, plot*2/10)
	if h := states.Rows[1].Href; h != "/clusters?state=Failed" {
		t.Errorf("Failed links to %q", h)
	}

	prov := v.ClusterCharts[1]
	aws := prov.Rows[0]
	if aws.Label != "aws" || aws.Total != 8 || len(aws.Segs) != 2 || aws.Segs[0].Class != "ok" || aws.Segs[1].Class != "bad" {
		t.Fatalf("by provider, aws first: %+v", aws)
	}
	near("aws's Succeeded segment", aws.Segs[0].W, plot*6/8)
	near("aws's Failed segment starts where Succeeded's ends", aws.Segs[1].X, aws.Segs[0].X+aws.Segs[0].W)
	if c := aws.Cells[1]; c.Text != "2" || c.Href != "/clusters?provider=aws&state=Failed" {
		t.Errorf("aws's Failed cell: %+v", c)
	}
	if c := prov.Rows[1].Cells[1]; c.Text != "0" || c.Href != "" {
		t.Errorf("sim's Failed cell: %+v; want 0 without a link", c)
	}
	prof := v.ClusterCharts[3]
	if prof.Rows[0].Label != noProfile || prof.Rows[0].Href != "/clusters?profile=-" {
		t.Errorf("the clusters without a profile: %+v", prof.Rows[0])
	}

	week := v.OpCharts[1]
	if len(week.Rows) != 2 || week.Rows[0].Label != v1.KindCreate || week.Rows[1].Label != v1.KindDelete {
		t.Fatalf("the week's kinds: %+v; want create, then delete (the week before's only)", week.Rows)
	}
	near("create's bar", week.Rows[0].End, barEnd)
	near("create's week-before marker", week.Rows[0].Markers[0].X, barPlotX+plot*5/10)
	if got := week.Rows[1].Cells[len(week.Rows[1].Cells)-1].Text; got != "3" || len(week.Rows[1].Segs) != 0 {
		t.Errorf("delete: the week before %q, %d segments; want 3 and none", got, len(week.Rows[1].Segs))
	}

	d := v.Durations.Rows[0]
	near("p95's bar", d.Segs[0].W, plot)
	near("p50's bar", d.Segs[1].W, plot/4)
	near("p50 drawn from the axis", d.Segs[1].X, barPlotX)
	near("the week before's p50", d.Markers[0].X, barPlotX+plot/2)
	if d.Cells[1].Text != "30s" || d.Cells[2].Text != "2m" || d.Cells[3].Text != "1m" || d.Cells[4].Text != "1m 30s" {
		t.Errorf("durations' cells: %+v", d.Cells)
	}

	pools := v.Pools
	if len(pools.Rows) != 1 || len(pools.Ticks) != 8 || pools.Ticks[7].Title != "now" {
		t.Fatalf("the pool chart: %+v", pools)
	}
	pl := pools.Rows[0]
	if pl.From != 2 || pl.Now != 3 || pl.Least != 2 || pl.Most != 4 || pl.Changes != 2 || pl.URL != "/projects/p/clusters/c" {
		t.Errorf("the pool's line: %+v", pl)
	}
	near("the first change, half way", pl.Points[0].X, barPlotX+plot/2)
	near("the first change's size, the line's top", pl.Points[0].Y, pl.Y+(poolRowH-poolLineH)/2)
	if pl.Points[1].Class != "bad" || !strings.HasPrefix(pl.Path, "M170.0 ") || !strings.HasSuffix(pl.Path, "H520.0") {
		t.Errorf("the failed change %+v, the path %q", pl.Points[1], pl.Path)
	}
	if !strings.Contains(pl.Points[0].Title, "2 → 4 nodes (Succeeded): 2 pods pending") {
		t.Errorf("a change's title: %q", pl.Points[0].Title)
	}

	if len(v.FailureRows) != 2 || v.FailureRows[0].Code != v1.CodeQuotaExceeded {
		t.Fatalf("failures: %+v", v.FailureRows)
	}
	op := v.FailureRows[0].Operations[0]
	if op.URL != "/projects/p/clusters/c#op-op-1" || op.DiagnosticsURL != "/projects/p/clusters/c/diagnostics/d-1" {
		t.Errorf("the failed operation links to %q and %q", op.URL, op.DiagnosticsURL)
	}
}
