package console

import (
	"cmp"
	"context"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"time"

	v1 "kiln.dev/kiln/api/v1"
)

// The fleet page draws what GET /v1/fleet adds up (the store's grouped
// queries): bar charts, SVG laid out here and written by the templates
// (as the operation timeline is: no script), each with a table beside it
// that says the same in text, for screen readers and without images.

// barChart is one chart: a row per thing counted, each a bar of segments
// (stacked, or overlaid when Overlay: the longest first) and faint
// markers (what the week before had). Its table has a column per key.
type barChart struct {
	ID      string // for element ids
	Caption string // what it shows; labels the SVG and the table
	// Head names the table's first column; Keys the columns after it,
	// whose values are each row's Cells; Total adds a column of the
	// row's total.
	Head  string
	Keys  []string
	Total bool
	// Legend are the states or results the segments' colours stand for.
	Legend []string
	// Overlay draws the segments over one another from the axis, not
	// one after another.
	Overlay bool
	// Note says what the markers are, under the chart.
	Note          string
	Rows          []barRow
	Width, Height float64
	PlotX         float64 // the bars start here; labels end before it
}

// barRow is a row of a chart and of its table.
type barRow struct {
	Label, Href string // Href: the list it counts
	Y, TextY    float64
	Bottom      float64   // of the bar
	Cells       []barCell // one per the chart's Keys
	Total       int
	Segs        []barSeg
	Markers     []barMarker
	// End and EndLabel: where the bar ends and what is written after it.
	End      float64
	EndLabel string
	Title    string // the row as a sentence, for a tooltip
}

// barCell is a value in the table, linked to what it counts when Href.
type barCell struct {
	Text, Href string
}

// barSeg is a segment of a bar.
type barSeg struct {
	X, W         float64
	Class, Title string
	Href         string
}

// barMarker is a faint mark across a row: what the week before had.
type barMarker struct {
	X, Y1, Y2 float64
	Title     string
}

// The charts' geometry, in SVG units.
const (
	barWidth  = 640.0
	barPlotX  = 170.0 // labels end here (right-aligned)
	barEnd    = 520.0 // the longest bar ends here; its label after it
	barRowH   = 24.0
	barH      = 16.0
	barMinSeg = 2.0 // the narrowest segment drawn
)

// layout places the rows' segments and markers, scaled so that top (in
// the values' unit) reaches barEnd.
func (ch *barChart) layout(top float64) {
	ch.Width, ch.PlotX = barWidth, barPlotX
	ch.Height = float64(len(ch.Rows))*barRowH + 4
	scale := 0.0
	if top > 0 {
		scale = (barEnd - barPlotX) / top
	}
	for i := range ch.Rows {
		r := &ch.Rows[i]
		r.Y = float64(i)*barRowH + (barRowH-barH)/2
		r.TextY, r.Bottom = r.Y+barH-3, r.Y+barH
		x := barPlotX
		r.End = barPlotX
		for j := range r.Segs {
			sg := &r.Segs[j]
			w := max0(sg.W*scale, barMinSeg)
			sg.X, sg.W = x, w
			if ch.Overlay {
				sg.X = barPlotX
			} else {
				x += w
			}
			r.End = max(r.End, sg.X+w)
		}
		for j := range r.Markers {
			m := &r.Markers[j]
			m.X, m.Y1, m.Y2 = barPlotX+m.X*scale, r.Y-3, r.Bottom+3
		}
	}
}

// max0 is x, at least least unless it is 0.
func max0(x, least float64) float64 {
	if x <= 0 {
		return 0
	}
	return max(x, least)
}

// fleetView is the fleet page.
type fleetView struct {
	Clusters      int // in all
	Operations    int // begun in the last 7 days
	ClusterCharts []barChart
	OpCharts      []barChart
	Durations     barChart
	Failures      barChart
	FailureRows   []failureRow
	Pools         poolChart
}

// failureRow is an error code of the last 7 days with its newest
// operations, linked to their cluster's page and diagnostics bundle.
type failureRow struct {
	Code       string
	Count      int
	Operations []failedOp
}

// failedOp is one operation that failed, with where the console shows it.
type failedOp struct {
	v1.FleetFailedOperation
	URL, DiagnosticsURL string
}

// fleetStates are the cluster states in the order the charts stack them.
var fleetStates = []string{v1.StateSucceeded, v1.StateHibernated, v1.StateCreating, v1.StateUpdating, v1.StateDeleting, v1.StateFailed, v1.StateCanceled}

