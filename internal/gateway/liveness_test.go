package gateway_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	v1 "kiln.dev/kiln/api/v1"
	"kiln.dev/kiln/internal/gateway"
	"kiln.dev/kiln/internal/gateway/gatewaytest"
	"kiln.dev/kiln/internal/store"
	"kiln.dev/kiln/test/waitfor"
)

// TestDelayedHeartbeatsDoNotRevive: heartbeats that spent longer on the way
// than the liveness limit (written into a connection while the link was
// cut, delivered when it is back) leave a NOT_READY node NOT_READY; a
// heartbeat on time puts it back, whatever the agent's clock says.
func TestDelayedHeartbeatsDoNotRevive(t *testing.T) {
	e := gatewaytest.New(t, gateway.Options{HeartbeatInterval: 50 * time.Millisecond}) // NOT_READY after 150 ms
	c := e.CreateCluster("h", v1.ClusterSpec{NodeApproval: "auto"})
	for _, tc := range []struct {
		name, node string
		skew       time.Duration // of the agent's clock
	}{
		{"clocks agree", "h-w-0", 0},
		{"agent an hour behind", "h-w-1", -time.Hour},
		{"agent an hour ahead", "h-w-2", time.Hour},
	} {
		node := tc.node
		t.Run(tc.name, func(t *testing.T) {
			s := openSkewed(t, e, join(t, e, c, node), tc.skew)
			get := func() *store.Node {
				t.Helper()
				n, err := e.Store.GetNode(context.Background(), c.Key, node)
				if err != nil {
					t.Fatal(err)
				}
				return n
			}
			waitfor.Cond(t, "NOT_READY", wait, func() (bool, error) { return get().State == v1.NodeNotReady, nil })

			s.sendSent(v1.AgentMessage{Type: v1.AgentHeartbeat}, time.Now().Add(-time.Second))
			// Messages are handled in order: once the facts are in, the
			// heartbeat before them was handled too.
			s.send(v1.AgentMessage{Type: v1.AgentFacts, Facts: &v1.NodeFacts{Hostname: "after-the-delayed-heartbeat"}})
			waitfor.Cond(t, "the facts", wait, func() (bool, error) {
				n := get()
				return n.Facts != nil && n.Facts.Hostname == "after-the-delayed-heartbeat", nil
			})
			if n := get(); n.State != v1.NodeNotReady {
				t.Fatalf("after a heartbeat a second late: %s %q, want NOT_READY still", n.State, n.Message)
			}

			s.send(v1.AgentMessage{Type: v1.AgentHeartbeat})
			waitfor.Cond(t, "APPROVED again", wait, func() (bool, error) { return get().State == v1.NodeApproved, nil })
		})
	}
}

// TestHeartbeatAnswered: the controller answers every heartbeat with its
// seq and time, once it has recorded it: the node's LastHeartbeat is the
// heartbeat's by the time the answer comes.
func TestHeartbeatAnswered(t *testing.T) {
	var now atomic.Int64 // the gateway's clock, in ns since the epoch
	start := time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)
	now.Store(start.UnixNano())
	e := gatewaytest.New(t, gateway.Options{Now: func() time.Time { return time.Unix(0, now.Load()) }})
	c := e.CreateCluster("hb", v1.ClusterSpec{NodeApproval: "manual"})
	s := open(t, e, join(t, e, c, "hb-w-0"))
	for i := 1; i <= 3; i++ {
		// Half an interval on, a heartbeat is written again.
		now.Add(int64(gateway.DefaultHeartbeatInterval))
		at := time.Unix(0, now.Load()).UTC()
		s.send(v1.AgentMessage{Type: v1.AgentHeartbeat})
		sent := s.seq
		m := s.next(v1.ControllerHeartbeat)
		if m.Heartbeat == nil || m.Heartbeat.Seq != sent || m.Heartbeat.Time.IsZero() {
			t.Fatalf("heartbeat %d (seq %d) answered with %+v", i, sent, m.Heartbeat)
		}
		n, err := e.Store.GetNode(context.Background(), c.Key, "hb-w-0")
		if err != nil {
			t.Fatal(err)
		}
		if n.LastHeartbeat == nil || !n.LastHeartbeat.Equal(at) {
			t.Fatalf("heartbeat %d answered with the node's last heartbeat at %v, want %v", i, n.LastHeartbeat, at)
		}
	}
}
