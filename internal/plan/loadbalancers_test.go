package plan_test

import (
	"testing"

	"github.com/google/go-cmp/cmp"

	v1 "kiln.dev/kiln/api/v1"
	"kiln.dev/kiln/internal/plan"
	"kiln.dev/kiln/internal/plan/profile"
)

// install-service-load-balancers applies the metallb chart, then the pool
// of spec.network.loadBalancerPool; without a pool it is Skipped and
// applies nothing.
func TestInstallServiceLoadBalancers(t *testing.T) {
	for _, tc := range []struct {
		name, pool string
		want       []string
		state      string
	}{
		{"a pool", "192.168.1.240/28", []string{profile.MetalLBPack, profile.MetalLBPoolPack}, v1.StepSucceeded},
		{"no pool", "", nil, v1.StepSkipped},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fake := &fakePacks{}
			e, r, sp := secretsEnv(t, fake)
			sp.Profile = v1.ProfileRef{}
			sp.Network.LoadBalancerPool = tc.pool
			op := e.beginSteps("c", v1.KindProvision, sp, []string{plan.StepEnsureClusterPKI, plan.StepInstallServiceLoadBalancers})
			e.runOnce(r)
			got := e.op(op.ID)
			if got.Status != v1.OpSucceeded || stepStates(got)[plan.StepInstallServiceLoadBalancers] != tc.state {
				t.Fatalf("operation %s %+v, steps %v; want Succeeded, the step %s", got.Status, got.Error, stepStates(got), tc.state)
			}
			if diff := cmp.Diff(tc.want, fake.took()); diff != "" {
				t.Errorf("packs applied (-want +got):\n%s", diff)
			}
		})
	}
}

// The pool's manifests name the addresses as MetalLB reads them.
func TestPoolManifests(t *testing.T) {
	want := `apiVersion: metallb.io/v1beta1
kind: IPAddressPool
metadata:
  name: kiln
spec:
  addresses:
  - 10.0.0.5-10.0.0.9
---
apiVersion: metallb.io/v1beta1
kind: L2Advertisement
metadata:
  name: kiln
spec:
  ipAddressPools:
  - kiln
`
	if diff := cmp.Diff(want, profile.PoolManifests("10.0.0.5-10.0.0.9")); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
}
