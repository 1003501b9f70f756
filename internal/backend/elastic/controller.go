package elastic

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	v1 "kiln.dev/kiln/api/v1"
	"kiln.dev/kiln/internal/backend/check"
	"kiln.dev/kiln/internal/kubeapi"
	"kiln.dev/kiln/internal/store"
)

// Defaults of the Controller.
const (
	DefaultInterval = 10 * time.Second
	// DefaultCooldown is how long after a change of the cluster (any
	// operation's end) the autoscaler waits before it changes it again.
	DefaultCooldown = time.Minute
)

// Store is what the Controller needs of the store.
type Store interface {
	store.ClusterLister
	check.Writer
	ListJobs(ctx context.Context, k store.Key, pg store.Page) ([]*store.Job, string, error)
	PutJob(ctx context.Context, j *store.Job, c store.Cond) error
}

// Options configure a Controller. Store, Watched, Observe, Submit and Steps
// are required.
type Options struct {
	check.Base
	Store Store
	// Watched reports whether the clusters of a provider are autoscaled:
	// those whose machines Kiln makes and that run Kubernetes.
	Watched func(provider string) bool
	// Observe reads the cluster's Kubernetes.
	Observe func(ctx context.Context, cl *store.Cluster) (State, error)
	// Submit creates a job's Kubernetes Job (KubeJob) in the cluster; one
	// there already is no error.
	Submit func(ctx context.Context, cl *store.Cluster, j v1.Job) error
	// Shape returns the resources a node of an instance type of the
	// cluster's provider offers (its size, as the provider describes it),
	// for a pool that has no node to learn its shape from; optional.
	Shape func(ctx context.Context, cl *store.Cluster, instanceType string) (kubeapi.Resources, bool)
	// JobLog reads the log of a job's newest pod, kept in the job's record
	// when it ends; optional.
	JobLog func(ctx context.Context, cl *store.Cluster, job string) ([]byte, error)
	// CanStop reports whether a provider can stop machines (hibernation,
	// for spec.idleStop).
	CanStop  func(provider string) bool
	Cooldown time.Duration // DefaultCooldown when zero
	// IdleEvery is how often a cluster read only for its Idle condition
	// is read; DefaultIdleEvery when zero.
	IdleEvery time.Duration
}

// Controller is the elastic loop: every Interval, for each Succeeded
// cluster, it submits the jobs waiting for the cluster and follows the
// running ones; hibernates a cluster with spec.idleStop idle for that long;
// and judges the autoscaled pools by Decide, beginning an autoscale
// operation for a change. Operations are begun conditional on the
// cluster's etag (a user's change, or another replica's, wins). Since when a
// node has been underused and a cluster idle is kept in memory: a restart
// begins those clocks again, which only delays a scale-down or a stop.
type Controller struct {
	opts Options
	acts check.Acts

	mu       sync.Mutex
	clusters map[string]*memory // by cluster uid
}

// memory is what the Controller keeps of one cluster between passes.
type memory struct {
	underused map[string]time.Time
	idleSince time.Time // zero while busy
	read      time.Time // when the cluster's Kubernetes was last read
	blocked   []string  // the last Blocked said in events
	seen      bool      // in the current pass
}

// NewController returns a Controller with opts, defaults filled in.
func NewController(opts Options) *Controller {
	opts.Base = opts.WithDefaults(DefaultInterval)
	if opts.Cooldown <= 0 {
		opts.Cooldown = DefaultCooldown
	}
	if opts.IdleEvery <= 0 {
		opts.IdleEvery = DefaultIdleEvery
	}
	return &Controller{opts: opts, clusters: map[string]*memory{},
		acts: opts.Acts(opts.Store)}
}

// Periodic is the loop's shape: what a check.Runner runs.
func (c *Controller) Periodic() check.Periodic {
	return c.opts.Periodic("autoscaler", c)
}

// CheckAll judges every cluster once, and forgets the clusters that are
// gone.
func (c *Controller) CheckAll(ctx context.Context) error {
	return check.Pass(ctx, c.opts.Store, nil, c.Periodic())
}

