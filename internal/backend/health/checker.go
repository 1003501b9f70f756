package health

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	v1 "kiln.dev/kiln/api/v1"
	"kiln.dev/kiln/internal/backend/check"
	"kiln.dev/kiln/internal/clusterstate"
	"kiln.dev/kiln/internal/store"
)

// DefaultInterval is how often the Checker looks at every cluster.
const DefaultInterval = 15 * time.Second

// Store is what the Checker needs of the store.
type Store interface {
	store.ClusterLister
	check.Writer
	ListNodes(ctx context.Context, k store.Key, pg store.Page) ([]*store.Node, string, error)
}

// Options configure a Checker. Store, Watched and Steps are required.
type Options struct {
	check.Base
	Store Store
	// Watched reports whether the clusters of a provider are checked: those
	// whose machines run agents and that Kiln makes (not sim's, which have
	// no heartbeats, nor the hosts users bring, which Kiln cannot make
	// again).
	Watched func(provider string) bool
	// KubeNotReady, when set, says which of the cluster's Kubernetes nodes
	// are NotReady and since when (KubeNotReady of its nodes). An error is
	// logged and the check goes on by heartbeats.
	KubeNotReady func(ctx context.Context, cl *store.Cluster) (map[string]time.Time, error)
	// Stopped, when set, names the cluster's machines that have stopped
	// (a killed container, an agent process that exited:
	// plan.StopReporter). It is asked only when a control-plane node is
	// NOT_READY; such a node whose machine stopped is started again by a
	// repair (Verdict.Restart). An error is logged and the check goes on.
	Stopped func(ctx context.Context, cl *store.Cluster) ([]string, error)
	// Attached reports whether a provider's clusters are attached ones
	// (made elsewhere, with no agents): their nodes are not judged but
	// observed, by Observe (internal/plan/attached.Observe), at every check of an
	// idle one. Both optional.
	Attached func(provider string) bool
	Observe  func(ctx context.Context, cl *store.Cluster) error
	// Silence is how long a node's agent may go without a heartbeat before
	// the node counts against its pool's maxUnhealthy while it is not
	// NOT_READY yet (two heartbeat intervals); zero: never. Nodes that die
	// together turn NOT_READY one liveness sweep apart, and the first alone
	// would be replaced as within maxUnhealthy.
	Silence time.Duration
	// Started is when the process started: Silence counts from it at the
	// earliest (clusterstate.Quiet); zero: when NewChecker runs.
	Started time.Time
	// Unreachable is how long KubeNotReady may fail (the cluster's
	// Kubernetes API not answering Kiln) before a watched cluster is
	// Unhealthy (APIUnreachable) whatever its agents say; zero: two
	// intervals.
	Unreachable time.Duration
}

// Checker is the machine health check: every Interval it judges the worker
// nodes of every idle (Succeeded) cluster it watches with Assess, begins a
// repair operation for the nodes to replace (and for control-plane
// machines that stopped, to start them again), and keeps the cluster's
// NodesHealthy condition saying whether a pool is beyond its maxUnhealthy.
// Several replicas may run one each: the operation is begun conditional on
// the cluster's etag, so one of them wins.
type Checker struct {
	opts    Options
	acts    check.Acts
	started time.Time // Silence counts from it at the earliest

	mu sync.Mutex
	// unanswered holds, by cluster uid, when its Kubernetes API first
	// failed to answer in the failures running now; failing are those a
	// pass found failing (the others are forgotten at its end).
	unanswered map[string]time.Time
	failing    map[string]bool
}

// BeginPass starts a pass (check.Passer).
func (c *Checker) BeginPass() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.failing = map[string]bool{}
}

// EndPass forgets the failures of clusters the pass did not find failing
// (deleted, no longer watched).
func (c *Checker) EndPass() {
	c.mu.Lock()
	defer c.mu.Unlock()
	for uid := range c.unanswered {
		if !c.failing[uid] {
			delete(c.unanswered, uid)
		}
	}
	c.failing = nil
}

// NewChecker returns a Checker with opts, defaults filled in.
func NewChecker(opts Options) *Checker {
	opts.Base = opts.WithDefaults(DefaultInterval)
	if opts.Unreachable <= 0 {
		opts.Unreachable = 2 * opts.Interval
	}
	c := &Checker{opts: opts, acts: opts.Acts(opts.Store), started: opts.Started, unanswered: map[string]time.Time{}}
	if c.started.IsZero() {
		c.started = opts.Now()
	}
	return c
}

