package retention_test

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	v1 "kiln.dev/kiln/api/v1"
	"kiln.dev/kiln/internal/backend/retention"
	"kiln.dev/kiln/internal/store"
	"kiln.dev/kiln/internal/store/sqlite"
	"kiln.dev/kiln/test/waitfor"
)

// The pruner deletes, from a real store, what is past each retention and
// keeps what is not, or everything of a kind whose retention is zero.
func TestPruner(t *testing.T) {
	ctx := t.Context()
	st, err := sqlite.Open(ctx, filepath.Join(t.TempDir(), "kiln.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	now := time.Date(2030, 6, 1, 0, 0, 0, 0, time.UTC)
	for _, age := range []time.Duration{100 * 24 * time.Hour, 10 * 24 * time.Hour} {
		if err := st.AppendEvent(ctx, &store.Event{Project: "p", Cluster: "c", Event: v1.Event{Time: now.Add(-age), Type: "Normal", Reason: "R"}}); err != nil {
			t.Fatal(err)
		}
		if err := st.AppendAudit(ctx, &v1.AuditEntry{Time: now.Add(-age), Actor: "user:a", Action: "PUT /x", Result: v1.AuditSuccess}); err != nil {
			t.Fatal(err)
		}
	}
	p := retention.New(retention.Options{Store: st, Events: 90 * 24 * time.Hour, Now: func() time.Time { return now }})
	got, err := p.Prune(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if want := (store.Pruned{Events: 1}); got != want {
		t.Errorf("pruned %+v, want %+v (audit kept: its retention is zero)", got, want)
	}
	evs, _, _ := st.ListEvents(ctx, store.Key{Project: "p", Name: "c"}, store.Page{})
	audit, _, _ := st.ListAudit(ctx, store.AuditFilter{}, store.Page{})
	if len(evs) != 1 || len(audit) != 2 {
		t.Errorf("left %d events and %d audit entries, want 1 and 2", len(evs), len(audit))
	}

	// Run prunes on its own, and stops with its context.
	run := retention.New(retention.Options{Store: st, Audit: 30 * 24 * time.Hour, Interval: 10 * time.Millisecond,
		Now: func() time.Time { return now }})
	rctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- run.Run(rctx) }()
	waitfor.Cond(t, "Run to prune the old audit entry", 30*time.Second, func() (bool, error) {
		audit, _, err := st.ListAudit(ctx, store.AuditFilter{}, store.Page{})
		return len(audit) == 1, err
	})
	cancel()
	if err := <-done; err != context.Canceled {
		t.Errorf("Run returned %v, want context.Canceled", err)
	}
}

// Each retention is the cutoff of its kind, now less it; a zero one keeps
// its kind (a zero cutoff).
func TestCutoffs(t *testing.T) {
	now := time.Date(2030, 6, 1, 0, 0, 0, 0, time.UTC)
	day := 24 * time.Hour
	p := retention.New(retention.Options{Events: 90 * day, Operations: 60 * day, Instructions: 30 * day, Now: func() time.Time { return now }})
	want := store.Cutoffs{Events: now.Add(-90 * day), Operations: now.Add(-60 * day), Instructions: now.Add(-30 * day)}
	if got := p.Cutoffs(); got != want {
		t.Errorf("Cutoffs = %+v, want %+v", got, want)
	}
}

// A cost interval is kept at least retention.MinCostIntervals after it
// ended, whatever shorter retention is asked, for the cost page's last 30
// days; a longer one is kept as asked.
func TestCostIntervalsCutoff(t *testing.T) {
	now := time.Date(2030, 6, 1, 0, 0, 0, 0, time.UTC)
	day := 24 * time.Hour
	for _, tc := range []struct {
		name       string
		keep, want time.Duration
	}{
		{"shorter than 31 days", 7 * day, 31 * day},
		{"longer", 400 * day, 400 * day},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := retention.New(retention.Options{CostIntervals: tc.keep, Now: func() time.Time { return now }})
			if got, want := p.Cutoffs().CostIntervals, now.Add(-tc.want); !got.Equal(want) {
				t.Errorf("cost intervals kept %s asked: cutoff %s, want %s", tc.keep, got, want)
			}
		})
	}
	if got := retention.New(retention.Options{Now: func() time.Time { return now }}).Cutoffs().CostIntervals; !got.IsZero() {
		t.Errorf("no retention asked: cutoff %s, want none (kept forever)", got)
	}
}
