package kiln

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"time"
)

// When a node's pods are reachable from every other node. A node takes pods
// once its kubelet is Ready, which it is once the CNI configuration is
// written; the other nodes route to its pod range only at their next sync.
// So the node keeps its NetworkUnavailable condition True (the node
// controller taints it node.kubernetes.io/network-unavailable:NoSchedule)
// from before it writes its CNI configuration until every other node
// records, in its PodRoutesAnnotation, a route to this node's range via
// this node's address, and this node routes to all of theirs. Both are
// written with the kubelet's credentials (the node authorizer and
// NodeRestriction let a node patch its own Node and its status), the nodes
// are listed and watched with kube-proxy's.

const (
	// ConditionNetworkUnavailable is the node condition the node controller
	// taints a node by while it is True.
	ConditionNetworkUnavailable = "NetworkUnavailable"
	// ReasonPending and ReasonReady are its reasons while the node waits for
	// the other nodes' routes, and once they route to it.
	ReasonPending = "KilnPodNetworkPending"
	ReasonReady   = "KilnPodNetworkReady"
	// PodRoutesAnnotation is, on each node, the routes its pod network has
	// to the other nodes' pod ranges, as JSON: range -> via address, such as
	// {"10.244.1.0/24":"172.30.0.3"}.
	PodRoutesAnnotation = "kiln.dev/pod-routes"
)

// NetworkReadyWait is how long a node waits for the other nodes' routes
// before it logs which have not routed to it yet (it keeps waiting).
const NetworkReadyWait = 2 * time.Minute

// networkCondition is the NetworkUnavailable condition a node sets on itself.
func networkCondition(available bool, now time.Time) map[string]any {
	c := map[string]any{"type": ConditionNetworkUnavailable, "status": "True", "reason": ReasonPending,
		"message":            "kiln pod network: waiting until every other node routes to this node's pods",
		"lastTransitionTime": now.UTC().Format(time.RFC3339), "lastHeartbeatTime": now.UTC().Format(time.RFC3339)}
	if available {
		c["status"], c["reason"] = "False", ReasonReady
		c["message"] = "kiln pod network: every other node routes to this node's pods"
	}
	return c
}

// SetNetworkUnavailable sets the NetworkUnavailable condition of node
// (a strategic merge patch of its status: the kubelet's conditions stay)
// with c, the kubelet's credentials.
func SetNetworkUnavailable(ctx context.Context, c *http.Client, endpoint, node string, unavailable bool) error {
	patch := map[string]any{"status": map[string]any{"conditions": []any{networkCondition(!unavailable, time.Now())}}}
	err := send(ctx, c, http.MethodPatch, "https://"+endpoint+"/api/v1/nodes/"+url.PathEscape(node)+"/status",
		"application/strategic-merge-patch+json", patch)
	if err != nil {
		return fmt.Errorf("set node %s's %s to %t: %w", node, ConditionNetworkUnavailable, unavailable, err)
	}
	return nil
}

// holdPods sets node n's NetworkUnavailable condition True, with the
// kubelet's credentials c, before the node's pod network is set up (so that
// it takes no pods before the other nodes route to it), unless the node got
// this far before and is available (the same range's CNI configuration is
// under root and the condition is False).
func holdPods(ctx context.Context, c *http.Client, endpoint, root string, n wireNode) error {
	if n.condition(ConditionNetworkUnavailable) == "False" && hasCNIConfig(root, n.Spec.PodCIDR) {
		return nil
	}
	if err := SetNetworkUnavailable(ctx, c, endpoint, n.Metadata.Name, true); err != nil {
		return fmt.Errorf("mark the node's network unavailable until the other nodes route to it: %w", err)
	}
	return nil
}

// recordRoutes sets node's PodRoutesAnnotation to routes.
func recordRoutes(ctx context.Context, c *http.Client, endpoint, node, routes string) error {
	patch := map[string]any{"metadata": map[string]any{"annotations": map[string]any{PodRoutesAnnotation: routes}}}
	err := send(ctx, c, http.MethodPatch, "https://"+endpoint+"/api/v1/nodes/"+url.PathEscape(node),
		"application/merge-patch+json", patch)
	if err != nil {
		return fmt.Errorf("record node %s's routes: %w", node, err)
	}
	return nil
}

// routesValue is want as PodRoutesAnnotation's value (encoding/json sorts
// the ranges).
func routesValue(want map[string]string) string {
	b, _ := json.Marshal(want)
	return string(b)
}

