// Package elastic is Kiln's autoscaler: it reads a cluster's Kubernetes
// (nodes, pods, PodDisruptionBudgets) and decides how the sizes of its
// autoscaled worker pools change, and the loop in the backend that begins
// an autoscale operation for each decision.
//
// Growing: pods the scheduler marked unschedulable, that no existing node
// has room for, are packed onto new nodes of the pool whose node shape
// (allocatable CPU and memory, labels, taints) fits most of them, within the
// pool's max, in one step for a burst. Shrinking: a node of an autoscaled
// pool whose pods request less than half its CPU and memory for the pool's
// scaleDownAfter is removed, never below min, when each of its pods has a
// controller, a PodDisruptionBudget allows its eviction and another node
// has room for it.
package elastic

import (
	"cmp"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	v1 "kiln.dev/kiln/api/v1"
	"kiln.dev/kiln/internal/kubeapi"
	"kiln.dev/kiln/internal/validate"
)

// underusedBelow is the share of a node's CPU and memory its pods must
// request less of for it to count as underused.
const underusedBelow = 0.5

// State is what the autoscaler reads of a cluster's Kubernetes.
type State struct {
	Nodes   []kubeapi.Node
	Pods    []kubeapi.Pod
	Budgets []kubeapi.PodDisruptionBudget
	// Jobs are the Kubernetes Jobs of Kiln's jobs (labelled v1.LabelJob).
	Jobs []kubeapi.Job
}

// Input is what Decide judges.
type Input struct {
	Spec  *v1.ClusterSpec
	State State
	// Shape returns the allocatable resources of a node of an instance
	// type (the provider's offer); optional: without it, a pool that has
	// no node yet is taken to be shaped as another worker node.
	Shape func(instanceType string) (kubeapi.Resources, bool)
	// Underused says since when each node has been underused, as the
	// last Decide left it (nil at first).
	Underused map[string]time.Time
	Now       time.Time
}

// Change is a new size of one pool.
type Change struct {
	Pool     string
	From, To int
	// Remove are the nodes a scale-down removes, emptiest first.
	Remove []string
}

// Decision is what Decide found.
type Decision struct {
	// Changes are the pools to resize (all up, or all down); none when
	// nothing is to change.
	Changes []Change
	// Reason says why, for the operation and its event: which pods,
	// which pool, why not another.
	Reason string
	// Blocked say what the autoscaler would do and cannot, and why (no pool
	// fits a pod; a budget or a pod without a controller keeps a node).
	Blocked []string
	// Underused is since when each underused node of an autoscaled pool has
	// been underused, for the next Decide.
	Underused map[string]time.Time
}

// Up reports whether the decision grows pools.
func (d Decision) Up() bool { return len(d.Changes) > 0 && d.Changes[0].To > d.Changes[0].From }

// Autoscaled reports whether any of the spec's pools autoscales.
func Autoscaled(spec *v1.ClusterSpec) bool {
	return slices.ContainsFunc(spec.WorkerPools, func(p v1.WorkerPool) bool { return p.Autoscale != nil })
}

// Decide judges one cluster: a scale-up when pods wait for room a pool can
// give, otherwise a scale-down of nodes underused long enough (pods that no
// pool can help do not hold it back).
func Decide(in Input) Decision {
	c := newCluster(in.State)
	d := Decision{Underused: c.underused(in)}
	if pending := c.waiting(); len(pending) > 0 {
		d.Changes, d.Reason, d.Blocked = c.scaleUp(in, pending)
		if len(d.Changes) > 0 {
			return d
		}
	}
	// Pods no pool can help do not keep underused nodes.
	var blocked []string
	d.Changes, d.Reason, blocked = c.scaleDown(in, d.Underused)
	d.Blocked = append(d.Blocked, blocked...)
	return d
}

// node is a Kubernetes node as the autoscaler plans with it: what is free
// on it as pods are placed.
type node struct {
	kubeapi.Node
	pool string
	free kubeapi.Resources
	pods []kubeapi.Pod // bound to it, running or about to
}

// usable reports whether the scheduler may place pods on the node.
func (n *node) usable() bool { return n.Ready() && !n.Unschedulable }

type cluster struct {
	nodes  []*node
	byName map[string]*node
	pods   []kubeapi.Pod
	state  State
}

