package kiln

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

// fakeHost records the ip and iptables commands the pod network runs and
// keeps the routes and rules they make, as the kernel would.
type fakeHost struct {
	mu     sync.Mutex
	cmds   []string
	routes map[string]string // range -> via, proto 77 only
	rules  []string
}

func newFakeHost() *fakeHost { return &fakeHost{routes: map[string]string{}} }

func (h *fakeHost) run(_ context.Context, name string, args ...string) ([]byte, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	line := name + " " + strings.Join(args, " ")
	h.cmds = append(h.cmds, line)
	switch {
	case name == "ip" && slices.Equal(args, []string{"-4", "route", "show", "proto", routeProto}):
		var b strings.Builder
		for cidr, via := range h.routes {
			fmt.Fprintf(&b, "%s via %s dev eth0 proto %s\n", cidr, via, routeProto)
		}
		return []byte(b.String()), nil
	case name == "ip" && len(args) == 8 && args[2] == "replace":
		h.routes[args[3]] = args[5]
		return nil, nil
	case name == "ip" && len(args) == 6 && args[2] == "del":
		delete(h.routes, args[3])
		return nil, nil
	case name == "iptables":
		rule := strings.Join(append(args[:2:2], args[3:]...), " ")
		i := slices.Index(h.rules, rule)
		switch args[2] {
		case "-C":
			if i < 0 {
				return nil, errors.New("iptables: Bad rule (does a matching rule exist in that chain?)")
			}
		case "-A":
			h.rules = append(h.rules, rule)
		case "-I": // first in its chain: the fake keeps one list, first
			h.rules = append([]string{rule}, h.rules...)
		case "-D":
			if i < 0 {
				return nil, errors.New("iptables: Bad rule")
			}
			h.rules = slices.Delete(h.rules, i, i+1)
		}
		return nil, nil
	}
	return nil, fmt.Errorf("fake host: unexpected %s", line)
}

func (h *fakeHost) state() (map[string]string, []string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	routes := map[string]string{}
	for k, v := range h.routes {
		routes[k] = v
	}
	return routes, slices.Clone(h.rules)
}

// nodesAPI is the part of the Kubernetes API the pod network uses: it lists,
// reads and watches the nodes set, and applies the patches of a node's
// annotations and of its status's conditions.
type nodesAPI struct {
	mu      sync.Mutex
	nodes   []*fakeNode
	lists   int             // GET /api/v1/nodes
	patches []string        // "NAME status TYPE=STATUS" or "NAME annotations ..."
	watches []chan struct{} // one per watch: told of every change
	// onStatus is called, with mu held, before a status patch is applied.
	onStatus func(node, condition, status string)
}

type fakeNode struct {
	name, cidr, ip string
	deleting       bool
	annotations    map[string]string
	conditions     map[string]string // type -> status
}

func (n *fakeNode) json() string {
	var conds []string
	for _, t := range slices.Sorted(maps.Keys(n.conditions)) {
		conds = append(conds, fmt.Sprintf(`{"type": %q, "status": %q}`, t, n.conditions[t]))
	}
	ann, _ := json.Marshal(n.annotations)
	deleting := ""
	if n.deleting {
		deleting = `, "deletionTimestamp": "2026-11-29T16:00:00Z"`
	}
	return fmt.Sprintf(`{"metadata": {"name": %q, "annotations": %s%s}, "spec": {"podCIDR": %q},
		"status": {"addresses": [{"type": "Hostname", "address": %[1]q}, {"type": "InternalIP", "address": %[5]q}], "conditions": [%[6]s]}}`,
		n.name, ann, deleting, n.cidr, n.ip, strings.Join(conds, ","))
}

// set replaces the nodes: name, pod range, address.
func (a *nodesAPI) set(nodes ...[3]string) {
	a.mu.Lock()
	a.nodes = nil
	for _, n := range nodes {
		a.nodes = append(a.nodes, &fakeNode{name: n[0], cidr: n[1], ip: n[2], annotations: map[string]string{}, conditions: map[string]string{}})
	}
	a.mu.Unlock()
	a.changed()
}

// update changes the node name.
func (a *nodesAPI) update(name string, f func(*fakeNode)) {
	a.mu.Lock()
	if n := a.node(name); n != nil {
		f(n)
	}
	a.mu.Unlock()
	a.changed()
}