// opStatuses are the operation results in the order the charts stack
// them.
var opStatuses = []string{v1.OpSucceeded, v1.OpFailed, v1.OpCanceled, v1.OpInProgress}

// fleetPage is GET /fleet.
func (c *Console) fleetPage(w http.ResponseWriter, r *http.Request, s *session) error {
	v, err := c.loadFleet(r.Context(), r, s)
	if err != nil {
		return err
	}
	c.render(w, r, http.StatusOK, "fleet.html", page{Title: "Fleet", Session: s, Data: v, Live: "/fleet/live"})
	return nil
}

// fleetLive streams the fleet page's charts, re-read every LiveInterval.
func (c *Console) fleetLive(w http.ResponseWriter, r *http.Request, s *session) error {
	return c.pollFragment(w, r, s, "fleet.html", "fleet", func(ctx context.Context) (any, error) {
		return c.loadFleet(ctx, r, s)
	})
}

// loadFleet reads the fleet's sums from the API and lays out the charts.
func (c *Console) loadFleet(ctx context.Context, r *http.Request, s *session) (*fleetView, error) {
	f, err := c.client(r, s.token).Fleet(ctx)
	if err != nil {
		return nil, err
	}
	return newFleetView(f), nil
}

// newFleetView lays out the charts of f.
func newFleetView(f *v1.Fleet) *fleetView {
	v := &fleetView{}
	byState := map[string]int{}
	for _, n := range f.Clusters {
		v.Clusters += n.Count
		byState[n.State] += n.Count
	}
	states := ordered(fleetStates, byState)
	stateChart := barChart{ID: "clusters-state", Caption: "Clusters by state", Head: "State", Keys: []string{"Clusters"}}
	for _, st := range states {
		href := clustersURL("state", st)
		row := barRow{Label: st, Href: href, Total: byState[st], Cells: []barCell{{Text: fmt.Sprint(byState[st]), Href: href}}}
		row.Segs = []barSeg{{W: float64(byState[st]), Class: stateClass(st), Title: fmt.Sprintf("%s: %d", st, byState[st]), Href: href}}
		row.EndLabel, row.Title = fmt.Sprint(byState[st]), fmt.Sprintf("%s: %s", st, plural(byState[st], "cluster"))
		stateChart.Rows = append(stateChart.Rows, row)
	}
	stateChart.layout(float64(maxOf(byState)))
	v.ClusterCharts = append(v.ClusterCharts, stateChart,
		clusterChart(f, states, "clusters-provider", "Clusters by provider, by state", "Provider", "provider",
			func(n v1.FleetClusterCount) string { return n.Provider }),
		clusterChart(f, states, "clusters-version", "Clusters by Kubernetes version, by state", "Version", "version",
			func(n v1.FleetClusterCount) string { return n.KubernetesVersion }),
		clusterChart(f, states, "clusters-profile", "Clusters by profile, by state", "Profile", "profile",
			func(n v1.FleetClusterCount) string { return cmp.Or(n.Profile, noProfile) }))

	prior := map[string]int{} // the week before's operations by kind
	for _, n := range f.Operations {
		if n.Window == v1.WindowWeek {
			v.Operations += n.Count
		}
		if n.Window == v1.WindowPriorWeek {
			prior[n.Kind] += n.Count
		}
	}
	v.OpCharts = []barChart{
		opChart(f, v1.WindowDay, "ops-day", "Operations begun in the last 24 hours, by kind and result", nil),
		opChart(f, v1.WindowWeek, "ops-week", "Operations begun in the last 7 days, by kind and result", prior),
	}
	v.Durations = durationChart(f)
	v.Failures, v.FailureRows = failureChart(f)
	v.Pools = newPoolChart(f)
	return v
}

// noProfile names the clusters without a profile in the charts; the
// clusters list's filter profile=- selects them.
const noProfile = "(none)"

// ordered is the keys of counts: those of order first, in its order,
// then the others sorted.
func ordered(order []string, counts map[string]int) []string {
	var out []string
	for _, k := range order {
		if counts[k] > 0 {
			out = append(out, k)
		}
	}
	var rest []string
	for k, n := range counts {
		if n > 0 && !slices.Contains(order, k) {
			rest = append(rest, k)
		}
	}
	slices.Sort(rest)
	return append(out, rest...)
}

func maxOf[K comparable](m map[K]int) int {
	n := 0
	for _, v := range m {
		n = max(n, v)
	}
	return n
}

