package kiln

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
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

// nodesAPI answers GET /api/v1/nodes with the nodes set.
type nodesAPI struct {
	mu    sync.Mutex
	nodes []string // JSON of each
}

func (a *nodesAPI) set(nodes ...[3]string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.nodes = nil
	for _, n := range nodes {
		a.nodes = append(a.nodes, fmt.Sprintf(`{"metadata": {"name": %q}, "spec": {"podCIDR": %q},
			"status": {"addresses": [{"type": "Hostname", "address": %[1]q}, {"type": "InternalIP", "address": %[3]q}]}}`, n[0], n[1], n[2]))
	}
}

func (a *nodesAPI) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path != "/api/v1/nodes" {
		http.NotFound(w, r)
		return
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	fmt.Fprintf(w, `{"kind": "NodeList", "items": [%s]}`, strings.Join(a.nodes, ","))
}

// The routes follow the nodes: one per other node with a pod range, via
// its InternalIP; a node that leaves loses its route, one whose address
// changes gets the new one; the node's own range and nodes without a range
// get none. The masquerade rule is added once.
func TestPodNetworkRoutesFollowTheNodes(t *testing.T) {
	api := &nodesAPI{}
	srv := httptest.NewTLSServer(api)
	defer srv.Close()
	host := newFakeHost()
	pn := &Routes{Log: slog.New(slog.DiscardHandler), Run: host.run, Every: time.Hour,
		Client: func() (*http.Client, error) { return srv.Client(), nil }}
	c := NetworkConfig{Node: "w0", Endpoint: strings.TrimPrefix(srv.URL, "https://"), ClusterCIDR: "10.244.0.0/16", NodeCIDR: "10.244.1.0/24"}

	sync := func(want map[string]string) {
		t.Helper()
		if _, err := pn.sync(t.Context(), c); err != nil {
			t.Fatal(err)
		}
		routes, rules := host.state()
		if !mapsEqual(routes, want) {
			t.Errorf("routes %v, want %v", routes, want)
		}
		wantRule := "-t nat POSTROUTING -s 10.244.1.0/24 ! -d 10.244.0.0/16 -m comment --comment " + masqueradeComment + " -j MASQUERADE"
		if len(rules) != 1 || rules[0] != wantRule {
			t.Errorf("rules %q, want only %q", rules, wantRule)
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
