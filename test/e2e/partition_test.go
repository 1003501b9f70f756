package e2e

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	v1 "kiln.dev/kiln/api/v1"
	"kiln.dev/kiln/internal/agent/journal"
	"kiln.dev/kiln/internal/proc"
	"kiln.dev/kiln/test/waitfor"
)

// cut takes host i off the network, as a pulled cable would: the host side
// of its link goes down, so nothing reaches it or leaves it, from kilnd or
// from the other hosts, and no side gets an error. Its processes run on.
func (h *hostNet) cut(i int) time.Time {
	h.t.Helper()
	h.must(ip("link", "set", h.hosts[i], "down"))
	return time.Now()
}

// heal puts host i back on the network.
func (h *hostNet) heal(i int) time.Time {
	h.t.Helper()
	h.must(ip("link", "set", h.hosts[i], "up"))
	return time.Now()
}

// TestAgentPartition: an edge cluster of two hosts (network namespaces), a
// control plane and a worker. The worker's link is cut twice, each time for
// longer than kilnd's heartbeat timeout (3 intervals of 5 s):
//
//  1. while its install instruction runs: the agent finds the session dead
//     by itself, tries again with backoff while the link is down, connects
//     once it is back, and reports the result; the operation succeeds, the
//     worker got one install instruction and its agent started it once;
//  2. once the cluster is Ready: Kiln's node goes NOT_READY and Kubernetes'
//     NotReady while the worker's kubelet runs on in its namespace; after
//     the heal both are Ready again with the same kubelet, and the worker
//     got no new instruction and ran nothing.
func TestAgentPartition(t *testing.T) {
	t.Parallel()
	if skipWhy != "" {
		t.Skip(skipWhy)
	}
	hn := newHostNet(t, 2)
	e := start(t, "kilnd", "--agent-listen", hn.gateway+":0")
	ctx := t.Context()
	const cluster = "part"
	e.create(&v1.Cluster{Name: cluster, Spec: v1.ClusterSpec{
		Provider: "edge", NodeApproval: "manual",
		ControlPlane: v1.ControlPlane{Size: 1, Dedicated: true},
	}})
	installer := filepath.Join(e.data, "hosts", "installer")
	command := strings.TrimSpace(e.kiln("cluster", "installer", cluster, "-d", installer))
	var dirs []string
	for i := range hn.hosts {
		dir := filepath.Join(e.data, "hosts", fmt.Sprintf("host%d", i+1))
		hn.startHost(installer, dir, i, command)
		dirs = append(dirs, dir)
	}
	nodes := e.waitNodes(cluster, 2, func(n v1.Node) bool { return n.State == v1.NodeDiscovered })
	for i, n := range nodes {
		if _, err := e.c.ApproveNode(ctx, "default", cluster, n.Name); err != nil {
			t.Fatal(err)
		}
		role := v1.RoleWorker
		if i == 0 {
			role = v1.RoleControlPlane
		}
		if _, err := e.c.ConfigureNode(ctx, "default", cluster, n.Name, v1.NodeConfig{Role: role, Interface: "eth0"}); err != nil {
			t.Fatal(err)
		}
	}
	const w = 1 // the worker host
	worker := nodes[w].Name
	agentDir, agentLog := filepath.Join(dirs[w], "agent"), filepath.Join(dirs[w], "agent.log")
	_, opID, err := e.c.ProvisionCluster(ctx, "default", cluster)
	if err != nil {
		t.Fatal(err)
	}

	t.Log("1: the worker's link is cut while it installs")
	var install journal.Entry
	waitfor.Cond(t, "the worker to start its install", opWait, func() (bool, error) {
		for _, en := range journalEntries(t, agentDir) {
			if en.Kind == v1.InstructionInstall {
				install = en
				return true, nil
			}
		}
		return false, nil
	})
	cutAt := hn.cut(w)
	for _, en := range journalEntries(t, agentDir) {
		if en.ID == install.ID && en.Result != nil {
			t.Fatalf("the worker's install %s had finished when its link went down (%s): the cut did not fall in the install", en.ID, en.Result.State)
		}
	}
	notReadyAt := e.waitNodeState(cluster, worker, v1.NodeNotReady)
	waitfor.Cond(t, "the worker's agent to fail to connect twice", 2*time.Minute, func() (bool, error) {
		return len(reconnectAfter(t, agentLog, cutAt).failed) >= 2, nil
	})
	healAt := hn.heal(w)
	op := e.wait(cluster, opID)
	if op.Status != v1.OpSucceeded {
		t.Fatalf("provision: %s", op.Status)
	}
	waitfor.Cond(t, "the worker's agent to connect again", 2*time.Minute, func() (bool, error) {
		return !reconnectAfter(t, agentLog, cutAt).back.IsZero(), nil
	})
	rc := reconnectAfter(t, agentLog, cutAt)
	rc.check(t, healAt)
	t.Logf("cut during the install: %s; Kiln NOT_READY after %s; the agent found its session dead after %s (%q), "+
		"%d failed attempts (the first: %q; waits %s), connected %s after the heal",
		healAt.Sub(cutAt).Round(time.Millisecond), notReadyAt.Sub(cutAt).Round(time.Millisecond),
		rc.lost.Sub(cutAt).Round(time.Millisecond), rc.why, len(rc.failed), rc.failWhy, strings.Join(rc.failed, " "),
		rc.back.Sub(healAt).Round(time.Millisecond))
	e.installedOnce(cluster, nodes[0].Name, filepath.Join(dirs[0], "agent"))
	ins := e.installedOnce(cluster, worker, agentDir)
	if ins == nil || ins.ID != install.ID {
		t.Fatalf("the worker's instruction is %+v, want %s, the one that ran across the cut", ins, install.ID)
	}
	e.waitNodeState(cluster, worker, v1.NodeReady)
	e.waitKubeReady(cluster, worker, true)

	t.Log("2: the worker's link is cut once the cluster is Ready")
	waitfor.Cond(t, "the worker's agent to record the acknowledgement of its install", time.Minute, func() (bool, error) {
		en := journalEntries(t, agentDir)
		return len(en) == 1 && en[0].Acked != nil, nil
	})
	instructionsBefore, journalBefore := e.instructions(cluster, worker), journalEntries(t, agentDir)
	kubelet := readPIDFile(t, filepath.Join(dirs[w], "root", "run", "kubelet.pid"))
	stillRuns := func(when string) {
		t.Helper()
		if !proc.Alive(kubelet.PID, kubelet.Start) {
			t.Fatalf("%s: the worker's kubelet (pid %d) is gone", when, kubelet.PID)
		}
		if !inNetns(kubelet.PID, hn.hosts[w]) {
			t.Fatalf("%s: pid %d is not in the worker's network namespace %s", when, kubelet.PID, hn.hosts[w])
		}
	}
	stillRuns("before the cut")

	cutAt = hn.cut(w)
	notReadyAt = e.waitNodeState(cluster, worker, v1.NodeNotReady)
	stillRuns("Kiln's node NOT_READY")
	kubeNotReadyAt := e.waitKubeReady(cluster, worker, false)
	stillRuns("Kubernetes' node NotReady")
	if n, err := e.c.GetNode(ctx, "default", cluster, worker); err != nil || n.State != v1.NodeNotReady {
		t.Fatalf("Kiln's node during the cut, once Kubernetes' is NotReady: %+v %v, want NOT_READY", n, err)
	}
	healAt = hn.heal(w)
	readyAt := e.waitNodeState(cluster, worker, v1.NodeReady)
	kubeReadyAt := e.waitKubeReady(cluster, worker, true)
	stillRuns("after the heal")
	waitfor.Cond(t, "the worker's agent to connect again", 2*time.Minute, func() (bool, error) {
		return !reconnectAfter(t, agentLog, cutAt).back.IsZero(), nil
	})
	rc = reconnectAfter(t, agentLog, cutAt)
	rc.check(t, healAt)
	if !readyAt.After(rc.back) {
		t.Errorf("Kiln showed the node READY (seen at %s) before its agent connected again (%s): stale heartbeats revived it",
			readyAt.UTC().Format(time.RFC3339Nano), rc.back.UTC().Format(time.RFC3339Nano))
	}
	t.Logf("cut once Ready: %s; Kiln NOT_READY after %s, Kubernetes NotReady after %s; the agent found its session dead after %s, "+
		"%d failed attempts (waits %s), connected %s after the heal; Kiln READY %s and Kubernetes Ready %s after the heal",
		healAt.Sub(cutAt).Round(time.Millisecond), notReadyAt.Sub(cutAt).Round(time.Millisecond),
		kubeNotReadyAt.Sub(cutAt).Round(time.Millisecond), rc.lost.Sub(cutAt).Round(time.Millisecond),
		len(rc.failed), strings.Join(rc.failed, " "), rc.back.Sub(healAt).Round(time.Millisecond),
		readyAt.Sub(healAt).Round(time.Millisecond), kubeReadyAt.Sub(healAt).Round(time.Millisecond))
	if d := cmp.Diff(instructionsBefore, e.instructions(cluster, worker)); d != "" {
		t.Errorf("the worker's instructions changed across the cut (-before +after):\n%s", d)
	}
	if d := cmp.Diff(journalBefore, journalEntries(t, agentDir)); d != "" {
		t.Errorf("the worker's journal changed across the cut (-before +after):\n%s", d)
	}
}

