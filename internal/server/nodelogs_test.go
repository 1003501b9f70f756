package server_test

import (
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	v1 "kiln.dev/kiln/api/v1"
	"kiln.dev/kiln/internal/server"
	"kiln.dev/kiln/internal/store"
)

// The server filters a node's log: by component, by time, the newest N;
// the nextLink goes on with the filters (not the tail), and ?wait=
// long-polls for the next line that matches.
func TestNodeLogFilters(t *testing.T) {
	waiting := make(chan string, 16)
	h := newHarness(t, func(o *server.Options) { o.PollInterval = 10 * time.Millisecond })
	h.s.OnLongPollWait(func(what string) {
		select {
		case waiting <- what:
		default:
		}
	})
	h.project("p")
	h.createCluster("p", "c", minimal)
	h.putNode("n1", v1.NodeReady)
	k := store.Key{Project: "p", Name: "c"}
	start := time.Date(2030, 1, 2, 3, 4, 0, 0, time.UTC)
	var lines []v1.LogLine
	for i := range 12 {
		stream := []string{"agent", "etcd", "kubelet"}[i%3]
		lines = append(lines, v1.LogLine{Time: start.Add(time.Duration(i) * time.Second), Stream: stream, Line: fmt.Sprintf("%s %d", stream, i)})
	}
	if err := h.store.AppendNodeLogs(t.Context(), k, "n1", lines); err != nil {
		t.Fatal(err)
	}
	read := func(path string) ([]string, string) {
		t.Helper()
		var page v1.List[v1.LogLine]
		h.must(http.StatusOK, "GET", path, "").decode(t, &page)
		var out []string
		for _, l := range page.Value {
			out = append(out, l.Line)
		}
		return out, page.NextLink
	}
	const logs = nodes + "n1/logs"

	got, next := read(logs + "?component=etcd&tail=2")
	if strings.Join(got, ",") != "etcd 7,etcd 10" {
		t.Errorf("etcd, tail 2: %v", got)
	}
	if q := query(t, next); q.Get("tail") != "" || q.Get("component") != "etcd" {
		t.Errorf("nextLink %q: want the component and no tail", next)
	}
	got, _ = read(logs + "?component=agent,kubelet&since=" + url.QueryEscape(start.Add(8*time.Second).Format(time.RFC3339)))
	if strings.Join(got, ",") != "kubelet 8,agent 9,kubelet 11" {
		t.Errorf("agent and kubelet since 8s: %v", got)
	}
	got, _ = read(logs + "?component=agent&component=etcd&tail=3")
	if strings.Join(got, ",") != "etcd 7,agent 9,etcd 10" {
		t.Errorf("agent and etcd, tail 3: %v", got)
	}

	// Nothing new that matches: the wait ends with none, at the same place.
	got, again := read(next + "&wait=50ms")
	if len(got) != 0 || query(t, again).Get("skipToken") != query(t, next).Get("skipToken") {
		t.Errorf("an empty wait: %v, nextLink %q, want none at %q", got, again, next)
	}

	// A long-poll answers with the next line that matches, not the others.
	type answer struct {
		r   response
		err error
	}
	for len(waiting) > 0 {
		<-waiting // the waits of the read before
	}
	ch := make(chan answer, 1)
	go func() {
		r, err := h.send("GET", next+"&wait=30s", "")
		ch <- answer{r, err}
	}()
	select {
	case <-waiting:
	case a := <-ch:
		t.Fatalf("the long-poll answered before there was a line: %d %s %v", a.r.status, a.r.body, a.err)
	}
	if err := h.store.AppendNodeLogs(t.Context(), k, "n1", []v1.LogLine{
		{Time: start.Add(time.Minute), Stream: "kubelet", Line: "kubelet later"},
		{Time: start.Add(time.Minute), Stream: "etcd", Line: "etcd later"},
	}); err != nil {
		t.Fatal(err)
	}
	a := <-ch
	if a.err != nil || a.r.status != http.StatusOK {
		t.Fatalf("long-poll: %v %d %s", a.err, a.r.status, a.r.body)
	}
	var page v1.List[v1.LogLine]
	a.r.decode(t, &page)
	if len(page.Value) != 1 || page.Value[0].Line != "etcd later" {
		t.Errorf("long-poll answered %+v, want the one new etcd line", page.Value)
	}

	for _, tt := range []struct{ query, target string }{
		{"component=Etcd!", "component"},
		{"since=yesterday", "since"},
		{"tail=0", "tail"},
		{"tail=10001", "tail"},
		{"wait=2m", "wait"},
	} {
		if e := h.must(http.StatusBadRequest, "GET", logs+"?"+tt.query, "").errorBody(t); e.Target != tt.target {
			t.Errorf("%s: target %q, want %q", tt.query, e.Target, tt.target)
		}
	}
}

// query is the query of a relative URL.
func query(t *testing.T, link string) url.Values {
	t.Helper()
	u, err := url.Parse(link)
	if err != nil {
		t.Fatalf("%q: %v", link, err)
	}
	return u.Query()
}
