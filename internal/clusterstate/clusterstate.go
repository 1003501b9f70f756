// Package clusterstate says what a cluster's node records add up to: the
// counts of wanted, present and ready nodes (status.nodes) and the
// cluster's health (status.health). The API computes both when it answers,
// so that the console, the CLI and programs read one set of numbers that
// is true now; the health checker uses Health to record when it changes.
package clusterstate

import (
	"fmt"
	"slices"
	"strings"
	"time"

	v1 "kiln.dev/kiln/api/v1"
	"kiln.dev/kiln/internal/validate"
)

// Counts counts nodes (the cluster's node records) against spec.
func Counts(spec *v1.ClusterSpec, nodes []v1.Node) v1.NodeCounts {
	c := v1.NodeCounts{ControlPlaneWanted: spec.ControlPlane.Size}
	pools := map[string]*v1.PoolCount{}
	for _, p := range spec.WorkerPools {
		c.WorkersWanted += p.Size
		c.Pools = append(c.Pools, v1.PoolCount{Name: p.Name, Wanted: p.Size})
	}
	for i := range c.Pools {
		pools[c.Pools[i].Name] = &c.Pools[i]
	}
	for _, n := range nodes {
		if n.State == v1.NodeDeleting {
			continue
		}
		ready := n.State == v1.NodeReady
		if ready {
			c.Ready++
		}
		if n.State == v1.NodeNotReady {
			c.NotReady++
		}
		switch n.Role {
		case v1.RoleControlPlane:
			c.ControlPlane++
			if ready {
				c.ControlPlaneReady++
			}
		case v1.RoleWorker:
			c.Workers++
			if ready {
				c.WorkersReady++
			}
			if p := pools[n.Pool]; p != nil {
				p.Present++
				if ready {
					p.Ready++
				}
			}
		}
	}
	return c
}

// Down reports whether an installed node has stopped answering: NOT_READY
// (its agent missed heartbeats long enough for the gateway to say so), or
// READY with its last heartbeat before quiet (two heartbeat intervals
// ago: it is on its way to NOT_READY). Nodes without heartbeats (the sim
// provider's) are never silent.
func Down(n v1.Node, quiet time.Time) bool {
	switch n.State {
	case v1.NodeNotReady:
		return true
	case v1.NodeReady:
		return !quiet.IsZero() && n.LastHeartbeat != nil && n.LastHeartbeat.Before(quiet)
	}
	return false
}

// Quiet is the quiet time Down and Health take at now: silence before now,
// or zero (READY is trusted) while the process that asks has been up for
// less than silence since started, so that a kilnd started again gives
// the agents time to reconnect before their old heartbeats count against
// them (as the gateway's liveness sweep does).
func Quiet(now, started time.Time, silence time.Duration) time.Time {
	if silence <= 0 || now.Sub(started) < silence {
		return time.Time{}
	}
	return now.Add(-silence)
}

