package storetest

import (
	"bytes"
	"errors"
	"fmt"
	"time"

	v1 "kiln.dev/kiln/api/v1"
	"kiln.dev/kiln/internal/store"
)

// testClusterSecrets: secrets are written by the lease holder only, create-
// only when asked, read back byte for byte, and go with their cluster.
func testClusterSecrets(e *env) {
	t, ctx, s := e.t, e.ctx, e.s
	e.project("p")
	e.begin("p", "c", v1.KindCreate, v1.StateCreating)
	cl := e.claim("w", time.Hour)
	k, f := cl.Key(), cl.Lease.Fence()
	stale := store.Fence{Owner: f.Owner, Token: f.Token - 1}
	key := []byte("-----BEGIN EC PRIVATE KEY-----\x00\xff")

	if err := s.PutClusterSecret(ctx, k, "ca.key", key, store.Cond{}); err == nil {
		t.Fatal("PutClusterSecret without a fence: no error")
	}
	wantErr(t, "PutClusterSecret stale", s.PutClusterSecret(ctx, k, "ca.key", key, store.Cond{Fence: &stale}), store.ErrLeaseLost)
	if _, err := s.GetClusterSecret(ctx, k, "ca.key"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("a refused write left a secret (err %v)", err)
	}
	wantErr(t, "PutClusterSecret", s.PutClusterSecret(ctx, k, "ca.key", key, store.Cond{Fence: &f, IfNoneMatch: "*"}), nil)
	wantErr(t, "PutClusterSecret create-only again", s.PutClusterSecret(ctx, k, "ca.key", []byte("other"), store.Cond{Fence: &f, IfNoneMatch: "*"}), store.ErrExists)
	got, err := s.GetClusterSecret(ctx, k, "ca.key")
	if err != nil || !bytes.Equal(got, key) {
		t.Fatalf("GetClusterSecret = %q, %v; want the first value", got, err)
	}
	wantErr(t, "PutClusterSecret replace", s.PutClusterSecret(ctx, k, "ca.key", []byte("rotated"), store.Cond{Fence: &f}), nil)
	if got, _ := s.GetClusterSecret(ctx, k, "ca.key"); string(got) != "rotated" {
		t.Fatalf("replaced secret = %q, want rotated", got)
	}

	e.finishDelete(cl)
	if _, err := s.GetClusterSecret(ctx, k, "ca.key"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("secret of a deleted cluster: %v, want ErrNotFound", err)
	}
}

