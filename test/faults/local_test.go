package faults

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"kiln.dev/kiln/api/client"
	v1 "kiln.dev/kiln/api/v1"
	"kiln.dev/kiln/test/kilndtest"
)

// localClusters is how many local-provider clusters (1 control plane and 1
// worker, real Kubernetes from kiln-kube) the SQLite half makes under its
// kills, when there is a kiln-kube.
const localClusters = 1

// localPrefix starts the names of the load's local clusters.
const localPrefix = "local-"

func isLocal(cluster string) bool { return strings.HasPrefix(cluster, localPrefix) }

var repoRoot = func() string { _, f, _, _ := runtime.Caller(0); return filepath.Join(filepath.Dir(f), "..", "..") }()

// localKube is the kiln-kube the local clusters run (KILN_KUBE_BIN, default
// the repository's bin/kiln-kube), or why there are none.
func localKube(replicas int) (kube, skip string) {
	if replicas > 1 {
		return "", "the PostgreSQL half's 3 replicas cannot share local machines: a local cluster's load balancer " +
			"and agent gateway live in one kilnd process (docs/faults.md, Local clusters)"
	}
	kube = os.Getenv("KILN_KUBE_BIN")
	if kube == "" {
		kube = filepath.Join(repoRoot, "bin", "kiln-kube")
	}
	if _, err := os.Stat(kube); err != nil {
		return "", fmt.Sprintf("no kiln-kube at %s (run make kube, or set KILN_KUBE_BIN)", kube)
	}
	return kube, ""
}

var buildAgent = sync.OnceValue(func() error {
	// kilnd runs the kiln-agent next to it for local machines.
	return kilndtest.Build(filepath.Dir(kilndBin), "kiln.dev/kiln/cmd/kiln-agent")
})

// setupLocal turns the local provider on when the run can have local
// clusters: kiln-agent next to kilnd, kiln-kube, and one agent address for
// every process of the replica, so that machines find the restarted kilnd
// (as test/e2e/reconnect_test.go does). It returns whether it did.
func (s *suite) setupLocal(replicas int) bool {
	t := s.t
	kube, skip := localKube(replicas)
	if skip != "" {
		t.Logf("local clusters SKIPPED: %s", skip)
		return false
	}
	if err := buildAgent(); err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	ln.Close()
	s.args = append(s.args, "--local", "--kube-binary", kube, "--agent-listen", fmt.Sprintf("127.0.0.1:%d", port))
	// Machines outlive kilnd by design; the suite's must not outlive the
	// suite. Registered before any kilnd, so it runs after they are killed.
	machines := filepath.Join(s.data, "machines")
	t.Cleanup(func() {
		for _, p := range processesUnder(machines) {
			if err := syscall.Kill(p.pid, syscall.SIGKILL); err == nil {
				t.Logf("killed a process the suite left: %d %s", p.pid, p.cmd)
			}
		}
	})
	t.Logf("local clusters: %d (1 control plane, 1 worker) with kiln-kube %s, agents on 127.0.0.1:%d", localClusters, kube, port)
	return true
}

// localLoad creates the local clusters one after the other, under the
// kills, checks their nodes Ready, and deletes them once the fault loop
// stops, checking that no process of theirs is left.
func (s *suite) localLoad(stop <-chan struct{}) {
	var made []string
	for n := range localClusters {
		name := fmt.Sprintf("%s%d", localPrefix, n)
		s.mu.Lock()
		s.localBusy = name
		s.mu.Unlock()
		ok := s.mutate(name, v1.KindCreate, 1, "", "")
		s.mu.Lock()
		s.localBusy = ""
		s.mu.Unlock()
		if !ok {
			return
		}
		made = append(made, name)
		if op := s.waitOp(s.lastOp(name)); op != nil {
			s.t.Logf("local cluster %s: create %s in %s; %s", name, op.Status, op.EndTime.Sub(op.StartTime).Round(time.Millisecond), s.faultsDuring(op))
		}
		s.checkLocalNodes(name)
	}
	<-stop
	for _, name := range made {
		if s.mutate(name, v1.KindDelete, 0, "", s.lastOp(name)) {
			s.checkLocalGone(name)
		}
	}
}

