package console_test

import (
	"context"
	"maps"
	"net/http"
	"net/url"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"kiln.dev/kiln/api/client"
	v1 "kiln.dev/kiln/api/v1"
	"kiln.dev/kiln/internal/provider/sim"
	"kiln.dev/kiln/internal/store"
	"kiln.dev/kiln/test/waitfor"
)

// An operator's actions, each through the API: scale, add and remove a
// pool, upgrade, cancel, retry, delete (only with the name typed); each
// redirects back with what it did, and a refusal shows the API's message
// with its status.
func TestClusterActions(t *testing.T) {
	e := newEnv(t, true)
	b := e.browser()
	csrf := b.login(e.user("otto", v1.RoleOperator))
	const c1 = "/projects/default/clusters/c1"
	post := func(path string, form url.Values) page {
		t.Helper()
		form.Set("csrf", csrf)
		return b.post(path, form)
	}
	done := func(path string, form url.Values, notice string) {
		t.Helper()
		p := post(path, form)
		if p.status != http.StatusSeeOther || p.header.Get("Location") != c1 {
			t.Fatalf("POST %s: %d to %q: %s", path, p.status, p.header.Get("Location"), p.body)
		}
		if got := b.get(c1); !strings.Contains(got.body, notice) {
			t.Errorf("after POST %s the page does not say %q", path, notice)
		}
		if op := e.wait("c1"); op.Status != v1.OpSucceeded {
			t.Fatalf("operation after POST %s: %s %+v", path, op.Status, op.Error)
		}
	}
	p := post("/clusters/new", url.Values{"project": {"default"}, "name": {"c1"}, "provider": {"sim"},
		"controlPlane": {"1"}, "workers": {"1"}, "version": {"v1.35.5"}})
	if p.status != http.StatusSeeOther {
		t.Fatalf("create: %d %s", p.status, p.body)
	}
	e.wait("c1")

	done(c1+"/scale", url.Values{"pool": {"default"}, "size": {"3"}}, "Scaling pool default to 3")
	if cl := e.cluster("c1"); cl.Spec.WorkerPools[0].Size != 3 || cl.Status.Nodes.Workers != 3 {
		t.Errorf("after scaling: size %d, %d workers", cl.Spec.WorkerPools[0].Size, cl.Status.Nodes.Workers)
	}
	done(c1+"/scale", url.Values{"pool": {"control-plane"}, "size": {"3"}}, "Scaling the control plane to 3")
	done(c1+"/pools", url.Values{"name": {"gpu"}, "size": {"1"}, "labels": {"accel=gpu"}, "taints": {"gpu=true:NoSchedule"}}, "Adding pool gpu")
	if gpu := e.cluster("c1").Spec.WorkerPools[1]; gpu.Name != "gpu" || gpu.Labels["accel"] != "gpu" || len(gpu.Taints) != 1 {
		t.Errorf("added pool %+v", gpu)
	}
	done(c1+"/pools/gpu/remove", url.Values{}, "Removing pool gpu")
	if pools := e.cluster("c1").Spec.WorkerPools; len(pools) != 1 {
		t.Errorf("pools after remove: %+v", pools)
	}
	done(c1+"/upgrade", url.Values{"version": {"v1.36.3"}}, "Upgrading to v1.36.3")
	if v := e.cluster("c1").Spec.KubernetesVersion; v != "v1.36.3" {
		t.Errorf("version after upgrade: %s", v)
	}
	if !strings.Contains(b.get(c1).body, `id="hibernate"`) {
		t.Errorf("the page of a Succeeded cluster offers no hibernate")
	}
	done(c1+"/hibernate", url.Values{}, "Hibernating")
	if st := e.cluster("c1").Status.ProvisioningState; st != v1.StateHibernated {
		t.Errorf("after hibernate: %s", st)
	}
	if got := b.get(c1).body; !strings.Contains(got, `id="resume"`) || strings.Contains(got, `id="hibernate"`) {
		t.Errorf("the page of a Hibernated cluster offers no resume, or a hibernate")
	}
	done(c1+"/resume", url.Values{}, "Resuming")
	if st := e.cluster("c1").Status.ProvisioningState; st != v1.StateSucceeded {
		t.Errorf("after resume: %s", st)
	}

	// Refusals: back on the cluster's page (the address bar names it, and a
	// reload posts nothing), with the API's words and status once; nothing
	// changed.
	etag := e.cluster("c1").ETag
	for _, tc := range []struct {
		path   string
		form   url.Values
		status int
		want   string
	}{
		{c1 + "/scale", url.Values{"pool": {"default"}, "size": {"-1"}}, http.StatusBadRequest, "size"},
		{c1 + "/scale", url.Values{"pool": {"default"}, "size": {"x"}}, http.StatusBadRequest, "whole number"},
		{c1 + "/scale", url.Values{"pool": {"nope"}, "size": {"1"}}, http.StatusBadRequest, `no worker pool "nope"`},
		{c1 + "/upgrade", url.Values{"version": {"v9.9.9"}}, http.StatusBadRequest, "v9.9.9"},
		{c1 + "/pools", url.Values{"name": {"Bad Name"}, "size": {"1"}}, http.StatusBadRequest, "Bad Name"},
		{c1 + "/retry", url.Values{}, http.StatusConflict, "Conflict"},
		{c1 + "/delete", url.Values{"confirm": {"c2"}}, http.StatusBadRequest, "Type the cluster's name, c1"},
	} {
		p := post(tc.path, tc.form)
		msg, _ := p.byID(t, "error")
		if p.status != tc.status || !strings.Contains(msg, tc.want) || p.landed != c1 {
			t.Errorf("POST %s %v: %d %q on %q, want %d with %q on %s", tc.path, tc.form, p.status, msg, p.landed, tc.status, tc.want, c1)
		}
		if again := b.get(c1); again.status != http.StatusOK || strings.Contains(again.body, `id="error"`) {
			t.Errorf("the page again after the refusal of POST %s: %d, the error still shown", tc.path, again.status)
		}
	}
	if e.cluster("c1").ETag != etag {
		t.Error("a refused action changed the cluster")
	}

	// Cancel stops a running operation (the sim holds this one's step
	// until it is canceled); retry runs it again from the step that
	// stopped.
	const hung = "/projects/default/clusters/hung"
	e.createCluster("hung", v1.ClusterSpec{Provider: "sim", Labels: map[string]string{sim.LabelHangStep: "ensure-control-plane-machines"}})
	first := e.cluster("hung").Status.CurrentOperation
	e.stepRunning(first, "ensure-control-plane-machines")
	if page := b.get(hung); !slices.Contains(page.postForms(t), hung+"/cancel") {
		t.Errorf("a running operation's page has no cancel form: %v", page.postForms(t))
	}
	if p := post(hung+"/cancel", url.Values{}); p.status != http.StatusSeeOther {
		t.Fatalf("cancel: %d %s", p.status, p.body)
	}
	if op := e.wait("hung"); op.Status != v1.OpCanceled {
		t.Fatalf("operation after cancel: %s", op.Status)
	}
	if page := b.get(hung); !slices.Contains(page.postForms(t), hung+"/retry") {
		t.Errorf("a canceled operation's page has no retry form: %v", page.postForms(t))
	}
	if p := post(hung+"/retry", url.Values{}); p.status != http.StatusSeeOther {
		t.Fatalf("retry: %d %s", p.status, p.body)
	}
	retry, err := e.api.GetOperation(t.Context(), e.cluster("hung").Status.CurrentOperation)
	if err != nil || client.OperationID(retry.Properties.RetryOf) != client.OperationID(first) {
		t.Fatalf("after retry: %+v %v, want a retry of %s", retry, err, first)
	}
	e.stepRunning(retry.ID, "ensure-control-plane-machines") // held again: the label is still there
	if p := post(hung+"/cancel", url.Values{}); p.status != http.StatusSeeOther {
		t.Fatalf("cancel the retry: %d %s", p.status, p.body)
	}
	e.wait("hung")

	p = post(c1+"/delete", url.Values{"confirm": {"c1"}})
	if p.status != http.StatusSeeOther {
		t.Fatalf("delete: %d %s", p.status, p.body)
	}
	waitfor.Cond(t, "the cluster to be deleted", time.Minute, func() (bool, error) {
		_, err := e.api.GetCluster(t.Context(), "default", "c1")
		if client.IsNotFound(err) {
			return true, nil
		}
		return false, err
	})
}

