package e2e

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"kiln.dev/kiln/api/client"
	v1 "kiln.dev/kiln/api/v1"
	"kiln.dev/kiln/test/waitfor"
)

// hostNet is a bridge on this machine and, for each host, a network
// namespace joined to it: the test's stand-in for hosts on a data-center
// network. Hosts get 10.251.N.11, .12, ...; the bridge is 10.251.N.1.
type hostNet struct {
	t       testing.TB
	bridge  string
	gateway string
	hosts   []string // namespace names
	addrs   []string
}

// hostNets counts the host networks made, so that each gets its own subnet;
// they start from a random one, away from what a killed run may have left.
var (
	hostNets    atomic.Int32
	hostNetBase = func() int { var b [1]byte; _, _ = rand.Read(b[:]); return int(b[0]) }()
)

// newHostNet makes the bridge and n namespaces, or skips the test saying
// why when this machine cannot (not root, no ip netns). Everything is
// removed when the test ends.
func newHostNet(t testing.TB, n int) *hostNet {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("edge hosts are network namespaces, which need root: SKIPPED")
	}
	var id [2]byte
	if _, err := rand.Read(id[:]); err != nil {
		t.Fatal(err)
	}
	tag := hex.EncodeToString(id[:])
	// Each host network of this run a /24 of its own (tests run in parallel).
	subnet := fmt.Sprintf("10.251.%d", 1+(hostNetBase+int(hostNets.Add(1)))%250)
	h := &hostNet{t: t, bridge: "kbr" + tag, gateway: subnet + ".1"}
	if err := ip("link", "add", h.bridge, "type", "bridge"); err != nil {
		t.Skipf("cannot make a bridge for edge hosts (%v): SKIPPED", err)
	}
	t.Cleanup(func() { _ = ip("link", "del", h.bridge) })
	h.must(ip("addr", "add", h.gateway+"/24", "dev", h.bridge))
	h.must(ip("link", "set", h.bridge, "up"))
	// Docker makes FORWARD drop by default, and bridged frames pass through
	// it: let the hosts talk to each other.
	rule := []string{"FORWARD", "-i", h.bridge, "-o", h.bridge, "-j", "ACCEPT"}
	if err := run("iptables", append([]string{"-I"}, rule...)...); err == nil {
		t.Cleanup(func() { _ = run("iptables", append([]string{"-D"}, rule...)...) })
	}
	for i := range n {
		ns := fmt.Sprintf("kh%s%d", tag, i+1)
		addr := fmt.Sprintf("%s.%d", subnet, 11+i)
		h.must(ip("netns", "add", ns))
		t.Cleanup(func() { _ = ip("netns", "del", ns) })
		h.must(ip("link", "add", ns, "type", "veth", "peer", "name", "eth0", "netns", ns))
		h.must(ip("link", "set", ns, "master", h.bridge, "up"))
		h.must(ip("-n", ns, "addr", "add", addr+"/24", "dev", "eth0"))
		h.must(ip("-n", ns, "link", "set", "eth0", "up"))
		h.must(ip("-n", ns, "link", "set", "lo", "up"))
		h.must(ip("-n", ns, "route", "add", "default", "via", h.gateway))
		h.hosts = append(h.hosts, ns)
		h.addrs = append(h.addrs, addr)
	}
	return h
}

func (h *hostNet) must(err error) {
	h.t.Helper()
	if err != nil {
		h.t.Fatal(err)
	}
}

func ip(args ...string) error { return run("ip", args...) }

func run(name string, args ...string) error {
	out, err := exec.Command(name, args...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("%s %s: %w: %s", name, strings.Join(args, " "), err, out)
	}
	return nil
}