func send(ctx context.Context, c *http.Client, method, u, contentType string, body any) error {
	b, err := json.Marshal(body)
	if err != nil {
		return err
	}
	req, err := http.NewRequestWithContext(ctx, method, u, bytes.NewReader(b))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", contentType)
	req.Header.Set("Accept", "application/json")
	resp, err := c.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	answer, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		return fmt.Errorf("%s %s: %s: %s", method, u, resp.Status, bytes.TrimSpace(answer))
	}
	return nil
}

// networkPending says which other nodes this node still waits for, each
// with why, sorted; none: its pods are reachable from every node. It waits
// for every other node that has a pod range, is not being deleted, whose
// kubelet is heard from (Ready not Unknown: a node that stopped runs no
// agent that could route) and that records its routes at all, until that
// node records a route to this node's range via this node's address, and
// until this node routes to it (want holds the routes this node has). A
// node that has never recorded routes is either one whose agent predates
// the record (it routes within RouteSyncInterval, as before; waiting for it
// would keep a node added to an older cluster unavailable for good) or one
// that has not made its first pass yet, and that one checks both directions
// itself before it takes pods. A node alone waits for nothing.
func networkPending(nodes []wireNode, self wireNode, want map[string]string) []string {
	var pending []string
	for _, n := range nodes {
		recorded, hasRecord := n.Metadata.Annotations[PodRoutesAnnotation]
		if n.Metadata.Name == self.Metadata.Name || n.Spec.PodCIDR == "" || n.Metadata.DeletionTimestamp != "" ||
			n.condition("Ready") == "Unknown" || !hasRecord {
			continue
		}
		if want[n.Spec.PodCIDR] == "" {
			pending = append(pending, n.Metadata.Name+" (no route to it: no address)")
			continue
		}
		var routes map[string]string
		_ = json.Unmarshal([]byte(recorded), &routes)
		if routes[self.Spec.PodCIDR] != self.internalIP() {
			pending = append(pending, n.Metadata.Name+" (no route to this node yet)")
		}
	}
	slices.Sort(pending)
	return pending
}

// watchKey is what of a node the pod network follows: a change of it
// brings the routes up to date at once.
func (n wireNode) watchKey() string {
	deleting := n.Metadata.DeletionTimestamp != ""
	return fmt.Sprint(n.Spec.PodCIDR, " ", n.internalIP(), " ", deleting, " ", n.condition("Ready"), " ",
		n.condition(ConditionNetworkUnavailable), " ", n.Metadata.Annotations[PodRoutesAnnotation])
}

// watchNodes watches the nodes until ctx ends and calls changed whenever a
// node appears, leaves or changes what the pod network follows (watchKey),
// so that a node that joins is routed to within a moment rather than at the
// next sync. It connects again after a second when the watch ends or fails;
// the periodic sync stays the fallback.
func watchNodes(ctx context.Context, client func() (*http.Client, error), endpoint string, changed func()) {
	keys := map[string]string{}
	for ctx.Err() == nil {
		if c, err := client(); err == nil {
			_ = watchOnce(ctx, c, endpoint, keys, changed)
		}
		select {
		case <-ctx.Done():
		case <-time.After(time.Second):
		}
	}
}

// watchOnce is one watch of the nodes (at most five minutes); it starts with
// an ADDED event per node.
func watchOnce(ctx context.Context, c *http.Client, endpoint string, keys map[string]string, changed func()) error {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Minute+10*time.Second)
	defer cancel()
	wc := *c
	wc.Timeout = 0 // a watch lasts; ctx bounds it
	req, err := http.NewRequestWithContext(ctx, http.MethodGet,
		"https://"+endpoint+"/api/v1/nodes?watch=true&timeoutSeconds=300", nil)
	if err != nil {
		return err
	}
	req.Header.Set("Accept", "application/json")
	resp, err := wc.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 4<<10))
		return fmt.Errorf("watch nodes: %s: %s", resp.Status, bytes.TrimSpace(b))
	}
	dec := json.NewDecoder(bufio.NewReader(resp.Body))
	for {
		var ev struct {
			Type   string   `json:"type"`
			Object wireNode `json:"object"`
		}
		if err := dec.Decode(&ev); err != nil {
			return err
		}
		name := ev.Object.Metadata.Name
		switch strings.ToUpper(ev.Type) {
		case "ADDED", "MODIFIED":
			if k := ev.Object.watchKey(); keys[name] != k {
				keys[name] = k
				changed()
			}
		case "DELETED":
			delete(keys, name)
			changed()
		}
	}
}
