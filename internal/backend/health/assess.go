// Package health finds the worker nodes that stayed unhealthy longer than
// their pool allows and decides whether to replace them: the machine
// health check of Kiln (Cluster API's MachineHealthCheck, by pool). A node
// is unhealthy when it is NOT_READY (its agent missed heartbeats) or its
// Kubernetes Node is NotReady; one unhealthy for longer than the pool's
// unhealthyTimeout is replaced, unless more than maxUnhealthy of the pool
// is unhealthy, in which case nothing of that pool is replaced and the
// cluster says why (something larger than one machine is wrong, and
// replacing machines would not help).
package health

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	v1 "kiln.dev/kiln/api/v1"
	"kiln.dev/kiln/internal/kubeapi"
	"kiln.dev/kiln/internal/validate"
)

// Verdict is what Assess found in one cluster.
type Verdict struct {
	// Replace are the nodes to replace, by name, sorted.
	Replace []string
	// Waiting are unhealthy nodes whose timeout has not passed yet, with
	// when it will.
	Waiting map[string]time.Time
	// Blocked says, per pool, why its unhealthy nodes are not replaced
	// (more than maxUnhealthy of it is unhealthy).
	Blocked map[string]string
	// Restart are the control-plane nodes whose machine stopped, to start
	// again, sorted (the Checker fills it in: Assess cannot know).
	Restart []string
}

// Node is a node as Assess sees it: the record, since when Kubernetes
// reports it NotReady (zero when Ready or not known), and whether its agent
// has gone silent (missed heartbeats, not NOT_READY yet).
type Node struct {
	v1.Node
	KubeNotReadySince time.Time
	Silent            bool
}

// UnhealthySince returns since when n has been unhealthy, and false when it
// is healthy. A NOT_READY node is unhealthy since its last heartbeat.
func UnhealthySince(n Node) (time.Time, bool) {
	var since time.Time
	if n.State == v1.NodeNotReady && n.LastHeartbeat != nil {
		since = *n.LastHeartbeat
	}
	if !n.KubeNotReadySince.IsZero() && (since.IsZero() || n.KubeNotReadySince.Before(since)) {
		since = n.KubeNotReadySince
	}
	return since, !since.IsZero()
}

// Assess applies each worker pool's policy to the cluster's nodes at now.
// A node the cloud gave an interruption notice (v1.Node.Interruption) is
// replaced at once, whatever the pool's maxUnhealthy.
// Only worker nodes of a pool the spec has, that were installed (READY or
// NOT_READY in Kiln), are judged: control-plane nodes are not replaced by
// this check (etcd membership needs its own care).
func Assess(spec *v1.ClusterSpec, nodes []Node, now time.Time) Verdict {
	v := Verdict{Waiting: map[string]time.Time{}, Blocked: map[string]string{}}
	byPool := map[string][]Node{}
	for _, n := range nodes {
		if n.Role == v1.RoleWorker && (n.State == v1.NodeReady || n.State == v1.NodeNotReady) {
			byPool[n.Pool] = append(byPool[n.Pool], n)
		}
	}
	for _, pool := range spec.WorkerPools {
		members := byPool[pool.Name]
		timeout := validate.UnhealthyTimeout(pool)
		var unhealthy, due []string
		for _, n := range members {
			if n.Interruption != nil {
				// The cloud takes it away whatever the pool's health: it is
				// replaced at once (drained first: it still answers).
				v.Replace = append(v.Replace, n.Name)
				continue
			}
			since, bad := UnhealthySince(n)
			if !bad {
				if n.Silent {
					// Counted against maxUnhealthy, not replaced: nodes that
					// die together turn NOT_READY a liveness sweep apart, and
					// the first alone would be within maxUnhealthy.
					unhealthy = append(unhealthy, n.Name)
				}
				continue
			}
			unhealthy = append(unhealthy, n.Name)
			if deadline := since.Add(timeout); now.Before(deadline) {
				v.Waiting[n.Name] = deadline
			} else {
				due = append(due, n.Name)
			}
		}
		if len(due) == 0 {
			continue
		}
		size := max(len(members), pool.Size)
		if allowed := validate.MaxUnhealthy(pool, size); len(unhealthy) > allowed {
			slices.Sort(unhealthy)
			v.Blocked[pool.Name] = fmt.Sprintf(
				"%d of %d nodes of pool %s are unhealthy (%s), more than maxUnhealthy %s allows (%d): none is replaced until the others recover or the pool is changed",
				len(unhealthy), size, pool.Name, strings.Join(unhealthy, ", "), orDefault(pool.MaxUnhealthy), allowed)
			continue
		}
		v.Replace = append(v.Replace, due...)
	}
	slices.Sort(v.Replace)
	return v
}

func orDefault(maxUnhealthy string) string {
	if maxUnhealthy == "" {
		return validate.DefaultMaxUnhealthy
	}
	return maxUnhealthy
}

// BlockedMessage joins the pools' reasons into one message, by pool name.
func (v Verdict) BlockedMessage() string {
	var parts []string
	for _, p := range slices.Sorted(maps.Keys(v.Blocked)) {
		parts = append(parts, v.Blocked[p])
	}
	return strings.Join(parts, "; ")
}

// KubeNotReady returns, for each Kubernetes Node whose Ready condition is
// not True, since when (the condition's last transition; nodes without a
// Ready condition are left out: they have not reported yet).
func KubeNotReady(nodes []kubeapi.Node) map[string]time.Time {
	out := map[string]time.Time{}
	for _, n := range nodes {
		c, ok := n.Condition("Ready")
		if ok && c.Status != "True" && !c.LastTransitionTime.IsZero() {
			out[n.Name] = c.LastTransitionTime
		}
	}
	return out
}

// Nodes pairs node records with what Kubernetes says of them (kube may be
// nil: not known). A node not NOT_READY whose last heartbeat is before
// quiet is Silent (a zero quiet: none is).
func Nodes(records []v1.Node, kube map[string]time.Time, quiet time.Time) []Node {
	out := make([]Node, len(records))
	for i, r := range records {
		silent := r.State != v1.NodeNotReady && r.LastHeartbeat != nil && r.LastHeartbeat.Before(quiet)
		out[i] = Node{Node: r, KubeNotReadySince: kube[r.Name], Silent: silent}
	}
	return out
}
