package gateway_test

import (
	"context"
	"testing"
	"time"

	v1 "kiln.dev/kiln/api/v1"
	"kiln.dev/kiln/internal/gateway"
	"kiln.dev/kiln/internal/gateway/gatewaytest"
	"kiln.dev/kiln/internal/store"
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
			gatewaytest.Eventually(t, wait, "NOT_READY", func() bool { return get().State == v1.NodeNotReady })

			s.sendSent(v1.AgentMessage{Type: v1.AgentHeartbeat}, time.Now().Add(-time.Second))
			// Messages are handled in order: once the facts are in, the
			// heartbeat before them was handled too.
			s.send(v1.AgentMessage{Type: v1.AgentFacts, Facts: &v1.NodeFacts{Hostname: "after-the-delayed-heartbeat"}})
			gatewaytest.Eventually(t, wait, "the facts", func() bool {
				n := get()
				return n.Facts != nil && n.Facts.Hostname == "after-the-delayed-heartbeat"
			})
			if n := get(); n.State != v1.NodeNotReady {
				t.Fatalf("after a heartbeat a second late: %s %q, want NOT_READY still", n.State, n.Message)
			}

			s.send(v1.AgentMessage{Type: v1.AgentHeartbeat})
			gatewaytest.Eventually(t, wait, "APPROVED again", func() bool { return get().State == v1.NodeApproved })
		})
	}
}
