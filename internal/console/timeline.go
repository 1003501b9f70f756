package console

import (
	"fmt"
	"time"

	v1 "kiln.dev/kiln/api/v1"
)

// timeline is an operation's steps drawn on a time axis (an SVG the
// templates write out): each step it ran a bar from its start to its end
// (a running one's to now), the steps not started yet listed without one,
// so where the time went shows at a glance. Coordinates are in the SVG's
// own units (Width wide); the browser scales it to the page.
type timeline struct {
	ID            string // the operation's id, for element ids
	Width, Height float64
	Rows          []timelineRow
	Ticks         []timelineTick
	// Span is how long the axis covers; Bars how many steps have a bar.
	Span time.Duration
	Bars int
	// PlotX and PlotEnd bound the bars; AxisY is where the axis is drawn.
	PlotX, PlotEnd, AxisY float64
}

// timelineRow is one step: its name, and its bar when it started.
type timelineRow struct {
	Name, State string
	Y, TextY    float64 // the bar's top; the baseline of its texts
	Bar         bool
	X, W        float64 // the bar
	// Label is the bar's duration, written after the bar; where there is
	// no room after it, inside its end (LabelInside) or else before it
	// (LabelX is then where the text ends: LabelEnd).
	Label       string
	LabelX      float64
	LabelEnd    bool
	LabelInside bool
	// Title says it all, for a tooltip and a screen reader.
	Title string
	// Failed are the step's failed attempts before its last, drawn before
	// its bar (the gaps between are the back-off).
	Failed []timelineSegment
}

// timelineSegment is one failed attempt of a step.
type timelineSegment struct {
	X, W  float64
	Title string
}

// timelineTick is a mark on the axis.
type timelineTick struct {
	X     float64
	Label string
}

// The timeline's geometry, in SVG units.
const (
	tlWidth   = 1000.0
	tlNames   = 250.0 // step names end here (right-aligned)
	tlPlotX   = 262.0 // the axis starts here
	tlPlotEnd = 985.0
	tlRow     = 22.0 // a step's row
	tlBar     = 14.0 // a bar's height
	tlAxis    = 26.0 // room for the axis and its labels
	tlMinBar  = 2.0  // the narrowest bar drawn, so that short steps show
	// tlMaxTicks is how many marks the axis has at most (besides 0).
	tlMaxTicks = 8
)

// newTimeline lays out steps (an operation's own, in order) on an axis from
// start to end; now ends a running step's bar.
func newTimeline(id string, start, end time.Time, steps []v1.Step, now time.Time) timeline {
	tl := timeline{ID: id, Width: tlWidth, PlotX: tlPlotX, PlotEnd: tlPlotEnd}
	// The axis covers the operation and every step it ran.
	for _, s := range steps {
		if f := s.FirstStart(); f != nil && f.Before(start) {
			start = *f
		}
		if e := stepEnd(s, now); e.After(end) {
			end = e
		}
	}
	tl.Span = max(end.Sub(start), time.Millisecond)
	scale := (tlPlotEnd - tlPlotX) / float64(tl.Span)
	at := func(t time.Time) float64 { return tlPlotX + float64(t.Sub(start))*scale }
	for i, s := range steps {
		y := float64(i)*tlRow + (tlRow-tlBar)/2
		r := timelineRow{Name: s.Name, State: s.State, Y: y, TextY: y + tlBar - 3}
		if s.StartTime == nil {
			r.Title = s.Name + ": " + s.State + ", not started"
			tl.Rows = append(tl.Rows, r)
			continue
		}
		e := stepEnd(s, now)
		first := *s.FirstStart()
		for i, a := range s.FailedAttempts {
			n := s.Attempts - len(s.FailedAttempts) + i // the attempt's number
			r.Failed = append(r.Failed, timelineSegment{X: at(a.StartTime), W: max(float64(a.EndTime.Sub(a.StartTime))*scale, tlMinBar),
				Title: fmt.Sprintf("attempt %d failed after %s, at %s: %s", n, span(a.EndTime.Sub(a.StartTime)), offset(a.EndTime.Sub(start)), a.Message)})
		}
		d := e.Sub(first)
		r.Bar, r.X, r.W = true, at(*s.StartTime), max(float64(e.Sub(*s.StartTime))*scale, tlMinBar)
		r.Label = span(d)
		if s.EndTime == nil {
			r.Label += " so far"
		}
		switch room := labelWidth(r.Label); {
		case r.X+r.W+room <= tlWidth:
			r.LabelX = r.X + r.W + 4
		case r.W >= room:
			r.LabelX, r.LabelEnd, r.LabelInside = r.X+r.W-4, true, true
		default:
			r.LabelX, r.LabelEnd = r.X-4, true
		}
		r.Title = fmt.Sprintf("%s: %s, %s, from %s to %s", s.Name, s.State, r.Label,
			offset(first.Sub(start)), offset(e.Sub(start)))
		if s.EndTime == nil {
			r.Title = fmt.Sprintf("%s: %s for %s, since %s", s.Name, s.State, span(d), offset(first.Sub(start)))
		}
		if s.Attempts > 1 {
			r.Title += fmt.Sprintf(" (%d attempts)", s.Attempts)
		}
		for _, f := range r.Failed {
			r.Title += "; " + f.Title
		}
		tl.Bars++
		tl.Rows = append(tl.Rows, r)
	}
	tl.AxisY = float64(len(steps)) * tlRow
	tl.Height = tl.AxisY + tlAxis
	step := tickStep(tl.Span)
	for d := time.Duration(0); d <= tl.Span; d += step {
		tl.Ticks = append(tl.Ticks, timelineTick{X: tlPlotX + float64(d)*scale, Label: span(d)})
	}
	return tl
}

