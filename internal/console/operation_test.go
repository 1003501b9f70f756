package console_test

import (
	"context"
	"fmt"
	"math"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/net/html"

	v1 "kiln.dev/kiln/api/v1"
	"kiln.dev/kiln/internal/plan"
	"kiln.dev/kiln/internal/provider/sim"
	"kiln.dev/kiln/internal/store"
)

// t0 is when the history below began: the create of 25 Nov 14:02:31.
var t0 = time.Date(2025, 11, 25, 14, 2, 31, 0, time.UTC)

func at(d time.Duration) *time.Time { t := t0.Add(d); return &t }

// history writes a cluster whose create failed at its fourth step after
// steps of 10, 20, 30 and 40 seconds, and a retry of it ten minutes later
// that kept the first three, ran the fourth (45 s) and was canceled in the
// fifth (15 s): the retry is the cluster's current operation.
func (e *env) history(name string) (create, retry *store.Operation) {
	e.t.Helper()
	ctx := e.t.Context()
	steps := plan.Steps(v1.KindCreate)
	create = &store.Operation{ID: "01a20fdc-0000-7000-8000-000000000001", Kind: v1.KindCreate, Status: v1.OpFailed,
		StartTime: t0, EndTime: at(100 * time.Second), Error: &v1.Error{Code: v1.CodeQuotaExceeded, Message: "no quota"}}
	for i, s := range steps {
		st := v1.Step{Name: s, State: v1.StepPending}
		if i < 4 {
			from := []time.Duration{0, 10, 30, 60}[i] * time.Second
			st.State, st.Attempts, st.StartTime, st.EndTime = v1.StepSucceeded, 1, at(from), at(from+time.Duration(i+1)*10*time.Second)
		}
		if i == 3 {
			st.State, st.Message = v1.StepFailed, "no quota"
		}
		create.Steps = append(create.Steps, st)
	}
	cl := &store.Cluster{Project: "default", Name: name, Spec: v1.ClusterSpec{Provider: "sim", KubernetesVersion: "v1.35.5"},
		Status: v1.ClusterStatus{ProvisioningState: v1.StateFailed, FailedProvisioningState: v1.StateCreating, CurrentOperation: create.ID}}
	if err := e.store.BeginOperation(ctx, cl, create, store.Cond{}); err != nil {
		e.t.Fatal(err)
	}
	retry = create.Retry("01a2102a-0000-7000-8000-000000000002", t0.Add(10*time.Minute))
	retry.Status, retry.EndTime = v1.OpCanceled, at(10*time.Minute+60*time.Second)
	retry.Steps[3] = v1.Step{Name: steps[3], State: v1.StepSucceeded, Attempts: 1, StartTime: at(10 * time.Minute), EndTime: at(10*time.Minute + 45*time.Second)}
	retry.Steps[4] = v1.Step{Name: steps[4], State: v1.StepCanceled, Attempts: 1, StartTime: at(10*time.Minute + 45*time.Second),
		EndTime: at(10*time.Minute + 60*time.Second), Message: "canceled by user:admin while running"}
	cl, err := e.store.GetCluster(ctx, store.Key{Project: "default", Name: name})
	if err != nil {
		e.t.Fatal(err)
	}
	cl.Status.ProvisioningState, cl.Status.CurrentOperation = v1.StateCanceled, retry.ID
	if err := e.store.BeginOperation(ctx, cl, retry, store.Cond{}); err != nil {
		e.t.Fatal(err)
	}
	return create, retry
}

