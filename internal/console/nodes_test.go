package console_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	"golang.org/x/net/html"

	v1 "kiln.dev/kiln/api/v1"
	"kiln.dev/kiln/internal/store"
)

// The nodes tab: each node's state, role, pool, facts, failed prechecks
// with their message, last heartbeat; search and sort; approve and
// configure buttons where they apply, and both work.
func TestNodesTab(t *testing.T) {
	e := newEnv(t, false)
	e.createCluster("edge1", v1.ClusterSpec{Provider: "edge", NodeApproval: "manual"})
	e.putNode("edge1", "edge1-bravo", v1.NodeDiscovered, v1.PrecheckResult{Name: "os", Result: v1.PrecheckPass})
	e.putNode("edge1", "edge1-alpha", v1.NodePrecheckFailed,
		v1.PrecheckResult{Name: "dns-port", Result: v1.PrecheckFail, Message: "port 53 is taken by dnsmasq"},
		v1.PrecheckResult{Name: "os", Result: v1.PrecheckPass})
	e.putNode("edge1", "edge1-charlie", v1.NodeApproved)
	b := e.browser()
	csrf := b.login(ownerToken)
	const nodes = "/projects/default/clusters/edge1/nodes"

	rows := func(p page) []string {
		var out []string
		for n := range p.doc(t).Descendants() {
			if n.Type == html.ElementNode && n.Data == "tr" && attr(n, "data-node") != "" {
				out = append(out, attr(n, "data-node")+"="+attr(n, "data-state"))
			}
		}
		return out
	}
	p := b.get(nodes)
	if got := rows(p); !slices.Equal(got, []string{"edge1-alpha=PRECHECK_FAILED", "edge1-bravo=DISCOVERED", "edge1-charlie=APPROVED"}) {
		t.Errorf("nodes %v", got)
	}
	for _, want := range []string{`<li class="bad"><strong>dns-port</strong>: port 53 is taken by dnsmasq</li>`,
		"debian 12 · amd64 · 4 CPU · 8.0 GiB", "10.0.0.5", "1 passed"} {
		if !strings.Contains(p.body, want) {
			t.Errorf("the nodes tab does not show %q", want)
		}
	}
	// Approve for the DISCOVERED node only, configure for the APPROVED one.
	forms := p.postForms(t)
	for _, want := range []string{nodes + "/edge1-bravo/approve", nodes + "/edge1-charlie/configure"} {
		if !slices.Contains(forms, want) {
			t.Errorf("no form %s among %v", want, forms)
		}
	}
	if slices.Contains(forms, nodes+"/edge1-alpha/approve") {
		t.Error("a node whose prechecks failed has an approve button")
	}
	if got := rows(b.get(nodes + "?q=discovered")); !slices.Equal(got, []string{"edge1-bravo=DISCOVERED"}) {
		t.Errorf("search discovered: %v", got)
	}
	if got := rows(b.get(nodes + "?sort=state")); !slices.Equal(got, []string{"edge1-charlie=APPROVED", "edge1-bravo=DISCOVERED", "edge1-alpha=PRECHECK_FAILED"}) {
		t.Errorf("sorted by state: %v", got)
	}
	if got := rows(b.get(nodes + "?sort=hostname")); !slices.Equal(got, []string{"edge1-alpha=PRECHECK_FAILED", "edge1-bravo=DISCOVERED", "edge1-charlie=APPROVED"}) {
		t.Errorf("sorted by hostname: %v", got)
	}

	p = b.post(nodes+"/edge1-bravo/approve", url.Values{"csrf": {csrf}})
	if p.status != http.StatusSeeOther || p.header.Get("Location") != nodes {
		t.Fatalf("approve: %d to %q", p.status, p.header.Get("Location"))
	}
	if n, _ := e.api.GetNode(t.Context(), "default", "edge1", "edge1-bravo"); n.State != v1.NodeApproved {
		t.Errorf("node after approve: %s", n.State)
	}
	// The API's refusal, with its words, on the nodes tab.
	p = b.post(nodes+"/edge1-alpha/approve", url.Values{"csrf": {csrf}})
	if msg, _ := p.byID(t, "error"); p.status != http.StatusConflict || !strings.Contains(msg, "dns-port") {
		t.Errorf("approving a node whose prechecks failed: %d %q", p.status, msg)
	}
	p = b.post(nodes+"/edge1-charlie/configure", url.Values{"csrf": {csrf}, "role": {"control-plane"}, "interface": {"eth0"}})
	if p.status != http.StatusSeeOther {
		t.Fatalf("configure: %d %s", p.status, p.body)
	}
	if n, _ := e.api.GetNode(t.Context(), "default", "edge1", "edge1-charlie"); n.State != v1.NodeConfigured ||
		n.Role != v1.RoleControlPlane || n.Interface != "eth0" {
		t.Errorf("node after configure: %+v", n)
	}
	p = b.post(nodes+"/edge1-bravo/configure", url.Values{"csrf": {csrf}, "role": {"boss"}})
	if msg, _ := p.byID(t, "error"); p.status != http.StatusBadRequest || !strings.Contains(msg, "role") {
		t.Errorf("configure with role boss: %d %q", p.status, msg)
	}

	// A node's page: its facts, every precheck, its events, and its live log.
	if err := e.store.AppendEvent(t.Context(), &store.Event{Project: "default", Cluster: "edge1", Event: v1.Event{
		Time: time.Now(), Type: "Warning", Reason: "PrecheckFailed", Message: "dns-port failed", Node: "edge1-alpha"}}); err != nil {
		t.Fatal(err)
	}
	p = b.get(nodes + "/edge1-alpha")
	if evs, _ := p.byID(t, "node-events"); !strings.Contains(evs, "PrecheckFailed dns-port failed") {
		t.Errorf("the node's events: %q", evs)
	}
	if other, _ := b.get(nodes+"/edge1-bravo").byID(t, "node-events"); strings.Contains(other, "dns-port") {
		t.Errorf("another node's page shows edge1-alpha's events: %q", other)
	}
	for _, want := range []string{"PRECHECK_FAILED", "port 53 is taken by dnsmasq", "eth0 10.0.0.5/24", `data-live="/projects/default/clusters/edge1/nodes/edge1-alpha/logs/live?"`} {
		if !strings.Contains(p.body, want) {
			t.Errorf("the node page does not show %q", want)
		}
	}
	if p := b.get(nodes + "/nope"); p.status != http.StatusNotFound {
		t.Errorf("a missing node's page: %d, want 404", p.status)
	}
}

