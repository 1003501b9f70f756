package console_test

import (
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"testing"

	"golang.org/x/net/html"

	"kiln.dev/kiln/api/client"
	v1 "kiln.dev/kiln/api/v1"
	"kiln.dev/kiln/internal/provider/sim"
	"kiln.dev/kiln/internal/store"
)

func TestCreateForm(t *testing.T) {
	e := newEnv(t, false)
	b := e.browser()
	csrf := b.login(ownerToken)
	p := b.get("/clusters/new")
	for _, id := range []string{"project", "name", "provider", "version", "controlPlane", "dedicated", "workers",
		"instanceType", "nodeApproval", "region", "cloudAccount", "labels"} {
		if _, ok := p.byID(t, id); !ok {
			t.Errorf("the create form has no field %s", id)
		}
	}
	// Each label names its field.
	for n := range p.doc(t).Descendants() {
		if n.Type == html.ElementNode && (n.Data == "input" || n.Data == "select" || n.Data == "textarea") &&
			attr(n, "type") != "hidden" && !strings.Contains(p.body, `for="`+attr(n, "id")+`"`) {
			t.Errorf("field %s has no label", attr(n, "id"))
		}
	}

	// The API's own messages, at the field at fault; nothing is created.
	for _, tc := range []struct {
		field, value, input, want string
	}{
		{"controlPlane", "2", "controlPlane", "1, 3 or 5"},
		{"provider", "nope", "provider", "nope"},
		{"name", "Bad_Name", "name", "DNS-1123"},
		{"workers", "many", "workers", "whole number"},
		{"labels", "nokey", "labels", "key=value"},
	} {
		form := url.Values{"csrf": {csrf}, "project": {"default"}, "name": {"c1"}, "provider": {"sim"},
			"controlPlane": {"1"}, "workers": {"1"}, "nodeApproval": {"auto"}}
		form.Set(tc.field, tc.value)
		p := b.post("/clusters/new", form)
		if p.status != http.StatusBadRequest {
			t.Errorf("%s=%q: %d, want 400", tc.field, tc.value, p.status)
		}
		msg, ok := p.byID(t, tc.input+"-error")
		if !ok || !strings.Contains(msg, tc.want) {
			t.Errorf("%s=%q: message at %s is %q, want one with %q", tc.field, tc.value, tc.input, msg, tc.want)
		}
		// What was typed is kept.
		if !strings.Contains(p.body, `value="`+tc.value+`"`) && tc.field != "provider" && tc.field != "labels" {
			t.Errorf("%s=%q: the form lost what was typed", tc.field, tc.value)
		}
	}
	// The API says the same about the control plane.
	_, _, apiErr := e.api.CreateCluster(t.Context(), "default", &v1.Cluster{Name: "c1", Spec: v1.ClusterSpec{Provider: "sim", ControlPlane: v1.ControlPlane{Size: 2}}})
	ae, ok := apiErr.(*client.APIError)
	if !ok {
		t.Fatalf("API create with 2 control-plane nodes: %v", apiErr)
	}
	form := url.Values{"csrf": {csrf}, "project": {"default"}, "name": {"c1"}, "provider": {"sim"}, "controlPlane": {"2"}, "workers": {"1"}}
	if msg, _ := b.post("/clusters/new", form).byID(t, "controlPlane-error"); msg != ae.Err.Message {
		t.Errorf("console says %q, API says %q", msg, ae.Err.Message)
	}
	if cls, _ := e.api.ListClusters(t.Context(), "default"); len(cls) != 0 {
		t.Fatalf("refused forms created %d clusters", len(cls))
	}

	form = url.Values{"csrf": {csrf}, "project": {"default"}, "name": {"c1"}, "provider": {"sim"}, "controlPlane": {"3"},
		"dedicated": {"on"}, "workers": {"2"}, "nodeApproval": {"auto"}, "labels": {"team=a\nenv=dev"}}
	p = b.post("/clusters/new", form)
	if p.status != http.StatusSeeOther || p.header.Get("Location") != "/projects/default/clusters/c1" {
		t.Fatalf("create: %d to %q: %s", p.status, p.header.Get("Location"), p.body)
	}
	cl := e.cluster("c1")
	if s := cl.Spec; s.Provider != "sim" || s.ControlPlane.Size != 3 || !s.ControlPlane.Dedicated ||
		len(s.WorkerPools) != 1 || s.WorkerPools[0].Size != 2 || s.Labels["team"] != "a" || s.Labels["env"] != "dev" {
		t.Errorf("created spec %+v", s)
	}
	if got := b.get("/projects/default/clusters/c1"); !strings.Contains(got.body, "Creating cluster c1 (operation") {
		t.Error("the cluster page does not say what the create did")
	}
}

