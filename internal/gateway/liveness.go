package gateway

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/coder/websocket"

	v1 "kiln.dev/kiln/api/v1"
	"kiln.dev/kiln/internal/store"
)

// Node liveness is a sweep, not computed on read: NOT_READY is written to
// the node record, so the API, the CLI and the plan's waits all see the same
// state without knowing about heartbeats. The sweep (Run) looks at every
// node with a heartbeat every HeartbeatInterval; a node whose last heartbeat
// is older than MissedHeartbeats intervals (counted from this gateway's
// start at the earliest, so a restarted kilnd gives agents time to
// reconnect) becomes NOT_READY. Its state before is kept on the record
// (PreviousState), so the next heartbeat puts it back whichever replica
// receives it, also after kilnd restarted. A record written before
// PreviousState existed falls back to CONFIGURED for a node with a role,
// else DISCOVERED (approval runs again).

// liveStateList are the states the sweep may turn into NOT_READY;
// liveStates is the same as a set.
var (
	liveStateList = []string{v1.NodeDiscovered, v1.NodeApproved, v1.NodeConfigured, v1.NodeProvisioning, v1.NodeReady}
	liveStates    = func() map[string]bool {
		m := map[string]bool{}
		for _, s := range liveStateList {
			m[s] = true
		}
		return m
	}()
)

// Run sweeps node liveness every heartbeat interval until ctx ends.
func (g *Gateway) Run(ctx context.Context) error {
	defer g.watch()()
	t := time.NewTicker(g.opts.HeartbeatInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
		}
		if err := g.Sweep(ctx); err != nil && ctx.Err() == nil {
			g.log.Warn("node liveness sweep", "err", err)
		}
	}
}

// Sweep marks NOT_READY every node that missed its heartbeats, once. It
// reads only those nodes (store.ListStaleNodes), so its cost does not grow
// with the fleet.
func (g *Gateway) Sweep(ctx context.Context) error {
	now := g.opts.Now()
	limit := g.liveLimit()
	if now.Sub(g.started) <= limit {
		return nil // agents may still be reconnecting to this gateway
	}
	nodes, err := g.st.ListStaleNodes(ctx, now.Add(-limit), liveStateList)
	if err != nil {
		return err
	}
	var errs []error
	for _, n := range nodes {
		k := store.Key{Project: n.Project, Name: n.Cluster}
		var was string
		_, err := g.updateNode(ctx, k, n.Name, func(n *store.Node) error {
			if n.LastHeartbeat == nil || !liveStates[n.State] || now.Sub(*n.LastHeartbeat) <= limit {
				return errNodeUnchanged
			}
			was = n.State
			n.State, n.PreviousState = v1.NodeNotReady, was
			n.Message = fmt.Sprintf("no heartbeat since %s (was %s)", n.LastHeartbeat.UTC().Format(time.RFC3339), was)
			return nil
		})
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if was == "" {
			continue
		}
		g.log.Warn("node not ready: missed heartbeats", "cluster", k.String(), "node", n.Name, "was", was)
		g.event(ctx, k, eventWarning, ReasonNotReady, n.Name, "node %s missed %d heartbeats (%s): NOT_READY, was %s",
			n.Name, g.opts.MissedHeartbeats, limit, was)
	}
	return errors.Join(errs...)
}

// liveLimit is how long a node may go without a heartbeat before it is
// NOT_READY.
func (g *Gateway) liveLimit() time.Duration {
	return time.Duration(g.opts.MissedHeartbeats) * g.opts.HeartbeatInterval
}

// heartbeat records that the node is alive: LastHeartbeat, written at most
// every half interval, and a NOT_READY node back in its state before.
// sent is the agent's time of the heartbeat (zero when unknown); one that
// was delayed on the way longer than liveLimit is ignored (delayed).
func (s *session) heartbeat(sent time.Time) {
	now := s.g.opts.Now()
	if s.delayed(now, sent) {
		s.log.Debug("ignoring a delayed heartbeat", "sent", sent, "received", now)
		return
	}
	if now.Sub(s.lastBeatWrite) < s.g.opts.HeartbeatInterval/2 {
		return
	}
	var back string
	// From the record this session's last heartbeat wrote: no read
	// before each write while nobody else writes the node.
	known := s.lastBeat
	s.lastBeat = nil
	n, err := s.g.updateNodeFrom(s.ctx, s.k, s.node, known, func(n *store.Node) error {
		t := now.UTC()
		n.LastHeartbeat = &t
		back = ""
		if n.State == v1.NodeNotReady {
			back = stateBefore(n)
			n.State, n.Message, n.PreviousState = back, "", ""
		}
		return nil
	})
	if errors.Is(err, store.ErrNotFound) {
		// Deleted by a process that could not end the session itself.
		s.closeWith(websocket.StatusPolicyViolation, "the node was deleted: join again")
		return
	} else if err != nil {
		s.log.Warn("record heartbeat", "err", err)
		return
	}
	s.lastBeatWrite, s.lastBeat = now, n
	if back != "" {
		s.log.Info("node heartbeats resumed", "state", back)
		s.g.event(s.ctx, s.k, eventNormal, ReasonHeartbeatResumed, s.node, "node %s heartbeats again: %s", s.node, back)
		if back == v1.NodeDiscovered {
			s.g.autoApprove(s.ctx, s.k, s.node)
		}
	}
}

// delayed says whether a heartbeat sent at sent (the agent's clock) and
// received now spent longer on the way than liveLimit: it says the agent
// was alive then, not now. Heartbeats an agent wrote into a connection
// while its link was cut reach the controller when the link is back, all
// at once and just before the agent gives up that connection; counted,
// they would put a NOT_READY node back for seconds while it has no session
// (or for a whole liveLimit, if the agent died meanwhile). The delay is
// measured against the smallest seen in this session (the hello's at the
// latest), so the clocks of the agent and the controller need not agree.
func (s *session) delayed(now, sent time.Time) bool {
	if sent.IsZero() {
		return false
	}
	d := now.Sub(sent)
	if !s.lagKnown || d < s.minLag {
		s.minLag, s.lagKnown = d, true
	}
	return d-s.minLag > s.g.liveLimit()
}

// stateBefore is the state a NOT_READY node had before it missed its
// heartbeats.
func stateBefore(n *store.Node) string {
	switch {
	case n.PreviousState != "":
		return n.PreviousState
	case n.Role != "":
		return v1.NodeConfigured
	}
	return v1.NodeDiscovered
}

// autoApprove moves a DISCOVERED node to APPROVED when its cluster's
// nodeApproval is auto.
func (g *Gateway) autoApprove(ctx context.Context, k store.Key, node string) {
	cl, err := g.st.GetCluster(ctx, k)
	if err != nil {
		g.log.Warn("auto-approve: read cluster", "cluster", k.String(), "node", node, "err", err)
		return
	}
	if a := cl.Spec.NodeApproval; a != "" && a != "auto" {
		return
	}
	moved := false
	_, err = g.updateNode(ctx, k, node, func(n *store.Node) error {
		if n.State != v1.NodeDiscovered {
			return errNodeUnchanged
		}
		n.State, moved = v1.NodeApproved, true
		return nil
	})
	if err != nil {
		g.log.Warn("auto-approve", "cluster", k.String(), "node", node, "err", err)
		return
	}
	if moved {
		g.event(ctx, k, eventNormal, ReasonApproved, node, "node %s approved automatically (nodeApproval: auto)", node)
	}
}