// testInstructions: an instruction is issued once by the lease holder, its
// result recorded once, and it goes with its cluster.
func testInstructions(e *env) {
	t, ctx, s := e.t, e.ctx, e.s
	e.project("p")
	e.begin("p", "c", v1.KindCreate, v1.StateCreating)
	cl := e.claim("w", time.Hour)
	k, f := cl.Key(), cl.Lease.Fence()
	stale := store.Fence{Owner: f.Owner, Token: f.Token - 1}
	in := func(id, node string) *store.Instruction {
		return &store.Instruction{Project: "p", Cluster: "c", Node: node,
			Instruction: v1.Instruction{ID: id, Kind: v1.InstructionInstall, Params: []byte(`{"role":"worker"}`)}}
	}

	wantErr(t, "PutInstruction stale", s.PutInstruction(ctx, in("i1", "n1"), store.Cond{Fence: &stale}), store.ErrLeaseLost)
	if _, err := s.GetInstruction(ctx, "i1"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("a refused instruction was written (err %v)", err)
	}
	for _, x := range []*store.Instruction{in("i1", "n1"), in("i2", "n1"), in("i3", "n2")} {
		wantErr(t, "PutInstruction "+x.ID, s.PutInstruction(ctx, x, store.Cond{Fence: &f}), nil)
	}
	wantErr(t, "PutInstruction again", s.PutInstruction(ctx, in("i1", "n1"), store.Cond{Fence: &f}), store.ErrExists)

	got, err := s.GetInstruction(ctx, "i1")
	if err != nil || got.Node != "n1" || got.Kind != v1.InstructionInstall || string(got.Params) != `{"role":"worker"}` ||
		got.Result != nil || !got.CreatedAt.Equal(e.clock.Now()) {
		t.Fatalf("GetInstruction = %+v, %v", got, err)
	}

	wantErr(t, "SetInstructionResult", s.SetInstructionResult(ctx, "i1", v1.InstructionResult{Instruction: "i1", State: v1.StepSucceeded}), nil)
	wantErr(t, "SetInstructionResult twice", s.SetInstructionResult(ctx, "i1", v1.InstructionResult{Instruction: "i1", State: v1.StepFailed}), store.ErrExists)
	wantErr(t, "SetInstructionResult unknown", s.SetInstructionResult(ctx, "nope", v1.InstructionResult{State: v1.StepSucceeded}), store.ErrNotFound)
	if got, _ := s.GetInstruction(ctx, "i1"); got.Result == nil || got.Result.State != v1.StepSucceeded || got.ResultAt == nil {
		t.Fatalf("result after two reports: %+v, want the first (Succeeded)", got.Result)
	}

	ids := func(pending bool) []string {
		list, err := s.ListInstructions(ctx, k, "n1", pending)
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, x := range list {
			out = append(out, x.ID)
		}
		return out
	}
	diff(t, "all instructions of n1", []string{"i1", "i2"}, ids(false))
	diff(t, "pending instructions of n1", []string{"i2"}, ids(true))

	// A node's instructions go with its record: a node made again under
	// its name (a repair, a scale-up) is not sent what the old one had
	// pending.
	for _, name := range []string{"n1", "n2"} {
		wantErr(t, "PutNode "+name, s.PutNode(ctx, &store.Node{Project: "p", Node: v1.Node{Name: name, Cluster: "c"}}, store.Cond{Fence: &f}), nil)
	}
	wantErr(t, "DeleteNode n1 stale", s.DeleteNode(ctx, k, "n1", store.Cond{Fence: &stale}), store.ErrLeaseLost)
	diff(t, "all instructions of n1 after a refused DeleteNode", []string{"i1", "i2"}, ids(false))
	wantErr(t, "DeleteNode n1", s.DeleteNode(ctx, k, "n1", store.Cond{Fence: &f}), nil)
	diff(t, "all instructions of n1 after DeleteNode", []string(nil), ids(false))
	for _, id := range []string{"i1", "i2"} {
		if _, err := s.GetInstruction(ctx, id); !errors.Is(err, store.ErrNotFound) {
			t.Fatalf("instruction %s of a deleted node: %v, want ErrNotFound", id, err)
		}
	}
	if got, err := s.GetInstruction(ctx, "i3"); err != nil || got.Node != "n2" {
		t.Fatalf("another node's instruction after DeleteNode n1: %+v, %v", got, err)
	}

	e.finishDelete(cl)
	if _, err := s.GetInstruction(ctx, "i3"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("instruction of a deleted cluster: %v, want ErrNotFound", err)
	}
}

