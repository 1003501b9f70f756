// Package check is the one shape of the backend's periodic checks (the
// machine health check, the elastic loop, the certificate, profile and
// backup-schedule checks): every interval, a pass over the idle
// (Succeeded) clusters of the providers a check watches, those of them
// this replica is given (a Shard: several backends share the fleet), each
// looked at by the check, which may begin an operation (and wake the
// worker) or set a condition (Acts).
package check

import (
	"context"
	"log/slog"
	"time"

	v1 "kiln.dev/kiln/api/v1"
	"kiln.dev/kiln/internal/store"
)

// Check looks at one cluster as read and acts on what it finds.
type Check interface {
	Check(ctx context.Context, cl *store.Cluster) error
}

// Passer is a Check that keeps something of the clusters between passes
// (the elastic loop's clocks): it is told when a pass begins and ends, to
// forget the clusters the pass did not look at.
type Passer interface {
	BeginPass()
	EndPass()
}

// Shard says whether this replica checks a cluster: each cluster is
// checked by one of the backends that share the store.
type Shard interface {
	Owns(cl *store.Cluster) bool
}

// Periodic is a check with when and what it looks at.
type Periodic struct {
	Name     string        // what it is, in logs ("machine health check")
	Interval time.Duration // between passes
	// Providers are the providers whose Succeeded clusters a pass lists
	// (store.ClusterFilter): the fleet's other clusters are not read. Nil
	// lists every provider's.
	Providers []string
	Check     Check
	Logger    *slog.Logger
}

// Pass looks once at every cluster p selects that shard gives this replica
// (nil: every one), going on past a cluster's error; the errors come back
// joined, each naming its cluster. It stops when ctx ends.
func Pass(ctx context.Context, s store.ClusterLister, shard Shard, p Periodic) error {
	if ps, ok := p.Check.(Passer); ok {
		ps.BeginPass()
		defer ps.EndPass()
	}
	return store.CheckEachCluster(ctx, s, store.ClusterFilter{State: v1.StateSucceeded, Providers: p.Providers}, func(cl *store.Cluster) error {
		if shard != nil && !shard.Owns(cl) {
			return nil
		}
		return p.Check.Check(ctx, cl)
	})
}

// Runner runs periodic checks over the store's clusters, those its Shard
// gives it.
type Runner struct {
	Store store.ClusterLister
	Shard Shard // nil: every cluster
}

// Run passes p every p.Interval until ctx ends, and returns ctx's error.
func (r Runner) Run(ctx context.Context, p Periodic) error {
	return Every(ctx, p.Interval, p.Logger, p.Name, func(ctx context.Context) error { return Pass(ctx, r.Store, r.Shard, p) })
}

// Base is what every check's options share: which clusters a pass lists,
// how the check begins an operation, when it runs, its clock and its log.
// A check's Options embeds it, and its constructor fills it (WithDefaults).
type Base struct {
	// Providers are the providers whose clusters are listed at each pass
	// (store.ClusterFilter): the fleet's other clusters are not read. Nil
	// lists every provider's, and the check judges each.
	Providers []string
	// Steps are the pending steps of an operation kind (plan.PendingSteps);
	// nil for a check that begins no operation.
	Steps func(kind string) []v1.Step
	// Started is called with each operation the check began (to wake the
	// worker); optional.
	Started  func(*store.Operation)
	Interval time.Duration    // between passes; the check's own default when 0
	Now      func() time.Time // time.Now when nil
	Logger   *slog.Logger     // discards when nil
}

// WithDefaults returns b with what it leaves zero filled in: interval as
// its Interval, the wall clock, a logger that discards.
func (b Base) WithDefaults(interval time.Duration) Base {
	if b.Interval <= 0 {
		b.Interval = interval
	}
	if b.Now == nil {
		b.Now = time.Now
	}
	if b.Logger == nil {
		b.Logger = slog.New(slog.DiscardHandler)
	}
	return b
}

// Acts are the check's ways to act on a cluster, writing to w.
func (b Base) Acts(w Writer) Acts {
	return Acts{Store: w, Steps: b.Steps, Started: b.Started, Logger: b.Logger}
}

// Periodic is the check c, named name in logs, as b runs it.
func (b Base) Periodic(name string, c Check) Periodic {
	return Periodic{Name: name, Interval: b.Interval, Providers: b.Providers, Check: c, Logger: b.Logger}
}
