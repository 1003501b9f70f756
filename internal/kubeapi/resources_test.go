package kubeapi

import (
	"encoding/json"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// TestPodRequests: a pod's requests are what the scheduler counts, and an
// unschedulable pod says so.
func TestPodRequests(t *testing.T) {
	const doc = `{
	  "metadata": {"name": "web-1", "namespace": "shop"},
	  "spec": {
	    "nodeSelector": {"kiln.dev/pool": "big"},
	    "tolerations": [{"key": "gpu", "operator": "Exists", "effect": "NoSchedule"}],
	    "containers": [
	      {"resources": {"requests": {"cpu": "1500m", "memory": "256Mi"}}},
	      {"resources": {"requests": {"cpu": "0.25"}}}
	    ],
	    "initContainers": [{"resources": {"requests": {"cpu": "100m", "memory": "1Gi"}}}]
	  },
	  "status": {"phase": "Pending", "conditions": [
	    {"type": "PodScheduled", "status": "False", "reason": "Unschedulable", "message": "0/2 nodes are available: 2 Insufficient cpu."}
	  ]}
	}`
	var w wirePod
	if err := json.Unmarshal([]byte(doc), &w); err != nil {
		t.Fatal(err)
	}
	p := w.pod()
	want := Resources{MilliCPU: 1750, Memory: 1 << 30, Pods: 1}
	if diff := cmp.Diff(want, p.Requests); diff != "" {
		t.Errorf("requests (-want +got):\n%s", diff)
	}
	if !p.Unschedulable || p.UnschedulableMessage != "0/2 nodes are available: 2 Insufficient cpu." {
		t.Errorf("unschedulable %t %q", p.Unschedulable, p.UnschedulableMessage)
	}
	if p.NodeSelector["kiln.dev/pool"] != "big" || len(p.Tolerations) != 1 {
		t.Errorf("selector %v tolerations %v", p.NodeSelector, p.Tolerations)
	}
	if got := p.Requests.String(); got != "cpu 1750m, memory 1Gi" {
		t.Errorf("String() = %q", got)
	}
}

func TestTolerates(t *testing.T) {
	gpu := Taint{Key: "gpu", Value: "true", Effect: "NoSchedule"}
	for _, tc := range []struct {
		name string
		tol  Toleration
		want bool
	}{
		{"equal", Toleration{Key: "gpu", Value: "true", Effect: "NoSchedule"}, true},
		{"equal by default, other value", Toleration{Key: "gpu", Value: "false"}, false},
		{"exists, any effect", Toleration{Key: "gpu", Operator: "Exists"}, true},
		{"other effect", Toleration{Key: "gpu", Operator: "Exists", Effect: "NoExecute"}, false},
		{"everything", Toleration{Operator: "Exists"}, true},
		{"other key", Toleration{Key: "spot", Operator: "Exists"}, false},
	} {
		if got := tc.tol.Tolerates(gpu); got != tc.want {
			t.Errorf("%s: Tolerates = %t, want %t", tc.name, got, tc.want)
		}
	}
}
