package kubeapi

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// fakeCluster is a Kubernetes API with nodes, pods and one
// PodDisruptionBudget, enough for a drain: the Eviction API refuses to
// evict a pod the budget selects (429, with the cause the real API sends)
// while the budget is closed, and an evicted pod terminates after
// terminateAfter more lists, as a kubelet would take a moment.
type fakeCluster struct {
	mu             sync.Mutex
	nodes          map[string]map[string]any // name -> the node's JSON
	pods           map[string]*fakePod       // by uid
	budgetOpen     bool                      // the budget allows disruptions
	budgetSelector map[string]string
	terminateAfter int
	evictions      []string // every eviction asked, "ns/name 200|429"
	patches        []map[string]any
}

type fakePod struct {
	ns, name, uid, node, owner string
	labels                     map[string]string
	mirror                     bool
	terminating                int    // lists left before it is gone; 0: not terminating
	deleteBy                   string // its deletionTimestamp when terminating; default in the past
}

func newFakeCluster() *fakeCluster {
	f := &fakeCluster{nodes: map[string]map[string]any{}, pods: map[string]*fakePod{},
		budgetSelector: map[string]string{"app": "web"}, terminateAfter: 2}
	f.nodes["n1"] = map[string]any{"metadata": map[string]any{"name": "n1", "resourceVersion": "7"}, "spec": map[string]any{}}
	return f
}

func (f *fakeCluster) add(p *fakePod) { f.pods[p.uid] = p }

func (f *fakeCluster) left() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []string
	for _, p := range f.pods {
		out = append(out, p.ns+"/"+p.name)
	}
	slices.Sort(out)
	return out
}

func (f *fakeCluster) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	defer f.mu.Unlock()
	status := func(code int, reason, msg string, causes ...string) {
		w.WriteHeader(code)
		st := map[string]any{"kind": "Status", "reason": reason, "message": msg}
		if len(causes) > 0 {
			var cs []any
			for _, c := range causes {
				cs = append(cs, map[string]any{"type": "DisruptionBudget", "message": c})
			}
			st["details"] = map[string]any{"causes": cs}
		}
		_ = json.NewEncoder(w).Encode(st)
	}
	var body map[string]any
	b, _ := io.ReadAll(r.Body)
	_ = json.Unmarshal(b, &body)
	path := r.URL.Path
	switch {
	case strings.HasPrefix(path, "/api/v1/nodes/"):
		name := strings.TrimPrefix(path, "/api/v1/nodes/")
		n, ok := f.nodes[name]
		if !ok {
			status(http.StatusNotFound, "NotFound", "nodes \""+name+"\" not found")
			return
		}
		switch r.Method {
		case http.MethodGet:
			_ = json.NewEncoder(w).Encode(n)
		case http.MethodDelete:
			delete(f.nodes, name)
			_ = json.NewEncoder(w).Encode(n)
		case http.MethodPatch:
			f.patches = append(f.patches, body)
			if rv, ok := body["metadata"].(map[string]any)["resourceVersion"]; ok && rv != n["metadata"].(map[string]any)["resourceVersion"] {
				status(http.StatusConflict, "Conflict", "the object has been modified")
				return
			}
			mergePatch(n, body)
			_ = json.NewEncoder(w).Encode(n)
		}
	case path == "/api/v1/pods" && r.Method == http.MethodGet:
		node := strings.TrimPrefix(r.URL.Query().Get("fieldSelector"), "spec.nodeName=")
		var items []any
		for _, p := range f.pods {
			if p.node != node {
				continue
			}
			if p.terminating > 0 {
				p.terminating--
				if p.terminating == 0 {
					delete(f.pods, p.uid)
					continue
				}
			}
			items = append(items, p.json())
		}
		_ = json.NewEncoder(w).Encode(map[string]any{"items": items})
	case strings.HasSuffix(path, "/eviction") && r.Method == http.MethodPost:
		parts := strings.Split(path, "/") // "", api, v1, namespaces, ns, pods, name, eviction
		ns, name := parts[4], parts[6]
		uid := body["deleteOptions"].(map[string]any)["preconditions"].(map[string]any)["uid"].(string)
		p, ok := f.pods[uid]
		if !ok || p.ns != ns || p.name != name {
			status(http.StatusNotFound, "NotFound", "pods \""+name+"\" not found")
			return
		}
		if !f.budgetOpen && matches(f.budgetSelector, p.labels) {
			f.evictions = append(f.evictions, ns+"/"+name+" 429")
			status(http.StatusTooManyRequests, "TooManyRequests", "Cannot evict pod as it would violate the pod's disruption budget.",
				"The disruption budget web needs 2 healthy pods and has 2 currently")
			return
		}
		f.evictions = append(f.evictions, ns+"/"+name+" 200")
		if p.terminating == 0 {
			p.terminating = f.terminateAfter
		}
		w.WriteHeader(http.StatusCreated)
		_ = json.NewEncoder(w).Encode(map[string]any{"kind": "Status", "status": "Success"})
	case strings.HasSuffix(path, "/poddisruptionbudgets"):
		_ = json.NewEncoder(w).Encode(map[string]any{"items": []any{
			map[string]any{"metadata": map[string]any{"name": "web", "namespace": "default"},
				"spec": map[string]any{"selector": map[string]any{"matchLabels": f.budgetSelector}}},
			map[string]any{"metadata": map[string]any{"name": "other", "namespace": "default"},
				"spec": map[string]any{"selector": map[string]any{"matchLabels": map[string]string{"app": "other"}}}},
			map[string]any{"metadata": map[string]any{"name": "none", "namespace": "default"}, "spec": map[string]any{}},
		}})
	default:
		status(http.StatusNotFound, "NotFound", path+" not found")
	}
}

