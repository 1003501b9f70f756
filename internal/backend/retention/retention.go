// Package retention deletes what Kiln has kept long enough: events, audit
// entries, ended operations, answered instructions and ended cost
// intervals past their retention, and the records of tokens that expired or were revoked a
// while ago (console sessions make one a day per user). A backend runs it; several may, since a prune deletes only what is
// past its cutoff.
package retention

import (
	"context"
	"log/slog"
	"time"

	"kiln.dev/kiln/internal/store"
)

// Store is what a Pruner needs of the store.
type Store interface {
	Prune(ctx context.Context, c store.Cutoffs) (store.Pruned, error)
}

// Options configure a Pruner. A zero retention keeps that kind forever.
type Options struct {
	Store  Store
	Events time.Duration // events older than this go
	Audit  time.Duration // audit entries older than this go
	// Tokens: a token's record goes this long after it expired or was
	// revoked (it has been refused since).
	Tokens time.Duration
	// Operations: an operation goes this long after it ended, unless it
	// is a live cluster's last one.
	Operations time.Duration
	// Instructions: a node's instruction goes this long after its result
	// came, unless an operation runs on its cluster.
	Instructions time.Duration
	// CostIntervals: a cluster's cost interval (the estimate in force,
	// store.CostRecord) goes this long after it ended; never sooner than
	// MinCostIntervals, which the cost page's last 30 days need.
	CostIntervals time.Duration
	// Interval is how often it prunes; 0 means an hour.
	Interval time.Duration
	Logger   *slog.Logger     // nil discards
	Now      func() time.Time // nil means time.Now
}

// MinCostIntervals is the shortest a cost interval is kept after it
// ended: the cost page adds up the last 30 days, and a day more keeps the
// window's first day whole whenever a prune runs.
const MinCostIntervals = 31 * 24 * time.Hour

// Pruner prunes the store every Interval.
type Pruner struct {
	opts Options
	log  *slog.Logger
}

// New returns a Pruner.
func New(opts Options) *Pruner {
	if opts.Interval <= 0 {
		opts.Interval = time.Hour
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.CostIntervals > 0 {
		opts.CostIntervals = max(opts.CostIntervals, MinCostIntervals)
	}
	p := &Pruner{opts: opts, log: opts.Logger}
	if p.log == nil {
		p.log = slog.New(slog.DiscardHandler)
	}
	return p
}

// Cutoffs are what a prune now deletes before.
func (p *Pruner) Cutoffs() store.Cutoffs {
	now := p.opts.Now()
	before := func(d time.Duration) time.Time {
		if d <= 0 {
			return time.Time{}
		}
		return now.Add(-d)
	}
	return store.Cutoffs{Events: before(p.opts.Events), Audit: before(p.opts.Audit), Tokens: before(p.opts.Tokens),
		Operations: before(p.opts.Operations), Instructions: before(p.opts.Instructions), CostIntervals: before(p.opts.CostIntervals)}
}

// Prune prunes once and logs what it deleted.
func (p *Pruner) Prune(ctx context.Context) (store.Pruned, error) {
	c := p.Cutoffs()
	if c == (store.Cutoffs{}) {
		return store.Pruned{}, nil
	}
	got, err := p.opts.Store.Prune(ctx, c)
	if got != (store.Pruned{}) {
		p.log.InfoContext(ctx, "pruned what outlived its retention",
			"events", got.Events, "audit", got.Audit, "tokens", got.Tokens,
			"operations", got.Operations, "instructions", got.Instructions, "cost intervals", got.CostIntervals)
	}
	return got, err
}

// Run prunes once a minute after it starts (not at once: a fleet of
// restarting processes does not all prune together), then every Interval,
// until ctx ends; it returns ctx's error. A failed prune is logged and
// tried again at the next interval.
func (p *Pruner) Run(ctx context.Context) error {
	wait := min(time.Minute, p.opts.Interval)
	for {
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		case <-t.C:
		}
		if _, err := p.Prune(ctx); err != nil && ctx.Err() == nil {
			p.log.WarnContext(ctx, "prune failed; trying again later", "err", err, "in", p.opts.Interval)
		}
		wait = p.opts.Interval
	}
}