// waitNodeState waits until Kiln says node is in state, and returns when
// it saw it.
func (e *env) waitNodeState(cluster, node, state string) time.Time {
	e.t.Helper()
	return e.nodeWhen(cluster, node, state).seen
}

// seenNode is a node as Kiln showed it, and when.
type seenNode struct {
	*v1.Node
	seen time.Time
}

// nodeWhen waits until Kiln says node is in state, and returns it.
func (e *env) nodeWhen(cluster, node, state string) seenNode {
	e.t.Helper()
	var n *v1.Node
	waitfor.Cond(e.t, "node "+node+" "+state+" in Kiln", 3*time.Minute, func() (bool, error) {
		got, err := e.c.GetNode(e.t.Context(), "default", cluster, node)
		n = got
		return err == nil && got.State == state, nil
	})
	return seenNode{n, time.Now()}
}

// waitKubeReady waits until Kubernetes says node is Ready (or not), and
// returns when it saw it. Kubernetes marks a node whose kubelet went
// silent after its node-monitor grace period (50 s by default).
func (e *env) waitKubeReady(cluster, node string, ready bool) time.Time {
	e.t.Helper()
	waitfor.Cond(e.t, fmt.Sprintf("node %s Ready=%t in Kubernetes", node, ready), 4*time.Minute, func() (bool, error) {
		nodes, err := e.kubeNodesErr(cluster)
		if err != nil {
			return false, nil // the API server is reachable from here: kubectl answers again
		}
		n, ok := nodes[node]
		return ok && n.ready() == ready, nil
	})
	return time.Now()
}

