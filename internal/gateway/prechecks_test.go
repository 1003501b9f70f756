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
		deadline := time.Now().Add(wait)
		for {
			n, err := e.Store.GetNode(ctx, c.Key, "m-w-0")
			if err == nil && n.State == state {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("node never %s (last %+v, %v)", state, n, err)
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	// events waits a moment for the event that follows the write.
	events := func(reason string) []string {
		t.Helper()
		deadline := time.Now().Add(wait)
		for {
			evs, _, err := e.Store.ListEvents(ctx, c.Key, store.Page{Limit: 1000})
			if err != nil {
				t.Fatal(err)
			}
			var out []string
			for _, ev := range evs {
				if ev.Reason == reason && ev.Node == "m-w-0" {
					out = append(out, ev.Message)
				}
			}
			if len(out) > 0 || time.Now().After(deadline) {
				return out
			}
			time.Sleep(5 * time.Millisecond)
		}
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