// get returns a copy of the node name's annotations and conditions.
func (a *nodesAPI) get(name string) (annotations, conditions map[string]string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	n := a.node(name)
	return maps.Clone(n.annotations), maps.Clone(n.conditions)
}

func (a *nodesAPI) node(name string) *fakeNode {
	for _, n := range a.nodes {
		if n.name == name {
			return n
		}
	}
	return nil
}

func (a *nodesAPI) changed() {
	a.mu.Lock()
	defer a.mu.Unlock()
	for _, w := range a.watches {
		select {
		case w <- struct{}{}:
		default:
		}
	}
}

func (a *nodesAPI) handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /api/v1/nodes", func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Query().Get("watch") == "true" {
			a.watch(w, r)
			return
		}
		a.mu.Lock()
		defer a.mu.Unlock()
		a.lists++
		var items []string
		for _, n := range a.nodes {
			items = append(items, n.json())
		}
		fmt.Fprintf(w, `{"kind": "NodeList", "items": [%s]}`, strings.Join(items, ","))
	})
	mux.HandleFunc("GET /api/v1/nodes/{name}", func(w http.ResponseWriter, r *http.Request) {
		a.mu.Lock()
		defer a.mu.Unlock()
		n := a.node(r.PathValue("name"))
		if n == nil {
			http.NotFound(w, r)
			return
		}
		fmt.Fprint(w, n.json())
	})
	mux.HandleFunc("PATCH /api/v1/nodes/{name}", func(w http.ResponseWriter, r *http.Request) {
		var p struct {
			Metadata struct {
				Annotations map[string]string `json:"annotations"`
			} `json:"metadata"`
		}
		if r.Header.Get("Content-Type") != "application/merge-patch+json" || json.NewDecoder(r.Body).Decode(&p) != nil {
			http.Error(w, "bad patch", http.StatusBadRequest)
			return
		}
		a.mu.Lock()
		n := a.node(r.PathValue("name"))
		if n != nil {
			maps.Copy(n.annotations, p.Metadata.Annotations)
			a.patches = append(a.patches, fmt.Sprintf("%s annotations %v", n.name, p.Metadata.Annotations))
		}
		a.mu.Unlock()
		if n == nil {
			http.NotFound(w, r)
			return
		}
		a.changed()
		fmt.Fprint(w, "{}")
	})
	mux.HandleFunc("PATCH /api/v1/nodes/{name}/status", func(w http.ResponseWriter, r *http.Request) {
		var p struct {
			Status struct {
				Conditions []struct {
					Type, Status, Reason string
				} `json:"conditions"`
			} `json:"status"`
		}
		if r.Header.Get("Content-Type") != "application/strategic-merge-patch+json" || json.NewDecoder(r.Body).Decode(&p) != nil {
			http.Error(w, "bad patch", http.StatusBadRequest)
			return
		}
		a.mu.Lock()
		n := a.node(r.PathValue("name"))
		if n != nil {
			for _, c := range p.Status.Conditions {
				if a.onStatus != nil {
					a.onStatus(n.name, c.Type, c.Status)
				}
				n.conditions[c.Type] = c.Status
				a.patches = append(a.patches, fmt.Sprintf("%s status %s=%s %s", n.name, c.Type, c.Status, c.Reason))
			}
		}
		a.mu.Unlock()
		if n == nil {
			http.NotFound(w, r)
			return
		}
		a.changed()
		fmt.Fprint(w, "{}")
	})
	return mux
}

// watch streams a MODIFIED event of every node at each change (ADDED first).
func (a *nodesAPI) watch(w http.ResponseWriter, r *http.Request) {
	ch := make(chan struct{}, 1)
	a.mu.Lock()
	a.watches = append(a.watches, ch)
	a.mu.Unlock()
	defer func() {
		a.mu.Lock()
		a.watches = slices.DeleteFunc(a.watches, func(c chan struct{}) bool { return c == ch })
		a.mu.Unlock()
	}()
	typ := "ADDED"
	for {
		a.mu.Lock()
		for _, n := range a.nodes {
			fmt.Fprintf(w, `{"type": %q, "object": %s}`+"\n", typ, n.json())
		}
		a.mu.Unlock()
		w.(http.Flusher).Flush()
		typ = "MODIFIED"
		select {
		case <-r.Context().Done():
			return
		case <-ch:
		}
	}
}