// Periodic is the check's shape: what a check.Runner runs.
func (c *Checker) Periodic() check.Periodic {
	return c.opts.Periodic("machine health check", c)
}

// CheckAll checks every cluster once.
func (c *Checker) CheckAll(ctx context.Context) error {
	return check.Pass(ctx, c.opts.Store, nil, c.Periodic())
}

// Check judges one cluster as read (cl), and acts on what it finds. Of
// every cluster it records status.health when that changes
// (recordHealth); those of watched providers it also judges for repair,
// attached ones it observes.
func (c *Checker) Check(ctx context.Context, cl *store.Cluster) error {
	var records []v1.Node
	err := store.Each(func(pg store.Page) ([]*store.Node, string, error) { return c.opts.Store.ListNodes(ctx, cl.Key(), pg) },
		func(n *store.Node) error { records = append(records, n.Node); return nil })
	if err != nil {
		return fmt.Errorf("list nodes: %w", err)
	}
	now := c.opts.Now()
	quiet := clusterstate.Quiet(now, c.started, c.opts.Silence)
	h := clusterstate.Health(&cl.Spec, cl.Status.ProvisioningState, records, quiet)
	attached := c.opts.Attached != nil && c.opts.Attached(cl.Spec.Provider)
	watched := !attached && cl.Status.ProvisioningState == v1.StateSucceeded && c.opts.Watched(cl.Spec.Provider)
	var kube map[string]time.Time
	if watched && c.opts.KubeNotReady != nil {
		var kerr error
		kube, kerr = c.opts.KubeNotReady(ctx, cl)
		if kerr != nil {
			c.opts.Logger.Debug("could not read the cluster's Kubernetes nodes; judging by heartbeats", "cluster", cl.Key().String(), "err", kerr)
		}
		h = c.kubeView(cl, h, kerr, now)
	}
	if cl, err = c.recordHealth(ctx, cl, h, now); err != nil || cl == nil {
		return err
	}
	if attached {
		if cl.Status.ProvisioningState != v1.StateSucceeded || c.opts.Observe == nil {
			return nil
		}
		return c.opts.Observe(ctx, cl)
	}
	if !watched {
		return nil
	}
	v := Assess(&cl.Spec, Nodes(records, kube, quiet), now)
	v.Restart = c.stoppedControlPlane(ctx, cl, records)
	if len(v.Replace) > 0 || len(v.Restart) > 0 {
		return c.repair(ctx, cl, v, now)
	}
	return c.setCondition(ctx, cl, v, h, now)
}

// kubeView is h with what reading the cluster's Kubernetes API said (err):
// a control plane whose agents answer and whose API has not answered Kiln
// for Options.Unreachable is Unhealthy (APIUnreachable). A control plane
// judged down already is not judged again.
func (c *Checker) kubeView(cl *store.Cluster, h v1.Health, err error, now time.Time) v1.Health {
	c.mu.Lock()
	defer c.mu.Unlock()
	if err == nil {
		delete(c.unanswered, cl.UID)
		return h
	}
	if c.failing != nil {
		c.failing[cl.UID] = true
	}
	first, ok := c.unanswered[cl.UID]
	if !ok {
		first = now
		c.unanswered[cl.UID] = now
	}
	if now.Sub(first) < c.opts.Unreachable || h.Reason == "ControlPlaneDown" || h.Reason == "ControlPlaneQuorumLost" {
		return h
	}
	return clusterstate.APIUnreachable(h, cl.Status.Endpoint, now.Sub(first), err)
}

// recordHealth writes h as cl's status.health when its state or reason
// changed (a first Healthy is not written: nothing was said before), with
// an event HealthChanged, Warning when h is Degraded or Unhealthy. It
// returns the cluster as it is after (cl when nothing was written), or nil
// when another change got there first: the next pass judges it again.
func (c *Checker) recordHealth(ctx context.Context, cl *store.Cluster, h v1.Health, now time.Time) (*store.Cluster, error) {
	was := cl.Status.Health
	switch {
	case was != nil && was.State == h.State && was.Reason == h.Reason:
		return cl, nil
	case was == nil && (h.State == v1.HealthHealthy || h.State == v1.HealthUnknown):
		return cl, nil
	}
	next := *cl
	since := now.UTC()
	h.Since = &since
	next.Status.Health = &h
	written, err := c.acts.SetStatus(ctx, cl, &next)
	if err != nil {
		return nil, fmt.Errorf("write status.health: %w", err)
	}
	if !written {
		return nil, nil
	}
	typ, before := "Normal", "nothing recorded"
	if h.State == v1.HealthDegraded || h.State == v1.HealthUnhealthy {
		typ = "Warning"
	}
	if was != nil {
		before = was.State + " (" + was.Reason + ")"
	}
	msg := fmt.Sprintf("health %s (%s), was %s: %s", h.State, h.Reason, before, h.Message)
	c.opts.Logger.Info("cluster health changed", "cluster", cl.Key().String(), "health", h.State, "reason", h.Reason, "was", before)
	c.acts.Event(ctx, cl, typ, "HealthChanged", "", msg)
	return &next, nil
}