// labelWidth is about how wide a label is drawn, with a margin.
func labelWidth(label string) float64 { return 7*float64(len(label)) + 8 }

// stepEnd is when a started step ended, or now while it runs.
func stepEnd(s v1.Step, now time.Time) time.Time {
	switch {
	case s.EndTime != nil:
		return *s.EndTime
	case s.StartTime != nil && now.After(*s.StartTime):
		return now
	case s.StartTime != nil:
		return *s.StartTime
	}
	return time.Time{}
}

// tickSteps are the axis's possible intervals between marks.
var tickSteps = []time.Duration{
	time.Millisecond, 2 * time.Millisecond, 5 * time.Millisecond, 10 * time.Millisecond, 20 * time.Millisecond,
	50 * time.Millisecond, 100 * time.Millisecond, 200 * time.Millisecond, 500 * time.Millisecond,
	time.Second, 2 * time.Second, 5 * time.Second, 10 * time.Second, 15 * time.Second, 30 * time.Second,
	time.Minute, 2 * time.Minute, 5 * time.Minute, 10 * time.Minute, 15 * time.Minute, 30 * time.Minute,
	time.Hour, 2 * time.Hour, 3 * time.Hour, 6 * time.Hour, 12 * time.Hour, 24 * time.Hour,
}

// tickStep is the smallest interval that puts at most tlMaxTicks marks on
// an axis of span.
func tickStep(span time.Duration) time.Duration {
	for _, s := range tickSteps {
		if span/s <= tlMaxTicks {
			return s
		}
	}
	d := 24 * time.Hour
	for span/d > tlMaxTicks {
		d *= 2
	}
	return d
}

// span is a duration as the timeline writes it: "0s", "<1ms", "20ms",
// "4.2s", "45s", "1m 30s", "2h 5m".
func span(d time.Duration) string {
	switch {
	case d > 0 && d < time.Millisecond:
		return "<1ms"
	case d > 0 && d < time.Second:
		return fmt.Sprintf("%dms", d.Round(time.Millisecond)/time.Millisecond)
	case d < 10*time.Second && d%time.Second != 0:
		return fmt.Sprintf("%.1fs", d.Seconds())
	case d < time.Minute:
		return fmt.Sprintf("%ds", int(d.Round(time.Second).Seconds()))
	case d < time.Hour:
		d = d.Round(time.Second)
		if s := d % time.Minute; s != 0 {
			return fmt.Sprintf("%dm %ds", int(d/time.Minute), int(s/time.Second))
		}
		return fmt.Sprintf("%dm", int(d/time.Minute))
	}
	d = d.Round(time.Minute)
	if m := d % time.Hour; m != 0 {
		return fmt.Sprintf("%dh %dm", int(d/time.Hour), int(m/time.Minute))
	}
	return fmt.Sprintf("%dh", int(d/time.Hour))
}

// offset is a time on the axis, as "+1m 30s".
func offset(d time.Duration) string { return "+" + span(d) }