// The live stream sends the cluster page's fragments as they change, each
// only when it changed: a new event, an operation's steps until it has
// Succeeded; a deleted cluster's stream says so and ends.
func TestClusterLive(t *testing.T) {
	e := newEnv(t, true)
	b := e.browser()
	b.login(ownerToken)
	e.createCluster("c1", v1.ClusterSpec{Provider: "sim", WorkerPools: []v1.WorkerPool{{Name: "default", Size: 1}}})
	e.wait("c1")
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, e.srv.URL+"/projects/default/clusters/c1/live?view=overview", nil)
	req.Header.Set("Accept", "text/event-stream")
	resp, err := b.hc.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if ct := resp.Header.Get("Content-Type"); resp.StatusCode != http.StatusOK || ct != "text/event-stream" {
		t.Fatalf("live: %d %s", resp.StatusCode, ct)
	}
	events := readEvents(resp.Body)
	first := <-events
	if first.name != "fragments" {
		t.Fatalf("first event %+v", first)
	}
	for _, name := range []string{"status", "current", "current-timeline", "current-steps", "past", "pools", "events"} {
		if _, ok := first.fragments[name]; !ok {
			t.Errorf("the first event lacks fragment %s", name)
		}
	}
	if !strings.Contains(first.fragments["current"], `data-operation-status="Succeeded"`) {
		t.Errorf("current operation fragment: %s", first.fragments["current"])
	}
	// Nothing changes (the page is read again every 100ms): nothing is sent.
	select {
	case ev := <-events:
		t.Errorf("an event with nothing changed: %+v", ev)
	case <-time.After(time.Second):
	}
	// An event is appended: only the timeline is sent.
	if err := e.store.AppendEvent(ctx, &store.Event{Project: "default", Cluster: "c1",
		Event: v1.Event{Time: time.Now(), Type: "Normal", Reason: "Test", Message: "a test event"}}); err != nil {
		t.Fatal(err)
	}
	ev := <-events
	if !strings.Contains(ev.fragments["events"], "a test event") || len(ev.fragments) != 1 {
		t.Errorf("after an event: %+v", ev)
	}
	// A scale: its operation arrives, step by step, until Succeeded.
	_, opID, err := e.api.PatchCluster(ctx, "default", "c1", map[string]any{"spec": map[string]any{
		"workerPools": []v1.WorkerPool{{Name: "default", Size: 2}}}})
	if err != nil {
		t.Fatal(err)
	}
	page := first.fragments // the page as the stream has made it so far
	for {
		ev := <-events
		if ev.name != "fragments" {
			t.Fatalf("during the scale: %+v", ev)
		}
		maps.Copy(page, ev.fragments)
		cur := page["current"]
		if strings.Contains(cur, client.OperationID(opID)) && strings.Contains(cur, `data-operation-status="Succeeded"`) {
			steps := page["current-steps"]
			if !strings.Contains(steps, `data-state="Succeeded"`) || strings.Contains(steps, `data-state="Pending"`) || strings.Contains(steps, `data-state="Running"`) {
				t.Errorf("the operation is Succeeded with steps not done: %s", steps)
			}
			break
		}
	}
	// Deleted: the stream says so and ends.
	if _, err := e.api.DeleteCluster(ctx, "default", "c1"); err != nil {
		t.Fatal(err)
	}
	for ev := range events {
		if ev.name == "gone" {
			return
		}
	}
	t.Fatal("the stream ended without saying the cluster is gone")
}

