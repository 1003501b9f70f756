package local

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net/http"
	"net/netip"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	distrolocal "kiln.dev/kiln/internal/distro/local"
)

// The pod network of nodes that run containers: the CNI bridge plugin on
// every node, over the node's pod range (node.spec.podCIDR, which the
// controller manager allocates), and a route to every other node's pod range
// via that node's address, all nodes being on one network (the cluster's
// Docker network). Pods reach pods of other nodes by their own addresses;
// what leaves the pod ranges is masqueraded behind the node's address.

// routeProto marks the routes the pod network adds (ip route ... proto 77),
// so that it finds and removes only its own.
const routeProto = "77"

// masqueradeComment names the node's masquerade rule.
const masqueradeComment = "kiln pod network: leaving the pod ranges"

// routeSyncInterval is how often the routes are brought up to date with the
// nodes; a node that joins is reached by pods of the others within it.
const routeSyncInterval = 5 * time.Second

// networkFile is Root/var/lib/kiln-node/pod-network.json: the pod network
// of the last install, so a restarted agent (or node) sets it up again
// (Resume).
const networkFile = dirState + "/pod-network.json"

// networkConfig is what the pod network of a node needs.
type networkConfig struct {
	Node string `json:"node"`
	// Endpoint is the cluster's API endpoint, host:port.
	Endpoint string `json:"endpoint"`
	// ClusterCIDR is the cluster's pod range; NodeCIDR this node's part.
	ClusterCIDR string `json:"clusterCIDR"`
	NodeCIDR    string `json:"nodeCIDR"`
}

// runFunc runs a program and returns its combined output: exec, or a
// recorder in tests.
type runFunc func(ctx context.Context, name string, args ...string) ([]byte, error)

func runCommand(ctx context.Context, name string, args ...string) ([]byte, error) {
	out, err := exec.CommandContext(ctx, name, args...).CombinedOutput()
	if err != nil {
		return out, fmt.Errorf("%s %s: %w: %s", name, strings.Join(args, " "), err, bytes.TrimSpace(out))
	}
	return out, nil
}

// cniConfig is the CNI configuration of a node whose pods get addresses of
// nodeCIDR: a bridge (the pods' gateway, hairpin for a Service answered by
// the pod that asked), host-local addresses, hostPort mappings. No ipMasq:
// the bridge plugin would masquerade pod traffic to other nodes' pods too;
// the node's one rule (ensureMasquerade) keeps pod addresses within the
// cluster.
func cniConfig(nodeCIDR string) string {
	return fmt.Sprintf(`{
  "cniVersion": "1.0.0",
  "name": "kiln",
  "plugins": [
    {"type": "bridge", "bridge": "kiln0", "isGateway": true, "ipMasq": false, "hairpinMode": true,
     "ipam": {"type": "host-local", "ranges": [[{"subnet": %q}]], "routes": [{"dst": "0.0.0.0/0"}]}},
    {"type": "portmap", "capabilities": {"portMappings": true}},
    {"type": "loopback"}
  ]
}
`, nodeCIDR)
}

// masqueradeRule is the iptables rule (nat POSTROUTING, without the
// action flag) that masquerades what the node's pods send out of the pod
// ranges.
func masqueradeRule(c networkConfig) []string {
	return []string{"-t", "nat", "POSTROUTING", "-s", c.NodeCIDR, "!", "-d", c.ClusterCIDR,
		"-m", "comment", "--comment", masqueradeComment, "-j", "MASQUERADE"}
}

// iptablesArgs puts the action flag (-C, -A, -D) before the chain.
func iptablesArgs(action string, rule []string) []string {
	return append([]string{rule[0], rule[1], action}, rule[2:]...)
}

func ensureMasquerade(ctx context.Context, run runFunc, c networkConfig) error {
	rule := masqueradeRule(c)
	if _, err := run(ctx, "iptables", iptablesArgs("-C", rule)...); err == nil {
		return nil
	}
	if _, err := run(ctx, "iptables", iptablesArgs("-A", rule)...); err != nil {
		return fmt.Errorf("masquerade rule: %w", err)
	}
	return nil
}

