package sim

import (
	"context"
	"errors"
	"testing"
	"time"

	v1 "kiln.dev/kiln/api/v1"
	"kiln.dev/kiln/internal/failure"
	"kiln.dev/kiln/internal/provider"
	"kiln.dev/kiln/internal/provider/providertest"
)

func TestContract(t *testing.T) {
	providertest.Run(t, New())
}

func TestContractWithLatency(t *testing.T) {
	providertest.Run(t, New(WithLatency(time.Millisecond)))
}

func TestLoadBalancerAddress(t *testing.T) {
	lb, err := New().EnsureLoadBalancer(t.Context(), provider.Cluster{Project: "p", Name: "c"})
	if err != nil {
		t.Fatal(err)
	}
	if want := "c.p.sim.kiln.invalid:6443"; lb.Address != want {
		t.Errorf("address = %q, want %q", lb.Address, want)
	}
}

func TestMachinesAreReady(t *testing.T) {
	m, err := New().EnsureMachine(t.Context(), provider.Cluster{Project: "p", Name: "c"},
		provider.MachineSpec{Name: "c-cp-0", Role: v1.RoleControlPlane})
	if err != nil {
		t.Fatal(err)
	}
	if !m.Ready || m.Address == "" {
		t.Errorf("machine = %+v, want Ready with an address", m)
	}
}

func labelled(labels map[string]string) provider.Cluster {
	return provider.Cluster{Project: "p", Name: "c", Spec: v1.ClusterSpec{Labels: labels}}
}

func TestBeforeStep(t *testing.T) {
	tests := []struct {
		name      string
		labels    map[string]string
		step      string
		attempts  int
		wantFails int // attempts that fail retryably, then it succeeds
		wantTerm  bool
		wantCode  string
	}{
		{name: "no labels", step: "ensure-network", attempts: 2},
		{name: "other step", labels: map[string]string{LabelFailStep: "ensure-network"}, step: "approve-nodes", attempts: 2},
		{name: "fail once by default", labels: map[string]string{LabelFailStep: "ensure-network"}, step: "ensure-network", attempts: 3, wantFails: 1},
		{name: "fail twice", labels: map[string]string{LabelFailStep: "ensure-network", LabelFailTimes: "2"}, step: "ensure-network", attempts: 4, wantFails: 2},
		{name: "terminal", labels: map[string]string{LabelFailTerminal: "ensure-network"}, step: "ensure-network", attempts: 1, wantTerm: true, wantCode: v1.CodeProviderError},
		{name: "bad fail-times", labels: map[string]string{LabelFailStep: "x", LabelFailTimes: "many"}, step: "x", attempts: 1, wantTerm: true, wantCode: v1.CodeInvalidParameter},
		{name: "bad latency", labels: map[string]string{LabelStepLatency: "soon"}, step: "x", attempts: 1, wantTerm: true, wantCode: v1.CodeInvalidParameter},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := New()
			c := labelled(tt.labels)
			for i := range tt.attempts {
				err := s.BeforeStep(t.Context(), c, tt.step)
				switch {
				case tt.wantTerm:
					fe := failure.From(err)
					if err == nil || fe.Retryable || fe.Code != tt.wantCode {
						t.Fatalf("attempt %d: err = %v, want terminal %s", i+1, err, tt.wantCode)
					}
				case i < tt.wantFails:
					fe := failure.From(err)
					if err == nil || !fe.Retryable || fe.Code != v1.CodeProviderError {
						t.Fatalf("attempt %d: err = %v, want retryable ProviderError", i+1, err)
					}
				default:
					if err != nil {
						t.Fatalf("attempt %d: %v", i+1, err)
					}
				}
			}
		})
	}
}

func TestBeforeStepHangsUntilCancelled(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Millisecond)
	defer cancel()
	err := New().BeforeStep(ctx, labelled(map[string]string{LabelHangStep: "s"}), "s")
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("err = %v, want the context's error", err)
	}
}

func TestBeforeStepLatencyHonoursContext(t *testing.T) {
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	err := New().BeforeStep(ctx, labelled(map[string]string{LabelStepLatency: "1h"}), "s")
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("err = %v, want context.Canceled", err)
	}
}

func TestFaultCountsResetWhenNetworkDeleted(t *testing.T) {
	s := New()
	c := labelled(map[string]string{LabelFailStep: "s"})
	if err := s.BeforeStep(t.Context(), c, "s"); err == nil {
		t.Fatal("first attempt succeeded, want the injected failure")
	}
	if err := s.DeleteNetwork(t.Context(), c); err != nil {
		t.Fatal(err)
	}
	if err := s.BeforeStep(t.Context(), c, "s"); err == nil {
		t.Fatal("first attempt after the cluster was deleted succeeded, want the injected failure again")
	}
}