// An edge cluster's own actions: provision refuses until its hosts are
// configured (the API's NodeCountMismatch, shown); reset starts a reset.
func TestEdgeActions(t *testing.T) {
	e := newEnv(t, true)
	b := e.browser()
	csrf := b.login(ownerToken)
	const edge1 = "/projects/default/clusters/edge1"
	e.createCluster("edge1", v1.ClusterSpec{Provider: "edge", NodeApproval: "manual", ControlPlane: v1.ControlPlane{Size: 1}})
	if op := e.wait("edge1"); op.Status != v1.OpSucceeded {
		t.Fatalf("edge create: %s", op.Status)
	}
	p := b.get(edge1)
	for _, want := range []string{edge1 + "/provision", edge1 + "/reset"} {
		if !slices.Contains(p.postForms(t), want) {
			t.Errorf("the edge cluster's page has no form %s", want)
		}
	}
	p = b.post(edge1+"/provision", url.Values{"csrf": {csrf}})
	if msg, _ := p.byID(t, "error"); p.status != http.StatusConflict || !strings.Contains(msg, "NodeCountMismatch") {
		t.Errorf("provision without hosts: %d %q", p.status, msg)
	}
	p = b.post(edge1+"/reset", url.Values{"csrf": {csrf}})
	if p.status != http.StatusSeeOther {
		t.Fatalf("reset: %d %s", p.status, p.body)
	}
	op := e.wait("edge1")
	if op.Properties.Kind != v1.KindReset || op.Status != v1.OpSucceeded {
		t.Errorf("after reset: a %s operation, %s", op.Properties.Kind, op.Status)
	}
}