// clustersURL is the clusters list filtered by name=value pairs.
func clustersURL(kv ...string) string {
	q := url.Values{}
	for i := 0; i+1 < len(kv); i += 2 {
		q.Set(kv[i], kv[i+1])
	}
	return "/clusters?" + q.Encode()
}

// clusterChart is the clusters counted by what key says of them, each
// bar stacked by state, linked to the clusters list filtered by param.
func clusterChart(f *v1.Fleet, states []string, id, caption, head, param string, key func(v1.FleetClusterCount) string) barChart {
	counts := map[string]map[string]int{}
	totals := map[string]int{}
	for _, n := range f.Clusters {
		k := key(n)
		if counts[k] == nil {
			counts[k] = map[string]int{}
		}
		counts[k][n.State] += n.Count
		totals[k] += n.Count
	}
	ch := barChart{ID: id, Caption: caption, Head: head, Keys: states, Total: true, Legend: states}
	keys := ordered(nil, totals)
	slices.SortStableFunc(keys, func(a, b string) int { return cmp.Compare(totals[b], totals[a]) })
	for _, k := range keys {
		value := k
		if k == noProfile && param == "profile" {
			value = "-"
		}
		href := clustersURL(param, value)
		row := barRow{Label: k, Href: href, Total: totals[k], EndLabel: fmt.Sprint(totals[k]),
			Title: fmt.Sprintf("%s %s: %s", head, k, plural(totals[k], "cluster"))}
		for _, st := range states {
			n := counts[k][st]
			cell := barCell{Text: fmt.Sprint(n)}
			if n > 0 {
				cell.Href = clustersURL(param, value, "state", st)
				row.Segs = append(row.Segs, barSeg{W: float64(n), Class: stateClass(st), Href: cell.Href,
					Title: fmt.Sprintf("%s %s, %s: %d", head, k, st, n)})
				row.Title += fmt.Sprintf(", %d %s", n, st)
			}
			row.Cells = append(row.Cells, cell)
		}
		ch.Rows = append(ch.Rows, row)
	}
	ch.layout(float64(maxOf(totals)))
	return ch
}

// opChart is the operations begun in window by kind, each bar stacked by
// result; prior, when given, marks each kind's count of the week before.
func opChart(f *v1.Fleet, window, id, caption string, prior map[string]int) barChart {
	counts := map[string]map[string]int{}
	totals := map[string]int{}
	for _, n := range f.Operations {
		if n.Window != window {
			continue
		}
		if counts[n.Kind] == nil {
			counts[n.Kind] = map[string]int{}
		}
		counts[n.Kind][n.Status] += n.Count
		totals[n.Kind] += n.Count
	}
	byStatus := map[string]int{}
	for _, m := range counts {
		for st, n := range m {
			byStatus[st] += n
		}
	}
	ch := barChart{ID: id, Caption: caption, Head: "Kind", Keys: ordered(opStatuses, byStatus), Total: true}
	ch.Legend = ch.Keys
	if prior != nil {
		ch.Keys = append(ch.Keys, "The week before")
		ch.Note = "A faint line marks each kind's count of the 7 days before."
	}
	top := maxOf(totals)
	kinds := ordered(nil, totals)
	for k := range prior {
		if totals[k] == 0 && prior[k] > 0 && !slices.Contains(kinds, k) {
			kinds = append(kinds, k) // none this week, some the week before
		}
	}
	for _, k := range kinds {
		row := barRow{Label: k, Total: totals[k], EndLabel: fmt.Sprint(totals[k]), Title: fmt.Sprintf("%s: %d", k, totals[k])}
		for _, st := range ch.Keys {
			if prior != nil && st == "The week before" {
				row.Cells = append(row.Cells, barCell{Text: fmt.Sprint(prior[k])})
				if prior[k] > 0 {
					row.Markers = append(row.Markers, barMarker{X: float64(prior[k]), Title: fmt.Sprintf("%s the week before: %d", k, prior[k])})
				}
				row.Title += fmt.Sprintf("; the week before %d", prior[k])
				top = max(top, prior[k])
				continue
			}
			n := counts[k][st]
			row.Cells = append(row.Cells, barCell{Text: fmt.Sprint(n)})
			if n > 0 {
				row.Segs = append(row.Segs, barSeg{W: float64(n), Class: stateClass(st), Title: fmt.Sprintf("%s %s: %d", k, st, n)})
				row.Title += fmt.Sprintf(", %d %s", n, st)
			}
		}
		ch.Rows = append(ch.Rows, row)
	}
	ch.layout(float64(top))
	return ch
}