// reconnect is what an agent's log says of one cut: when it found its
// session dead and why, the waits before the attempts to connect that
// failed, and when it connected again.
type reconnect struct {
	lost    time.Time
	why     string
	failed  []string // the wait the agent chose after each failed attempt
	failWhy string   // the first failed attempt's error
	back    time.Time
}

// reconnectAfter reads the agent's log (slog text) from since on.
func reconnectAfter(t testing.TB, path string, since time.Time) reconnect {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var rc reconnect
	for line := range strings.Lines(string(b)) {
		ts, rest, ok := strings.Cut(strings.TrimPrefix(line, "time="), " ")
		at, err := time.Parse(time.RFC3339Nano, ts)
		if !ok || err != nil || at.Before(since) {
			continue
		}
		switch msg := field(rest, "msg"); {
		case msg == "session lost: reconnecting" && rc.lost.IsZero():
			rc.lost, rc.why = at, field(rest, "err")
		case msg == "session lost: reconnecting" && rc.back.IsZero():
			rc.failed = append(rc.failed, field(rest, "in"))
			if rc.failWhy == "" {
				rc.failWhy = field(rest, "err")
			}
		case msg == "session established" && !rc.lost.IsZero() && rc.back.IsZero():
			rc.back = at
		}
	}
	return rc
}

// check says whether the agent reconnected as it should: it found the
// session dead during the cut, by itself; it tried again, and failed, while
// the link was down; it connected again after the heal.
func (rc reconnect) check(t testing.TB, healAt time.Time) {
	t.Helper()
	switch {
	case rc.lost.IsZero() || !rc.lost.Before(healAt):
		t.Errorf("the agent did not find its session dead during the cut (lost %v, heal %v)", rc.lost, healAt)
	case len(rc.failed) == 0:
		t.Errorf("the agent made no attempt to connect during the cut")
	case rc.back.Before(healAt):
		t.Errorf("the agent connected at %v, before the heal at %v", rc.back, healAt)
	}
}

// field is the value of key in a slog text line (quoted or not).
func field(line, key string) string {
	_, v, ok := strings.Cut(line, " "+key+"=")
	if !ok {
		_, v, ok = strings.Cut(line, key+"=")
		if !ok {
			return ""
		}
	}
	if q, err := strconv.QuotedPrefix(v); err == nil {
		if s, err := strconv.Unquote(q); err == nil {
			return s
		}
	}
	v, _, _ = strings.Cut(v, " ")
	return strings.TrimSpace(v)
}

// pidFile is what the local distribution records of a running component
// (internal/agent/distro/local: Root/run/<component>.pid).
type pidFile struct {
	PID   int    `json:"pid"`
	Start uint64 `json:"start"`
}

func readPIDFile(t testing.TB, path string) pidFile {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var pf pidFile
	if err := json.Unmarshal(b, &pf); err != nil || pf.PID <= 0 {
		t.Fatalf("%s: %q: %v", path, b, err)
	}
	return pf
}

// inNetns says whether process pid is in the named network namespace.
func inNetns(pid int, ns string) bool {
	var a, b syscall.Stat_t
	if syscall.Stat(fmt.Sprintf("/proc/%d/ns/net", pid), &a) != nil || syscall.Stat("/run/netns/"+ns, &b) != nil {
		return false
	}
	return a.Dev == b.Dev && a.Ino == b.Ino
}
