package kiln

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

	"kiln.dev/kiln/internal/agent/distro/local"
	"kiln.dev/kiln/internal/atomicfile"
)

// The pod network of nodes that run containers: the CNI bridge plugin on
// every node, over the node's pod range (node.spec.podCIDR, which the
// controller manager allocates), and a route to every other node's pod range
// via that node's address, all nodes being on one network (the cluster's
// Docker network). Pods reach pods of other nodes by their own addresses;
// what leaves the pod ranges is masqueraded behind the node's address.
// What is sent to the Service range and was not translated to a Service's
// endpoint (a ClusterIP's port no Service has, an address no Service holds)
// is refused on the node, as kube-proxy's nftables mode does: in iptables
// mode it would leave by the default route, and a network that answers
// every address (a transparent proxy) would make a port a Service dropped
// still connect.

// routeProto marks the routes the pod network adds (ip route ... proto 77),
// so that it finds and removes only its own.
const routeProto = "77"

// masqueradeComment names the node's masquerade rule.
const masqueradeComment = "kiln pod network: leaving the pod ranges"

// serviceRejectComment names the node's rules that refuse what is sent to
// the Service range and no Service took.
const serviceRejectComment = "kiln pod network: no Service there"

// RouteSyncInterval is how often the routes are brought up to date with the
// nodes; a node that joins is reached by pods of the others within it.
const RouteSyncInterval = 5 * time.Second

// NetworkFile is Root/var/lib/kiln-node/pod-network.json: the pod network
// of the last install, so a restarted agent (or node) sets it up again
// (the executor's Resume).
const NetworkFile = "var/lib/kiln-node/pod-network.json"

// NetworkConfig is what the pod network of a node needs.
type NetworkConfig struct {
	Node string `json:"node"`
	// Endpoint is the cluster's API endpoint, host:port.
	Endpoint string `json:"endpoint"`
	// ClusterCIDR is the cluster's pod range; NodeCIDR this node's part.
	ClusterCIDR string `json:"clusterCIDR"`
	NodeCIDR    string `json:"nodeCIDR"`
	// ServiceCIDR is the cluster's Service range (none in the records of
	// agents before it: no reject rules).
	ServiceCIDR string `json:"serviceCIDR,omitempty"`
}

// RunFunc runs a program and returns its combined output: exec, or a
// recorder in tests.
type RunFunc func(ctx context.Context, name string, args ...string) ([]byte, error)