// BeginPass and EndPass bracket a pass (check.Passer): what is kept of a
// cluster the pass did not judge (gone, busy, or another replica's now)
// is forgotten.
func (c *Controller) BeginPass() {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, m := range c.clusters {
		m.seen = false
	}
}

func (c *Controller) EndPass() {
	c.mu.Lock()
	defer c.mu.Unlock()
	for uid, m := range c.clusters {
		if !m.seen {
			delete(c.clusters, uid)
		}
	}
}

// memoryOf returns what is kept of a cluster, marking it seen.
func (c *Controller) memoryOf(cl *store.Cluster) *memory {
	c.mu.Lock()
	defer c.mu.Unlock()
	m := c.clusters[cl.UID]
	if m == nil {
		m = &memory{}
		c.clusters[cl.UID] = m
	}
	m.seen = true
	return m
}

// Check judges one cluster as read, and acts on what it finds; last, it
// writes the cluster's Idle condition from what it read (every cluster's,
// those it has nothing else to do with every IdleEvery).
func (c *Controller) Check(ctx context.Context, cl *store.Cluster) (err error) {
	if cl.Status.ProvisioningState != v1.StateSucceeded || !c.opts.Watched(cl.Spec.Provider) {
		return nil
	}
	var jobs []*store.Job // those that have not ended
	err = store.Each(func(pg store.Page) ([]*store.Job, string, error) { return c.opts.Store.ListJobs(ctx, cl.Key(), pg) },
		func(j *store.Job) error {
			if !j.Status.Ended() {
				jobs = append(jobs, j)
			}
			return nil
		})
	if err != nil {
		return fmt.Errorf("list jobs: %w", err)
	}
	m := c.memoryOf(cl)
	now := c.opts.Now()
	if idleOnly(cl, jobs) && !m.read.IsZero() && now.Sub(m.read) < c.opts.IdleEvery {
		return nil
	}
	m.read = now
	st, err := c.opts.Observe(ctx, cl)
	if err != nil {
		if werr := c.markIdle(ctx, cl, idleCondition("", false), now); werr != nil {
			c.opts.Logger.Warn("could not write the Idle condition", "cluster", cl.Key().String(), "err", werr)
		}
		if idleOnly(cl, jobs) {
			// Read for its Idle condition alone: Unknown says it.
			c.opts.Logger.Debug("idle: could not read the cluster's Kubernetes", "cluster", cl.Key().String(), "err", err)
			return nil
		}
		return fmt.Errorf("read the cluster's Kubernetes: %w", err)
	}
	b := busy(st, jobs)
	defer func() {
		if werr := c.markIdle(ctx, cl, idleCondition(b, true), now); err == nil && werr != nil {
			err = fmt.Errorf("write the Idle condition: %w", werr)
		}
	}()
	if err := c.syncJobs(ctx, cl, jobs, st.Jobs, now); err != nil {
		return err
	}
	if cl.Spec.IdleStop != nil {
		if stopped, err := c.idleStop(ctx, cl, m, b, now); stopped || err != nil {
			return err
		}
	}
	if !Autoscaled(&cl.Spec) {
		return nil
	}
	in := Input{Spec: &cl.Spec, State: st, Underused: m.underused, Now: now}
	if c.opts.Shape != nil {
		shapes := map[string]kubeapi.Resources{} // asked once a pass
		in.Shape = func(t string) (kubeapi.Resources, bool) {
			r, ok := shapes[t]
			if !ok {
				if r, ok = c.opts.Shape(ctx, cl, t); ok {
					shapes[t] = r
				}
			}
			return r, ok
		}
	}
	d := Decide(in)
	m.underused = d.Underused
	c.sayBlocked(ctx, cl, m, d.Blocked)
	if len(d.Changes) == 0 {
		return nil
	}
	if wait := cl.Status.UpdatedAt.Add(c.opts.Cooldown).Sub(now); wait > 0 {
		c.opts.Logger.Debug("autoscaler: cooling down", "cluster", cl.Key().String(), "for", wait, "decision", d.Reason)
		return nil
	}
	return c.begin(ctx, cl, d, now)
}