// repair begins a repair operation, conditional on the cluster being as
// read: a user's change or another replica's repair wins over it.
func (c *Checker) repair(ctx context.Context, cl *store.Cluster, v Verdict, now time.Time) error {
	next := *cl
	op := &store.Operation{Kind: v1.KindRepair}
	_, err := c.acts.Begin(ctx, &next, cl.ETag, op, now, func() {
		if len(v.Restart) > 0 {
			msg := fmt.Sprintf("control-plane machines stopped: %s; starting them again (repair operation %s)", strings.Join(v.Restart, ", "), op.ID)
			c.opts.Logger.Warn("machine health check: starting stopped control-plane machines", "cluster", cl.Key().String(), "nodes", v.Restart, "operation", op.ID)
			c.acts.Event(ctx, cl, "Warning", "ControlPlaneStopped", op.ID, msg)
		}
		if len(v.Replace) > 0 {
			msg := fmt.Sprintf("replacing unhealthy worker nodes: %s (repair operation %s)", strings.Join(v.Replace, ", "), op.ID)
			c.opts.Logger.Warn("machine health check: replacing nodes", "cluster", cl.Key().String(), "nodes", v.Replace, "operation", op.ID)
			c.acts.Event(ctx, cl, "Warning", "NodesUnhealthy", op.ID, msg)
		}
	})
	return err
}

// stoppedControlPlane names the control-plane nodes that are NOT_READY and
// whose machine the provider reports stopped, sorted; the provider is asked
// only when there is such a node.
func (c *Checker) stoppedControlPlane(ctx context.Context, cl *store.Cluster, records []v1.Node) []string {
	var down []string
	for _, n := range records {
		if n.Role == v1.RoleControlPlane && n.State == v1.NodeNotReady {
			down = append(down, n.Name)
		}
	}
	if len(down) == 0 || c.opts.Stopped == nil {
		return nil
	}
	stopped, err := c.opts.Stopped(ctx, cl)
	if err != nil {
		c.opts.Logger.Warn("could not ask the provider which machines stopped", "cluster", cl.Key().String(), "err", err)
		return nil
	}
	var out []string
	for _, name := range down {
		if slices.Contains(stopped, name) {
			out = append(out, name)
		}
	}
	slices.Sort(out)
	return out
}

// setCondition keeps NodesHealthy as the verdict and the control plane's
// health say, writing only a change: False when a pool is beyond its
// maxUnhealthy or the control plane is down or has lost its quorum.
func (c *Checker) setCondition(ctx context.Context, cl *store.Cluster, v Verdict, h v1.Health, now time.Time) error {
	want := v1.Condition{Type: v1.ConditionNodesHealthy, Status: "True", Reason: "AsExpected",
		Message: "the control plane answers and no pool has more unhealthy nodes than its maxUnhealthy"}
	var bad []string
	if h.Reason == "ControlPlaneDown" || h.Reason == "ControlPlaneQuorumLost" {
		want.Reason = h.Reason
		bad = append(bad, h.Message)
	}
	if msg := v.BlockedMessage(); msg != "" {
		if len(bad) == 0 {
			want.Reason = "TooManyUnhealthy"
		}
		bad = append(bad, msg)
	}
	if len(bad) > 0 {
		want.Status, want.Message = "False", strings.Join(bad, "; ")
	}
	if want.Status == "True" && !slices.ContainsFunc(cl.Status.Conditions, func(c v1.Condition) bool { return c.Type == want.Type }) {
		return nil // healthy, and never said otherwise
	}
	_, written, err := c.acts.SetCondition(ctx, cl, want, now)
	if err != nil {
		return fmt.Errorf("write condition %s: %w", want.Type, err)
	}
	if !written {
		return nil
	}
	typ := "Normal"
	if want.Status == "False" {
		typ = "Warning"
		c.opts.Logger.Warn("machine health check: not replacing", "cluster", cl.Key().String(), "why", want.Message)
	}
	c.acts.Event(ctx, cl, typ, "NodesHealthy"+want.Status, "", want.Message)
	return nil
}