// testNodeLogs: lines come back in order, page by page; only the newest
// MaxNodeLogLines are kept; they go with their node and with their cluster.
func testNodeLogs(e *env) {
	t, ctx, s := e.t, e.ctx, e.s
	e.project("p")
	e.begin("p", "c", v1.KindCreate, v1.StateCreating)
	k := store.Key{Project: "p", Name: "c"}
	const extra = 7
	lines := make([]v1.LogLine, store.MaxNodeLogLines+extra)
	for i := range lines {
		lines[i] = v1.LogLine{Time: e.clock.Now(), Stream: "agent", Line: fmt.Sprintf("line %d", i)}
	}
	wantErr(t, "AppendNodeLogs", s.AppendNodeLogs(ctx, k, "n1", lines[:extra]), nil)
	wantErr(t, "AppendNodeLogs", s.AppendNodeLogs(ctx, k, "n1", lines[extra:]), nil)
	wantErr(t, "AppendNodeLogs other node", s.AppendNodeLogs(ctx, k, "n2", lines[:1]), nil)
	wantErr(t, "AppendNodeLogs unknown cluster", s.AppendNodeLogs(ctx, store.Key{Project: "p", Name: "nope"}, "n1", lines[:1]), store.ErrNotFound)

	var got []v1.LogLine
	pg := store.Page{Limit: 1000}
	for {
		page, next, err := s.ListNodeLogs(ctx, k, "n1", store.LogFilter{}, pg)
		if err != nil {
			t.Fatal(err)
		}
		if len(page) == 0 {
			if next != pg.Token {
				t.Fatalf("an empty page moved the position from %q to %q", pg.Token, next)
			}
			break
		}
		got = append(got, page...)
		pg.Token = next
	}
	if len(got) != store.MaxNodeLogLines {
		t.Fatalf("kept %d lines, want %d", len(got), store.MaxNodeLogLines)
	}
	if got[0].Line != fmt.Sprintf("line %d", extra) || got[len(got)-1].Line != lines[len(lines)-1].Line {
		t.Fatalf("kept lines %q .. %q, want the newest", got[0].Line, got[len(got)-1].Line)
	}
	diff(t, "first kept line", lines[extra], got[0])

	// Reading on from the end finds what was appended since.
	wantErr(t, "AppendNodeLogs later", s.AppendNodeLogs(ctx, k, "n1", []v1.LogLine{{Time: e.clock.Now(), Stream: "kubelet", Line: "later"}}), nil)
	if later, _, err := s.ListNodeLogs(ctx, k, "n1", store.LogFilter{}, pg); err != nil || len(later) != 1 || later[0].Line != "later" {
		t.Fatalf("reading on from the end: %+v, %v; want the one new line", later, err)
	}

	// A node's log goes with its record: a node made again under its name
	// (a repair, a rollout) does not show the old machine's lines.
	cl := e.claim("w", time.Hour)
	f := cl.Lease.Fence()
	for _, name := range []string{"n1", "n2"} {
		wantErr(t, "PutNode "+name, s.PutNode(ctx, &store.Node{Project: "p", Node: v1.Node{Name: name, Cluster: "c"}}, store.Cond{Fence: &f}), nil)
	}
	wantErr(t, "DeleteNode n1", s.DeleteNode(ctx, k, "n1", store.Cond{Fence: &f}), nil)
	if got, _, err := s.ListNodeLogs(ctx, k, "n1", store.LogFilter{}, store.Page{}); err != nil || len(got) != 0 {
		t.Fatalf("logs of a deleted node: %d lines, %v", len(got), err)
	}
	if got, _, err := s.ListNodeLogs(ctx, k, "n2", store.LogFilter{}, store.Page{}); err != nil || len(got) != 1 {
		t.Fatalf("logs of n2 after DeleteNode n1: %d lines, %v; want its 1", len(got), err)
	}

	e.finishDelete(cl)
	if got, _, err := s.ListNodeLogs(ctx, k, "n2", store.LogFilter{}, store.Page{}); err != nil || len(got) != 0 {
		t.Fatalf("logs of a deleted cluster: %d lines, %v", len(got), err)
	}
}

// finishDelete ends cl's operation as a successful delete.
func (e *env) finishDelete(cl *store.Cluster) {
	e.t.Helper()
	op := e.getOp(cl.Status.CurrentOperation)
	op.Status = v1.OpSucceeded
	wantErr(e.t, "FinishOperation delete", e.s.FinishOperation(e.ctx, nil, op, cl.Lease.Fence(), true), nil)
}

