package install

import (
	"testing"

	"github.com/google/go-cmp/cmp"

	"kiln.dev/kiln/internal/kubeapi"
)

func TestWithTaints(t *testing.T) {
	have := []kubeapi.Taint{{Key: "node.kubernetes.io/not-ready", Effect: "NoExecute", TimeAdded: "2026-01-01T00:00:00Z"}, {Key: "gpu", Value: "old", Effect: "NoSchedule"}}
	want := []kubeapi.Taint{{Key: "gpu", Value: "true", Effect: "NoSchedule"}, {Key: "spot", Effect: "PreferNoSchedule"}}
	got, changed := withTaints(have, want)
	wantOut := []kubeapi.Taint{{Key: "node.kubernetes.io/not-ready", Effect: "NoExecute", TimeAdded: "2026-01-01T00:00:00Z"}, {Key: "gpu", Value: "true", Effect: "NoSchedule"}, {Key: "spot", Effect: "PreferNoSchedule"}}
	if !changed || !cmp.Equal(wantOut, got) {
		t.Errorf("withTaints = %v, %v; want %v, true", got, changed, wantOut)
	}
	if _, changed := withTaints(got, want); changed {
		t.Error("withTaints changed a node that has every taint")
	}
}
