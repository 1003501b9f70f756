package gateway_test

import (
	"context"
	"fmt"
	"testing"

	v1 "kiln.dev/kiln/api/v1"
	"kiln.dev/kiln/internal/gateway"
	"kiln.dev/kiln/internal/gateway/gatewaytest"
	"kiln.dev/kiln/internal/store"
	"kiln.dev/kiln/test/waitfor"
)

// TestPrecheckTransitionsAreEvents: prechecks an agent reports again over
// its session move its node to PRECHECK_FAILED and back to DISCOVERED, and
// each move is an event.
func TestPrecheckTransitionsAreEvents(t *testing.T) {
	e := gatewaytest.New(t, gateway.Options{})
	c := e.CreateCluster("m", v1.ClusterSpec{NodeApproval: "manual"})
	s := open(t, e, join(t, e, c, "m-w-0"))
	ctx := context.Background()

	until := func(state string) {
		t.Helper()
		waitfor.Cond(t, "node m-w-0 "+state, wait, func() (bool, error) {
			n, err := e.Store.GetNode(ctx, c.Key, "m-w-0")
			if err != nil {
				return false, waitfor.NotYet(err)
			}
			return n.State == state, waitfor.NotYet(fmt.Errorf("last %+v", n))
		})
	}
	// events waits for the event that follows the write.
	events := func(reason string) []string {
		t.Helper()
		var out []string
		waitfor.Cond(t, "a "+reason+" event of m-w-0", wait, func() (bool, error) {
			evs, _, err := e.Store.ListEvents(ctx, c.Key, store.Page{Limit: 1000})
			if err != nil {
				return false, err
			}
			out = nil
			for _, ev := range evs {
				if ev.Reason == reason && ev.Node == "m-w-0" {
					out = append(out, ev.Message)
				}
			}
			return len(out) > 0, nil
		})
		return out
	}

	s.send(v1.AgentMessage{Type: v1.AgentPrechecks, Prechecks: []v1.PrecheckResult{{Name: "dns-port", Result: v1.PrecheckFail}}})
	until(v1.NodePrecheckFailed)
	if got := events(gateway.ReasonPrecheckFailed); len(got) != 1 || got[0] != "node m-w-0: prechecks failed: dns-port (was DISCOVERED)" {
		t.Errorf("precheck failure events %q", got)
	}
	s.send(v1.AgentMessage{Type: v1.AgentPrechecks, Prechecks: []v1.PrecheckResult{{Name: "dns-port", Result: v1.PrecheckPass}}})
	until(v1.NodeDiscovered)
	if got := events(gateway.ReasonPrecheckPassed); len(got) != 1 {
		t.Errorf("precheck pass events %q, want one", got)
	}
}
