package validate

import (
	"slices"
	"testing"

	v1 "kiln.dev/kiln/api/v1"
)

func TestHostsAdded(t *testing.T) {
	cp := func(name, state string) v1.Node {
		return v1.Node{Name: name, State: state, Role: v1.RoleControlPlane}
	}
	w := func(name, state string) v1.Node { return v1.Node{Name: name, State: state, Role: v1.RoleWorker} }
	failed := w("w-9", v1.NodeConfigured)
	failed.Prechecks = []v1.PrecheckResult{{Name: "ports", Result: v1.PrecheckFail}, {Name: "swap", Result: v1.PrecheckPass}}
	tests := []struct {
		name      string
		nodes     []v1.Node
		added     []string
		code, tgt string
	}{
		{name: "first provision", nodes: []v1.Node{cp("a", v1.NodeConfigured), cp("b", v1.NodeConfigured)}},
		{name: "nothing added", nodes: []v1.Node{cp("a", v1.NodeReady), w("w", v1.NodeNotReady), {Name: "x", State: v1.NodeDiscovered}}},
		{name: "a worker", nodes: []v1.Node{cp("a", v1.NodeReady), w("w", v1.NodeConfigured)}, added: []string{"w"}},
		{name: "a failed join again", nodes: []v1.Node{cp("a", v1.NodeReady), w("w", v1.NodeFailed)}, added: []string{"w"}},
		{name: "1 to 3", nodes: []v1.Node{cp("c", v1.NodeReady), cp("a", v1.NodeConfigured), cp("b", v1.NodeConfigured)},
			added: []string{"a", "b"}},
		{name: "1 to 2", nodes: []v1.Node{cp("a", v1.NodeReady), cp("b", v1.NodeConfigured), w("w", v1.NodeConfigured)},
			added: []string{"b", "w"}, code: v1.CodeNodeCountMismatch, tgt: "nodes/b.role"},
		{name: "3 to 4", nodes: []v1.Node{cp("a", v1.NodeReady), cp("b", v1.NodeReady), cp("c", v1.NodeNotReady), cp("d", v1.NodeConfigured)},
			added: []string{"d"}, code: v1.CodeNodeCountMismatch, tgt: "nodes/d.role"},
		{name: "prechecks failed", nodes: []v1.Node{cp("a", v1.NodeReady), failed},
			added: []string{"w-9"}, code: v1.CodeConflict, tgt: "nodes/w-9.prechecks"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			added, e := HostsAdded(tt.nodes)
			if !slices.Equal(added, tt.added) {
				t.Errorf("added %v, want %v", added, tt.added)
			}
			switch {
			case tt.code == "" && e != nil:
				t.Errorf("refused: %+v", e)
			case tt.code != "" && (e == nil || e.Code != tt.code || e.Target != tt.tgt):
				t.Errorf("error %+v, want %s on %s", e, tt.code, tt.tgt)
			}
		})
	}
}