// A node's log streams: the lines kept first, then each new one.
func TestNodeLogsLive(t *testing.T) {
	e := newEnv(t, false)
	e.createCluster("edge1", v1.ClusterSpec{Provider: "edge"})
	e.putNode("edge1", "edge1-host1", v1.NodeDiscovered)
	key := store.Key{Project: "default", Name: "edge1"}
	if err := e.store.AppendNodeLogs(t.Context(), key, "edge1-host1", []v1.LogLine{{Time: time.Now(), Stream: "agent", Line: "first line"}}); err != nil {
		t.Fatal(err)
	}
	b := e.browser()
	b.login(ownerToken)
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, e.srv.URL+"/projects/default/clusters/edge1/nodes/edge1-host1/logs/live", nil)
	resp, err := b.hc.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	events := readEvents(resp.Body)
	var lines []string
	want := func(line string) {
		t.Helper()
		for !slices.Contains(lines, line) {
			ev, ok := <-events
			if !ok {
				t.Fatalf("the stream ended before %q; lines %v", line, lines)
			}
			if ev.name == "lines" {
				var got []v1.LogLine
				if err := json.Unmarshal([]byte(ev.data), &got); err != nil {
					t.Fatal(err)
				}
				for _, l := range got {
					lines = append(lines, l.Line)
				}
			}
		}
	}
	want("first line")
	if err := e.store.AppendNodeLogs(t.Context(), key, "edge1-host1", []v1.LogLine{{Time: time.Now(), Stream: "etcd", Line: "second line"}}); err != nil {
		t.Fatal(err)
	}
	want("second line")
	if !slices.Equal(lines, []string{"first line", "second line"}) {
		t.Errorf("lines %v, want each once, in order", lines)
	}
}

// A sim node has no agent: its page says it has no log and no heartbeat
// rather than an empty log box and "never".
func TestAgentlessNode(t *testing.T) {
	e := newEnv(t, true)
	b := e.browser()
	b.login(ownerToken)
	e.createCluster("s", v1.ClusterSpec{Provider: "sim", WorkerPools: []v1.WorkerPool{{Name: "default", Size: 1}}})
	e.wait("s")
	p := b.get("/projects/default/clusters/s/nodes/s-default-0")
	if msg, ok := p.byID(t, "no-log"); !ok || !strings.Contains(msg, "no Kiln agent runs on it") {
		t.Errorf("the sim node's page does not say it has no log: %q", msg)
	}
	if strings.Contains(p.body, "data-log") {
		t.Error("the sim node's page has a log box")
	}
	if hb, _ := p.byID(t, "node-heartbeat"); !strings.Contains(hb, "no Kiln agent") {
		t.Errorf("last heartbeat says %q", hb)
	}
}

// The node page filters its log by component and time as kiln node logs
// does: the stream sends only the lines that match, the form keeps what
// was chosen.
func TestNodeLogFilter(t *testing.T) {
	e := newEnv(t, false)
	e.createCluster("edge1", v1.ClusterSpec{Provider: "edge"})
	e.putNode("edge1", "edge1-host1", v1.NodeDiscovered)
	key := store.Key{Project: "default", Name: "edge1"}
	now := time.Now()
	if err := e.store.AppendNodeLogs(t.Context(), key, "edge1-host1", []v1.LogLine{
		{Time: now.Add(-2 * time.Hour), Stream: "etcd", Line: "old etcd line"},
		{Time: now, Stream: "agent", Line: "agent line"},
		{Time: now, Stream: "etcd", Line: "new etcd line"}}); err != nil {
		t.Fatal(err)
	}
	b := e.browser()
	b.login(ownerToken)
	const node = "/projects/default/clusters/edge1/nodes/edge1-host1"
	p := b.get(node + "?component=etcd&since=1h")
	if !strings.Contains(p.body, `data-live="`+node+`/logs/live?component=etcd&amp;since=1h"`) ||
		!strings.Contains(p.body, "<option selected>etcd</option>") {
		t.Errorf("the page does not keep the filter in its form and its stream")
	}
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, e.srv.URL+node+"/logs/live?component=etcd&since=1h", nil)
	resp, err := b.hc.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	for ev := range readEvents(resp.Body) {
		if ev.name != "lines" {
			continue
		}
		var got []v1.LogLine
		if err := json.Unmarshal([]byte(ev.data), &got); err != nil {
			t.Fatal(err)
		}
		if len(got) != 1 || got[0].Line != "new etcd line" {
			t.Errorf("etcd's lines of the last hour: %+v, want the new etcd line alone", got)
		}
		return
	}
	t.Fatal("the stream ended without lines")
}
