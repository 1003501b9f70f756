package gateway_test

import (
	"testing"
	"time"

	v1 "kiln.dev/kiln/api/v1"
	"kiln.dev/kiln/internal/gateway"
	"kiln.dev/kiln/internal/gateway/gatewaytest"
	"kiln.dev/kiln/test/waitfor"
)

// TestSessionsCounted: Sessions (kiln_agent_sessions) counts the agents
// connected now: one per node, none once a session ends.
func TestSessionsCounted(t *testing.T) {
	e := gatewaytest.New(t, gateway.Options{HeartbeatInterval: time.Minute, PollInterval: time.Minute})
	c := e.CreateCluster("c", v1.ClusterSpec{NodeApproval: "auto"})
	if n := e.Gateway.Sessions(); n != 0 {
		t.Fatalf("before any agent: %d sessions", n)
	}
	first := open(t, e, join(t, e, c, "c-w-0"))
	open(t, e, join(t, e, c, "c-w-1"))
	sessions := func(want int) func() (bool, error) {
		return func() (bool, error) { return e.Gateway.Sessions() == want, nil }
	}
	waitfor.Cond(t, "two sessions", 10*time.Second, sessions(2))
	first.conn.CloseNow()
	waitfor.Cond(t, "one session once the first agent went", 10*time.Second, sessions(1))
}
