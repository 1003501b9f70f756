package gateway_test

import (
	"context"
	"testing"
	"time"

	v1 "kiln.dev/kiln/api/v1"
	"kiln.dev/kiln/internal/agent"
	"kiln.dev/kiln/internal/agent/state"
	"kiln.dev/kiln/internal/gateway"
	"kiln.dev/kiln/internal/gateway/gatewaytest"
	"kiln.dev/kiln/internal/pki"
	"kiln.dev/kiln/internal/trust"
	"kiln.dev/kiln/test/waitfor"
)

// TestCARotationRenewsAgents: a real agent, connected, is asked to renew
// its node certificate when a CA rotation needs it (RequestRenewal); it
// renews at once with the next CA, the request is done once it presents
// the new certificate, and its session goes on through the finish, after
// which its first certificate (the old CA's) is refused as not signed by
// the cluster's CA.
func TestCARotationRenewsAgents(t *testing.T) {
	e := gatewaytest.New(t, gateway.Options{HeartbeatInterval: 200 * time.Millisecond})
	c := e.CreateCluster("c", v1.ClusterSpec{NodeApproval: "auto"})
	ctx := context.Background()
	first, dir := runAgent(t, e, c, "c-w-0", agent.ExecutorFunc(func(context.Context, v1.Instruction, agent.Reporter) error { return nil }))
	e.Issue(c, "c-w-0", "before", v1.InstructionInstall)
	waitfor.Cond(t, "the result of an instruction before the rotation", wait, func() (bool, error) {
		in, err := e.Store.GetInstruction(ctx, "before")
		return err == nil && in.Result != nil, nil
	})

	now := time.Now()
	if _, err := trust.BeginCARotation(ctx, e.Store, c.Key, 0, now); err != nil {
		t.Fatal(err)
	}
	cas, err := trust.SetCAPhase(ctx, e.Store, c.Key, trust.CATrusting, trust.CAOverlap, now)
	if err != nil {
		t.Fatal(err)
	}
	if err := trust.RequestRenewal(ctx, e.Store, c.Key, "c-w-0"); err != nil {
		t.Fatal(err)
	}
	// Its certificate lasts a year: only the request makes it renew now.
	waitfor.Cond(t, "the agent to present a certificate of the next CA", wait, func() (bool, error) {
		pending, err := trust.RenewalPending(ctx, e.Store, c.Key, "c-w-0")
		return !pending, err
	})
	st, err := state.Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	if err := cas.Next.VerifyCertificate(parseCert(t, st.Certificate), pki.UsageClient, time.Now()); err != nil {
		t.Fatalf("the renewed certificate is not the next CA's: %v", err)
	}

	for _, p := range [][2]trust.CAPhase{{trust.CAOverlap, trust.CASigning}, {trust.CASigning, trust.CANarrowing}} {
		if _, err := trust.SetCAPhase(ctx, e.Store, c.Key, p[0], p[1], now); err != nil {
			t.Fatal(err)
		}
	}
	if err := trust.FinishCARotation(ctx, e.Store, c.Key); err != nil {
		t.Fatal(err)
	}
	e.Issue(c, "c-w-0", "after", v1.InstructionInstall)
	waitfor.Cond(t, "the result of an instruction after the finish", wait, func() (bool, error) {
		in, err := e.Store.GetInstruction(ctx, "after")
		return err == nil && in.Result != nil && in.Result.State == v1.StepSucceeded, nil
	})
	refused(t, e, identity{node: "c-w-0", cert: []byte(first.Certificate), key: first.Key}, "not signed by the CA of cluster")
}
