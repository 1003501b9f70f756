package gateway_test

import (
	"context"
	"strings"
	"testing"
	"time"

	v1 "kiln.dev/kiln/api/v1"
	"kiln.dev/kiln/internal/agent"
	"kiln.dev/kiln/internal/agent/state"
	"kiln.dev/kiln/internal/gateway"
	"kiln.dev/kiln/internal/gateway/gatewaytest"
	"kiln.dev/kiln/internal/pki"
	"kiln.dev/kiln/test/waitfor"
)

// TestCAPhases: what each phase of a CA rotation signs with and trusts,
// and how the phases move: a begin during a rotation changes nothing, a
// phase is only left from the one it is in, and the finish makes the next
// CA the cluster's in one write.
func TestCAPhases(t *testing.T) {
	e := gatewaytest.New(t, gateway.Options{})
	c := e.CreateCluster("c", v1.ClusterSpec{})
	ctx, now := context.Background(), time.Now()

	cas, err := gateway.LoadCAs(ctx, e.Store, c.Key)
	if err != nil {
		t.Fatal(err)
	}
	old := cas.Current
	if cas.Rotating() || cas.Issuer() != old || cas.NodeSigner() != old || len(cas.Trusted()) != 1 {
		t.Fatalf("without a rotation: %+v", cas)
	}
	if err := gateway.FinishCARotation(ctx, e.Store, c.Key); err != nil {
		t.Errorf("finishing without a rotation is done already: %v", err)
	}
	if _, err := gateway.SetCAPhase(ctx, e.Store, c.Key, gateway.CAOverlap, gateway.CASigning, now); err == nil {
		t.Error("a phase change without a rotation was accepted")
	}

	cas, err = gateway.BeginCARotation(ctx, e.Store, c.Key, 0, now)
	if err != nil {
		t.Fatal(err)
	}
	next := cas.Next
	if next == nil || cas.Phase != gateway.CATrusting || next.Certificate().Subject.CommonName == old.Certificate().Subject.CommonName {
		t.Fatalf("begin: phase %q, next %v", cas.Phase, next)
	}
	again, err := gateway.BeginCARotation(ctx, e.Store, c.Key, 0, now.Add(time.Minute))
	if err != nil || !again.Next.Certificate().Equal(next.Certificate()) {
		t.Fatalf("a second begin made another CA (%v)", err)
	}
	if err := gateway.FinishCARotation(ctx, e.Store, c.Key); err == nil {
		t.Error("a finish from the trusting phase was accepted")
	}

	leaf := func(ca *pki.CA) []byte {
		cert, _, err := ca.Issue(pki.AdminRequest("u"))
		if err != nil {
			t.Fatal(err)
		}
		return cert
	}
	oldLeaf, nextLeaf := leaf(old), leaf(next)
	type want struct {
		issuer, signer *pki.CA
		nodeTrust      int // CAs in NodeTrustPEM
		acceptsOld     bool
	}
	for _, step := range []struct {
		from, to gateway.CAPhase
		want     want
	}{
		{gateway.CATrusting, gateway.CATrusting, want{old, old, 2, true}},
		{gateway.CATrusting, gateway.CAOverlap, want{next, old, 2, true}},
		{gateway.CAOverlap, gateway.CASigning, want{next, next, 2, true}},
		{gateway.CASigning, gateway.CANarrowing, want{next, next, 1, true}},
	} {
		cas, err := gateway.SetCAPhase(ctx, e.Store, c.Key, step.from, step.to, now)
		if err != nil {
			t.Fatalf("%s to %s: %v", step.from, step.to, err)
		}
		w := step.want
		if cas.Issuer() != nil && !cas.Issuer().Certificate().Equal(w.issuer.Certificate()) {
			t.Errorf("%s: issuer %q", step.to, cas.Issuer().Certificate().Subject.CommonName)
		}
		if !cas.NodeSigner().Certificate().Equal(w.signer.Certificate()) {
			t.Errorf("%s: node signer %q", step.to, cas.NodeSigner().Certificate().Subject.CommonName)
		}
		if n := countCerts(cas.NodeTrustPEM()); n != w.nodeTrust {
			t.Errorf("%s: nodes trust %d CAs, want %d", step.to, n, w.nodeTrust)
		}
		if countCerts(cas.TrustPEM()) != 2 {
			t.Errorf("%s: kubeconfigs and the gateway trust %d CAs, want both", step.to, countCerts(cas.TrustPEM()))
		}
		for name, l := range map[string][]byte{"old": oldLeaf, "next": nextLeaf} {
			if err := cas.VerifyCertificate(parseCert(t, string(l)), pki.UsageClient, time.Now()); err != nil {
				t.Errorf("%s: a certificate of the %s CA is refused: %v", step.to, name, err)
			}
		}
	}
	if _, err := gateway.SetCAPhase(ctx, e.Store, c.Key, gateway.CAOverlap, gateway.CASigning, now); err == nil {
		t.Error("a move from a phase the rotation is not in was accepted")
	}

	if err := gateway.FinishCARotation(ctx, e.Store, c.Key); err != nil {
		t.Fatal(err)
	}
	cas, err = gateway.LoadCAs(ctx, e.Store, c.Key)
	if err != nil {
		t.Fatal(err)
	}
	if cas.Rotating() || !cas.Current.Certificate().Equal(next.Certificate()) || len(cas.Trusted()) != 1 {
		t.Fatalf("after the finish: phase %q, current %q", cas.Phase, cas.Current.Certificate().Subject.CommonName)
	}
	if err := cas.VerifyCertificate(parseCert(t, string(oldLeaf)), pki.UsageClient, time.Now()); err == nil {
		t.Error("after the finish a certificate of the old CA is accepted")
	}
	if _, err := pki.LoadCA(cas.Current.CertPEM(), cas.Current.KeyPEM()); err != nil {
		t.Errorf("the new CA's key is not kept: %v", err)
	}
	// A rotation can begin again.
	if cas, err = gateway.BeginCARotation(ctx, e.Store, c.Key, 0, now); err != nil || cas.Phase != gateway.CATrusting {
		t.Errorf("a second rotation: %v, phase %q", err, cas.Phase)
	}
}