func (p *fakePod) json() map[string]any {
	md := map[string]any{"name": p.name, "namespace": p.ns, "uid": p.uid, "labels": p.labels}
	if p.owner != "" {
		md["ownerReferences"] = []any{map[string]any{"kind": p.owner, "name": "x", "controller": true}}
	}
	if p.mirror {
		md["annotations"] = map[string]any{MirrorAnnotation: "abc"}
	}
	if p.terminating > 0 {
		md["deletionTimestamp"] = "2026-01-01T00:00:00Z"
		if p.deleteBy != "" {
			md["deletionTimestamp"] = p.deleteBy
		}
	}
	return map[string]any{"metadata": md, "spec": map[string]any{"nodeName": p.node}, "status": map[string]any{"phase": "Running"}}
}

func matches(sel, labels map[string]string) bool {
	for k, v := range sel {
		if labels[k] != v {
			return false
		}
	}
	return true
}

// mergePatch applies an RFC 7386 merge patch to doc.
func mergePatch(doc, patch map[string]any) {
	for k, v := range patch {
		switch v := v.(type) {
		case nil:
			delete(doc, k)
		case map[string]any:
			sub, ok := doc[k].(map[string]any)
			if !ok {
				sub = map[string]any{}
				doc[k] = sub
			}
			mergePatch(sub, v)
		default:
			doc[k] = v
		}
	}
}

// drainPods are a node's pods: two of a ReplicaSet the budget covers, one
// of another ReplicaSet, a bare pod, a DaemonSet pod, a mirror pod, and a
// pod on another node.
func drainPods(f *fakeCluster) {
	for _, p := range []*fakePod{
		{ns: "default", name: "web-1", uid: "u1", node: "n1", owner: "ReplicaSet", labels: map[string]string{"app": "web"}},
		{ns: "default", name: "web-2", uid: "u2", node: "n1", owner: "ReplicaSet", labels: map[string]string{"app": "web"}},
		{ns: "kube-system", name: "dns-1", uid: "u3", node: "n1", owner: "ReplicaSet", labels: map[string]string{"app": "dns"}},
		{ns: "default", name: "bare", uid: "u4", node: "n1"},
		{ns: "kube-system", name: "proxy-n1", uid: "u5", node: "n1", owner: "DaemonSet"},
		{ns: "kube-system", name: "static-n1", uid: "u6", node: "n1", mirror: true},
		{ns: "default", name: "web-3", uid: "u7", node: "n2", owner: "ReplicaSet", labels: map[string]string{"app": "web"}},
	} {
		f.add(p)
	}
}