func TestClustersList(t *testing.T) {
	e := newEnv(t, false)
	e.createCluster("alpha", v1.ClusterSpec{Provider: "sim"})
	e.createCluster("beta", v1.ClusterSpec{Provider: "edge"})
	e.createCluster("gamma", v1.ClusterSpec{Provider: "local"})
	b := e.browser()
	b.login(ownerToken)
	rows := func(p page) []string {
		var out []string
		for n := range p.doc(t).Descendants() {
			if n.Type == html.ElementNode && n.Data == "tr" && attr(n, "data-cluster") != "" {
				out = append(out, attr(n, "data-cluster"))
			}
		}
		return out
	}
	p := b.get("/clusters")
	if got := rows(p); !slices.Equal(got, []string{"alpha", "beta", "gamma"}) {
		t.Errorf("clusters %v", got)
	}
	// State, provider, version, node counts and the running operation's percent.
	for _, want := range []string{"Creating", "sim", "edge", "v1.36.3", "control plane 0/1, workers 0/", `data-health="Unknown"`, `<progress max="100" value="0"`} {
		if !strings.Contains(p.body, want) {
			t.Errorf("the list does not show %q", want)
		}
	}
	if got := rows(b.get("/clusters?q=edge")); !slices.Equal(got, []string{"beta"}) {
		t.Errorf("search edge: %v", got)
	}
	if got := rows(b.get("/clusters?q=zzz")); len(got) != 0 {
		t.Errorf("search zzz: %v", got)
	}
	if got := rows(b.get("/clusters?sort=provider")); !slices.Equal(got, []string{"beta", "gamma", "alpha"}) {
		t.Errorf("sorted by provider: %v, want edge, local, sim", got)
	}

	// The list is live: a new cluster that matches the search arrives.
	p = b.get("/clusters?q=sim")
	live := attr(findElement(p.doc(t), "body"), "data-live")
	if live != "/clusters/live?q=sim&sort=name" {
		t.Fatalf("the list's stream is %q", live)
	}
	events := b.stream(live)
	if ev := <-events; !strings.Contains(ev.fragments["clusters"], `data-cluster="alpha"`) || strings.Contains(ev.fragments["clusters"], `data-cluster="beta"`) {
		t.Errorf("first list event: %+v", ev)
	}
	e.createCluster("delta", v1.ClusterSpec{Provider: "sim"})
	if ev := <-events; !strings.Contains(ev.fragments["clusters"], `data-cluster="delta"`) {
		t.Errorf("after a create: %+v", ev)
	}
}

// findElement returns the first element named name.
func findElement(doc *html.Node, name string) *html.Node {
	for n := range doc.Descendants() {
		if n.Type == html.ElementNode && n.Data == name {
			return n
		}
	}
	return &html.Node{}
}

// A fleet's list shows its first 500 clusters and says how to narrow it.
func TestClustersListCap(t *testing.T) {
	e := newEnv(t, false)
	for i := range 501 {
		e.createCluster(fmt.Sprintf("c%03d", i), v1.ClusterSpec{Provider: "sim"})
	}
	b := e.browser()
	b.login(ownerToken)
	p := b.get("/clusters")
	if n := strings.Count(p.body, "<tr data-cluster="); n != 500 {
		t.Errorf("%d rows, want 500", n)
	}
	if !strings.Contains(p.body, "The first 500 of 501 matching clusters (501 in all)") {
		t.Error("the list does not say it is cut")
	}
	p = b.get("/clusters?q=c500")
	if n := strings.Count(p.body, "<tr data-cluster="); n != 1 || !strings.Contains(p.body, "1 of 501 clusters") {
		t.Errorf("search c500: %d rows", n)
	}
}