// testStaleNodes: ListStaleNodes finds, across clusters, exactly the nodes in
// the states asked whose heartbeat is older than the time given, oldest
// first; a newer heartbeat or another state takes a node off the list, and
// nodes go with their cluster.
func testStaleNodes(e *env) {
	t, ctx, s := e.t, e.ctx, e.s
	e.project("p")
	e.begin("p", "c1", v1.KindCreate, v1.StateCreating)
	e.begin("p", "c2", v1.KindCreate, v1.StateCreating)
	now := e.clock.Now()
	ago := func(d time.Duration) *time.Time { t := now.Add(-d).UTC(); return &t }
	put := func(cluster, name, state string, beat *time.Time) *store.Node {
		t.Helper()
		n := &store.Node{Project: "p", Node: v1.Node{Name: name, Cluster: cluster, State: state, LastHeartbeat: beat}}
		wantErr(t, "PutNode "+name, s.PutNode(ctx, n, store.Cond{}), nil)
		return n
	}
	old := put("c1", "old", v1.NodeReady, ago(time.Minute))
	put("c1", "fresh", v1.NodeReady, ago(time.Second))
	put("c1", "gone", v1.NodeNotReady, ago(2*time.Minute))
	put("c1", "silent", v1.NodeReady, nil)
	put("c2", "older", v1.NodeProvisioning, ago(90*time.Second))
	live := []string{v1.NodeReady, v1.NodeProvisioning}
	stale := func() []string {
		t.Helper()
		nodes, err := s.ListStaleNodes(ctx, now.Add(-10*time.Second), live)
		if err != nil {
			t.Fatalf("ListStaleNodes: %v", err)
		}
		var names []string
		for _, n := range nodes {
			names = append(names, n.Cluster+"/"+n.Name+":"+n.State)
		}
		return names
	}
	diff(t, "stale nodes", []string{"c2/older:PROVISIONING", "c1/old:READY"}, stale())

	old.LastHeartbeat = ago(0)
	wantErr(t, "PutNode old", s.PutNode(ctx, old, store.Cond{IfMatch: old.ETag}), nil)
	diff(t, "stale nodes after a heartbeat", []string{"c2/older:PROVISIONING"}, stale())
	put("c2", "older", v1.NodeNotReady, ago(90*time.Second))
	diff(t, "stale nodes after a state change", []string(nil), stale())
	put("c2", "lost", v1.NodeReady, ago(time.Hour))
	diff(t, "stale nodes", []string{"c2/lost:READY"}, stale())
	if cl := e.claim("w", time.Hour); cl.Name != "c1" { // the oldest first; c2 next
		t.Fatalf("claimed %s, want c1", cl.Name)
	}
	e.finishDelete(e.claim("w", time.Hour))
	diff(t, "stale nodes of a deleted cluster", []string(nil), stale())
	if nodes, err := s.ListStaleNodes(ctx, now, nil); err != nil || len(nodes) != 0 {
		t.Fatalf("ListStaleNodes with no states: %v, %v", nodes, err)
	}
}

// testClustersNodes: ListClustersNodes answers the nodes of exactly the
// clusters named in the project named, by cluster and each by name; a
// cluster without nodes, or of another project, has no entry.
func testClustersNodes(e *env) {
	t, ctx, s := e.t, e.ctx, e.s
	e.project("p")
	e.project("q")
	for _, c := range []string{"a", "b", "empty", "other"} {
		e.begin("p", c, v1.KindCreate, v1.StateCreating)
	}
	e.begin("q", "a", v1.KindCreate, v1.StateCreating)
	for _, n := range []struct{ project, cluster, name string }{
		{"p", "a", "n2"}, {"p", "a", "n1"}, {"p", "b", "n1"}, {"p", "other", "n1"}, {"q", "a", "n9"},
	} {
		wantErr(t, "PutNode "+n.name, s.PutNode(ctx, &store.Node{Project: n.project, Node: v1.Node{Name: n.name, Cluster: n.cluster, State: v1.NodeReady}}, store.Cond{}), nil)
	}
	got, err := s.ListClustersNodes(ctx, "p", []string{"a", "b", "empty", "missing"})
	if err != nil {
		t.Fatalf("ListClustersNodes: %v", err)
	}
	names := map[string][]string{}
	for c, nodes := range got {
		for _, n := range nodes {
			if n.Project != "p" || n.Cluster != c || n.ETag == "" {
				t.Errorf("node %s of %s: project %q, cluster %q, etag %q", n.Name, c, n.Project, n.Cluster, n.ETag)
			}
			names[c] = append(names[c], n.Name)
		}
	}
	diff(t, "nodes by cluster", map[string][]string{"a": {"n1", "n2"}, "b": {"n1"}}, names)
	if got, err := s.ListClustersNodes(ctx, "p", nil); err != nil || len(got) != 0 {
		t.Fatalf("ListClustersNodes of no clusters: %v, %v", got, err)
	}
}

