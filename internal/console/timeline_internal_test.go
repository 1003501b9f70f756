package console

import (
	"strings"
	"testing"
	"time"

	v1 "kiln.dev/kiln/api/v1"
)

func TestTickStep(t *testing.T) {
	for _, tc := range []struct {
		span, want time.Duration
	}{
		{6 * time.Millisecond, time.Millisecond},
		{150 * time.Millisecond, 20 * time.Millisecond},
		{time.Second, 200 * time.Millisecond},
		{8 * time.Second, time.Second},
		{9 * time.Second, 2 * time.Second},
		{time.Minute, 10 * time.Second},
		{100 * time.Second, 15 * time.Second},
		{20 * time.Minute, 5 * time.Minute},
		{3 * time.Hour, 30 * time.Minute},
		{10 * 24 * time.Hour, 48 * time.Hour},
	} {
		if got := tickStep(tc.span); got != tc.want {
			t.Errorf("tickStep(%s) = %s, want %s", tc.span, got, tc.want)
		}
	}
}

func TestSpan(t *testing.T) {
	for d, want := range map[time.Duration]string{
		0: "0s", 300 * time.Microsecond: "<1ms", 20 * time.Millisecond: "20ms", 999 * time.Millisecond: "999ms", 1200 * time.Millisecond: "1.2s", 10 * time.Second: "10s", 45 * time.Second: "45s",
		time.Minute: "1m", 90 * time.Second: "1m 30s", time.Hour: "1h", 125 * time.Minute: "2h 5m",
	} {
		if got := span(d); got != want {
			t.Errorf("span(%s) = %q, want %q", d, got, want)
		}
	}
}

// A running step's bar ends at now; a step not started has none; a step
// too short to see is drawn narrow but visible; the axis reaches the end.
func TestTimelineLayout(t *testing.T) {
	t0 := time.Date(2025, 11, 25, 14, 2, 31, 0, time.UTC)
	at := func(d time.Duration) *time.Time { t := t0.Add(d); return &t }
	now := t0.Add(40 * time.Second)
	tl := newTimeline("op", t0, now, []v1.Step{
		{Name: "a", State: v1.StepSucceeded, StartTime: at(0), EndTime: at(10 * time.Millisecond)},
		{Name: "b", State: v1.StepSucceeded, StartTime: at(0), EndTime: at(20 * time.Second)},
		{Name: "c", State: v1.StepRunning, StartTime: at(20 * time.Second)},
		{Name: "d", State: v1.StepPending},
	}, now)
	if tl.Bars != 3 || len(tl.Rows) != 4 || tl.Rows[3].Bar {
		t.Fatalf("bars %d, rows %d (the last with a bar: %v); want 3 bars of 4 rows, none for the step not started", tl.Bars, len(tl.Rows), tl.Rows[3].Bar)
	}
	a, b, c := tl.Rows[0], tl.Rows[1], tl.Rows[2]
	if a.W != tlMinBar {
		t.Errorf("a 10ms step's bar is %.1f wide, want %.1f", a.W, tlMinBar)
	}
	if b.X != tlPlotX || c.X != b.X+b.W || c.X+c.W != tlPlotEnd || b.W != c.W {
		t.Errorf("bars b %.1f+%.1f, c %.1f+%.1f: want two halves of %.0f..%.0f, the running one to now", b.X, b.W, c.X, c.W, tlPlotX, tlPlotEnd)
	}
	if c.Label != "20s so far" {
		t.Errorf("the running step's label is %q", c.Label)
	}
	// Labels go after their bar, inside its end when there is no room
	// after it, and before it when the bar is too narrow too.
	if b.LabelInside || b.LabelEnd || b.LabelX <= b.X+b.W || !c.LabelInside || c.LabelX >= tlPlotEnd {
		t.Errorf("labels: b at %.1f (inside %v), c at %.1f (inside %v); want b's after its bar, c's inside its end", b.LabelX, b.LabelInside, c.LabelX, c.LabelInside)
	}
	narrow := newTimeline("op", t0, now, []v1.Step{
		{Name: "e", State: v1.StepSucceeded, StartTime: at(39 * time.Second), EndTime: at(40 * time.Second)},
	}, now).Rows[0]
	if narrow.LabelInside || !narrow.LabelEnd || narrow.LabelX >= narrow.X {
		t.Errorf("a narrow bar at the end: label at %.1f (inside %v), bar at %.1f; want it before the bar", narrow.LabelX, narrow.LabelInside, narrow.X)
	}
	if last := tl.Ticks[len(tl.Ticks)-1]; len(tl.Ticks) != 9 || last.Label != "40s" || last.X != tlPlotEnd {
		t.Errorf("ticks %+v: want 0s to 40s every 5s", tl.Ticks)
	}
}

// A step that took attempts draws each failed one as its own segment, red,
// with its error, before the bar of its last; its label and duration count
// from the first attempt. An operation of milliseconds gets an axis of
// milliseconds, not slivers on a second.
func TestTimelineAttempts(t *testing.T) {
	t0 := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	p := func(t time.Time) *time.Time { return &t }
	steps := []v1.Step{
		{Name: "ensure-network", State: v1.StepSucceeded, Attempts: 3, StartTime: p(at(4)), EndTime: p(at(6)),
			FailedAttempts: []v1.Attempt{
				{StartTime: at(0), EndTime: at(1), Message: "quota exceeded"},
				{StartTime: at(2), EndTime: at(3), Message: "throttled"}}},
	}
	tl := newTimeline("op", t0, at(6), steps, at(6))
	if tl.Span != 6*time.Millisecond || len(tl.Ticks) < 4 || tl.Ticks[1].Label != "1ms" {
		t.Errorf("axis of a 6 ms operation: span %s, ticks %+v", tl.Span, tl.Ticks)
	}
	r := tl.Rows[0]
	if len(r.Failed) != 2 || r.Failed[0].X != tlPlotX || r.Failed[1].X <= r.Failed[0].X+r.Failed[0].W || r.X <= r.Failed[1].X {
		t.Fatalf("segments %+v, bar at %.1f: want two failed attempts, in order, before the last", r.Failed, r.X)
	}
	if !strings.Contains(r.Failed[0].Title, "attempt 1 failed") || !strings.Contains(r.Failed[1].Title, "attempt 2 failed") ||
		!strings.Contains(r.Failed[1].Title, "throttled") {
		t.Errorf("failed attempts' titles: %q, %q", r.Failed[0].Title, r.Failed[1].Title)
	}
	if r.Label != "6ms" || !strings.Contains(r.Title, "(3 attempts)") {
		t.Errorf("label %q, title %q: want the step's whole 6ms and its 3 attempts", r.Label, r.Title)
	}
	if got := stepDuration(steps[0]); got != "6ms" {
		t.Errorf("the step's duration %q, want 6ms from its first attempt", got)
	}
}