// The page offers what can be done about a failure, as the CLI says it
// (v1.NextSteps): a retry only for a failure that can pass, a change for
// a permanent one, and a forced delete after a delete failed for good.
func TestNextStepsOffered(t *testing.T) {
	e := newEnv(t, true)
	b := e.browser()
	csrf := b.login(ownerToken)
	open := func(name string) page { return b.get("/projects/default/clusters/" + name) }
	hasForm := func(p page, name, action string) bool {
		return slices.Contains(p.postForms(t), "/projects/default/clusters/"+name+"/"+action)
	}

	e.createCluster("flaky", v1.ClusterSpec{Provider: "sim", Labels: map[string]string{sim.LabelFailStep: "ensure-network", sim.LabelFailTimes: "10"}})
	e.createCluster("perm", v1.ClusterSpec{Provider: "sim", Labels: map[string]string{sim.LabelFailTerminal: "ensure-network"}})
	for _, name := range []string{"flaky", "perm"} {
		if op := e.wait(name); op.Status != v1.OpFailed {
			t.Fatalf("%s: %s, want Failed", name, op.Status)
		}
	}
	if p := open("flaky"); !hasForm(p, "flaky", "retry") {
		t.Errorf("a failure that can pass offers no retry: %v", p.postForms(t))
	}
	p := open("perm")
	if hasForm(p, "perm", "retry") {
		t.Error("a permanent failure offers a retry, which would fail the same way")
	}
	if msg, ok := p.byID(t, "next-edit"); !ok || !strings.Contains(msg, "kiln cluster edit perm") {
		t.Errorf("a permanent failure's page does not say to change the cluster: %q", msg)
	}
	if strings.Contains(p.body, `name="force"`) {
		t.Error("a failed create offers a forced delete")
	}
	if n := len(regexp.MustCompile(`<p class="error"[^>]*>[^\n]*sim: failure injected`).FindAllString(p.body, -1)); n != 1 {
		t.Errorf("the failure is shown in %d banners, want one", n)
	}
	// The fleet list says where and why a failed cluster stopped.
	if l := b.get("/clusters"); !strings.Contains(l.body, `data-code="ProviderError"`) || !strings.Contains(l.body, "at <code>ensure-network</code>") {
		t.Errorf("the list does not show the failed clusters' error and step")
	}

	// A delete that fails for good: the page offers the forced delete,
	// which removes the cluster.
	e.createCluster("stuck", v1.ClusterSpec{Provider: "sim", Labels: map[string]string{sim.LabelFailTerminal: "delete-network"}})
	e.wait("stuck")
	if _, err := e.api.DeleteCluster(t.Context(), "default", "stuck"); err != nil {
		t.Fatal(err)
	}
	if op := e.wait("stuck"); op.Status != v1.OpFailed {
		t.Fatalf("delete: %s, want Failed", op.Status)
	}
	p = open("stuck")
	if _, ok := p.byID(t, "next-force-delete"); !ok || !strings.Contains(p.body, `name="force"`) || hasForm(p, "stuck", "retry") {
		t.Fatalf("a delete failed for good: force offered %t, retry offered %t", ok, hasForm(p, "stuck", "retry"))
	}
	if r := b.post("/projects/default/clusters/stuck/delete", url.Values{"confirm": {"stuck"}, "force": {"true"}, "csrf": {csrf}}); r.status != http.StatusSeeOther {
		t.Fatalf("forced delete: %d %s", r.status, r.body)
	}
	waitfor.Cond(t, "the forced delete to remove cluster stuck", time.Minute, func() (bool, error) {
		_, err := e.api.GetCluster(t.Context(), "default", "stuck")
		return client.IsNotFound(err), nil
	})
}

