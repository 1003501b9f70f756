package plan

import (
	"context"
	"errors"
	"fmt"

	v1 "kiln.dev/kiln/api/v1"
	"kiln.dev/kiln/internal/store"
)

// nodeEvents is the store as a run uses it: every node state the plan
// writes, whichever step writes it, and every node record it removes, is
// also an event in the cluster's timeline, with the run's operation.
type nodeEvents struct {
	NodeStore
	x *run
}

// PutNode writes n and, when its state changed, adds a NodeStateChanged
// event in the same transaction. The state before is read first; a write
// that fails adds nothing.
func (s nodeEvents) PutNode(ctx context.Context, n *store.Node, c store.Cond, events ...*store.Event) error {
	was, known := "", false
	if old, err := s.NodeStore.GetNode(ctx, store.Key{Project: n.Project, Name: n.Cluster}, n.Name); err == nil {
		was, known = old.State, true
	} else if !errors.Is(err, store.ErrNotFound) {
		return err
	}
	if !known || was != n.State {
		msg := fmt.Sprintf("node %s: %s -> %s", n.Name, was, n.State)
		if !known {
			msg = fmt.Sprintf("node %s recorded as %s", n.Name, n.State)
		}
		if n.Message != "" {
			msg += ": " + n.Message
		}
		typ := "Normal"
		if n.State == v1.NodeFailed || n.State == v1.NodeNotReady {
			typ = "Warning"
		}
		e := s.x.newEvent(typ, "NodeStateChanged", msg)
		e.Node = n.Name
		events = append(events, e)
	}
	return s.NodeStore.PutNode(ctx, n, c, events...)
}

// DeleteNode removes the record and adds a NodeRemoved event.
func (s nodeEvents) DeleteNode(ctx context.Context, k store.Key, name string, c store.Cond) error {
	if err := s.NodeStore.DeleteNode(ctx, k, name, c); err != nil {
		return err
	}
	x := s.x
	if ctx.Err() != nil {
		return nil
	}
	e := x.newEvent("Normal", "NodeRemoved", fmt.Sprintf("node %s removed from the cluster", name))
	e.Node = name
	if err := x.events.AppendEvent(ctx, e); err != nil {
		x.log.Warn("could not append event", "reason", "NodeRemoved", "node", name, "err", err)
	}
	return nil
}