func RunCommand(ctx context.Context, name string, args ...string) ([]byte, error) {
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
// the node's masquerade rule (ensureRules) keeps pod addresses within the
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
func masqueradeRule(c NetworkConfig) []string {
	return []string{"-t", "nat", "POSTROUTING", "-s", c.NodeCIDR, "!", "-d", c.ClusterCIDR,
		"-m", "comment", "--comment", masqueradeComment, "-j", "MASQUERADE"}
}

// serviceRejectRules are the iptables rules (filter, without the action
// flag) that refuse what the node forwards or sends to the Service range
// after kube-proxy's translation (nat PREROUTING and OUTPUT come before
// filter FORWARD and OUTPUT): an address still in the range was no
// Service's port. None without a Service range.
func serviceRejectRules(c NetworkConfig) [][]string {
	if c.ServiceCIDR == "" {
		return nil
	}
	var rules [][]string
	for _, chain := range []string{"FORWARD", "OUTPUT"} {
		rules = append(rules, []string{"-t", "filter", chain, "-d", c.ServiceCIDR,
			"-m", "comment", "--comment", serviceRejectComment, "-j", "REJECT"})
	}
	return rules
}

// nodeRules are the node's rules of the pod network, each with the
// action that adds it: the masquerade rule appended, the reject rules
// first in their chains.
func nodeRules(c NetworkConfig) (rules [][]string, add []string) {
	rules = append([][]string{masqueradeRule(c)}, serviceRejectRules(c)...)
	add = []string{"-A"}
	for range rules[1:] {
		add = append(add, "-I")
	}
	return rules, add
}

// iptablesArgs puts the action flag (-C, -A, -I, -D) before the chain.
func iptablesArgs(action string, rule []string) []string {
	return append([]string{rule[0], rule[1], action}, rule[2:]...)
}

// ensureRules adds the node's rules that are missing (nodeRules).
func ensureRules(ctx context.Context, run RunFunc, c NetworkConfig) error {
	rules, add := nodeRules(c)
	for i, rule := range rules {
		if _, err := run(ctx, "iptables", iptablesArgs("-C", rule)...); err == nil {
			continue
		}
		if _, err := run(ctx, "iptables", iptablesArgs(add[i], rule)...); err != nil {
			return fmt.Errorf("pod network rule (%s): %w", strings.Join(rule, " "), err)
		}
	}
	return nil
}

// wireNode is what the pod network reads of a Node.
type wireNode struct {
	Metadata struct {
		Name              string            `json:"name"`
		Annotations       map[string]string `json:"annotations"`
		DeletionTimestamp string            `json:"deletionTimestamp"`
	} `json:"metadata"`
	Spec struct {
		PodCIDR string `json:"podCIDR"`
	} `json:"spec"`
	Status struct {
		Addresses []struct {
			Type    string `json:"type"`
			Address string `json:"address"`
		} `json:"addresses"`
		Conditions []struct {
			Type   string `json:"type"`
			Status string `json:"status"`
		} `json:"conditions"`
	} `json:"status"`
}

// condition is the status of the node's condition of type t; "" when it
// has none.
func (n wireNode) condition(t string) string {
	for _, c := range n.Status.Conditions {
		if c.Type == t {
			return c.Status
		}
	}
	return ""
}

func (n wireNode) internalIP() string {
	for _, a := range n.Status.Addresses {
		if a.Type == "InternalIP" {
			return a.Address
		}
	}
	return ""
}

// NodePodCIDR reads the pod range the controller manager gave node.
func NodePodCIDR(ctx context.Context, c *http.Client, endpoint, node string) (string, error) {
	n, err := readPodRange(ctx, c, endpoint, node)
	return n.Spec.PodCIDR, err
}

// readPodRange reads node, once it has a pod range.
func readPodRange(ctx context.Context, c *http.Client, endpoint, node string) (wireNode, error) {
	var n wireNode
	b, err := local.Get(ctx, c, "https://"+endpoint+"/api/v1/nodes/"+url.PathEscape(node))
	if err != nil {
		return n, err
	}
	if err := json.Unmarshal(b, &n); err != nil {
		return n, fmt.Errorf("node %s: %w", node, err)
	}
	if n.Spec.PodCIDR == "" {
		return n, fmt.Errorf("node %s has no pod range yet (spec.podCIDR; the controller manager allocates it)", node)
	}
	if _, err := netip.ParsePrefix(n.Spec.PodCIDR); err != nil {
		return n, fmt.Errorf("node %s: spec.podCIDR %q: %w", node, n.Spec.PodCIDR, err)
	}
	return n, nil
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

// Routes keeps a node's routes to the other nodes' pod ranges up to
// date while it runs (one goroutine, from start to stop), and, with Node,
// records them on its Node and makes the node available to pods once every
// other node routes to it (netready.go).
type Routes struct {
	Log *slog.Logger
	Run RunFunc
	// Client lists and watches the nodes: kube-proxy's credentials
	// (system:kube-proxy, which the default system:node-proxier binding lets
	// list and watch nodes; a kubelet may read only its own Node), read
	// again each pass (they are renewed).
	Client func() (*http.Client, error)
	// Node patches this node's own Node: the kubelet's credentials (the
	// node authorizer and NodeRestriction let a node patch its own Node and
	// status). It records the routes (PodRoutesAnnotation) and sets
	// NetworkUnavailable False once every other node routes to this one.
	// nil: neither.
	Node func() (*http.Client, error)
	// Every is how often the routes are brought up to date besides when the
	// nodes change (a watch).
	Every time.Duration
	// ReadyWait is how long the node waits for the other nodes' routes
	// before it logs which have not routed to it yet; NetworkReadyWait when
	// zero.
	ReadyWait time.Duration

	mu     sync.Mutex
	cancel context.CancelFunc
	done   chan struct{}
}

// netState is what a Routes' passes carry from one to the next.
type netState struct {
	started time.Time
	warned  bool // that the node waited ReadyWait
}

// Start (re)starts keeping the routes of c.
func (pn *Routes) Start(c NetworkConfig) {
	pn.Stop()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	pn.mu.Lock()
	pn.cancel, pn.done = cancel, done
	pn.mu.Unlock()
	kick := make(chan struct{}, 1)
	var watching sync.WaitGroup
	watching.Go(func() {
		watchNodes(ctx, pn.Client, c.Endpoint, func() {
			select {
			case kick <- struct{}{}:
			default:
			}
		})
	})
	go func() {
		defer close(done)
		defer watching.Wait()
		t := time.NewTicker(pn.Every)
		defer t.Stop()
		var last string
		st := &netState{started: time.Now()}
		for {
			n, err := pn.sync(ctx, c, st)
			switch {
			case ctx.Err() != nil:
				return
			case err != nil && err.Error() != last:
				pn.Log.Warn("pod network: could not bring the routes to other nodes up to date; trying again", "err", err)
				last = err.Error()
			case err == nil && last != "":
				pn.Log.Info("pod network: routes up to date again", "routes", n)
				last = ""
			}
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			case <-kick:
			}
		}
	}()
}

// Stop ends the goroutine and waits for it.
func (pn *Routes) Stop() {
	pn.mu.Lock()
	cancel, done := pn.cancel, pn.done
	pn.cancel, pn.done = nil, nil
	pn.mu.Unlock()
	if cancel != nil {
		cancel()
		<-done
	}
}

// sync makes one pass: the node's rules are there, and the routes are
// those the nodes ask for; with Node, the node records them and becomes
// available once every other node routes to it. It returns how many routes
// there are.
func (pn *Routes) sync(ctx context.Context, c NetworkConfig, st *netState) (int, error) {
	if err := ensureRules(ctx, pn.Run, c); err != nil {
		return 0, err
	}
	client, err := pn.Client()
	if err != nil {
		return 0, err
	}
	b, err := local.Get(ctx, client, "https://"+c.Endpoint+"/api/v1/nodes")
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
	out, err := pn.Run(ctx, "ip", "-4", "route", "show", "proto", routeProto)
	if err != nil {
		return 0, err
	}
	have := parseRoutes(out)
	var errs []error
	for _, cidr := range slices.Sorted(maps.Keys(want)) {
		if have[cidr] == want[cidr] {
			continue
		}
		if _, err := pn.Run(ctx, "ip", "-4", "route", "replace", cidr, "via", want[cidr], "proto", routeProto); err != nil {
			errs = append(errs, err)
			continue
		}
		pn.Log.Info("pod network: route added", "range", cidr, "via", want[cidr])
	}
	for _, cidr := range slices.Sorted(maps.Keys(have)) {
		if _, ok := want[cidr]; ok {
			continue
		}
		if _, err := pn.Run(ctx, "ip", "-4", "route", "del", cidr, "proto", routeProto); err != nil {
			errs = append(errs, err)
			continue
		}
		pn.Log.Info("pod network: route removed", "range", cidr, "via", have[cidr])
	}
	if len(errs) > 0 || pn.Node == nil {
		return len(want), errors.Join(errs...)
	}
	return len(want), pn.announce(ctx, c, list.Items, want, st)
}

// announce records the routes the node has (want) on its Node and, while
// its NetworkUnavailable condition is True, sets it False once every other
// node routes to it (networkPending); after NetworkReadyWait it logs those
// that do not, once. A node whose condition is False or absent keeps it.
func (pn *Routes) announce(ctx context.Context, c NetworkConfig, nodes []wireNode, want map[string]string, st *netState) error {
	i := slices.IndexFunc(nodes, func(n wireNode) bool { return n.Metadata.Name == c.Node })
	if i < 0 {
		return fmt.Errorf("node %s is not among the nodes", c.Node)
	}
	self := nodes[i]
	client, err := pn.Node()
	if err != nil {
		return err
	}
	if v := routesValue(want); self.Metadata.Annotations[PodRoutesAnnotation] != v {
		if err := recordRoutes(ctx, client, c.Endpoint, c.Node, v); err != nil {
			return err
		}
		self.Metadata.Annotations = map[string]string{PodRoutesAnnotation: v}
	}
	if self.condition(ConditionNetworkUnavailable) != "True" {
		return nil
	}
	pending := networkPending(nodes, self, want)
	if len(pending) > 0 {
		wait := pn.ReadyWait
		if wait <= 0 {
			wait = NetworkReadyWait
		}
		if !st.warned && time.Since(st.started) >= wait {
			pn.Log.Warn("pod network: other nodes do not route to this node's pods yet; it stays NetworkUnavailable, tainted "+
				"network-unavailable, and keeps waiting", "waited", time.Since(st.started).Round(time.Second), "nodes", pending)
			st.warned = true
		}
		return nil
	}
	if err := SetNetworkUnavailable(ctx, client, c.Endpoint, c.Node, false); err != nil {
		return err
	}
	pn.Log.Info("pod network: every other node routes to this node's pods; NetworkUnavailable False",
		"routes", len(want), "waited", time.Since(st.started).Round(time.Millisecond))
	return nil
}

// SetUp writes the node's CNI configuration and its rules (nodeRules), and
// records c for the executor's Resume.
func SetUp(ctx context.Context, root string, run RunFunc, c NetworkConfig) error {
	if err := atomicfile.WriteMkdirAll(filepath.Join(root, FileCNI), []byte(cniConfig(c.NodeCIDR)), 0o644); err != nil {
		return fmt.Errorf("CNI configuration: %w", err)
	}
	if err := ensureRules(ctx, run, c); err != nil {
		return err
	}
	b, err := json.Marshal(c)
	if err != nil {
		return err
	}
	return atomicfile.WriteMkdirAll(filepath.Join(root, NetworkFile), b, 0o600)
}

// hasCNIConfig reports whether the node's CNI configuration is written, for
// nodeCIDR.
func hasCNIConfig(root, nodeCIDR string) bool {
	b, err := os.ReadFile(filepath.Join(root, FileCNI))
	return err == nil && string(b) == cniConfig(nodeCIDR)
}

// Load reads the pod network of the last install; os.ErrNotExist
// when it had none.
func Load(root string) (NetworkConfig, error) {
	var c NetworkConfig
	b, err := os.ReadFile(filepath.Join(root, NetworkFile))
	if err != nil {
		return c, err
	}
	if err := json.Unmarshal(b, &c); err != nil {
		return c, fmt.Errorf("%s: %w", NetworkFile, err)
	}
	return c, nil
}

// TearDown removes what the pod network added to the node: its
// routes, its rules and its CNI configuration. Errors of rules or
// routes already gone are not errors.
func TearDown(ctx context.Context, root string, run RunFunc) error {
	c, err := Load(root)
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
	rules, _ := nodeRules(c)
	for _, rule := range rules {
		for {
			if _, err := run(ctx, "iptables", iptablesArgs("-D", rule)...); err != nil {
				break
			}
		}
	}
	var errs []error
	for _, f := range []string{FileCNI, NetworkFile} {
		if err := os.Remove(filepath.Join(root, f)); err != nil && !errors.Is(err, os.ErrNotExist) {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// FileCNI is the pod network's CNI configuration, under the node's root,
// where the node image's containerd looks
// (images/node/files/etc/containerd/config.toml).
const FileCNI = "etc/cni/net.d/10-kiln.conflist"
