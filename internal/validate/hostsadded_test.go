package validate

import (
	"slices"
	"strconv"
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

func TestNodeRemoval(t *testing.T) {
	n := func(name, state, role string) v1.Node {
		return v1.Node{Name: name, State: state, Role: role, Address: "192.0.2." + strconv.Itoa(int(name[len(name)-1]))}
	}
	cp, w := v1.RoleControlPlane, v1.RoleWorker
	three := []v1.Node{n("a", v1.NodeReady, cp), n("b", v1.NodeReady, cp), n("c", v1.NodeNotReady, cp),
		n("w1", v1.NodeReady, w), n("w2", v1.NodeReady, w), n("w3", v1.NodeConfigured, w)}
	tests := []struct {
		name, node string
		nodes      []v1.Node
		dedicated  bool
		endpoint   string
		target     string // "" for allowed
	}{
		{name: "a worker of two", node: "w1", nodes: three, dedicated: true},
		{name: "the last installed worker of a dedicated control plane", node: "w1", dedicated: true,
			nodes: []v1.Node{n("a", v1.NodeReady, cp), n("w1", v1.NodeReady, w), n("w2", v1.NodeConfigured, w)}, target: "nodes/w1"},
		{name: "the last worker of a converged control plane", node: "w1",
			nodes: []v1.Node{n("a", v1.NodeReady, cp), n("w1", v1.NodeReady, w)}},
		{name: "a host with nothing installed", node: "w3", nodes: three, dedicated: true},
		{name: "3 to 2 control-plane nodes", node: "b", nodes: three, target: "nodes/b.role"},
		{name: "the only control-plane node", node: "a", nodes: []v1.Node{n("a", v1.NodeReady, cp)}, target: "nodes/a.role"},
		{name: "4 to 3, not the endpoint", node: "d", nodes: append(slices.Clone(three), n("d", v1.NodeReady, cp))},
		{name: "4 to 3, the endpoint", node: "a", nodes: append(slices.Clone(three), n("d", v1.NodeReady, cp)), target: "nodes/a.role"},
		{name: "4 to 3, the recorded endpoint", node: "d", nodes: append(slices.Clone(three), n("d", v1.NodeReady, cp)),
			endpoint: "192.0.2.100:6443", target: "nodes/d.role"},
		{name: "4 to 3, the first by name when another is the endpoint", node: "a", nodes: append(slices.Clone(three), n("d", v1.NodeReady, cp)),
			endpoint: "192.0.2.100:6443"},
		{name: "a control-plane host with nothing installed", node: "e", nodes: append(slices.Clone(three), n("e", v1.NodeConfigured, cp))},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			spec := &v1.ClusterSpec{ControlPlane: v1.ControlPlane{Size: 3, Dedicated: tt.dedicated}}
			e := NodeRemoval(spec, tt.endpoint, tt.nodes, tt.node)
			switch {
			case tt.target == "" && e != nil:
				t.Errorf("refused: %+v", e)
			case tt.target != "" && (e == nil || e.Code != v1.CodeNodeCountMismatch || e.Target != tt.target):
				t.Errorf("error %+v, want NodeCountMismatch on %s", e, tt.target)
			}
		})
	}
}