var fastDrain = DrainOptions{Poll: 5 * time.Millisecond, RetryRefused: 5 * time.Millisecond, CordonedBy: "op-1"}

func TestDrainEvictsAllButDaemonSetAndMirrorPods(t *testing.T) {
	f := newFakeCluster()
	f.budgetOpen = true
	drainPods(f)
	c, _, _ := newTestClient(t, f)
	opts := fastDrain
	opts.Timeout = 10 * time.Second
	var progress []int
	opts.Progress = func(s DrainStatus) { progress = append(progress, len(s.Left)) }
	st, err := c.Drain(t.Context(), "n1", opts)
	if err != nil {
		t.Fatalf("Drain: %v", err)
	}
	want := []string{"default/web-3", "kube-system/proxy-n1", "kube-system/static-n1"}
	if diff := cmp.Diff(want, f.left()); diff != "" {
		t.Errorf("pods left after the drain (-want +got):\n%s", diff)
	}
	if st.Evicted != 4 || len(st.Left) != 0 || len(st.Skipped) != 2 {
		t.Errorf("status %+v: want 4 evicted, none left, 2 skipped", st)
	}
	if progress[0] != 4 || progress[len(progress)-1] != 0 {
		t.Errorf("progress (pods left per look) %v: want 4 first and 0 last", progress)
	}
	n, err := c.GetNode(t.Context(), "n1")
	if err != nil || !n.Unschedulable || n.Annotations[CordonedBy] != "op-1" {
		t.Fatalf("node after drain: %+v, %v; want unschedulable and cordoned by op-1", n, err)
	}
	if err := c.Uncordon(t.Context(), "n1"); err != nil {
		t.Fatal(err)
	}
	if n, _ := c.GetNode(t.Context(), "n1"); n.Unschedulable || n.Annotations[CordonedBy] != "" {
		t.Errorf("node after uncordon: %+v", n)
	}
}