func countCerts(b []byte) int { return strings.Count(string(b), "BEGIN CERTIFICATE") }

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
	if _, err := gateway.BeginCARotation(ctx, e.Store, c.Key, 0, now); err != nil {
		t.Fatal(err)
	}
	cas, err := gateway.SetCAPhase(ctx, e.Store, c.Key, gateway.CATrusting, gateway.CAOverlap, now)
	if err != nil {
		t.Fatal(err)
	}
	if err := gateway.RequestRenewal(ctx, e.Store, c.Key, "c-w-0"); err != nil {
		t.Fatal(err)
	}
	// Its certificate lasts a year: only the request makes it renew now.
	waitfor.Cond(t, "the agent to present a certificate of the next CA", wait, func() (bool, error) {
		pending, err := gateway.RenewalPending(ctx, e.Store, c.Key, "c-w-0")
		return !pending, err
	})
	st, err := state.Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	if err := cas.Next.VerifyCertificate(parseCert(t, st.Certificate), pki.UsageClient, time.Now()); err != nil {
		t.Fatalf("the renewed certificate is not the next CA's: %v", err)
	}

	for _, p := range [][2]gateway.CAPhase{{gateway.CAOverlap, gateway.CASigning}, {gateway.CASigning, gateway.CANarrowing}} {
		if _, err := gateway.SetCAPhase(ctx, e.Store, c.Key, p[0], p[1], now); err != nil {
			t.Fatal(err)
		}
	}
	if err := gateway.FinishCARotation(ctx, e.Store, c.Key); err != nil {
		t.Fatal(err)
	}
	e.Issue(c, "c-w-0", "after", v1.InstructionInstall)
	waitfor.Cond(t, "the result of an instruction after the finish", wait, func() (bool, error) {
		in, err := e.Store.GetInstruction(ctx, "after")
		return err == nil && in.Result != nil && in.Result.State == v1.StepSucceeded, nil
	})
	refused(t, e, identity{node: "c-w-0", cert: []byte(first.Certificate), key: first.Key}, "not signed by the CA of cluster")
}