// Buttons only where they work: while an operation runs the changes that
// would be refused are disabled, with the reason in words; a sim cluster
// offers no kubeconfig, and says why.
func TestButtonsWhereTheyWork(t *testing.T) {
	e := newEnv(t, true)
	b := e.browser()
	b.login(ownerToken)
	e.createCluster("hung", v1.ClusterSpec{Provider: "sim", WorkerPools: []v1.WorkerPool{{Name: "default", Size: 1}},
		Labels: map[string]string{sim.LabelHangStep: "ensure-worker-machines"}})
	e.stepRunning(e.cluster("hung").Status.CurrentOperation, "ensure-worker-machines")
	p := b.get("/projects/default/clusters/hung")
	disabled := regexp.MustCompile(`<button type="submit" (?:class="danger" )?id="(scale-default|scale-control-plane|remove-default|add-pool)" disabled title="The cluster is Creating`)
	if got := len(disabled.FindAllString(p.body, -1)); got != 4 {
		t.Errorf("%d of the scale, remove and add-pool buttons are disabled while the create runs, want 4", got)
	}
	if msg, ok := p.byID(t, "busy-note"); !ok || !strings.Contains(msg, "wait until its operation ends") {
		t.Errorf("no visible reason for the disabled buttons: %q", msg)
	}
	if strings.Contains(p.body, `/clusters/hung/kubeconfig"`) {
		t.Error("a sim cluster's page links a kubeconfig, which would answer 409")
	}
	if msg, ok := p.byID(t, "kubeconfig-why"); !ok || !strings.Contains(msg, "runs no Kubernetes") {
		t.Errorf("the page does not say why there is no kubeconfig: %q", msg)
	}
	// The held operation ends, canceled, before the backend stops.
	if _, err := e.api.CancelOperation(t.Context(), e.cluster("hung").Status.CurrentOperation); err != nil {
		t.Fatal(err)
	}
	e.wait("hung")
	// A cancel the user asked for is one notice, not red.
	p = b.get("/projects/default/clusters/hung")
	banners := regexp.MustCompile(`<p class="(error|notice)"[^>]*>[^\n]*canceled by `).FindAllStringSubmatch(p.body, -1)
	if len(banners) != 1 || banners[0][1] != "notice" {
		t.Errorf("the canceled cluster's page shows the cancel in %d banners (%v), want one notice", len(banners), banners)
	}
}

// The overview's events filter by severity and kind, and the live stream
// keeps the filter.
func TestEventFilters(t *testing.T) {
	e := newEnv(t, true)
	b := e.browser()
	b.login(ownerToken)
	e.createCluster("flaky", v1.ClusterSpec{Provider: "sim", Labels: map[string]string{sim.LabelFailStep: "ensure-network", sim.LabelFailTimes: "10"}})
	e.wait("flaky")
	reasons := func(q string) []string {
		p := b.get("/projects/default/clusters/flaky?events=" + q)
		var out []string
		for _, m := range regexp.MustCompile(`<span class="state [a-z]+">([A-Za-z]+)</span>`).FindAllStringSubmatch(p.body[strings.Index(p.body, `id="events"`):], -1) {
			out = append(out, m[1])
		}
		if !strings.Contains(p.body, "events="+q) {
			t.Errorf("?events=%s: the live stream's URL does not keep the filter", q)
		}
		return out
	}
	all, warnings, noSteps := reasons("all"), reasons("warnings"), reasons("no-steps")
	if !slices.Contains(all, "StepStarted") || !slices.Contains(all, "OperationFailed") {
		t.Fatalf("all events: %v", all)
	}
	if len(warnings) == 0 || slices.Contains(warnings, "StepStarted") || !slices.Contains(warnings, "OperationFailed") {
		t.Errorf("warnings only: %v", warnings)
	}
	if slices.Contains(noSteps, "StepStarted") || slices.Contains(noSteps, "StepSucceeded") || !slices.Contains(noSteps, "OperationStarted") {
		t.Errorf("without steps: %v", noSteps)
	}
}