// The operation view names operations by kind and time (their ids on the
// side, for the CLI), shows the steps a retry kept once, folded, and draws
// each step an operation ran as a bar as wide as it took.
func TestOperationView(t *testing.T) {
	e := newEnv(t, false)
	b := e.browser()
	b.login(ownerToken)
	create, retry := e.history("c1")
	p := b.get("/projects/default/clusters/c1")
	if p.status != http.StatusOK {
		t.Fatalf("cluster page: %d %s", p.status, p.body)
	}
	doc := p.doc(t)

	// Names: kind and start time; the id is there too, but not as the name.
	summary, _ := p.byID(t, "current-operation")
	for _, want := range []string{"retry of create, 25 Nov 14:12:31 UTC", "(retries the create of 25 Nov 14:02:31 UTC)", "id " + retry.ID} {
		if !strings.Contains(summary, want) {
			t.Errorf("the current operation's summary %q does not say %q", summary, want)
		}
	}
	past := text(find(doc, "details", "id", "op-"+create.ID))
	if !strings.HasPrefix(past, "Failed create, 25 Nov 14:02:31 UTC") || !strings.Contains(past, "id "+create.ID) {
		t.Errorf("the past create's summary: %q", past)
	}

	// Folding: the three steps the retry kept are one row, said once.
	steps := find(doc, "div", "data-fragment", "current-steps")
	kept := findAll(steps, "tr", "class", "kept")
	if len(kept) != 1 {
		t.Fatalf("the retry's steps have %d folded rows, want 1", len(kept))
	}
	const keptSays = "3 steps done by the create of 25 Nov 14:02:31 UTC, not run again"
	if got := text(find(kept[0], "summary", "", "")); got != keptSays {
		t.Errorf("the folded row says %q, want %q", got, keptSays)
	}
	if n := strings.Count(p.body, "not run again"); n != 1 {
		t.Errorf(`the page says "not run again" %d times, want once`, n)
	}
	if strings.Contains(p.body, "done by operation") {
		t.Error(`the page still says "done by operation <id>"`)
	}
	for i, s := range retry.Steps {
		rows := findAll(steps, "tr", "data-step", s.Name)
		inFold := len(findAll(kept[0], "tr", "data-step", s.Name))
		if len(rows) != 1 || (i < 3) != (inFold == 1) {
			t.Errorf("step %s: %d rows, %d in the fold; want one row, in the fold only if kept", s.Name, len(rows), inFold)
		}
	}

	// The timelines: one bar per step the operation ran, as wide as the
	// step took.
	for _, tc := range []struct {
		op   *store.Operation
		want map[string]time.Duration
	}{
		{create, map[string]time.Duration{retry.Steps[0].Name: 10 * time.Second, retry.Steps[1].Name: 20 * time.Second,
			retry.Steps[2].Name: 30 * time.Second, retry.Steps[3].Name: 40 * time.Second}},
		{retry, map[string]time.Duration{retry.Steps[3].Name: 45 * time.Second, retry.Steps[4].Name: 15 * time.Second}},
	} {
		bars := timelineBars(t, doc, tc.op.ID)
		if len(bars) != len(tc.want) {
			t.Errorf("the %s's timeline has %d bars, want %d: %v", tc.op.Kind, len(bars), len(tc.want), bars)
		}
		var perSecond float64
		for name, d := range tc.want {
			w, ok := bars[name]
			if !ok {
				t.Errorf("the timeline of %s has no bar for %s", tc.op.ID, name)
				continue
			}
			if perSecond == 0 {
				perSecond = w / d.Seconds()
			}
			if want := perSecond * d.Seconds(); math.Abs(w-want) > want/200 { // within 0.5%: widths are rounded
				t.Errorf("the bar of %s (%s) is %.1f wide, want %.1f: widths are not proportional to durations", name, d, w, want)
			}
		}
	}
	// The retry's timeline has the steps it ran (not those it kept), over
	// the minute it took.
	want := fmt.Sprintf("2 of %d steps ran, over 1m", len(retry.Steps)-3)
	if got := text(find(find(doc, "figure", "id", "timeline-"+retry.ID), "figcaption", "", "")); !strings.Contains(got, want) {
		t.Errorf("the retry's timeline caption is %q, want it to say %q", got, want)
	}
}

// The live stream keeps the timeline true while the operation runs: the
// running step's bar grows until the step ends.
func TestTimelineLive(t *testing.T) {
	e := newEnv(t, true)
	b := e.browser()
	b.login(ownerToken)
	const hang = "ensure-control-plane-machines"
	e.createCluster("c1", v1.ClusterSpec{Provider: "sim", Labels: map[string]string{sim.LabelHangStep: hang}})
	opID := e.cluster("c1").Status.CurrentOperation
	e.stepRunning(opID, hang)

	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, e.srv.URL+"/projects/default/clusters/c1/live?view=overview", nil)
	resp, err := b.hc.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	events := readEvents(resp.Body)
	// next returns the next timeline the stream sends.
	next := func() *html.Node {
		t.Helper()
		for ev := range events {
			if tl, ok := ev.fragments["current-timeline"]; ok {
				n, err := html.Parse(strings.NewReader(tl))
				if err != nil {
					t.Fatal(err)
				}
				return n
			}
		}
		t.Fatal("the stream ended")
		return nil
	}
	running := func(n *html.Node) (float64, bool) {
		for _, g := range findAll(n, "g", "data-step", hang) {
			if attr(g, "data-state") == v1.StepRunning {
				if r := find(g, "rect", "", ""); r != nil {
					w, _ := strconv.ParseFloat(attr(r, "width"), 64)
					return w, true
				}
			}
		}
		return 0, false
	}
	first, ok := running(next())
	if !ok {
		t.Fatalf("the first timeline has no bar for the running step %s", hang)
	}
	for {
		w, ok := running(next())
		if !ok {
			t.Fatal("the running step's bar went away while it runs")
		}
		if w > first {
			break
		}
	}
	if _, err := e.api.CancelOperation(ctx, opID); err != nil {
		t.Fatal(err)
	}
	for {
		n := next()
		if _, ok := running(n); ok {
			continue
		}
		g := findAll(n, "g", "data-step", hang)
		if len(g) != 1 || attr(g[0], "data-state") != v1.StepCanceled || find(g[0], "rect", "", "") == nil {
			t.Fatalf("after the cancel the step's bar is %v, want one, Canceled", g)
		}
		break
	}
}