func TestDrainAsksAgainWhileABudgetRefuses(t *testing.T) {
	f := newFakeCluster()
	drainPods(f)
	c, _, _ := newTestClient(t, f)
	opts := fastDrain
	opts.Timeout = 10 * time.Second
	refusedSeen := false
	opts.Progress = func(s DrainStatus) {
		if len(s.Refused()) == 2 && !refusedSeen {
			refusedSeen = true
			go func() { // the budget opens, as when a workload scales up elsewhere
				f.mu.Lock()
				f.budgetOpen = true
				f.mu.Unlock()
			}()
		}
	}
	st, err := c.Drain(t.Context(), "n1", opts)
	if err != nil || len(st.Left) != 0 {
		t.Fatalf("Drain = %+v, %v", st, err)
	}
	if !refusedSeen {
		t.Error("the drain never reported the refused pods")
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	var refused, accepted int
	for _, e := range f.evictions {
		if strings.HasPrefix(e, "default/web-1 ") {
			if strings.HasSuffix(e, "429") {
				refused++
			} else {
				accepted++
			}
		}
	}
	if refused == 0 || accepted != 1 {
		t.Errorf("evictions of web-1: %d refused, %d accepted; want some refused, then one accepted: %v", refused, accepted, f.evictions)
	}
}

func TestDrainTimesOutNamingTheBlockedPodsAndBudget(t *testing.T) {
	f := newFakeCluster()
	drainPods(f)
	f.terminateAfter = 1 << 30 // the bare pod never finishes terminating
	c, _, _ := newTestClient(t, f)
	opts := fastDrain
	opts.Timeout = 300 * time.Millisecond
	start := time.Now()
	st, err := c.Drain(t.Context(), "n1", opts)
	var de *DrainError
	if !errors.As(err, &de) {
		t.Fatalf("Drain = %+v, %v; want a *DrainError", st, err)
	}
	if took := time.Since(start); took < opts.Timeout || took > opts.Timeout+2*time.Second {
		t.Errorf("the drain gave up after %s; timeout %s", took, opts.Timeout)
	}
	want := []PodState{
		{PodRef: PodRef{"default", "bare"}, Evicted: true},
		{PodRef: PodRef{"default", "web-1"}, Refused: "The disruption budget web needs 2 healthy pods and has 2 currently", Budgets: []string{"web"}},
		{PodRef: PodRef{"default", "web-2"}, Refused: "The disruption budget web needs 2 healthy pods and has 2 currently", Budgets: []string{"web"}},
		{PodRef: PodRef{"kube-system", "dns-1"}, Evicted: true},
	}
	if diff := cmp.Diff(want, de.Status.Left); diff != "" {
		t.Errorf("pods left (-want +got):\n%s", diff)
	}
	if len(de.Status.Refused()) != 2 {
		t.Errorf("Refused() = %v", de.Status.Refused())
	}
	// The message is these fields', each pod's as Describe says it
	// (TestDescribe).
	if de.Node != "n1" || de.Timeout != opts.Timeout {
		t.Errorf("DrainError of node %q, timeout %s; want n1, %s", de.Node, de.Timeout, opts.Timeout)
	}
	if n, _ := c.GetNode(t.Context(), "n1"); !n.Unschedulable {
		t.Error("a node whose drain timed out is not cordoned")
	}
}

// A node whose kubelet stopped reporting (a killed machine) cannot end the
// pods evicted from it: the drain stops waiting for those whose grace
// period is over, and waits for the others.
func TestDrainOfAnUnreachableNode(t *testing.T) {
	f := newFakeCluster()
	f.budgetOpen = true
	f.terminateAfter = 1 << 30 // no kubelet ends them
	f.nodes["n1"]["status"] = map[string]any{"conditions": []any{
		map[string]any{"type": "Ready", "status": "Unknown", "reason": "NodeStatusUnknown"}}}
	f.add(&fakePod{ns: "default", name: "web-1", uid: "u1", node: "n1", owner: "ReplicaSet"})
	f.add(&fakePod{ns: "kube-system", name: "dns-1", uid: "u2", node: "n1", owner: "ReplicaSet"})
	f.add(&fakePod{ns: "default", name: "slow", uid: "u3", node: "n1", terminating: 1 << 30,
		deleteBy: time.Now().Add(time.Hour).Format(time.RFC3339)}) // its grace period is not over
	c, _, _ := newTestClient(t, f)
	opts := fastDrain
	opts.Timeout = 300 * time.Millisecond
	st, err := c.Drain(t.Context(), "n1", opts)
	var de *DrainError
	if !errors.As(err, &de) {
		t.Fatalf("Drain = %+v, %v; want a *DrainError for the pod within its grace period", st, err)
	}
	if diff := cmp.Diff([]PodState{{PodRef: PodRef{"default", "slow"}, Evicted: true}}, de.Status.Left); diff != "" {
		t.Errorf("pods left (-want +got):\n%s", diff)
	}
	if want := []PodRef{{"default", "web-1"}, {"kube-system", "dns-1"}}; !de.Status.Unreachable || !slices.Equal(want, de.Status.Abandoned) {
		t.Errorf("status %+v: want unreachable, %v abandoned", de.Status, want)
	}

	f.mu.Lock()
	delete(f.pods, "u3")
	f.mu.Unlock()
	st, err = c.Drain(t.Context(), "n1", opts)
	if err != nil || len(st.Left) != 0 || len(st.Abandoned) != 2 {
		t.Fatalf("Drain = %+v, %v; want drained with 2 pods abandoned", st, err)
	}

	// The same pods on a node that reports: the drain waits for them.
	f.nodes["n1"]["status"] = map[string]any{"conditions": []any{map[string]any{"type": "Ready", "status": "True"}}}
	st, err = c.Drain(t.Context(), "n1", opts)
	if !errors.As(err, &de) || len(de.Status.Left) != 2 || len(de.Status.Abandoned) != 0 || de.Status.Unreachable {
		t.Fatalf("Drain of a reachable node = %+v, %v; want a *DrainError with the 2 pods left", st, err)
	}
}

func TestDrainOfAMissingNode(t *testing.T) {
	c, _, _ := newTestClient(t, newFakeCluster())
	opts := fastDrain
	opts.Timeout = time.Second
	st, err := c.Drain(t.Context(), "gone", opts)
	if err != nil || !st.NodeMissing {
		t.Fatalf("Drain(gone) = %+v, %v; want NodeMissing", st, err)
	}
}

func TestDrainStopsWithTheContext(t *testing.T) {
	f := newFakeCluster()
	drainPods(f)
	c, _, _ := newTestClient(t, f)
	opts := fastDrain
	opts.Timeout = time.Hour
	ctx, cancel := context.WithCancel(t.Context())
	opts.Progress = func(DrainStatus) { cancel() }
	if _, err := c.Drain(ctx, "n1", opts); !errors.Is(err, context.Canceled) {
		t.Fatalf("Drain with a cancelled context = %v", err)
	}
}

func TestNodeTaintsAndDelete(t *testing.T) {
	f := newFakeCluster()
	c, _, _ := newTestClient(t, f)
	ctx := t.Context()
	taints := []Taint{{Key: "gpu", Value: "true", Effect: "NoSchedule"}}
	if err := c.SetTaints(ctx, "n1", "6", taints); !errors.Is(err, ErrConflict) {
		t.Fatalf("SetTaints at a stale resourceVersion = %v; want ErrConflict", err)
	}
	if err := c.SetTaints(ctx, "n1", "7", taints); err != nil {
		t.Fatal(err)
	}
	n, err := c.GetNode(ctx, "n1")
	if err != nil || !cmp.Equal(n.Taints, taints) {
		t.Fatalf("taints %v, %v; want %v", n.Taints, err, taints)
	}
	for range 2 { // the second finds nothing, and that is fine
		if err := c.DeleteNode(ctx, "n1"); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := c.GetNode(ctx, "n1"); !errors.Is(err, ErrNotFound) {
		t.Errorf("GetNode after DeleteNode = %v", err)
	}
}

func TestLabelSelector(t *testing.T) {
	labels := map[string]string{"app": "web", "tier": "front"}
	tests := []struct {
		name string
		sel  *LabelSelector
		want bool
	}{
		{"no selector selects nothing", nil, false},
		{"empty selects everything", &LabelSelector{}, true},
		{"matchLabels", &LabelSelector{MatchLabels: map[string]string{"app": "web"}}, true},
		{"matchLabels other value", &LabelSelector{MatchLabels: map[string]string{"app": "db"}}, false},
		{"In", &LabelSelector{MatchExpressions: []Requirement{{Key: "tier", Operator: "In", Values: []string{"front", "back"}}}}, true},
		{"NotIn", &LabelSelector{MatchExpressions: []Requirement{{Key: "tier", Operator: "NotIn", Values: []string{"front"}}}}, false},
		{"Exists", &LabelSelector{MatchExpressions: []Requirement{{Key: "app", Operator: "Exists"}}}, true},
		{"DoesNotExist", &LabelSelector{MatchExpressions: []Requirement{{Key: "app", Operator: "DoesNotExist"}}}, false},
		{"unknown operator", &LabelSelector{MatchExpressions: []Requirement{{Key: "app", Operator: "Gt"}}}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b := PodDisruptionBudget{Selector: tt.sel}
			if got := b.Selects(labels); got != tt.want {
				t.Errorf("Selects = %v, want %v", got, tt.want)
			}
		})
	}
}

// Describe says what holds a pod up, as a drain's error lists it for the
// user: the text is what the user reads.
func TestDescribe(t *testing.T) {
	web := PodRef{"default", "web-1"}
	for _, tc := range []struct {
		p    PodState
		want string
	}{
		{PodState{PodRef: web, Refused: "The disruption budget web needs 2 healthy pods and has 2 currently", Budgets: []string{"web"}},
			"default/web-1: eviction refused by PodDisruptionBudget web: The disruption budget web needs 2 healthy pods and has 2 currently"},
		{PodState{PodRef: web, Refused: "Cannot evict pod as it would violate the pod's disruption budget."},
			"default/web-1: eviction refused: Cannot evict pod as it would violate the pod's disruption budget."},
		{PodState{PodRef: web, Evicted: true}, "default/web-1: evicted, still terminating"},
		{PodState{PodRef: web}, "default/web-1: not evicted yet"},
	} {
		if got := tc.p.Describe(); got != tc.want {
			t.Errorf("Describe(%+v) = %q, want %q", tc.p, got, tc.want)
		}
	}
}
