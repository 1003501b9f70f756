package plan_test

import (
	"bytes"
	"testing"
	"time"

	v1 "kiln.dev/kiln/api/v1"
	"kiln.dev/kiln/internal/plan"
	"kiln.dev/kiln/internal/provider"
	"kiln.dev/kiln/internal/trust"
)

// withAgents is the sim without its Agentless marker: a provider whose
// machines would run agents. There is no Kubernetes behind it, so its
// operations fail after the PKI step; this test looks at that step only.
type withAgents struct{ provider.Provider }

// TestClusterPKIIsCreatedOnce: a cluster whose machines run agents gets its
// CA, agent credential and passphrase in the first steps of its create, and
// a later operation keeps them.
func TestClusterPKIIsCreatedOnce(t *testing.T) {
	e := newEnv(t)
	e.reg["agents"] = withAgents{e.sim}
	sp := spec(1, nil)
	sp.Provider = "agents"
	quick := func(o *plan.Options) { o.NodeTimeout, o.MaxAttempts = 10*time.Millisecond, 1 }
	op := e.begin("c", v1.KindCreate, sp)
	e.runOnce(e.runner(quick))
	if got := stepStates(e.op(op.ID))[plan.StepEnsureClusterPKI]; got != v1.StepSucceeded {
		t.Fatalf("ensure-cluster-pki = %s, want Succeeded", got)
	}
	k := e.cluster("c").Key()
	ca, err := e.st.GetClusterSecret(t.Context(), k, trust.SecretCA)
	if err != nil || !bytes.Contains(ca, []byte("BEGIN CERTIFICATE")) {
		t.Fatalf("cluster CA secret: %q, %v", ca, err)
	}
	if _, _, pass, err := trust.ClearCredentials(t.Context(), e.st, k); err != nil || pass == "" {
		t.Fatalf("credentials: passphrase %q, %v", pass, err)
	}

	// Creating again (a retried create) keeps the CA.
	op2 := e.begin("c", v1.KindCreate, sp)
	e.runOnce(e.runner(quick))
	if got := stepStates(e.op(op2.ID))[plan.StepEnsureClusterPKI]; got != v1.StepSucceeded {
		t.Fatalf("second create: ensure-cluster-pki = %s", got)
	}
	again, _ := e.st.GetClusterSecret(t.Context(), k, trust.SecretCA)
	if !bytes.Equal(ca, again) {
		t.Error("a second create replaced the cluster CA")
	}
}
