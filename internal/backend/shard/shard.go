// Package shard divides the clusters among the backend replicas that share
// a store, for the periodic checks: each replica records itself alive on a
// heartbeat (store.PutReplica) and reads which others are; a cluster is
// checked by the live replica that ranks it highest (rendezvous hashing of
// the cluster's uid), so a replica that comes or goes moves only its own
// share. A replica that stops deletes its record, and its share goes to
// the others at their next heartbeat; one that dies without a word loses
// its share when its record expires. While two replicas' lists differ (a
// heartbeat apart) a cluster may be checked twice or wait a pass: every
// change a check makes is conditional on the cluster as read, so a second
// check changes nothing.
package shard

import (
	"cmp"
	"context"
	"hash/fnv"
	"log/slog"
	"slices"
	"sync"
	"time"

	"kiln.dev/kiln/internal/store"
)

// Store is what the replicas' records need of the store.
type Store interface {
	PutReplica(ctx context.Context, name string, ttl time.Duration) error
	ListReplicas(ctx context.Context) ([]string, error)
	DeleteReplica(ctx context.Context, name string) error
}

// Options configure Replicas. Store and Name are required.
type Options struct {
	Store Store
	// Name is this replica's, unique among them (the worker's lease
	// owner).
	Name string
	// TTL is how long a record holds without a heartbeat: how long a
	// replica that died keeps its share. Default 15s.
	TTL time.Duration
	// Heartbeat is how often the record is renewed and the others read.
	// Default a third of TTL.
	Heartbeat time.Duration
	Logger    *slog.Logger
}

// Replicas is this replica's view of the live ones (check.Shard).
type Replicas struct {
	opts Options

	mu   sync.Mutex
	live []string // sorted, this replica among them
}

// New returns this replica's view, which names it alone until Run has
// read the store.
func New(opts Options) *Replicas {
	if opts.TTL <= 0 {
		opts.TTL = 15 * time.Second
	}
	if opts.Heartbeat <= 0 || opts.Heartbeat > opts.TTL/3 {
		opts.Heartbeat = opts.TTL / 3
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	return &Replicas{opts: opts, live: []string{opts.Name}}
}

// Run renews this replica's record and reads the live replicas at once and
// every Heartbeat until ctx ends; then it deletes the record (the others
// take its share at their next heartbeat) and returns ctx's error.
func (r *Replicas) Run(ctx context.Context) error {
	t := time.NewTicker(r.opts.Heartbeat)
	defer t.Stop()
	for {
		r.Beat(ctx)
		select {
		case <-ctx.Done():
			dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
			defer cancel()
			if err := r.opts.Store.DeleteReplica(dctx, r.opts.Name); err != nil {
				r.opts.Logger.Warn("could not delete this replica's record; the others take its clusters when it expires", "err", err, "in", r.opts.TTL)
			}
			return ctx.Err()
		case <-t.C:
		}
	}
}

// Beat renews this replica's record and reads the live replicas once. A
// failure is logged, and the last list read is kept.
func (r *Replicas) Beat(ctx context.Context) {
	if err := r.opts.Store.PutReplica(ctx, r.opts.Name, r.opts.TTL); err != nil {
		if ctx.Err() == nil {
			r.opts.Logger.Warn("could not renew this replica's record", "err", err)
		}
		return
	}
	live, err := r.opts.Store.ListReplicas(ctx)
	if err != nil {
		if ctx.Err() == nil {
			r.opts.Logger.Warn("could not read the live replicas", "err", err)
		}
		return
	}
	if !slices.Contains(live, r.opts.Name) { // its own record expired meanwhile: it is alive all the same
		live = append(live, r.opts.Name)
		slices.Sort(live)
	}
	r.mu.Lock()
	changed := !slices.Equal(live, r.live)
	r.live = live
	r.mu.Unlock()
	if changed {
		r.opts.Logger.Info("backend replicas changed; the periodic checks divide the clusters among them", "replicas", live)
	}
}

// Live names the live replicas as last read, sorted.
func (r *Replicas) Live() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.live)
}

// Owns reports whether this replica checks cl: whether it ranks cl
// highest of the live replicas.
func (r *Replicas) Owns(cl *store.Cluster) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return Owner(r.live, cmp.Or(cl.UID, cl.Key().String())) == r.opts.Name
}

// Owner is the replica of live that checks the cluster of key: the one
// whose hash with the key is highest ("" when live is empty).
func Owner(live []string, key string) string {
	var best string
	var top uint64
	for _, name := range live {
		h := fnv.New64a()
		h.Write([]byte(name))
		h.Write([]byte{0})
		h.Write([]byte(key))
		if s := mix(h.Sum64()); best == "" || s > top || s == top && name < best {
			best, top = name, s
		}
	}
	return best
}

// mix spreads a hash's bits over all 64 (splitmix64's finalizer): FNV's
// high bits barely change with the last bytes, where keys differ.
func mix(x uint64) uint64 {
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	return x ^ x>>31
}
