package plan_test

import (
	"context"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	v1 "kiln.dev/kiln/api/v1"
	"kiln.dev/kiln/internal/distro"
	"kiln.dev/kiln/internal/plan"
	"kiln.dev/kiln/internal/provider/edge"
	"kiln.dev/kiln/internal/store"
	"kiln.dev/kiln/internal/trust"
)

// edgeSpec is an edge cluster: one dedicated control-plane host and
// workers, installed with the local distribution.
func edgeSpec() v1.ClusterSpec {
	return v1.ClusterSpec{
		Provider: "edge", Distribution: v1.DistroLocal, KubernetesVersion: "v1.36.3",
		ControlPlane: v1.ControlPlane{Size: 1, Dedicated: true}, NodeApproval: "manual",
	}
}

// host records a host that joined cluster c, in state with role.
func (e *env) host(name, state, role string) {
	e.t.Helper()
	n := &store.Node{Project: project, Node: v1.Node{Name: name, Cluster: "c", State: state, Role: role, Address: "192.0.2.10"}}
	if err := e.st.PutNode(e.t.Context(), n, store.Cond{}); err != nil {
		e.t.Fatal(err)
	}
}

func (e *env) beginHosts(kind string) *store.Operation {
	e.t.Helper()
	return e.beginSteps("c", kind, edgeSpec(), plan.StepsFor(kind, true))
}

// An edge create makes the activation material and nothing else.
func TestEdgeCreate(t *testing.T) {
	e := newEnv(t)
	e.reg["edge"] = edge.Edge{Versions: distro.Versions()}
	op := e.beginHosts(v1.KindCreate)
	e.runOnce(e.runner())
	got := e.op(op.ID)
	if got.Status != v1.OpSucceeded {
		t.Fatalf("operation %s %+v, want Succeeded", got.Status, got.Error)
	}
	if diff := cmp.Diff(map[string]string{"validate-dynamic": v1.StepSucceeded, "ensure-cluster-pki": v1.StepSucceeded}, stepStates(got)); diff != "" {
		t.Errorf("steps (-want +got):\n%s", diff)
	}
	for _, secret := range []string{trust.SecretCredentialHash, trust.SecretPassphraseHash} {
		if _, err := e.st.GetClusterSecret(t.Context(), store.Key{Project: project, Name: "c"}, secret); err != nil {
			t.Errorf("secret %s: %v", secret, err)
		}
	}
	if n := e.nodes("c"); len(n) != 0 {
		t.Errorf("nodes %v before any host joined", n)
	}
}

// Provisioning hosts that do not make the configuration fails before
// anything is installed, saying what is missing.
func TestEdgeProvisionNeedsTheConfiguredHosts(t *testing.T) {
	e := newEnv(t)
	e.reg["edge"] = edge.Edge{Versions: distro.Versions()}
	e.beginHosts(v1.KindCreate)
	e.runOnce(e.runner())
	e.host("host-a", v1.NodeConfigured, v1.RoleControlPlane)
	e.host("host-b", v1.NodeApproved, "")
	op := e.beginHosts(v1.KindProvision)
	e.runOnce(e.runner())

	got := e.op(op.ID)
	if got.Status != v1.OpFailed || got.Error.Code != v1.CodeNodeCountMismatch ||
		!strings.Contains(got.Error.Message, "configure at least 1 host as worker") ||
		!strings.Contains(got.Error.Message, "joined without a role: host-b") {
		t.Fatalf("operation %s %+v, want Failed with NodeCountMismatch naming the missing worker", got.Status, got.Error)
	}
	if s := stepStates(got); s[plan.StepCheckNodeConfiguration] != v1.StepFailed || s[plan.StepInstallControlPlane] != v1.StepPending {
		t.Errorf("steps = %v, want check-node-configuration Failed and nothing installed", s)
	}
	if n := e.nodes("c"); n["host-a"] != "control-plane//CONFIGURED" {
		t.Errorf("host-a = %q, want it untouched", n["host-a"])
	}
}

// A load balancer pool that holds a host's address (or is off its
// subnet) fails check-node-configuration before anything is installed,
// naming the field.
func TestEdgeProvisionChecksTheLoadBalancerPool(t *testing.T) {
	e := newEnv(t)
	e.reg["edge"] = edge.Edge{Versions: distro.Versions()}
	spec := edgeSpec()
	spec.Distribution, spec.ControlPlane.Dedicated = v1.DistroKubeadm, false
	spec.Network.LoadBalancerPool = "192.0.2.8/29" // holds host-a's 192.0.2.10
	e.beginSteps("c", v1.KindCreate, spec, plan.StepsFor(v1.KindCreate, true))
	e.runOnce(e.runner())
	e.host("host-a", v1.NodeConfigured, v1.RoleControlPlane)
	op := e.beginSteps("c", v1.KindProvision, spec, plan.StepsFor(v1.KindProvision, true))
	e.runOnce(e.runner())

	got := e.op(op.ID)
	if got.Status != v1.OpFailed || got.Error.Code != v1.CodeInvalidParameter || got.Error.Target != "spec.network.loadBalancerPool" {
		t.Fatalf("operation %s %+v, want Failed with InvalidParameter on spec.network.loadBalancerPool", got.Status, got.Error)
	}
	if s := stepStates(got); s[plan.StepCheckNodeConfiguration] != v1.StepFailed || s[plan.StepInstallControlPlane] != v1.StepPending {
		t.Errorf("steps = %v, want check-node-configuration Failed and nothing installed", s)
	}
}

