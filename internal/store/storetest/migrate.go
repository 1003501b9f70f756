package storetest

import (
	"testing"
	"time"

	v1 "kiln.dev/kiln/api/v1"
	"kiln.dev/kiln/internal/store"
)

// NodeLivenessMigration checks that migration 10 (nodes' state and
// heartbeat columns) fills those columns from the nodes already stored: a
// node written, the database rolled back to version 9 (downTo) and opened
// again, must be found by ListStaleNodes with its heartbeat to the
// millisecond. open opens the store on the same database each time, applying
// every migration.
func NodeLivenessMigration(t *testing.T, open func(t *testing.T) store.Store, downTo func(t *testing.T, version int64)) {
	ctx := t.Context()
	s := open(t)
	e := &env{t: t, ctx: ctx, s: s, clock: clockOf(t)}
	e.project("p")
	e.begin("p", "c", v1.KindCreate, v1.StateCreating)
	beat := time.Date(2026, 11, 21, 10, 11, 12, 345000000, time.UTC) // whole milliseconds: SQLite keeps no more
	for _, n := range []*store.Node{
		{Project: "p", Node: v1.Node{Name: "beating", Cluster: "c", State: v1.NodeReady, LastHeartbeat: &beat}},
		{Project: "p", Node: v1.Node{Name: "silent", Cluster: "c", State: v1.NodeReady}},
	} {
		wantErr(t, "PutNode", s.PutNode(ctx, n, store.Cond{}), nil)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	downTo(t, 9)
	s = open(t)
	for _, tc := range []struct {
		before time.Time
		want   int
	}{{beat, 0}, {beat.Add(time.Millisecond), 1}} {
		nodes, err := s.ListStaleNodes(ctx, tc.before, []string{v1.NodeReady})
		if err != nil {
			t.Fatalf("ListStaleNodes: %v", err)
		}
		if len(nodes) != tc.want {
			t.Fatalf("ListStaleNodes before %s after the migration: %d nodes, want %d", tc.before, len(nodes), tc.want)
		}
		if tc.want == 1 && (nodes[0].Name != "beating" || !nodes[0].LastHeartbeat.Equal(beat)) {
			t.Fatalf("stale node %s (heartbeat %v), want beating", nodes[0].Name, nodes[0].LastHeartbeat)
		}
	}
}
