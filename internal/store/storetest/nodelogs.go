package storetest

import (
	"fmt"
	"time"

	v1 "kiln.dev/kiln/api/v1"
	"kiln.dev/kiln/internal/store"
)

// testNodeLogFilters: the store filters a node's log by stream and time and
// starts at its newest lines (tail); a filtered read that reached the end
// goes on reading after what it left out.
func testNodeLogFilters(e *env) {
	t, ctx, s := e.t, e.ctx, e.s
	e.project("p")
	e.begin("p", "c", v1.KindCreate, v1.StateCreating)
	k := store.Key{Project: "p", Name: "c"}
	start := e.clock.Now()
	var lines []v1.LogLine
	for i := range 30 {
		stream := []string{"agent", "etcd", "kubelet"}[i%3]
		lines = append(lines, v1.LogLine{Time: start.Add(time.Duration(i) * time.Second), Stream: stream, Line: fmt.Sprintf("%s %d", stream, i)})
	}
	wantErr(t, "AppendNodeLogs", s.AppendNodeLogs(ctx, k, "n1", lines), nil)

	read := func(f store.LogFilter, pg store.Page) ([]string, string) {
		t.Helper()
		got, next, err := s.ListNodeLogs(ctx, k, "n1", f, pg)
		if err != nil {
			t.Fatalf("ListNodeLogs(%+v, %+v): %v", f, pg, err)
		}
		var out []string
		for _, l := range got {
			out = append(out, l.Line)
		}
		return out, next
	}
	want := func(name string, got []string, want ...string) {
		t.Helper()
		diff(t, name, want, got)
	}

	got, _ := read(store.LogFilter{Streams: []string{"etcd"}, Tail: 2}, store.Page{})
	want("etcd, the newest 2", got, "etcd 25", "etcd 28")
	got, _ = read(store.LogFilter{Streams: []string{"agent", "kubelet"}, Since: start.Add(24 * time.Second)}, store.Page{})
	want("agent and kubelet since 24s", got, "agent 24", "kubelet 26", "agent 27", "kubelet 29")
	got, _ = read(store.LogFilter{Tail: 3}, store.Page{})
	want("the newest 3", got, "agent 27", "etcd 28", "kubelet 29")
	got, _ = read(store.LogFilter{Tail: 100, Since: start.Add(28 * time.Second)}, store.Page{})
	want("more than there are", got, "etcd 28", "kubelet 29")
	got, _ = read(store.LogFilter{Streams: []string{"scheduler"}}, store.Page{})
	want("a stream with no lines", got)

	// A tail read in pages: the first page starts at the tail.
	got, next := read(store.LogFilter{Streams: []string{"kubelet"}, Tail: 4}, store.Page{Limit: 3})
	want("tail, first page", got, "kubelet 20", "kubelet 23", "kubelet 26")
	got, next = read(store.LogFilter{Streams: []string{"kubelet"}}, store.Page{Limit: 3, Token: next})
	want("tail, second page", got, "kubelet 29")

	// Following a filtered log: the end of the read is past the lines it
	// left out, and only what matches comes next.
	got, again := read(store.LogFilter{Streams: []string{"kubelet"}}, store.Page{Token: next})
	want("nothing new", got)
	if again == "" {
		t.Fatal("an empty read has no position to read on from")
	}
	wantErr(t, "AppendNodeLogs later", s.AppendNodeLogs(ctx, k, "n1", []v1.LogLine{
		{Time: start.Add(time.Minute), Stream: "etcd", Line: "etcd later"},
		{Time: start.Add(time.Minute), Stream: "kubelet", Line: "kubelet later"},
	}), nil)
	got, next = read(store.LogFilter{Streams: []string{"kubelet"}}, store.Page{Token: again})
	want("the new kubelet line", got, "kubelet later")
	got, _ = read(store.LogFilter{Streams: []string{"kubelet"}}, store.Page{Token: next})
	want("read to the end", got)
}