// startHost runs command (the installer's, as printed) on host i: in its
// network namespace, with its own host name, in its own copy of the
// installer directory. The process is killed when the test ends.
func (h *hostNet) startHost(installer, dir string, i int, command string) *exec.Cmd {
	h.t.Helper()
	h.must(run("cp", "-a", installer, dir))
	hostname := fmt.Sprintf("host%d", i+1)
	cmd := exec.Command("ip", "netns", "exec", h.hosts[i], "unshare", "--uts", "sh", "-c",
		"hostname "+hostname+" && exec "+command)
	cmd.Dir = dir
	logf, err := os.Create(filepath.Join(dir, "agent.log"))
	h.must(err)
	cmd.Stdout, cmd.Stderr = logf, logf
	h.must(cmd.Start())
	h.t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_, _ = cmd.Process.Wait()
		logf.Close()
	})
	return cmd
}

// The bring-your-own-host flow end to end: two hosts, each a network
// namespace that runs the installer's command exactly as kiln printed it;
// manual approval; roles; provision; kubectl sees both nodes Ready; reset;
// the hosts join again; provision again.
func TestEdgeHostsJoinProvisionResetAndJoinAgain(t *testing.T) {
	t.Parallel()
	if skipWhy != "" {
		t.Skip(skipWhy)
	}
	hn := newHostNet(t, 2)
	e := start(t, "kilnd", "--agent-listen", hn.gateway+":0")
	ctx := t.Context()

	e.create(&v1.Cluster{Name: "edge1", Spec: v1.ClusterSpec{
		Provider: "edge", NodeApproval: "manual",
		ControlPlane: v1.ControlPlane{Size: 1, Dedicated: true},
		Labels:       map[string]string{"kiln.dev/site": "rack-7"},
	}})
	installer := filepath.Join(e.data, "hosts", "installer")
	command := e.kiln("cluster", "installer", "edge1", "-d", installer)
	command = strings.TrimSpace(command)
	if !strings.HasPrefix(command, "./kiln-agent run ") {
		t.Fatalf("installer printed %q", command)
	}

	for round := 1; round <= 2; round++ {
		t.Logf("round %d: hosts join", round)
		for i := range hn.hosts {
			hn.startHost(installer, filepath.Join(e.data, "hosts", fmt.Sprintf("round%d-host%d", round, i+1)), i, command)
		}
		nodes := e.waitNodes("edge1", 2, func(n v1.Node) bool { return n.State == v1.NodeDiscovered })
		if !slices.Equal(names(nodes), []string{"edge1-host1", "edge1-host2"}) {
			t.Fatalf("nodes %v, want edge1-host1 and edge1-host2", names(nodes))
		}
		_, _, err := e.c.ProvisionCluster(ctx, "default", "edge1")
		if ae := (*client.APIError)(nil); !errors.As(err, &ae) || ae.StatusCode != http.StatusConflict || ae.Err.Code != v1.CodeNodeCountMismatch {
			t.Fatalf("provision before the hosts are configured: %v, want a NodeCountMismatch", err)
		}
		for i, n := range nodes {
			if n.Address != hn.addrs[i] {
				t.Errorf("node %s has address %s, want its namespace's %s", n.Name, n.Address, hn.addrs[i])
			}
			if _, err := e.c.ApproveNode(ctx, "default", "edge1", n.Name); err != nil {
				t.Fatal(err)
			}
			role := v1.RoleWorker
			if i == 0 {
				role = v1.RoleControlPlane
			}
			if _, err := e.c.ConfigureNode(ctx, "default", "edge1", n.Name, v1.NodeConfig{Role: role, Interface: "eth0"}); err != nil {
				t.Fatal(err)
			}
		}
		_, opID, err := e.c.ProvisionCluster(ctx, "default", "edge1")
		if err != nil {
			t.Fatal(err)
		}
		e.wait("edge1", opID)
		out, err := e.kubectl("edge1", "get", "nodes", "-o", "jsonpath={range .items[*]}{.metadata.name}={.status.conditions[?(@.type==\"Ready\")].status} {end}")
		if err != nil {
			t.Fatal(err)
		}
		if got := strings.TrimSpace(out); got != "edge1-host1=True edge1-host2=True" {
			t.Fatalf("kubectl get nodes: %q, want both Ready", got)
		}
		// The cluster's labels and each host's role are on its node.
		for selector, want := range map[string]string{
			"kiln.dev/site=rack-7,node-role.kubernetes.io/control-plane": "edge1-host1",
			"kiln.dev/site=rack-7,node-role.kubernetes.io/worker":        "edge1-host2",
		} {
			out, err := e.kubectl("edge1", "get", "nodes", "-l", selector, "-o", "jsonpath={.items[*].metadata.name}")
			if err != nil {
				t.Fatal(err)
			}
			if got := strings.TrimSpace(out); got != want {
				t.Errorf("nodes with %s: %q, want %s", selector, got, want)
			}
		}

		t.Logf("round %d: reset", round)
		_, opID, err = e.c.ResetCluster(ctx, "default", "edge1")
		if err != nil {
			t.Fatal(err)
		}
		op := e.wait("edge1", opID)
		if s := op.Properties.Steps; len(s) != 2 || s[0].State != v1.StepSucceeded || s[1].State != v1.StepSucceeded {
			t.Errorf("reset steps: %+v", s)
		}
		if nodes, _ := e.c.ListNodes(ctx, "default", "edge1"); len(nodes) != 0 {
			t.Errorf("nodes after reset: %v", names(nodes))
		}
		if cl, err := e.c.GetCluster(ctx, "default", "edge1"); err != nil || cl.Status.ProvisioningState != v1.StateSucceeded {
			t.Fatalf("cluster after reset: %+v %v", cl, err)
		}
	}
}