// wireNode is what the pod network reads of a Node.
type wireNode struct {
	Metadata struct {
		Name string `json:"name"`
	} `json:"metadata"`
	Spec struct {
		PodCIDR string `json:"podCIDR"`
	} `json:"spec"`
	Status struct {
		Addresses []struct {
			Type    string `json:"type"`
			Address string `json:"address"`
		} `json:"addresses"`
	} `json:"status"`
}

func (n wireNode) internalIP() string {
	for _, a := range n.Status.Addresses {
		if a.Type == "InternalIP" {
			return a.Address
		}
	}
	return ""
}

// nodePodCIDR reads the pod range the controller manager gave node.
func nodePodCIDR(ctx context.Context, c *http.Client, endpoint, node string) (string, error) {
	b, err := get(ctx, c, "https://"+endpoint+"/api/v1/nodes/"+url.PathEscape(node))
	if err != nil {
		return "", err
	}
	var n wireNode
	if err := json.Unmarshal(b, &n); err != nil {
		return "", fmt.Errorf("node %s: %w", node, err)
	}
	if n.Spec.PodCIDR == "" {
		return "", fmt.Errorf("node %s has no pod range yet (spec.podCIDR; the controller manager allocates it)", node)
	}
	if _, err := netip.ParsePrefix(n.Spec.PodCIDR); err != nil {
		return "", fmt.Errorf("node %s: spec.podCIDR %q: %w", node, n.Spec.PodCIDR, err)
	}
	return n.Spec.PodCIDR, nil
}

// wantedRoutes are the routes to the other nodes' pod ranges: range ->
// the node's address.
func wantedRoutes(nodes []wireNode, self string) map[string]string {
	want := map[string]string{}
	for _, n := range nodes {
		ip := n.internalIP()
		if n.Metadata.Name == self || n.Spec.PodCIDR == "" || ip == "" {
			continue
		}
		if _, err := netip.ParsePrefix(n.Spec.PodCIDR); err != nil {
			continue
		}
		if _, err := netip.ParseAddr(ip); err != nil {
			continue
		}
		want[n.Spec.PodCIDR] = ip
	}
	return want
}

// parseRoutes reads `ip -4 route show proto 77`: range -> gateway.
func parseRoutes(out []byte) map[string]string {
	have := map[string]string{}
	for line := range strings.Lines(string(out)) {
		f := strings.Fields(line)
		if len(f) >= 3 && f[1] == "via" {
			have[f[0]] = f[2]
		}
	}
	return have
}

// podNetwork keeps a node's routes to the other nodes' pod ranges up to
// date while it runs (one goroutine, from start to stop).
type podNetwork struct {
	log    *slog.Logger
	run    runFunc
	client func() (*http.Client, error) // kube-proxy's credentials, read again each pass (they are renewed)
	every  time.Duration

	mu     sync.Mutex
	cancel context.CancelFunc
	done   chan struct{}
}

// start (re)starts keeping the routes of c.
func (pn *podNetwork) start(c networkConfig) {
	pn.stop()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	pn.mu.Lock()
	pn.cancel, pn.done = cancel, done
	pn.mu.Unlock()
	go func() {
		defer close(done)
		t := time.NewTicker(pn.every)
		defer t.Stop()
		var last string
		for {
			n, err := pn.sync(ctx, c)
			switch {
			case ctx.Err() != nil:
				return
			case err != nil && err.Error() != last:
				pn.log.Warn("pod network: could not bring the routes to other nodes up to date; trying again", "err", err)
				last = err.Error()
			case err == nil && last != "":
				pn.log.Info("pod network: routes up to date again", "routes", n)
				last = ""
			}
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
		}
	}()
}

// stop ends the goroutine and waits for it.
func (pn *podNetwork) stop() {
	pn.mu.Lock()
	cancel, done := pn.cancel, pn.done
	pn.cancel, pn.done = nil, nil
	pn.mu.Unlock()
	if cancel != nil {
		cancel()
		<-done
	}
}

