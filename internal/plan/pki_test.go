package plan_test

import (
	"bytes"
	"testing"

	v1 "kiln.dev/kiln/api/v1"
	"kiln.dev/kiln/internal/gateway"
	"kiln.dev/kiln/internal/plan"
	"kiln.dev/kiln/internal/provider"
)

// withAgents is the sim without its Agentless marker: a provider whose
// machines would run agents (its machines are still Ready at once).
type withAgents struct{ provider.Provider }

// TestClusterPKIIsCreatedOnce: a cluster whose machines run agents gets its
// CA, agent credential and passphrase in the first steps of its create, and
// a later operation keeps them.
func TestClusterPKIIsCreatedOnce(t *testing.T) {
	e := newEnv(t)
	e.reg["agents"] = withAgents{e.sim}
	sp := spec(1, nil)
	sp.Provider = "agents"
	op := e.begin("c", v1.KindCreate, sp)
	e.runOnce(e.runner())
	if got := stepStates(e.op(op.ID))[plan.StepEnsureClusterPKI]; got != v1.StepSucceeded {
		t.Fatalf("ensure-cluster-pki = %s, want Succeeded", got)
	}
	k := e.cluster("c").Key()
	ca, err := e.st.GetClusterSecret(t.Context(), k, gateway.SecretCA)
	if err != nil || !bytes.Contains(ca, []byte("BEGIN CERTIFICATE")) {
		t.Fatalf("cluster CA secret: %q, %v", ca, err)
	}
	if _, _, pass, err := gateway.ClearCredentials(t.Context(), e.st, k); err != nil || pass == "" {
		t.Fatalf("credentials: passphrase %q, %v", pass, err)
	}

	// Creating again (a retried create) keeps the CA.
	op2 := e.begin("c", v1.KindCreate, sp)
	e.runOnce(e.runner())
	if got := e.op(op2.ID).Status; got != v1.OpSucceeded {
		t.Fatalf("second create: %s", got)
	}
	again, _ := e.st.GetClusterSecret(t.Context(), k, gateway.SecretCA)
	if !bytes.Equal(ca, again) {
		t.Error("a second create replaced the cluster CA")
	}
}