func newCluster(s State) *cluster {
	c := &cluster{byName: map[string]*node{}, state: s}
	for _, kn := range s.Nodes {
		n := &node{Node: kn, pool: kn.Labels[v1.LabelPool], free: kn.Allocatable}
		c.nodes = append(c.nodes, n)
		c.byName[kn.Name] = n
	}
	for _, p := range s.Pods {
		if p.Finished() {
			continue
		}
		c.pods = append(c.pods, p)
		if n := c.byName[p.NodeName]; n != nil {
			n.free = n.free.Sub(p.Requests)
			n.pods = append(n.pods, p)
		}
	}
	return c
}

// waiting are the unschedulable pods no usable node has room for now: the
// scheduler will place the others (a node that just joined), so they need
// no new node.
func (c *cluster) waiting() []kubeapi.Pod {
	var out []kubeapi.Pod
	free := map[string]kubeapi.Resources{}
	for _, n := range c.nodes {
		free[n.Name] = n.free
	}
	for _, p := range c.pods {
		if !p.Unschedulable || p.Terminating {
			continue
		}
		i := slices.IndexFunc(c.nodes, func(n *node) bool {
			return n.usable() && free[n.Name].Fits(p.Requests) && why(p, shapeOf(n)) == ""
		})
		if i >= 0 {
			free[c.nodes[i].Name] = free[c.nodes[i].Name].Sub(p.Requests)
			continue
		}
		out = append(out, p)
	}
	return out
}

// shape is what a new node of a pool would be.
type shape struct {
	alloc  kubeapi.Resources // for pods, after the DaemonSets' share
	labels map[string]string
	taints []kubeapi.Taint
	// from says where the shape was learnt ("node n", "instance type t").
	from string
}

// shapeOf is a node's own shape (its free room aside).
func shapeOf(n *node) shape {
	return shape{alloc: n.Allocatable, labels: n.Labels, taints: n.Taints, from: "node " + n.Name}
}

// why says why a pod cannot go on a node of shape s ("" when it can),
// leaving room aside.
func why(p kubeapi.Pod, s shape) string {
	for k, v := range p.NodeSelector {
		if got, ok := s.labels[k]; !ok || got != v {
			return fmt.Sprintf("its nodeSelector %s=%s does not match the pool's nodes", k, v)
		}
	}
	for _, t := range s.taints {
		if t.Effect != "NoSchedule" && t.Effect != "NoExecute" {
			continue
		}
		if !slices.ContainsFunc(p.Tolerations, func(tol kubeapi.Toleration) bool { return tol.Tolerates(t) }) {
			return fmt.Sprintf("it does not tolerate the taint %s", taintString(t))
		}
	}
	return ""
}

func taintString(t kubeapi.Taint) string {
	if t.Value == "" {
		return t.Key + ":" + t.Effect
	}
	return t.Key + "=" + t.Value + ":" + t.Effect
}

// transientTaint is a taint Kubernetes puts on a node for a while (not
// ready, unreachable, cordoned): a new node would not keep it.
func transientTaint(t kubeapi.Taint) bool {
	return strings.HasPrefix(t.Key, "node.kubernetes.io/") || strings.HasPrefix(t.Key, "node.cloudprovider.kubernetes.io/")
}

// poolShape is what a new node of pool p would be: as its Ready nodes are
// (their DaemonSet pods' share taken off), or, with none, as its instance
// type says or another worker node is, with the pool's labels and taints.
func (c *cluster) poolShape(in Input, p v1.WorkerPool) (shape, bool) {
	for _, n := range c.nodes {
		if n.pool != p.Name || !n.Ready() {
			continue
		}
		s := shape{alloc: n.Allocatable, labels: maps.Clone(n.Labels), from: "node " + n.Name}
		delete(s.labels, "kubernetes.io/hostname")
		for _, t := range n.Taints {
			if !transientTaint(t) {
				s.taints = append(s.taints, t)
			}
		}
		for _, pod := range n.pods {
			if pod.DaemonSet() || pod.Mirror {
				s.alloc = s.alloc.Sub(pod.Requests)
			}
		}
		return s, true
	}
	s := shape{labels: map[string]string{v1.LabelPool: p.Name, "kubernetes.io/os": "linux"}}
	maps.Copy(s.labels, p.Labels)
	for _, t := range p.Taints {
		s.taints = append(s.taints, parseTaint(t))
	}
	if in.Shape != nil {
		if r, ok := in.Shape(p.InstanceType); ok {
			s.alloc, s.from = r, "instance type "+cmp.Or(p.InstanceType, "(default)")
			return s, true
		}
	}
	for _, n := range c.nodes {
		if n.pool != "" && n.Ready() {
			s.alloc, s.from = n.Allocatable, "node "+n.Name+" of pool "+n.pool+" (the pool has no node to learn from)"
			if arch := n.Labels["kubernetes.io/arch"]; arch != "" {
				s.labels["kubernetes.io/arch"] = arch
			}
			return s, true
		}
	}
	return shape{}, false
}

