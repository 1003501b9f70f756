package kiln

import (
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	distrolocal "kiln.dev/kiln/internal/distro/local"
)

// waitUntil waits, up to within, until cond holds.
func waitUntil(t *testing.T, within time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(within)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("not within %s: %s", within, what)
		}
		select {
		case <-t.Context().Done():
			t.Fatal(t.Context().Err())
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// The pod-network step marks the node's network unavailable before it
// writes the CNI configuration (which makes the kubelet Ready), records the
// node's routes, and makes the node available only once the other node
// routes to it, at once when that node records it (the watch: the periodic
// sync is an hour away).
func TestPodNetworkStepWaitsForTheOtherNodes(t *testing.T) {
	api := &nodesAPI{}
	srv := httptest.NewTLSServer(api.handler())
	defer srv.Close()
	root := t.TempDir()
	api.set([3]string{"cp0", "10.244.0.0/24", "172.30.0.2"}, [3]string{"w0", "10.244.1.0/24", "172.30.0.3"})
	api.update("cp0", func(n *fakeNode) {
		n.conditions["Ready"] = "True"
		n.annotations[PodRoutesAnnotation] = `{}`
	})
	var cniWhenUnavailable []bool
	api.onStatus = func(node, typ, status string) {
		if node == "w0" && typ == ConditionNetworkUnavailable && status == "True" {
			_, err := os.Stat(filepath.Join(root, FileCNI))
			cniWhenUnavailable = append(cniWhenUnavailable, err == nil)
		}
	}
	host := newFakeHost()
	client := func() (*http.Client, error) { return srv.Client(), nil }
	x := &containers{run: host.run, timeout: 5 * time.Second,
		net: &Routes{Log: slog.New(slog.DiscardHandler), Run: host.run, Client: client, Node: client, Every: time.Hour}}
	defer x.Stop()
	p := distrolocal.InstallParams{Node: distrolocal.Node{Name: "w0", Address: "172.30.0.3"},
		Endpoint: strings.TrimPrefix(srv.URL, "https://"), PodCIDR: "10.244.0.0/16"}
	if _, err := x.podNetwork(t.Context(), p, root, srv.Client()); err != nil {
		t.Fatal(err)
	}
	if !hasCNIConfig(root, "10.244.1.0/24") {
		t.Fatal("no CNI configuration for the node's range")
	}
	api.mu.Lock()
	if diff := cmp.Diff([]bool{false}, cniWhenUnavailable); diff != "" {
		t.Errorf("CNI configuration written when NetworkUnavailable was set True (-want +got):\n%s", diff)
	}
	api.mu.Unlock()

	// w0 routes to cp0 and says so; cp0 does not route to w0 yet: w0 waits,
	// through the passes its own patches start.
	waitUntil(t, 2*time.Second, "w0 records its route to cp0", func() bool {
		ann, _ := api.get("w0")
		return ann[PodRoutesAnnotation] == `{"10.244.0.0/24":"172.30.0.2"}`
	})
	lists := func() int { api.mu.Lock(); defer api.mu.Unlock(); return api.lists }
	waitUntil(t, 2*time.Second, "w0 looks again after recording", func() bool { return lists() >= 2 })
	if _, cond := api.get("w0"); cond[ConditionNetworkUnavailable] != "True" {
		t.Fatalf("w0's NetworkUnavailable %q before cp0 routes to it, want True", cond[ConditionNetworkUnavailable])
	}

	// A route of cp0 to another address is not one to w0.
	api.update("cp0", func(n *fakeNode) { n.annotations[PodRoutesAnnotation] = `{"10.244.1.0/24":"172.30.0.9"}` })
	before := lists()
	waitUntil(t, 2*time.Second, "w0 looks again", func() bool { return lists() > before })
	if _, cond := api.get("w0"); cond[ConditionNetworkUnavailable] != "True" {
		t.Fatalf("w0's NetworkUnavailable %q while cp0 routes its range elsewhere, want True", cond[ConditionNetworkUnavailable])
	}

	start := time.Now()
	api.update("cp0", func(n *fakeNode) { n.annotations[PodRoutesAnnotation] = `{"10.244.1.0/24":"172.30.0.3"}` })
	waitUntil(t, 2*time.Second, "w0's NetworkUnavailable False once cp0 routes to it", func() bool {
		_, cond := api.get("w0")
		return cond[ConditionNetworkUnavailable] == "False"
	})
	t.Logf("w0 available %s after cp0 recorded its route", time.Since(start))
	api.mu.Lock()
	defer api.mu.Unlock()
	want := []string{
		"w0 status NetworkUnavailable=True " + ReasonPending,
		`w0 annotations map[kiln.dev/pod-routes:{"10.244.0.0/24":"172.30.0.2"}]`,
		"w0 status NetworkUnavailable=False " + ReasonReady,
	}
	if diff := cmp.Diff(want, api.patches); diff != "" {
		t.Errorf("patches (-want +got):\n%s", diff)
	}
}

// A node alone in its cluster is available at once, and stays so when its
// routes are started again (a restarted agent).
func TestPodNetworkLoneNode(t *testing.T) {
	api := &nodesAPI{}
	srv := httptest.NewTLSServer(api.handler())
	defer srv.Close()
	api.set([3]string{"cp0", "10.244.0.0/24", "172.30.0.2"})
	api.update("cp0", func(n *fakeNode) { n.conditions[ConditionNetworkUnavailable] = "True" })
	host := newFakeHost()
	client := func() (*http.Client, error) { return srv.Client(), nil }
	pn := &Routes{Log: slog.New(slog.DiscardHandler), Run: host.run, Client: client, Node: client, Every: time.Hour}
	c := NetworkConfig{Node: "cp0", Endpoint: strings.TrimPrefix(srv.URL, "https://"), ClusterCIDR: "10.244.0.0/16", NodeCIDR: "10.244.0.0/24"}
	pn.Start(c)
	waitUntil(t, 2*time.Second, "cp0's NetworkUnavailable False", func() bool {
		_, cond := api.get("cp0")
		return cond[ConditionNetworkUnavailable] == "False"
	})
	pn.Stop()
	pn.Start(c)
	pn.Stop()
	api.mu.Lock()
	defer api.mu.Unlock()
	want := []string{"cp0 annotations map[kiln.dev/pod-routes:{}]", "cp0 status NetworkUnavailable=False " + ReasonReady}
	if diff := cmp.Diff(want, api.patches); diff != "" {
		t.Errorf("patches (-want +got):\n%s", diff)
	}
}

// Which nodes a node waits for: every other with a pod range, not being
// deleted, whose kubelet is heard from and that records its routes, until
// it routes to this node's range via this node's address; and those this
// node cannot route to.
func TestNetworkPending(t *testing.T) {
	node := func(name, cidr, ip, ready, routes string, deleting bool) wireNode {
		var n wireNode
		n.Metadata.Name, n.Spec.PodCIDR = name, cidr
		if routes != "" {
			n.Metadata.Annotations = map[string]string{PodRoutesAnnotation: routes}
		}
		if deleting {
			n.Metadata.DeletionTimestamp = "2026-11-29T16:00:00Z"
		}
		if ip != "" {
			n.Status.Addresses = append(n.Status.Addresses, struct {
				Type    string `json:"type"`
				Address string `json:"address"`
			}{"InternalIP", ip})
		}
		if ready != "" {
			n.Status.Conditions = append(n.Status.Conditions, struct {
				Type   string `json:"type"`
				Status string `json:"status"`
			}{"Ready", ready})
		}
		return n
	}
	self := node("w0", "10.244.1.0/24", "172.30.0.3", "True", "", false)
	routesToSelf := `{"10.244.1.0/24":"172.30.0.3"}`
	for _, c := range []struct {
		name  string
		peers []wireNode
		want  []string
	}{
		{"alone", nil, nil},
		{"every peer routes here", []wireNode{node("cp0", "10.244.0.0/24", "172.30.0.2", "True", routesToSelf, false),
			node("w1", "10.244.2.0/24", "172.30.0.4", "False", routesToSelf, false)}, nil},
		{"a peer routes elsewhere, another not to this node", []wireNode{node("cp0", "10.244.0.0/24", "172.30.0.2", "True", `{"10.244.2.0/24":"172.30.0.4"}`, false),
			node("w1", "10.244.2.0/24", "172.30.0.4", "True", `{"10.244.1.0/24":"172.30.0.8"}`, false)},
			[]string{"cp0 (no route to this node yet)", "w1 (no route to this node yet)"}},
		{"no range, being deleted, not heard from: not waited for", []wireNode{node("w1", "", "172.30.0.4", "False", "", false),
			node("w2", "10.244.3.0/24", "172.30.0.5", "True", "{}", true), node("w3", "10.244.4.0/24", "172.30.0.6", "Unknown", "{}", false)}, nil},
		{"a peer that never recorded routes (an older agent, or before its first pass): not waited for",
			[]wireNode{node("w1", "10.244.2.0/24", "172.30.0.4", "True", "", false)}, nil},
		{"a peer without an address", []wireNode{node("w1", "10.244.2.0/24", "", "False", routesToSelf, false)},
			[]string{"w1 (no route to it: no address)"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			nodes := append([]wireNode{self}, c.peers...)
			got := networkPending(nodes, self, wantedRoutes(nodes, "w0"))
			if diff := cmp.Diff(c.want, got); diff != "" {
				t.Errorf("networkPending (-want +got):\n%s", diff)
			}
		})
	}
}

// A node that waited ReadyWait logs, once, which nodes do not route to it
// yet, and keeps waiting.
func TestPodNetworkLogsWhoDoesNotRoute(t *testing.T) {
	api := &nodesAPI{}
	srv := httptest.NewTLSServer(api.handler())
	defer srv.Close()
	api.set([3]string{"cp0", "10.244.0.0/24", "172.30.0.2"}, [3]string{"w0", "10.244.1.0/24", "172.30.0.3"})
	api.update("cp0", func(n *fakeNode) { n.annotations[PodRoutesAnnotation] = "{}" })
	api.update("w0", func(n *fakeNode) { n.conditions[ConditionNetworkUnavailable] = "True" })
	var logs strings.Builder
	client := func() (*http.Client, error) { return srv.Client(), nil }
	pn := &Routes{Log: slog.New(slog.NewTextHandler(&logs, nil)), Run: newFakeHost().run, Client: client, Node: client,
		Every: time.Hour, ReadyWait: time.Minute}
	c := NetworkConfig{Node: "w0", Endpoint: strings.TrimPrefix(srv.URL, "https://"), ClusterCIDR: "10.244.0.0/16", NodeCIDR: "10.244.1.0/24"}
	st := &netState{started: time.Now().Add(-2 * time.Minute)}
	for range 2 {
		if _, err := pn.sync(t.Context(), c, st); err != nil {
			t.Fatal(err)
		}
	}
	if n := strings.Count(logs.String(), "do not route to this node's pods yet"); n != 1 ||
		!strings.Contains(logs.String(), "nodes=\"[cp0 (no route to this node yet)]\"") {
		t.Errorf("want one warning naming cp0, logs:\n%s", logs.String())
	}
	if _, cond := api.get("w0"); cond[ConditionNetworkUnavailable] != "True" {
		t.Errorf("w0's NetworkUnavailable %q, want True", cond[ConditionNetworkUnavailable])
	}
}