// idleStop keeps the cluster's idle clock (busy says what keeps it busy,
// "" when idle) and begins a hibernate operation once it has been idle for
// spec.idleStop.after; stopped says it did.
func (c *Controller) idleStop(ctx context.Context, cl *store.Cluster, m *memory, busy string, now time.Time) (stopped bool, err error) {
	if busy != "" {
		m.idleSince = time.Time{}
		return false, nil
	}
	if m.idleSince.IsZero() {
		// Idle from when it was seen so, or from the end of its last
		// operation if that is later (a resume just ended).
		m.idleSince = now
	}
	since := m.idleSince
	if cl.Status.UpdatedAt.After(since) {
		since = cl.Status.UpdatedAt
	}
	after, perr := time.ParseDuration(cl.Spec.IdleStop.After)
	if perr != nil || now.Sub(since) < after {
		return false, nil
	}
	if c.opts.CanStop == nil || !c.opts.CanStop(cl.Spec.Provider) {
		c.sayBlocked(ctx, cl, m, []string{fmt.Sprintf("the cluster has been idle since %s but cannot hibernate: the %s provider cannot stop machines (spec.idleStop)",
			since.UTC().Format(time.RFC3339), cl.Spec.Provider)})
		return false, nil
	}
	reason := fmt.Sprintf("idle since %s: no pod running outside the system namespaces and no job of Kiln's running for %s (spec.idleStop.after %s)",
		since.UTC().Format(time.RFC3339), now.Sub(since).Round(time.Second), cl.Spec.IdleStop.After)
	next := *cl
	op := &store.Operation{Kind: v1.KindHibernate, Reason: reason}
	begun, err := c.acts.Begin(ctx, &next, cl.ETag, op, now, func() {
		c.opts.Logger.Info("idle stop: hibernating", "cluster", cl.Key().String(), "operation", op.ID)
		c.acts.Event(ctx, cl, "Normal", "IdleStop", op.ID, reason)
	})
	if begun {
		m.idleSince = time.Time{}
	}
	return begun, err
}

// sayBlocked makes an event of what the autoscaler cannot do, when it
// differs from what it said last.
func (c *Controller) sayBlocked(ctx context.Context, cl *store.Cluster, m *memory, blocked []string) {
	if slices.Equal(blocked, m.blocked) {
		return
	}
	m.blocked = blocked
	for _, b := range blocked {
		c.acts.Event(ctx, cl, "Warning", "AutoscaleBlocked", "", b)
	}
}

// begin writes the new pool sizes and an autoscale operation, conditional
// on the cluster being as read.
func (c *Controller) begin(ctx context.Context, cl *store.Cluster, d Decision, now time.Time) error {
	next := *cl
	next.Spec.WorkerPools = slices.Clone(cl.Spec.WorkerPools)
	var remove []string
	var pools []v1.PoolResize
	for _, ch := range d.Changes {
		i := slices.IndexFunc(next.Spec.WorkerPools, func(p v1.WorkerPool) bool { return p.Name == ch.Pool })
		next.Spec.WorkerPools[i].Size = ch.To
		remove = append(remove, ch.Remove...)
		pools = append(pools, v1.PoolResize{Pool: ch.Pool, From: ch.From, To: ch.To})
	}
	op := &store.Operation{Kind: v1.KindAutoscale, Reason: d.Reason, Nodes: remove, Pools: pools}
	_, err := c.acts.Begin(ctx, &next, cl.ETag, op, now, func() {
		reason, verb := "AutoscaleUp", "growing"
		if !d.Up() {
			reason, verb = "AutoscaleDown", "shrinking"
		}
		var sizes []string
		for _, ch := range d.Changes {
			sizes = append(sizes, fmt.Sprintf("%s %d→%d", ch.Pool, ch.From, ch.To))
		}
		c.opts.Logger.Info("autoscaler: "+verb, "cluster", cl.Key().String(), "pools", strings.Join(sizes, ", "), "operation", op.ID)
		c.acts.Event(ctx, cl, "Normal", reason, op.ID, d.Reason)
	})
	return err
}
