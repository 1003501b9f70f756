package storetest

import (
	"fmt"
	"time"

	v1 "kiln.dev/kiln/api/v1"
	"kiln.dev/kiln/internal/store"
)

// testEvents: events append with increasing ids and list by id, per cluster.
func testEvents(e *env) {
	t, ctx, s := e.t, e.ctx, e.s
	k := store.Key{Project: "p", Name: "c"}
	var want []*store.Event
	for i := range 5 {
		ev := &store.Event{Project: "p", Cluster: "c", Event: v1.Event{
			Type: "Normal", Reason: "StepSucceeded", Message: fmt.Sprintf("step %d", i), Operation: "op", Node: "n1",
		}}
		if i == 3 {
			ev.Time = epoch.Add(-time.Hour)
		}
		wantErr(t, "AppendEvent", s.AppendEvent(ctx, ev), nil)
		if i != 3 && !ev.Time.Equal(e.clock.Now()) {
			t.Fatalf("event time %v, want the store clock %v", ev.Time, e.clock.Now())
		}
		if i > 0 && ev.ID <= want[i-1].ID {
			t.Fatalf("event id %d not above %d", ev.ID, want[i-1].ID)
		}
		want = append(want, ev)
		wantErr(t, "AppendEvent other", s.AppendEvent(ctx, &store.Event{Project: "p", Cluster: "other",
			Event: v1.Event{Type: "Warning", Reason: "x"}}), nil)
		e.clock.Advance(time.Second)
	}
	var got []*store.Event
	tok := ""
	for {
		evs, next, err := s.ListEvents(ctx, k, store.Page{Limit: 2, Token: tok})
		wantErr(t, "ListEvents", err, nil)
		got = append(got, evs...)
		if next == "" {
			break
		}
		tok = next
	}
	diff(t, "events", want, got)
}

// testPageLimitCap: a limit above 1000 returns pages of 1000.
func testPageLimitCap(e *env) {
	t := e.t
	k := store.Key{Project: "p", Name: "c"}
	for i := range 1001 {
		ev := &store.Event{Project: "p", Cluster: "c", Event: v1.Event{Type: "Normal", Reason: fmt.Sprint(i)}}
		wantErr(t, "AppendEvent", e.s.AppendEvent(e.ctx, ev), nil)
	}
	evs, next, err := e.s.ListEvents(e.ctx, k, store.Page{Limit: 5000})
	wantErr(t, "ListEvents", err, nil)
	if len(evs) != 1000 || next == "" {
		t.Fatalf("ListEvents limit 5000: %d events, next %q; want 1000 and a token", len(evs), next)
	}
	evs, next, err = e.s.ListEvents(e.ctx, k, store.Page{Limit: 5000, Token: next})
	wantErr(t, "ListEvents page 2", err, nil)
	if len(evs) != 1 || next != "" || evs[0].Reason != "1000" {
		t.Fatalf("ListEvents last page: %d events, next %q; want the 1001st and no token", len(evs), next)
	}
}