// parseTaint reads key[=value]:Effect (validated when the spec was).
func parseTaint(s string) kubeapi.Taint {
	kv, effect, _ := strings.Cut(s, ":")
	k, v, _ := strings.Cut(kv, "=")
	return kubeapi.Taint{Key: k, Value: v, Effect: effect}
}

// pack places pods on at most limit new nodes of shape s, first fit,
// largest first: how many nodes it took and which pods found room.
func pack(pods []kubeapi.Pod, s shape, limit int) (nodes int, placed []kubeapi.Pod) {
	sorted := slices.Clone(pods)
	slices.SortStableFunc(sorted, func(a, b kubeapi.Pod) int {
		return cmp.Or(cmp.Compare(b.Requests.MilliCPU, a.Requests.MilliCPU), cmp.Compare(b.Requests.Memory, a.Requests.Memory))
	})
	var free []kubeapi.Resources
	for _, p := range sorted {
		i := slices.IndexFunc(free, func(f kubeapi.Resources) bool { return f.Fits(p.Requests) })
		if i < 0 {
			if len(free) == limit || !s.alloc.Fits(p.Requests) {
				continue
			}
			free = append(free, s.alloc)
			i = len(free) - 1
		}
		free[i] = free[i].Sub(p.Requests)
		placed = append(placed, p)
	}
	return len(free), placed
}

// scaleUp grows the pools that give the waiting pods room: the pool that
// places most of them (fewest nodes on a tie), then again for what is left.
func (c *cluster) scaleUp(in Input, pending []kubeapi.Pod) ([]Change, string, []string) {
	type option struct {
		pool   v1.WorkerPool
		shape  shape
		nodes  int
		placed []kubeapi.Pod
		chosen bool
	}
	var options []*option
	notChosen := map[string]string{} // pool → why not
	for _, p := range in.Spec.WorkerPools {
		if p.Autoscale == nil {
			continue
		}
		if p.Size >= p.Autoscale.Max {
			notChosen[p.Name] = fmt.Sprintf("pool %s is at its max %d", p.Name, p.Autoscale.Max)
			continue
		}
		s, ok := c.poolShape(in, p)
		if !ok {
			notChosen[p.Name] = fmt.Sprintf("pool %s: its node shape is not known (no Ready worker node, no instance type size)", p.Name)
			continue
		}
		options = append(options, &option{pool: p, shape: s})
	}
	var changes []Change
	var said []string
	left := pending
	for len(left) > 0 {
		var best *option
		for _, o := range options {
			if o.chosen {
				continue
			}
			var fit []kubeapi.Pod
			for _, p := range left {
				if why(p, o.shape) == "" {
					fit = append(fit, p)
				}
			}
			o.nodes, o.placed = pack(fit, o.shape, o.pool.Autoscale.Max-o.pool.Size)
			if len(o.placed) == 0 {
				continue
			}
			if best == nil || len(o.placed) > len(best.placed) || (len(o.placed) == len(best.placed) && o.nodes < best.nodes) {
				best = o
			}
		}
		if best == nil {
			break
		}
		best.chosen = true
		p := best.pool
		changes = append(changes, Change{Pool: p.Name, From: p.Size, To: p.Size + best.nodes})
		said = append(said, fmt.Sprintf("pool %s grows from %d to %d (max %d): %s unschedulable (%s) fit on %d new %s of %s each (shape of %s)",
			p.Name, p.Size, p.Size+best.nodes, p.Autoscale.Max, count(len(best.placed), "pod"),
			podList(best.placed), best.nodes, plural(best.nodes, "node"), best.shape.alloc, best.shape.from))
		left = slices.DeleteFunc(slices.Clone(left), func(p kubeapi.Pod) bool {
			return slices.ContainsFunc(best.placed, func(q kubeapi.Pod) bool { return q.PodRef == p.PodRef })
		})
	}
	// Why not the other pools: what kept the first waiting pod off them.
	for _, o := range options {
		switch {
		case o.chosen:
		case len(o.placed) > 0:
			notChosen[o.pool.Name] = fmt.Sprintf("pool %s would place fewer of them", o.pool.Name)
		default:
			notChosen[o.pool.Name] = fmt.Sprintf("pool %s: %s", o.pool.Name, whyNot(pending[0], o.shape, o.pool))
		}
	}
	var blocked []string
	for _, p := range left {
		var whys []string
		for _, name := range slices.Sorted(maps.Keys(notChosen)) {
			i := slices.IndexFunc(options, func(o *option) bool { return o.pool.Name == name })
			if i < 0 {
				whys = append(whys, notChosen[name])
				continue
			}
			whys = append(whys, fmt.Sprintf("pool %s: %s", name, whyNot(p, options[i].shape, options[i].pool)))
		}
		for _, o := range options {
			if o.chosen {
				whys = append(whys, fmt.Sprintf("pool %s: %s", o.pool.Name, whyNot(p, o.shape, o.pool)))
			}
		}
		if len(whys) == 0 {
			whys = []string{"no worker pool autoscales"}
		}
		blocked = append(blocked, fmt.Sprintf("pod %s is unschedulable and no autoscaled pool can take it: %s", p.PodRef, strings.Join(whys, "; ")))
	}
	if len(changes) == 0 {
		return nil, "", blocked
	}
	reason := strings.Join(said, "; ")
	var others []string
	for _, name := range slices.Sorted(maps.Keys(notChosen)) {
		others = append(others, notChosen[name])
	}
	if len(others) > 0 {
		reason += ". Not another pool: " + strings.Join(others, "; ")
	}
	return changes, reason, blocked
}