// A reset removes every host from the cluster; hosts that had nothing
// installed need no teardown. The cluster and its activation stay.
func TestEdgeResetRemovesHosts(t *testing.T) {
	e := newEnv(t)
	e.reg["edge"] = edge.Edge{Versions: distro.Versions()}
	e.beginHosts(v1.KindCreate)
	e.runOnce(e.runner())
	e.host("host-a", v1.NodeConfigured, v1.RoleControlPlane)
	e.host("host-b", v1.NodeDiscovered, "")
	op := e.beginHosts(v1.KindReset)
	e.runOnce(e.runner())

	got := e.op(op.ID)
	if got.Status != v1.OpSucceeded {
		t.Fatalf("operation %s %+v, want Succeeded", got.Status, got.Error)
	}
	want := map[string]string{plan.StepResetNodes: v1.StepSkipped, plan.StepRemoveNodes: v1.StepSucceeded}
	if diff := cmp.Diff(want, stepStates(got)); diff != "" {
		t.Errorf("steps (-want +got):\n%s", diff)
	}
	if n := e.nodes("c"); len(n) != 0 {
		t.Errorf("nodes after reset: %v", n)
	}
	cl := e.cluster("c")
	if cl.Status.ProvisioningState != v1.StateSucceeded {
		t.Errorf("cluster %s after reset, want Succeeded", cl.Status.ProvisioningState)
	}
	if _, err := e.st.GetClusterSecret(t.Context(), cl.Key(), trust.SecretPassphraseHash); err != nil {
		t.Errorf("the activation passphrase is gone after a reset: %v", err)
	}
}

// The removal of one host (remove-node, the operation's Nodes) resets and
// removes that host only; the others and the cluster stay as they are.
func TestEdgeRemoveNodeResetsOnlyItsHost(t *testing.T) {
	e := newEnv(t)
	e.reg["edge"] = edge.Edge{Versions: distro.Versions()}
	e.beginHosts(v1.KindCreate)
	e.runOnce(e.runner())
	e.host("host-a", v1.NodeReady, v1.RoleControlPlane)
	e.host("host-b", v1.NodeReady, v1.RoleWorker)
	e.host("host-c", v1.NodeReady, v1.RoleWorker)
	op := e.beginStepsOn("c", v1.KindRemoveNode, edgeSpec(), []string{plan.StepResetNodes}, []string{"host-c"})

	var mu sync.Mutex
	var resets []string
	ctx, stop := context.WithCancel(t.Context())
	var wg sync.WaitGroup
	wg.Go(func() {
		k := store.Key{Project: project, Name: "c"}
		for ctx.Err() == nil {
			for _, h := range []string{"host-a", "host-b", "host-c"} {
				pending, _ := e.st.ListInstructions(ctx, k, h, true)
				for _, in := range pending {
					mu.Lock()
					resets = append(resets, h+" "+in.Kind)
					mu.Unlock()
					_ = e.st.SetInstructionResult(ctx, in.ID, v1.InstructionResult{Instruction: in.ID, State: v1.StepSucceeded})
				}
			}
			select {
			case <-ctx.Done():
			case <-time.After(5 * time.Millisecond):
			}
		}
	})
	e.runOnce(e.runner())
	stop()
	wg.Wait()

	if got := e.op(op.ID); got.Status != v1.OpSucceeded {
		t.Fatalf("operation %s %+v, want Succeeded", got.Status, got.Error)
	}
	if want := []string{"host-c " + v1.InstructionReset}; !slices.Equal(resets, want) {
		t.Errorf("instructions %v, want %v", resets, want)
	}
}

// A host with nothing installed is removed at once: nothing to drain or
// reset, no Node object to delete; the other hosts stay.
func TestEdgeRemoveNodeNotInstalled(t *testing.T) {
	e := newEnv(t)
	e.reg["edge"] = edge.Edge{Versions: distro.Versions()}
	e.beginHosts(v1.KindCreate)
	e.runOnce(e.runner())
	e.host("host-a", v1.NodeReady, v1.RoleControlPlane)
	e.host("host-b", v1.NodeReady, v1.RoleWorker)
	e.host("host-c", v1.NodeConfigured, v1.RoleWorker)
	op := e.beginStepsOn("c", v1.KindRemoveNode, edgeSpec(), plan.StepsFor(v1.KindRemoveNode, true), []string{"host-c"})
	e.runOnce(e.runner())

	got := e.op(op.ID)
	if got.Status != v1.OpSucceeded {
		t.Fatalf("operation %s %+v, want Succeeded", got.Status, got.Error)
	}
	want := map[string]string{plan.StepDrainNodes: v1.StepSkipped, plan.StepResetNodes: v1.StepSkipped, plan.StepRemoveNodes: v1.StepSucceeded}
	if diff := cmp.Diff(want, stepStates(got)); diff != "" {
		t.Errorf("steps (-want +got):\n%s", diff)
	}
	var left []string
	for name := range e.nodes("c") {
		left = append(left, name)
	}
	slices.Sort(left)
	if want := []string{"host-a", "host-b"}; !slices.Equal(left, want) {
		t.Errorf("nodes after the removal %v, want %v", left, want)
	}
	if cl := e.cluster("c"); cl.Status.ProvisioningState != v1.StateSucceeded {
		t.Errorf("cluster %s after the removal, want Succeeded", cl.Status.ProvisioningState)
	}
}