// timelineBars reads the timeline of operation id: each bar's width by its
// step.
func timelineBars(t *testing.T, doc *html.Node, id string) map[string]float64 {
	t.Helper()
	fig := find(doc, "figure", "id", "timeline-"+id)
	if fig == nil {
		t.Fatalf("no timeline for operation %s", id)
	}
	bars := map[string]float64{}
	for _, g := range findAll(fig, "g", "data-step", "") {
		r := find(g, "rect", "", "")
		if r == nil {
			continue
		}
		w, err := strconv.ParseFloat(attr(r, "width"), 64)
		if err != nil {
			t.Fatalf("bar of %s: width %q", attr(g, "data-step"), attr(r, "width"))
		}
		bars[attr(g, "data-step")] = w
	}
	return bars
}

// findAll returns the elements under n named tag whose attribute key is
// val (any value when val is "", any attributes when key is "").
func findAll(n *html.Node, tag, key, val string) []*html.Node {
	var out []*html.Node
	if n == nil {
		return nil
	}
	for d := range n.Descendants() {
		if d.Type != html.ElementNode || d.Data != tag {
			continue
		}
		if key == "" || hasAttr(d, key, val) {
			out = append(out, d)
		}
	}
	return out
}

func hasAttr(n *html.Node, key, val string) bool {
	for _, a := range n.Attr {
		if a.Key == key && (val == "" || a.Val == val || key == "class" && strings.Contains(" "+a.Val+" ", " "+val+" ")) {
			return true
		}
	}
	return false
}

// find is findAll's first, or nil.
func find(n *html.Node, tag, key, val string) *html.Node {
	if all := findAll(n, tag, key, val); len(all) > 0 {
		return all[0]
	}
	return nil
}

// text is n's text, its spaces collapsed.
func text(n *html.Node) string {
	if n == nil {
		return ""
	}
	var b strings.Builder
	for d := range n.Descendants() {
		if d.Type == html.TextNode {
			b.WriteString(d.Data)
		}
	}
	return strings.Join(strings.Fields(b.String()), " ")
}

// A failed operation links the diagnostics bundle gathered for it, and the
// link downloads the bundle.
func TestFailedOperationLinksDiagnostics(t *testing.T) {
	e := newEnv(t, false)
	b := e.browser()
	b.login(ownerToken)
	create, _ := e.history("c1")
	bundle := []byte{0x1f, 0x8b, 8, 0, 0, 0, 0, 0}
	d := &store.Diagnostics{Project: "default", Cluster: "c1", Diagnostics: v1.Diagnostics{ID: "01a21000-0000-7000-8000-0000000000d1",
		Cluster: "/v1/projects/default/clusters/c1", Operation: create.ID, Reason: "create operation failed", Size: int64(len(bundle)), CreatedAt: t0}}
	if err := e.store.PutDiagnostics(t.Context(), d, bundle); err != nil {
		t.Fatal(err)
	}
	p := b.get("/projects/default/clusters/c1")
	if p.status != http.StatusOK {
		t.Fatalf("cluster page: %d %s", p.status, p.body)
	}
	past := find(p.doc(t), "details", "id", "op-"+create.ID)
	link := find(past, "a", "download", "")
	want := "/projects/default/clusters/c1/diagnostics/" + d.ID
	if link == nil || attr(link, "href") != want {
		t.Fatalf("the failed create links no diagnostics bundle at %s: %q", want, text(past))
	}
	got := b.get(want)
	if got.status != http.StatusOK || got.header.Get("Content-Type") != "application/gzip" ||
		!strings.Contains(got.header.Get("Content-Disposition"), "diagnostics-"+d.ID+".tar.gz") || got.body != string(bundle) {
		t.Errorf("download: %d %q %q %q", got.status, got.header.Get("Content-Type"), got.header.Get("Content-Disposition"), got.body)
	}
}