// The create form says what each provider makes and which distributions
// each offers; its dry run shows what the API's finds, at their fields,
// and makes nothing; a name taken already is said at the name.
func TestCreateFormChoicesAndDryRun(t *testing.T) {
	e := newEnv(t, false)
	b := e.browser()
	csrf := b.login(ownerToken)
	p := b.get("/clusters/new")
	help, _ := p.byID(t, "provider-help")
	for _, want := range []string{"edge: hosts you prepare", "local: nodes are processes", "sim: simulated machines", "kiln cluster attach"} {
		if !strings.Contains(help, want) {
			t.Errorf("the provider help does not say %q: %q", want, help)
		}
	}
	for _, want := range []string{`<option value="kubeadm"`, `<option value="local"`} {
		if !strings.Contains(p.body, want) {
			t.Errorf("the distributions offered lack %s", want)
		}
	}

	form := url.Values{"csrf": {csrf}, "project": {"default"}, "name": {"c1"}, "provider": {"sim"}, "controlPlane": {"1"},
		"workers": {"1"}, "nodeApproval": {"auto"}, "region": {"mars"}, "dryRun": {"1"}}
	p = b.post("/clusters/new", form)
	if msg, ok := p.byID(t, "region-error"); !ok || !strings.Contains(msg, "mars") {
		t.Errorf("the dry run's finding about region mars is not at the region: %q (status %d)", msg, p.status)
	}
	form.Set("region", "sim-east")
	p = b.post("/clusters/new", form)
	if msg, ok := p.byID(t, "dry-run-ok"); !ok || !strings.Contains(msg, "nothing was created") {
		t.Errorf("a passing dry run says %q (status %d)", msg, p.status)
	}
	if cls, _ := e.api.ListClusters(t.Context(), "default"); len(cls) != 0 {
		t.Fatalf("dry runs created %d clusters", len(cls))
	}

	form.Del("dryRun")
	if p := b.post("/clusters/new", form); p.status != http.StatusSeeOther {
		t.Fatalf("create: %d %s", p.status, p.body)
	}
	p = b.post("/clusters/new", form)
	if msg, ok := p.byID(t, "name-error"); p.status != http.StatusConflict || !ok || !strings.Contains(msg, "a cluster named c1 is in project default already") {
		t.Errorf("a taken name: %d, at the name %q", p.status, msg)
	}
}

