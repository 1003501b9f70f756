package gateway_test

import (
	"context"
	"testing"
	"time"

	v1 "kiln.dev/kiln/api/v1"
	"kiln.dev/kiln/internal/gateway"
	"kiln.dev/kiln/internal/gateway/gatewaytest"
	"kiln.dev/kiln/internal/store"
	"kiln.dev/kiln/test/waitfor"
)

// TestInterruptionNotice: a node's spot interruption notice is recorded on
// it, with one event however often the agent sends it again.
func TestInterruptionNotice(t *testing.T) {
	e := gatewaytest.New(t, gateway.Options{})
	c := e.CreateCluster("spot", v1.ClusterSpec{NodeApproval: "auto"})
	s := open(t, e, join(t, e, c, "spot-w-0"))
	at := time.Date(2030, 1, 2, 3, 6, 0, 0, time.UTC)
	notice := &v1.Interruption{Kind: v1.InterruptionSpot, Action: "terminate", At: at, Noticed: at.Add(-2 * time.Minute)}
	for range 3 {
		s.send(v1.AgentMessage{Type: v1.AgentNotice, Notice: notice})
	}
	s.send(v1.AgentMessage{Type: v1.AgentFacts, Facts: &v1.NodeFacts{Hostname: "after-the-notices"}})
	var n *store.Node
	waitfor.Cond(t, "the notices handled", wait, func() (bool, error) {
		var err error
		n, err = e.Store.GetNode(context.Background(), c.Key, "spot-w-0")
		return err == nil && n.Facts != nil && n.Facts.Hostname == "after-the-notices", err
	})
	if n.Interruption == nil || !n.Interruption.At.Equal(at) || n.Interruption.Action != "terminate" {
		t.Fatalf("the node's interruption %+v", n.Interruption)
	}
	evs, _, err := e.Store.ListEvents(context.Background(), c.Key, store.Page{Limit: 1000})
	if err != nil {
		t.Fatal(err)
	}
	count := 0
	for _, ev := range evs {
		if ev.Reason == gateway.ReasonInterruption {
			count++
			if ev.Node != "spot-w-0" || ev.Type != "Warning" {
				t.Errorf("event %+v", ev.Event)
			}
		}
	}
	if count != 1 {
		t.Errorf("%d %s events, want 1", count, gateway.ReasonInterruption)
	}
}