// sync makes one pass: the masquerade rule is there, and the routes are
// those the nodes ask for. It returns how many routes there are.
func (pn *podNetwork) sync(ctx context.Context, c networkConfig) (int, error) {
	if err := ensureMasquerade(ctx, pn.run, c); err != nil {
		return 0, err
	}
	client, err := pn.client()
	if err != nil {
		return 0, err
	}
	b, err := get(ctx, client, "https://"+c.Endpoint+"/api/v1/nodes")
	if err != nil {
		return 0, fmt.Errorf("list nodes: %w", err)
	}
	var list struct {
		Items []wireNode `json:"items"`
	}
	if err := json.Unmarshal(b, &list); err != nil {
		return 0, fmt.Errorf("list nodes: %w", err)
	}
	want := wantedRoutes(list.Items, c.Node)
	out, err := pn.run(ctx, "ip", "-4", "route", "show", "proto", routeProto)
	if err != nil {
		return 0, err
	}
	have := parseRoutes(out)
	var errs []error
	for _, cidr := range slices.Sorted(maps.Keys(want)) {
		if have[cidr] == want[cidr] {
			continue
		}
		if _, err := pn.run(ctx, "ip", "-4", "route", "replace", cidr, "via", want[cidr], "proto", routeProto); err != nil {
			errs = append(errs, err)
			continue
		}
		pn.log.Info("pod network: route added", "range", cidr, "via", want[cidr])
	}
	for _, cidr := range slices.Sorted(maps.Keys(have)) {
		if _, ok := want[cidr]; ok {
			continue
		}
		if _, err := pn.run(ctx, "ip", "-4", "route", "del", cidr, "proto", routeProto); err != nil {
			errs = append(errs, err)
			continue
		}
		pn.log.Info("pod network: route removed", "range", cidr, "via", have[cidr])
	}
	return len(want), errors.Join(errs...)
}

// setUp writes the node's CNI configuration and its masquerade rule, and
// records c for Resume.
func setUpPodNetwork(ctx context.Context, root string, run runFunc, c networkConfig) error {
	if err := writeFile(filepath.Join(root, fileCNI), []byte(cniConfig(c.NodeCIDR)), 0o644); err != nil {
		return fmt.Errorf("CNI configuration: %w", err)
	}
	if err := ensureMasquerade(ctx, run, c); err != nil {
		return err
	}
	return writeJSON(filepath.Join(root, networkFile), c)
}

// loadNetwork reads the pod network of the last install; os.ErrNotExist
// when it had none.
func loadNetwork(root string) (networkConfig, error) {
	var c networkConfig
	b, err := os.ReadFile(filepath.Join(root, networkFile))
	if err != nil {
		return c, err
	}
	if err := json.Unmarshal(b, &c); err != nil {
		return c, fmt.Errorf("%s: %w", networkFile, err)
	}
	return c, nil
}

// tearDownPodNetwork removes what the pod network added to the node: its
// routes, its masquerade rule and its CNI configuration. Errors of rules or
// routes already gone are not errors.
func tearDownPodNetwork(ctx context.Context, root string, run runFunc) error {
	c, err := loadNetwork(root)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	if out, err := run(ctx, "ip", "-4", "route", "show", "proto", routeProto); err == nil {
		for cidr := range parseRoutes(out) {
			_, _ = run(ctx, "ip", "-4", "route", "del", cidr, "proto", routeProto)
		}
	}
	rule := masqueradeRule(c)
	for {
		if _, err := run(ctx, "iptables", iptablesArgs("-D", rule)...); err != nil {
			break
		}
	}
	var errs []error
	for _, f := range []string{fileCNI, networkFile} {
		if err := os.Remove(filepath.Join(root, f)); err != nil && !errors.Is(err, os.ErrNotExist) {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// nodesClient is the client the pod network lists nodes with:
// kube-proxy's credentials (system:kube-proxy, which the default
// system:node-proxier binding lets list and watch nodes). A kubelet may read
// only its own Node (the node authorizer, Kubernetes 1.33 and later).
func nodesClient(root string) func() (*http.Client, error) {
	return func() (*http.Client, error) { return kubeconfigClient(root, distrolocal.FileKubeProxyConf) }
}