// The fleet list and each cluster's page, and the CLI's cluster list and
// describe, show the counts and the health the API answers, for a sim fleet
// in every state it can make: succeeded, failed for good, failed for now,
// running, canceled, a node down, the control plane down.
func TestFleetAgreesWithTheAPI(t *testing.T) {
	e := newEnv(t, true)
	b := e.browser()
	b.login(ownerToken)
	pool := []v1.WorkerPool{{Name: "default", Size: 2}}
	sim2 := func(labels map[string]string) v1.ClusterSpec {
		return v1.ClusterSpec{Provider: "sim", WorkerPools: pool, Labels: labels}
	}
	e.createCluster("ok", sim2(nil))
	e.createCluster("perm", sim2(map[string]string{sim.LabelFailTerminal: "ensure-worker-machines"}))
	e.createCluster("flaky", sim2(map[string]string{sim.LabelFailStep: "ensure-worker-machines", sim.LabelFailTimes: "10"}))
	e.createCluster("degraded", sim2(nil))
	e.createCluster("dead", sim2(nil))
	e.createCluster("canceled", sim2(map[string]string{sim.LabelHangStep: "ensure-worker-machines"}))
	for _, name := range []string{"ok", "perm", "flaky", "degraded", "dead"} {
		e.wait(name)
	}
	e.stepRunning(e.cluster("canceled").Status.CurrentOperation, "ensure-worker-machines")
	if _, err := e.api.CancelOperation(t.Context(), e.cluster("canceled").Status.CurrentOperation); err != nil {
		t.Fatal(err)
	}
	e.wait("canceled")
	e.createCluster("running", sim2(map[string]string{sim.LabelHangStep: "ensure-worker-machines"}))
	e.stepRunning(e.cluster("running").Status.CurrentOperation, "ensure-worker-machines")
	// A worker of one, the control plane of the other, stop answering.
	down := func(cluster, node string) {
		n, err := e.store.GetNode(t.Context(), store.Key{Project: "default", Name: cluster}, node)
		if err != nil {
			t.Fatal(err)
		}
		n.State = v1.NodeNotReady
		if err := e.store.PutNode(t.Context(), n, store.Cond{IfMatch: n.ETag}); err != nil {
			t.Fatal(err)
		}
	}
	down("degraded", "degraded-default-0")
	down("dead", "dead-cp-0")

	list := b.get("/clusters")
	cliList := e.kiln("cluster", "list")
	want := map[string]string{"ok": v1.HealthHealthy, "degraded": v1.HealthDegraded, "dead": v1.HealthUnhealthy, "running": v1.HealthHealthy}
	for _, name := range []string{"ok", "perm", "flaky", "degraded", "dead", "canceled", "running"} {
		cl := e.cluster(name)
		n, h := cl.Status.Nodes, cl.Status.Health
		if w, ok := want[name]; ok && (h == nil || h.State != w) {
			t.Errorf("%s: the API says health %+v, want %s", name, h, w)
		}
		counts := fmt.Sprintf(`data-counts="%d/%d %d/%d"`, n.ControlPlaneReady, n.ControlPlaneWanted, n.WorkersReady, n.WorkersWanted)
		health := fmt.Sprintf(`data-health="%s"`, h.State)
		row := list.body[strings.Index(list.body, `<tr data-cluster="`+name+`">`):]
		row = row[:strings.Index(row, "</tr>")]
		if !strings.Contains(row, counts) || !strings.Contains(row, health) {
			t.Errorf("%s: the list's row says other than the API (%s, %s):\n%s", name, counts, health, row)
		}
		p := b.get("/projects/default/clusters/" + name)
		got, _ := p.byID(t, "cluster-nodes")
		wantText := fmt.Sprintf("control plane %d/%d, workers %d/%d ready", n.ControlPlaneReady, n.ControlPlaneWanted, n.WorkersReady, n.WorkersWanted)
		if !strings.HasPrefix(got, wantText) || !strings.Contains(p.body, health) {
			t.Errorf("%s: the page says %q and %s: the API %q and %s", name, got, p.body[strings.Index(p.body, "data-health"):][:30], wantText, health)
		}
		// The CLI: its list's row (HEALTH, CONTROL-PLANE and WORKERS
		// ready/wanted) and describe's lines.
		var cliRow []string
		for line := range strings.Lines(cliList) {
			if f := strings.Fields(line); len(f) > 0 && f[0] == name {
				cliRow = f
			}
		}
		wantRow := []string{h.State, fmt.Sprintf("%d/%d", n.ControlPlaneReady, n.ControlPlaneWanted), fmt.Sprintf("%d/%d", n.WorkersReady, n.WorkersWanted)}
		if len(cliRow) < 7 || !slices.Equal(cliRow[4:7], wantRow) {
			t.Errorf("%s: kiln cluster list says %v; the API %v", name, cliRow, wantRow)
		}
		d := e.kiln("cluster", "describe", name)
		for _, w := range []string{
			fmt.Sprintf("Control plane:   %d wanted, %d present, %d ready", n.ControlPlaneWanted, n.ControlPlane, n.ControlPlaneReady),
			fmt.Sprintf("Workers:         %d wanted, %d present, %d ready", n.WorkersWanted, n.Workers, n.WorkersReady),
			"Health:          " + h.State + " (" + h.Reason + ")",
		} {
			if !strings.Contains(d, w) {
				t.Errorf("%s: kiln cluster describe does not say %q:\n%s", name, w, d)
			}
		}
	}
	if _, err := e.api.CancelOperation(t.Context(), e.cluster("running").Status.CurrentOperation); err != nil {
		t.Fatal(err)
	}
	e.wait("running")
}