// testDiagnostics: a bundle comes back as written, its record apart; a
// cluster keeps its newest MaxDiagnostics, listed newest first; an id is
// written once; a bundle of an unknown cluster is refused; bundles go with
// their cluster.
func testDiagnostics(e *env) {
	t, ctx, s := e.t, e.ctx, e.s
	e.project("p")
	e.begin("p", "c", v1.KindCreate, v1.StateCreating)
	k := store.Key{Project: "p", Name: "c"}
	put := func(i int) *store.Diagnostics {
		t.Helper()
		e.clock.Advance(time.Second)
		d := &store.Diagnostics{Project: "p", Cluster: "c", Diagnostics: v1.Diagnostics{ID: fmt.Sprintf("d%02d", i),
			Cluster: "/v1/projects/p/clusters/c", Reason: "requested", Files: []string{"README.txt"}, Size: 3, CreatedAt: e.clock.Now()}}
		wantErr(t, "PutDiagnostics", s.PutDiagnostics(ctx, d, []byte{0x1f, 0x8b, byte(i)}), nil)
		return d
	}
	first := put(0)
	got, err := s.GetDiagnostics(ctx, "d00")
	wantErr(t, "GetDiagnostics", err, nil)
	diff(t, "diagnostics record", first, got)
	b, err := s.GetDiagnosticsBundle(ctx, "d00")
	wantErr(t, "GetDiagnosticsBundle", err, nil)
	diff(t, "bundle", []byte{0x1f, 0x8b, 0}, b)
	wantErr(t, "PutDiagnostics again", s.PutDiagnostics(ctx, first, []byte{1}), store.ErrExists)
	wantErr(t, "PutDiagnostics unknown cluster", s.PutDiagnostics(ctx,
		&store.Diagnostics{Project: "p", Cluster: "nope", Diagnostics: v1.Diagnostics{ID: "x"}}, []byte{1}), store.ErrNotFound)

	for i := 1; i <= store.MaxDiagnostics+2; i++ {
		put(i)
	}
	list, next, err := s.ListDiagnostics(ctx, k, store.Page{})
	wantErr(t, "ListDiagnostics", err, nil)
	var ids []string
	for _, d := range list {
		ids = append(ids, d.ID)
	}
	var want []string
	for i := store.MaxDiagnostics + 2; i > 2; i-- {
		want = append(want, fmt.Sprintf("d%02d", i))
	}
	diff(t, "bundles kept, newest first", want, ids)
	if next != "" {
		t.Errorf("next token %q for a list that is whole", next)
	}
	if _, err := s.GetDiagnostics(ctx, "d00"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("the oldest bundle beyond the limit: %v, want ErrNotFound", err)
	}
	wantErr(t, "DeleteDiagnostics", s.DeleteDiagnostics(ctx, "d12"), nil)
	wantErr(t, "DeleteDiagnostics again", s.DeleteDiagnostics(ctx, "d12"), store.ErrNotFound)

	e.finishDelete(e.claim("w", time.Hour))
	if _, err := s.GetDiagnosticsBundle(ctx, "d11"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("bundle of a deleted cluster: %v, want ErrNotFound", err)
	}
}