// kiln runs the CLI logged in to this kilnd and returns its stdout.
func (e *env) kiln(args ...string) string {
	e.t.Helper()
	stdout, stderr, err := e.kilnErr(args...)
	if err != nil {
		e.t.Fatalf("kiln %s: %v: %s", strings.Join(args, " "), err, stderr)
	}
	return stdout
}

// kilnErr runs the CLI logged in to this kilnd and returns its stdout and
// stderr, and an error when it fails: for what is to be refused.
func (e *env) kilnErr(args ...string) (stdout, stderr string, err error) {
	e.t.Helper()
	config := filepath.Join(e.data, "kiln-config")
	env := append(os.Environ(), "XDG_CONFIG_HOME="+config)
	if _, err := os.Stat(config); err != nil {
		login := exec.Command(filepath.Join(binDir, "kiln"), "login", "--server", e.k.URL(),
			"--token-file", filepath.Join(e.data, "admin.token"), "--ca-file", filepath.Join(e.data, "tls", "ca.crt"))
		login.Env = env
		if out, err := login.CombinedOutput(); err != nil {
			e.t.Fatalf("kiln login: %v: %s", err, out)
		}
	}
	cmd := exec.Command(filepath.Join(binDir, "kiln"), args...)
	cmd.Env = env
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err = cmd.Run()
	return out.String(), errOut.String(), err
}

// waitNodes waits until the cluster has n nodes that all satisfy ok and
// returns them by name.
func (e *env) waitNodes(cluster string, n int, ok func(v1.Node) bool) []v1.Node {
	e.t.Helper()
	var nodes []v1.Node
	done := false
	defer func() { // when the wait fails
		if !done {
			e.dump(cluster, nil)
		}
	}()
	waitfor.Cond(e.t, fmt.Sprintf("%d nodes of %s", n, cluster), 2*time.Minute, func() (bool, error) {
		var err error
		nodes, err = e.c.ListNodes(e.t.Context(), "default", cluster)
		if err == nil && len(nodes) == n && !slices.ContainsFunc(nodes, func(x v1.Node) bool { return !ok(x) }) {
			return true, nil
		}
		var have []string
		for _, x := range nodes {
			have = append(have, x.Name+" "+x.State)
		}
		return false, waitfor.NotYet(fmt.Errorf("have %v (%v)", have, err))
	})
	done = true
	slices.SortFunc(nodes, func(a, b v1.Node) int { return strings.Compare(a.Name, b.Name) })
	return nodes
}

func names(nodes []v1.Node) []string {
	out := make([]string, len(nodes))
	for i, n := range nodes {
		out[i] = n.Name
	}
	return out
}