// durationChart is how long each kind's operations of the last 7 days
// that succeeded took: the 95th percentile's bar, the median's over it,
// the week before's two as faint lines.
func durationChart(f *v1.Fleet) barChart {
	ch := barChart{ID: "durations", Caption: "How long operations that succeeded took in the last 7 days, by kind (median and 95th percentile)",
		Head: "Kind", Keys: []string{"Operations", "Median", "95th percentile", "The week before: median", "The week before: 95th percentile"}, Overlay: true,
		Note: "The darker bar is the median, the lighter one the 95th percentile; faint lines mark the week before's."}
	week, prior := map[string]v1.FleetDuration{}, map[string]v1.FleetDuration{}
	var kinds []string
	top := 0.0
	for _, d := range f.Durations {
		switch d.Window {
		case v1.WindowWeek:
			week[d.Kind] = d
		case v1.WindowPriorWeek:
			prior[d.Kind] = d
		default:
			continue
		}
		if !slices.Contains(kinds, d.Kind) {
			kinds = append(kinds, d.Kind)
		}
		top = max(top, d.P95)
	}
	slices.Sort(kinds)
	secs := func(s float64) time.Duration { return time.Duration(s * float64(time.Second)) }
	for _, k := range kinds {
		w, p := week[k], prior[k]
		row := barRow{Label: k, Total: w.Count}
		row.Cells = []barCell{{Text: fmt.Sprint(w.Count)}, {Text: "—"}, {Text: "—"}, {Text: "—"}, {Text: "—"}}
		row.Title = fmt.Sprintf("%s: none succeeded in the last 7 days", k)
		if w.Count > 0 {
			row.Cells[1].Text, row.Cells[2].Text = span(secs(w.P50)), span(secs(w.P95))
			row.Segs = []barSeg{
				{W: w.P95, Class: "p95", Title: fmt.Sprintf("%s 95th percentile: %s", k, span(secs(w.P95)))},
				{W: w.P50, Class: "p50", Title: fmt.Sprintf("%s median: %s", k, span(secs(w.P50)))},
			}
			row.EndLabel = span(secs(w.P50)) + " · " + span(secs(w.P95))
			row.Title = fmt.Sprintf("%s: median %s, 95th percentile %s over %s", k, span(secs(w.P50)), span(secs(w.P95)), plural(w.Count, "operation"))
		}
		if p.Count > 0 {
			row.Cells[3].Text, row.Cells[4].Text = span(secs(p.P50)), span(secs(p.P95))
			row.Markers = []barMarker{
				{X: p.P50, Title: fmt.Sprintf("%s median the week before: %s", k, span(secs(p.P50)))},
				{X: p.P95, Title: fmt.Sprintf("%s 95th percentile the week before: %s", k, span(secs(p.P95)))},
			}
			row.Title += fmt.Sprintf("; the week before, median %s, 95th percentile %s", span(secs(p.P50)), span(secs(p.P95)))
		}
		ch.Rows = append(ch.Rows, row)
	}
	ch.layout(top)
	return ch
}

// failureChart is the failure codes of the last 7 days, most frequent
// first, each bar linked to its operations in the table below.
func failureChart(f *v1.Fleet) (barChart, []failureRow) {
	ch := barChart{ID: "failures", Caption: "Failure codes of the last 7 days, most frequent first", Head: "Code", Keys: []string{"Operations"}}
	var rows []failureRow
	top := 0
	for _, fl := range f.Failures {
		href := "#failure-" + fl.Code
		ch.Rows = append(ch.Rows, barRow{Label: fl.Code, Href: href, Total: fl.Count, EndLabel: fmt.Sprint(fl.Count),
			Title: fmt.Sprintf("%s: %s failed", fl.Code, plural(fl.Count, "operation")), Cells: []barCell{{Text: fmt.Sprint(fl.Count), Href: href}},
			Segs: []barSeg{{W: float64(fl.Count), Class: "bad", Href: href, Title: fmt.Sprintf("%s: %d", fl.Code, fl.Count)}}})
		top = max(top, fl.Count)
		fr := failureRow{Code: fl.Code, Count: fl.Count}
		for _, op := range fl.Operations {
			fo := failedOp{FleetFailedOperation: op, URL: clusterURL(op.Project, op.Cluster) + "#op-" + url.PathEscape(op.ID)}
			if op.Diagnostics != "" {
				fo.DiagnosticsURL = clusterURL(op.Project, op.Cluster) + "/diagnostics/" + url.PathEscape(op.Diagnostics)
			}
			fr.Operations = append(fr.Operations, fo)
		}
		rows = append(rows, fr)
	}
	ch.layout(float64(top))
	return ch, rows
}