// whyNot says why a pod gets no new node of a pool that has room to grow:
// a selector or taint, its size, or else the pool's max.
func whyNot(p kubeapi.Pod, s shape, pool v1.WorkerPool) string {
	if w := why(p, s); w != "" {
		return w
	}
	if !s.alloc.Fits(p.Requests) {
		return fmt.Sprintf("it requests %s, a node offers %s", p.Requests, s.alloc)
	}
	return fmt.Sprintf("its max %d leaves no room", pool.Autoscale.Max)
}

// usage is the larger share of a node's CPU and memory its pods (but
// DaemonSet and mirror pods) request.
func usage(n *node) float64 {
	var req kubeapi.Resources
	for _, p := range n.pods {
		if !p.DaemonSet() && !p.Mirror {
			req = req.Add(p.Requests)
		}
	}
	u := 0.0
	if a := n.Allocatable.MilliCPU; a > 0 {
		u = float64(req.MilliCPU) / float64(a)
	}
	if a := n.Allocatable.Memory; a > 0 {
		u = max(u, float64(req.Memory)/float64(a))
	}
	return u
}

// underused is since when each usable node of an autoscaled pool has been
// underused: as before for those that still are, now for those that have
// just become so.
func (c *cluster) underused(in Input) map[string]time.Time {
	out := map[string]time.Time{}
	for _, n := range c.nodes {
		p := pool(in.Spec, n.pool)
		if p == nil || p.Autoscale == nil || !n.usable() || usage(n) >= underusedBelow {
			continue
		}
		since, ok := in.Underused[n.Name]
		if !ok {
			since = in.Now
		}
		out[n.Name] = since
	}
	return out
}

func pool(spec *v1.ClusterSpec, name string) *v1.WorkerPool {
	for i := range spec.WorkerPools {
		if spec.WorkerPools[i].Name == name {
			return &spec.WorkerPools[i]
		}
	}
	return nil
}