// maxClaims is how many claims of a local operation's step the fault loop
// lets end without the step finishing before it holds its kills: the runner
// fails an operation after 5 claims without progress
// (DequeueLimitExceeded), and a local install step (seconds, tens on a busy
// machine) outlasts the loop's 1.5-3 s between kills, so the suite alone
// would fail it. Attempts also count retries within one claim, so this
// holds early rather than late.
const maxClaims = 2

// holdKills says whether the fault loop must not stop the replica now: a
// local create is running and its step in flight has had maxClaims
// attempts already, or the operation cannot be read. While a local create
// runs, restarts are not armed (a fault point could kill it at any moment).
func (s *suite) holdKills() (bool, string) {
	s.mu.Lock()
	name := s.localBusy
	s.mu.Unlock()
	if name == "" {
		return false, ""
	}
	id := s.lastOp(name)
	if id == "" {
		return true, name + ": its create is not accepted yet"
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	op, err := s.client().GetOperation(ctx, id)
	if err != nil {
		return true, fmt.Sprintf("%s: its operation cannot be read: %v", name, err)
	}
	if v1.Terminal(op.Status) {
		return false, ""
	}
	for _, st := range op.Properties.Steps {
		if st.State == v1.StepRunning && st.Attempts >= maxClaims {
			return true, fmt.Sprintf("%s: step %s at attempt %d", name, st.Name, st.Attempts)
		}
	}
	return false, ""
}

// checkLocalNodes checks, once the create ended, that the cluster has its
// 2 nodes, both READY.
func (s *suite) checkLocalNodes(name string) {
	var nodes []v1.Node
	err := s.retry("list nodes", func(ctx context.Context, c *client.Client) error {
		var err error
		nodes, err = c.ListNodes(ctx, project, name)
		return err
	})
	if err != nil {
		s.errorf("local cluster %s: %v", name, err)
		return
	}
	var states []string
	ready := 0
	for _, n := range nodes {
		states = append(states, n.Name+"="+n.State)
		if n.State == v1.NodeReady {
			ready++
		}
	}
	if len(nodes) != 2 || ready != 2 {
		s.errorf("local cluster %s: nodes %v; want 2, both %s", name, states, v1.NodeReady)
		return
	}
	s.mu.Lock()
	s.localMade++
	s.mu.Unlock()
	s.t.Logf("local cluster %s: nodes %v", name, states)
}

// checkLocalGone checks, once the delete ended, that no process of the
// cluster's machines is left.
func (s *suite) checkLocalGone(name string) {
	dir := filepath.Join(s.data, "machines", project, name)
	if left := processesUnder(dir); len(left) > 0 {
		var ps []string
		for _, p := range left {
			ps = append(ps, fmt.Sprintf("%d %s", p.pid, p.cmd))
		}
		s.errorf("local cluster %s: deleted, but its processes are left: %s", name, strings.Join(ps, "; "))
		return
	}
	s.t.Logf("local cluster %s: deleted, no process of its machines left", name)
}

type proc struct {
	pid int
	cmd string
}

// processesUnder lists the processes whose command line names dir (a
// directory of this suite's, so only processes it started).
func processesUnder(dir string) []proc {
	var found []proc
	entries, _ := os.ReadDir("/proc")
	for _, ent := range entries {
		pid, err := strconv.Atoi(ent.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", ent.Name(), "cmdline"))
		if err != nil || !bytes.Contains(b, []byte(dir)) {
			continue
		}
		found = append(found, proc{pid: pid, cmd: strings.ReplaceAll(string(bytes.TrimRight(b, "\x00")), "\x00", " ")})
	}
	return found
}