// Health judges the cluster (spec, its provisioning state) by its nodes at
// a moment whose quiet time is given (see Down; zero: READY is trusted).
// The worst finding decides the state and the reason; the message says
// every finding. Since is left nil: the health checker keeps it.
func Health(spec *v1.ClusterSpec, state string, nodes []v1.Node, quiet time.Time) v1.Health {
	switch state {
	case v1.StateHibernated:
		return v1.Health{State: v1.HealthUnknown, Reason: "Hibernated",
			Message: "the cluster is hibernated: its machines are stopped until it is resumed"}
	}
	var cp, cpDown []string
	workers := map[string][]string{}
	down := map[string][]string{}
	var allWorkers, allDown []string
	for _, n := range nodes {
		if n.State != v1.NodeReady && n.State != v1.NodeNotReady {
			continue
		}
		d := Down(n, quiet)
		switch n.Role {
		case v1.RoleControlPlane:
			cp = append(cp, n.Name)
			if d {
				cpDown = append(cpDown, n.Name)
			}
		case v1.RoleWorker:
			workers[n.Pool] = append(workers[n.Pool], n.Name)
			allWorkers = append(allWorkers, n.Name)
			if d {
				down[n.Pool] = append(down[n.Pool], n.Name)
				allDown = append(allDown, n.Name)
			}
		}
	}
	if len(cp) == 0 && len(allWorkers) == 0 {
		switch state {
		case v1.StateCreating:
			return v1.Health{State: v1.HealthUnknown, Reason: "Creating", Message: "no node is installed yet"}
		case v1.StateDeleting:
			return v1.Health{State: v1.HealthUnknown, Reason: "Deleting", Message: "the cluster is being deleted"}
		}
		return v1.Health{State: v1.HealthUnknown, Reason: "NoNodes", Message: "no node of the cluster is installed"}
	}
	var f findings
	slices.Sort(cpDown)
	slices.Sort(allDown)
	// etcd's members are the installed control-plane nodes: those still
	// being made (a control plane growing) are not counted yet.
	members := len(cp)
	quorum := members/2 + 1
	switch up := len(cp) - len(cpDown); {
	case len(cp) > 0 && up == 0:
		f.add(v1.HealthUnhealthy, "ControlPlaneDown", fmt.Sprintf("no control-plane node answers (%s): the Kubernetes API is down", strings.Join(cpDown, ", ")))
	case members > 1 && up < quorum:
		f.add(v1.HealthUnhealthy, "ControlPlaneQuorumLost", fmt.Sprintf("%d of %d control-plane nodes answer, fewer than etcd's quorum of %d (down: %s)",
			up, members, quorum, strings.Join(cpDown, ", ")))
	case len(cpDown) > 0:
		f.add(v1.HealthDegraded, "ControlPlaneDegraded", fmt.Sprintf("control-plane nodes down: %s (%d of %d answer)", strings.Join(cpDown, ", "), up, members))
	}
	switch {
	case len(allWorkers) > 0 && len(allDown) == len(allWorkers):
		f.add(v1.HealthUnhealthy, "WorkersDown", fmt.Sprintf("no worker node answers (%s): workloads cannot run", strings.Join(allDown, ", ")))
	case len(allDown) > 0:
		reason := "WorkersNotReady"
		var parts []string
		for _, p := range spec.WorkerPools {
			d := down[p.Name]
			if len(d) == 0 {
				continue
			}
			slices.Sort(d)
			size := max(len(workers[p.Name]), p.Size)
			part := fmt.Sprintf("pool %s: %d of %d down (%s)", p.Name, len(d), size, strings.Join(d, ", "))
			if allowed := validate.MaxUnhealthy(p, size); len(d) > allowed {
				reason = "TooManyUnhealthy"
				part += fmt.Sprintf(", more than its maxUnhealthy allows (%d): none is replaced", allowed)
			}
			parts = append(parts, part)
		}
		if len(parts) == 0 { // workers of pools the spec no longer has
			parts = append(parts, "worker nodes down: "+strings.Join(allDown, ", "))
		}
		f.add(v1.HealthDegraded, reason, strings.Join(parts, "; "))
	}
	if state == v1.StateSucceeded {
		c := Counts(spec, nodes)
		if c.ControlPlane < c.ControlPlaneWanted {
			f.add(v1.HealthDegraded, "NodesMissing", fmt.Sprintf("%d of %d control-plane nodes present", c.ControlPlane, c.ControlPlaneWanted))
		}
		for _, p := range c.Pools {
			if p.Present < p.Wanted {
				f.add(v1.HealthDegraded, "NodesMissing", fmt.Sprintf("pool %s: %d of %d nodes present", p.Name, p.Present, p.Wanted))
			}
		}
	}
	return f.health()
}

// ReasonAPIUnreachable is the health reason of a cluster whose Kubernetes
// API Kiln could not read for a while although its nodes' agents answer:
// only the health checker sees it (it reads the API), and it records it.
const ReasonAPIUnreachable = "APIUnreachable"

// APIUnreachable is h made Unhealthy because the Kubernetes API at endpoint
// has not answered Kiln for since: err is its last answer. The nodes'
// findings stay in the message.
func APIUnreachable(h v1.Health, endpoint string, since time.Duration, err error) v1.Health {
	msg := fmt.Sprintf("the Kubernetes API at %s has not answered Kiln for %s: %v", endpoint, since.Round(time.Second), err)
	if h.State != v1.HealthHealthy {
		msg += "; " + h.Message
	}
	return v1.Health{State: v1.HealthUnhealthy, Reason: ReasonAPIUnreachable, Message: msg}
}

// WithRecorded is health h of a cluster in provisioning state state,
// judged from the nodes now, with what only the health checker saw: a
// recorded APIUnreachable of a Succeeded cluster (the only ones the checker
// judges) stands until the checker records otherwise, unless the nodes say
// as bad or worse.
func WithRecorded(h v1.Health, state string, recorded *v1.Health) v1.Health {
	if state == v1.StateSucceeded && recorded != nil && recorded.Reason == ReasonAPIUnreachable && rank(h.State) < rank(v1.HealthUnhealthy) {
		return *recorded
	}
	return h
}

// rank orders health states, best first (Unknown before all).
func rank(state string) int {
	switch state {
	case v1.HealthHealthy:
		return 0
	case v1.HealthDegraded:
		return 1
	case v1.HealthUnhealthy:
		return 2
	}
	return -1
}

// findings collects what Health found, the worst first.
type findings struct {
	state, reason string
	messages      []string
}

func (f *findings) add(state, reason, msg string) {
	if f.state == "" || rank(state) > rank(f.state) {
		f.state, f.reason = state, reason
		f.messages = append([]string{msg}, f.messages...)
		return
	}
	f.messages = append(f.messages, msg)
}

func (f *findings) health() v1.Health {
	if f.state == "" {
		return v1.Health{State: v1.HealthHealthy, Reason: "AsExpected", Message: "every node answers"}
	}
	return v1.Health{State: f.state, Reason: f.reason, Message: strings.Join(f.messages, "; ")}
}