// scaleDown removes the nodes underused for their pool's scaleDownAfter,
// emptiest first, down to each pool's min, when their pods can go: each
// has a controller, its budgets allow its eviction, and another node has
// room for it (the room taken as each node is planned away).
func (c *cluster) scaleDown(in Input, underused map[string]time.Time) ([]Change, string, []string) {
	var candidates []*node
	for name, since := range underused {
		n := c.byName[name]
		p := pool(in.Spec, n.pool)
		if in.Now.Sub(since) >= validate.ScaleDownAfter(*p.Autoscale) {
			candidates = append(candidates, n)
		}
	}
	slices.SortFunc(candidates, func(a, b *node) int { return cmp.Or(cmp.Compare(usage(a), usage(b)), cmp.Compare(a.Name, b.Name)) })
	gone := map[string]bool{}
	allowed := map[string]int{} // budget → disruptions left
	for _, b := range c.state.Budgets {
		allowed[b.Namespace+"/"+b.Name] = b.DisruptionsAllowed
	}
	removed := map[string][]string{} // pool → nodes
	var blocked, said []string
	for _, n := range candidates {
		p := pool(in.Spec, n.pool)
		if p.Size-len(removed[p.Name]) <= p.Autoscale.Min {
			continue
		}
		plan, msg := c.moveAway(n, gone, allowed)
		if msg != "" {
			blocked = append(blocked, fmt.Sprintf("node %s of pool %s is underused since %s but stays: %s",
				n.Name, p.Name, underused[n.Name].UTC().Format(time.RFC3339), msg))
			continue
		}
		for target, r := range plan.room {
			c.byName[target].free = c.byName[target].free.Sub(r)
		}
		maps.Copy(allowed, plan.allowed)
		gone[n.Name] = true
		removed[p.Name] = append(removed[p.Name], n.Name)
		said = append(said, fmt.Sprintf("%s (requests %.0f%% of it, underused for %s)", n.Name, 100*usage(n),
			in.Now.Sub(underused[n.Name]).Round(time.Second)))
	}
	var changes []Change
	for _, p := range in.Spec.WorkerPools {
		if r := removed[p.Name]; len(r) > 0 {
			changes = append(changes, Change{Pool: p.Name, From: p.Size, To: p.Size - len(r), Remove: r})
		}
	}
	if len(changes) == 0 {
		return nil, "", blocked
	}
	var parts []string
	for _, ch := range changes {
		p := pool(in.Spec, ch.Pool)
		parts = append(parts, fmt.Sprintf("pool %s shrinks from %d to %d (min %d, scaleDownAfter %s)", ch.Pool, ch.From, ch.To,
			p.Autoscale.Min, validate.ScaleDownAfter(*p.Autoscale)))
	}
	reason := strings.Join(parts, "; ") + ": underused nodes " + strings.Join(said, ", ") + "; their pods fit on the other nodes"
	return changes, reason, blocked
}

// movePlan is how a node's pods would move: the room they take on each
// other node, and the budgets' disruptions left after.
type movePlan struct {
	room    map[string]kubeapi.Resources
	allowed map[string]int
}

// moveAway plans where node n's pods go if it is removed, or says why
// they cannot go.
func (c *cluster) moveAway(n *node, gone map[string]bool, allowed map[string]int) (movePlan, string) {
	plan := movePlan{room: map[string]kubeapi.Resources{}, allowed: map[string]int{}}
	free := map[string]kubeapi.Resources{}
	for _, o := range c.nodes {
		free[o.Name] = o.free
	}
	for _, p := range n.pods {
		if p.DaemonSet() || p.Mirror || p.Terminating {
			continue
		}
		if p.OwnerKind == "" {
			return movePlan{}, fmt.Sprintf("pod %s has no controller: evicted, it would not come back", p.PodRef)
		}
		for _, b := range c.state.Budgets {
			if b.Namespace != p.Namespace || !b.Selects(p.Labels) {
				continue
			}
			key := b.Namespace + "/" + b.Name
			left, ok := plan.allowed[key]
			if !ok {
				left = allowed[key]
			}
			if left <= 0 {
				return movePlan{}, fmt.Sprintf("PodDisruptionBudget %s allows no more disruptions (%d of %d desired pods healthy) and selects pod %s",
					key, b.CurrentHealthy, b.DesiredHealthy, p.PodRef)
			}
			plan.allowed[key] = left - 1
		}
		i := slices.IndexFunc(c.nodes, func(o *node) bool {
			return o != n && !gone[o.Name] && o.usable() && free[o.Name].Fits(p.Requests) && why(p, shapeOf(o)) == ""
		})
		if i < 0 {
			return movePlan{}, fmt.Sprintf("pod %s (requests %s) would fit on no other node", p.PodRef, p.Requests)
		}
		target := c.nodes[i].Name
		free[target] = free[target].Sub(p.Requests)
		plan.room[target] = plan.room[target].Add(p.Requests)
	}
	return plan, ""
}

// podList names up to 5 pods, then how many more.
func podList(pods []kubeapi.Pod) string {
	var names []string
	for i, p := range pods {
		if i == 5 {
			names = append(names, fmt.Sprintf("and %d more", len(pods)-5))
			break
		}
		names = append(names, p.PodRef.String())
	}
	return strings.Join(names, ", ")
}

func count(n int, what string) string { return fmt.Sprintf("%d %s", n, plural(n, what)) }

func plural(n int, what string) string {
	if n == 1 {
		return what
	}
	return what + "s"
}