// The routes follow the nodes: one per other node with a pod range, via
// its InternalIP; a node that leaves loses its route, one whose address
// changes gets the new one; the node's own range and nodes without a range
// get none. The masquerade rule is added once, and so are the rules that
// refuse what is sent to the Service range and no Service took, first in
// filter FORWARD and OUTPUT.
func TestPodNetworkRoutesFollowTheNodes(t *testing.T) {
	api := &nodesAPI{}
	srv := httptest.NewTLSServer(api.handler())
	defer srv.Close()
	host := newFakeHost()
	client := func() (*http.Client, error) { return srv.Client(), nil }
	pn := &Routes{Log: slog.New(slog.DiscardHandler), Run: host.run, Every: time.Hour, Client: client, Node: client}
	c := NetworkConfig{Node: "w0", Endpoint: strings.TrimPrefix(srv.URL, "https://"), ClusterCIDR: "10.244.0.0/16", NodeCIDR: "10.244.1.0/24",
		ServiceCIDR: "10.96.0.0/12"}

	sync := func(want map[string]string) {
		t.Helper()
		if _, err := pn.sync(t.Context(), c, &netState{started: time.Now()}); err != nil {
			t.Fatal(err)
		}
		routes, rules := host.state()
		if !mapsEqual(routes, want) {
			t.Errorf("routes %v, want %v", routes, want)
		}
		// The node records the routes it has on its Node after the pass.
		if ann, _ := api.get("w0"); ann[PodRoutesAnnotation] != routesValue(want) {
			t.Errorf("annotation %s = %q, want %q", PodRoutesAnnotation, ann[PodRoutesAnnotation], routesValue(want))
		}
		wantRules := []string{
			"-t filter OUTPUT -d 10.96.0.0/12 -m comment --comment " + serviceRejectComment + " -j REJECT",
			"-t filter FORWARD -d 10.96.0.0/12 -m comment --comment " + serviceRejectComment + " -j REJECT",
			"-t nat POSTROUTING -s 10.244.1.0/24 ! -d 10.244.0.0/16 -m comment --comment " + masqueradeComment + " -j MASQUERADE",
		}
		if !slices.Equal(rules, wantRules) {
			t.Errorf("rules %q, want only %q", rules, wantRules)
		}
	}
	api.set([3]string{"cp0", "10.244.0.0/24", "172.30.0.2"}, [3]string{"w0", "10.244.1.0/24", "172.30.0.3"},
		[3]string{"w1", "10.244.2.0/24", "172.30.0.4"}, [3]string{"w2", "", "172.30.0.5"})
	sync(map[string]string{"10.244.0.0/24": "172.30.0.2", "10.244.2.0/24": "172.30.0.4"})
	api.set([3]string{"cp0", "10.244.0.0/24", "172.30.0.2"}, [3]string{"w0", "10.244.1.0/24", "172.30.0.3"},
		[3]string{"w2", "10.244.3.0/24", "172.30.0.9"})
	sync(map[string]string{"10.244.0.0/24": "172.30.0.2", "10.244.3.0/24": "172.30.0.9"})

	// The loop runs until stopped; teardown removes routes, rule and files.
	root := t.TempDir()
	if err := SetUp(t.Context(), root, host.run, c); err != nil {
		t.Fatal(err)
	}
	conf, err := os.ReadFile(filepath.Join(root, FileCNI))
	if err != nil || !strings.Contains(string(conf), `"subnet": "10.244.1.0/24"`) || !strings.Contains(string(conf), `"ipMasq": false`) {
		t.Errorf("CNI configuration %s (%v): want the node's range and no ipMasq", conf, err)
	}
	pn.Start(c)
	pn.Stop()
	if err := TearDown(t.Context(), root, host.run); err != nil {
		t.Fatal(err)
	}
	routes, rules := host.state()
	if len(routes) != 0 || len(rules) != 0 {
		t.Errorf("after teardown: routes %v, rules %q", routes, rules)
	}
	for _, f := range []string{FileCNI, NetworkFile} {
		if _, err := os.Stat(filepath.Join(root, f)); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s left after teardown (%v)", f, err)
		}
	}
}

func mapsEqual(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}
