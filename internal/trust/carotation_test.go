package trust_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"kiln.dev/kiln/internal/pki"
	"kiln.dev/kiln/internal/trust"
)

// TestCAPhases: what each phase of a CA rotation signs with and trusts,
// and how the phases move: a begin during a rotation changes nothing, a
// phase is only left from the one it is in, and the finish makes the next
// CA the cluster's in one write.
func TestCAPhases(t *testing.T) {
	st, k := newCluster(t, "c")
	ctx, now := context.Background(), time.Now()

	cas, err := trust.LoadCAs(ctx, st, k)
	if err != nil {
		t.Fatal(err)
	}
	old := cas.Current
	if cas.Rotating() || cas.Issuer() != old || cas.NodeSigner() != old || len(cas.Trusted()) != 1 {
		t.Fatalf("without a rotation: %+v", cas)
	}
	if err := trust.FinishCARotation(ctx, st, k); err != nil {
		t.Errorf("finishing without a rotation is done already: %v", err)
	}
	if _, err := trust.SetCAPhase(ctx, st, k, trust.CAOverlap, trust.CASigning, now); err == nil {
		t.Error("a phase change without a rotation was accepted")
	}

	cas, err = trust.BeginCARotation(ctx, st, k, 0, now)
	if err != nil {
		t.Fatal(err)
	}
	next := cas.Next
	if next == nil || cas.Phase != trust.CATrusting || next.Certificate().Subject.CommonName == old.Certificate().Subject.CommonName {
		t.Fatalf("begin: phase %q, next %v", cas.Phase, next)
	}
	again, err := trust.BeginCARotation(ctx, st, k, 0, now.Add(time.Minute))
	if err != nil || !again.Next.Certificate().Equal(next.Certificate()) {
		t.Fatalf("a second begin made another CA (%v)", err)
	}
	if err := trust.FinishCARotation(ctx, st, k); err == nil {
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
		from, to trust.CAPhase
		want     want
	}{
		{trust.CATrusting, trust.CATrusting, want{old, old, 2, true}},
		{trust.CATrusting, trust.CAOverlap, want{next, old, 2, true}},
		{trust.CAOverlap, trust.CASigning, want{next, next, 2, true}},
		{trust.CASigning, trust.CANarrowing, want{next, next, 1, true}},
	} {
		cas, err := trust.SetCAPhase(ctx, st, k, step.from, step.to, now)
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
	if _, err := trust.SetCAPhase(ctx, st, k, trust.CAOverlap, trust.CASigning, now); err == nil {
		t.Error("a move from a phase the rotation is not in was accepted")
	}

	if err := trust.FinishCARotation(ctx, st, k); err != nil {
		t.Fatal(err)
	}
	cas, err = trust.LoadCAs(ctx, st, k)
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
	if cas, err = trust.BeginCARotation(ctx, st, k, 0, now); err != nil || cas.Phase != trust.CATrusting {
		t.Errorf("a second rotation: %v, phase %q", err, cas.Phase)
	}
}

func countCerts(b []byte) int { return strings.Count(string(b), "BEGIN CERTIFICATE") }