// poolChart is each autoscaled pool's nodes over the last 7 days: a step
// line a row, from its size before the autoscaler's first change of the
// week to its size now, a dot at each change (titled with when, how and
// why), on an axis of days.
type poolChart struct {
	ID, Caption   string
	Width, Height float64
	PlotX, End    float64
	AxisY         float64
	Rows          []poolLine
	Ticks         []barMarker // X, and Title the day's label
}

// poolLine is one pool on the pool chart.
type poolLine struct {
	Project, Cluster, Pool, URL string
	Y, TextY                    float64
	Path                        string // the step line (SVG path data)
	Points                      []poolPoint
	Changes                     int
	From, Now, Least, Most      int
	Latest                      v1.FleetPoolChange
	Title                       string
}

// poolPoint is a change on the line.
type poolPoint struct {
	X, Y         float64
	Class, Title string
}

// The pool chart's geometry: a row's height and the room its line takes.
const (
	poolRowH  = 34.0
	poolLineH = 24.0
)

// newPoolChart lays out f.Autoscaled over the 7 days before f.Time,
// rounded up to the hour: the chart is drawn the same, and the live page
// sends it again, only when a pool changes or an hour has passed.
func newPoolChart(f *v1.Fleet) poolChart {
	ch := poolChart{ID: "pools", Caption: "Nodes per autoscaled pool over the last 7 days (the clusters the autoscaler changed most)",
		Width: barWidth, PlotX: barPlotX, End: barEnd}
	end := f.Time.Truncate(time.Hour)
	if end.Before(f.Time) {
		end = end.Add(time.Hour)
	}
	start := end.Add(-7 * 24 * time.Hour)
	span := float64(7 * 24 * time.Hour)
	x := func(t time.Time) float64 {
		return barPlotX + (barEnd-barPlotX)*min(max(float64(t.Sub(start))/span, 0), 1)
	}
	for i, p := range f.Autoscaled {
		if len(p.Changes) == 0 {
			continue
		}
		first, last := p.Changes[0], p.Changes[len(p.Changes)-1]
		r := poolLine{Project: p.Project, Cluster: p.Cluster, Pool: p.Pool, URL: clusterURL(p.Project, p.Cluster),
			Y: float64(i) * poolRowH, Changes: len(p.Changes), From: first.From, Now: last.To, Least: first.From, Most: first.From, Latest: last}
		r.TextY = r.Y + poolRowH/2 + 4
		for _, c := range p.Changes {
			r.Least, r.Most = min(r.Least, c.From, c.To), max(r.Most, c.From, c.To)
		}
		top := r.Y + (poolRowH-poolLineH)/2
		y := func(n int) float64 {
			if r.Most == r.Least {
				return top + poolLineH/2
			}
			return top + poolLineH*float64(r.Most-n)/float64(r.Most-r.Least)
		}
		path := fmt.Sprintf("M%.1f %.1f", barPlotX, y(first.From))
		for _, c := range p.Changes {
			cx := x(c.Time)
			path += fmt.Sprintf(" H%.1f V%.1f", cx, y(c.To))
			r.Points = append(r.Points, poolPoint{X: cx, Y: y(c.To), Class: stateClass(c.Status),
				Title: fmt.Sprintf("%s: %d → %d nodes (%s)%s", when(c.Time), c.From, c.To, c.Status, because(c.Reason))})
		}
		r.Path = path + fmt.Sprintf(" H%.1f", barEnd)
		r.Title = fmt.Sprintf("%s of %s: %d → %d nodes over %s, between %d and %d", p.Pool, p.Cluster, r.From, r.Now,
			plural(r.Changes, "change"), r.Least, r.Most)
		ch.Rows = append(ch.Rows, r)
	}
	ch.AxisY = float64(len(ch.Rows)) * poolRowH
	ch.Height = ch.AxisY + tlAxis
	for d := 0; d <= 7; d++ {
		label := fmt.Sprintf("-%dd", 7-d)
		if d == 7 {
			label = "now"
		}
		ch.Ticks = append(ch.Ticks, barMarker{X: x(start.Add(time.Duration(d) * 24 * time.Hour)), Title: label})
	}
	return ch
}

// because is a reason as the end of a sentence: ": reason", or nothing.
func because(reason string) string {
	if reason == "" {
		return ""
	}
	return ": " + reason
}
