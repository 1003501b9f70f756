// Package e2e brings up real Kubernetes clusters with the local provider:
// kilnd, kiln-agent and kiln-kube as real processes on loopback, checked with
// kubectl. It needs bin/kiln-kube (make kube); without it every test that
// runs Kubernetes skips and says so. The tests of what comes before
// Kubernetes (bare hosts' prechecks) run without it.
package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"kiln.dev/kiln/api/client"
	v1 "kiln.dev/kiln/api/v1"
	"kiln.dev/kiln/internal/store"
	"kiln.dev/kiln/test/kilndtest"
)

var (
	binDir   string // kilnd and kiln-agent, built for this run
	kubeBin  string // kiln-kube
	skipWhy  string // why the tests cannot run, if they cannot
	opWait   = 10 * time.Minute
	repoRoot = func() string { _, f, _, _ := runtime.Caller(0); return filepath.Join(filepath.Dir(f), "..", "..") }()
)

// parallel is how many of the package's tests run at once unless go
// test's -parallel says: every test calls t.Parallel, since most of one is
// waiting on Kubernetes, machines and timeouts rather than using a core.
// Four at once took 18 minutes against 41 alone, but kept the 2 cores at a
// load of 14-21 and made tests that race a timeout of Kiln's lose it; three
// leave more room (docs/testing.md has the measurements).
const parallel = 3

func TestMain(m *testing.M) {
	flag.Parse()
	given := false
	flag.Visit(func(f *flag.Flag) { given = given || f.Name == "test.parallel" })
	if !given {
		_ = flag.Set("test.parallel", strconv.Itoa(parallel))
	}
	kubeBin = os.Getenv("KILN_KUBE_BIN")
	if kubeBin == "" {
		kubeBin = filepath.Join(repoRoot, "bin", "kiln-kube")
	}
	if _, err := os.Stat(kubeBin); err != nil {
		skipWhy = fmt.Sprintf("no kiln-kube at %s (run make kube, or set KILN_KUBE_BIN): real-Kubernetes tests SKIPPED", kubeBin)
	}
	dir, err := os.MkdirTemp("", "kiln-e2e-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	binDir = dir
	if err := kilndtest.Build(dir, "kiln.dev/kiln/cmd/kilnd", "kiln.dev/kiln/cmd/kiln-agent", "kiln.dev/kiln/cmd/kiln", "kiln.dev/kiln/test/cloud/aws/kiln-aws-local", "kiln.dev/kiln/test/cloud/azure/kiln-azure-local"); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	sweepLeftovers()
	code := m.Run()
	forgetOwned()
	os.RemoveAll(dir)
	os.Exit(code)
}

// env is one kilnd --dev with its client.
type env struct {
	t    testing.TB
	k    *kilndtest.Kilnd
	c    *client.Client
	data string
	st   store.Store // opened by (*env).store
	// pool is the loopback range the env's local machines take
	// (--local-address-pool), the same at each start of its kilnd.
	pool string
}

// pools counts the local address pools handed out: each env has a range
// of its own, 127.0.N.2-127.0.N.254, so kilnds of tests that run in
// parallel never give two machines one address.
var pools atomic.Int32

// newPool returns the next env's local address pool.
func newPool() string {
	n := 1 + (pools.Add(1)-1)%250
	return fmt.Sprintf("127.0.%d.2-127.0.%d.254", n, n)
}

// poolPrefix is what every address of the pool starts with ("127.0.N.").
func poolPrefix(pool string) string {
	first, _, _ := strings.Cut(pool, "-")
	return first[:strings.LastIndex(first, ".")+1]
}

func start(t testing.TB, name string, args ...string) *env {
	t.Helper()
	if skipWhy != "" {
		t.Skip(skipWhy)
	}
	return startWithoutKube(t, name, args...)
}

// startWithoutKube is start for a test that installs no Kubernetes with
// kiln-kube: it runs whether or not kiln-kube is built.
func startWithoutKube(t testing.TB, name string, args ...string) *env {
	t.Helper()
	data := t.TempDir()
	// Machines outlive kilnd by design; a test's must not outlive the test.
	// Registered first, so it runs after kilnd is killed.
	t.Cleanup(func() { killProcessesUnder(t, data) })
	t.Cleanup(func() { logMachineLogs(t, data) })
	e := &env{t: t, data: data, pool: newPool()}
	e.startKilnd(name, args...)
	return e
}

// startKilnd starts (or starts again) kilnd --dev on the env's data dir.
func (e *env) startKilnd(name string, args ...string) {
	e.t.Helper()
	flags := []string{"--dev", "--data-dir", e.data, "--local-address-pool", e.pool}
	if skipWhy == "" {
		flags = append(flags, "--kube-binary", kubeBin)
	}
	if repo := os.Getenv("KILN_NODE_IMAGE_REPO"); repo != "" {
		// A node image built under another repository (scripts/node-image.sh's
		// KILN_NODE_IMAGE_REPO), at every start of this kilnd.
		flags = append(flags, "--docker-node-image", repo)
	}
	k := kilndtest.Start(e.t, filepath.Join(binDir, "kilnd"), name, nil, append(flags, args...)...)
	e.k, e.c = k, k.Client(kilndtest.Token(e.t, e.data))
	e.t.Cleanup(func() {
		if e.t.Failed() {
			e.t.Logf("%s log:\n%s", name, tail(k.LogText(), 80))
		}
	})
}

func localCluster(name string, cp int, dedicated bool, workers int) *v1.Cluster {
	cl := &v1.Cluster{Name: name, Spec: v1.ClusterSpec{
		Provider:     "local",
		ControlPlane: v1.ControlPlane{Size: cp, Dedicated: dedicated},
	}}
	if workers > 0 {
		cl.Spec.WorkerPools = []v1.WorkerPool{{Name: "default", Size: workers}}
	}
	return cl
}

// create creates the cluster and waits for its operation, failing the test
// with the operation's steps and the nodes' logs if it does not succeed.
func (e *env) create(cl *v1.Cluster) *v1.Operation {
	e.t.Helper()
	_, opID, err := e.c.CreateCluster(e.t.Context(), "default", cl)
	if err != nil {
		e.t.Fatal(err)
	}
	return e.wait(cl.Name, opID)
}

func (e *env) wait(cluster, opID string) *v1.Operation {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(e.t.Context(), opWait)
	defer cancel()
	op, err := e.c.WaitOperation(ctx, opID, nil)
	if err != nil || op.Status != v1.OpSucceeded {
		if op == nil {
			op, _ = e.c.GetOperation(e.t.Context(), opID)
		}
		e.dump(cluster, op)
		e.t.Fatalf("operation %s: %v", opID, err)
	}
	return op
}

// dump logs what a person would look at when a cluster does not come up.
func (e *env) dump(cluster string, op *v1.Operation) {
	e.t.Helper()
	if op != nil {
		b, _ := json.MarshalIndent(op, "", "  ")
		e.t.Logf("operation:\n%s", b)
	}
	nodes, _ := e.c.ListNodes(e.t.Context(), "default", cluster)
	for _, n := range nodes {
		e.t.Logf("node %s: %s %s", n.Name, n.State, n.Message)
		lines, _, _ := e.c.NodeLogs(e.t.Context(), "default", cluster, n.Name, "")
		var b strings.Builder
		for _, l := range lines[max(0, len(lines)-30):] {
			fmt.Fprintf(&b, "  %s %s\n", l.Stream, l.Line)
		}
		e.t.Logf("last log lines of %s:\n%s", n.Name, b.String())
	}
}

// kubectl runs kiln-kube kubectl with a break-glass admin kubeconfig of the
// cluster (a day's, kept for the env).
// cluster is a cluster of project default, or PROJECT/CLUSTER.
func (e *env) kubectl(cluster string, args ...string) (string, error) {
	e.t.Helper()
	project := "default"
	if p, c, ok := strings.Cut(cluster, "/"); ok {
		project, cluster = p, c
	}
	cfg := filepath.Join(e.data, project+"-"+cluster+".kubeconfig")
	if _, err := os.Stat(cfg); err != nil {
		b, err := e.c.AdminKubeconfig(e.t.Context(), project, cluster, "24h")
		if err != nil {
			e.t.Fatalf("kubeconfig: %v", err)
		}
		if err := os.WriteFile(cfg, b, 0o600); err != nil {
			e.t.Fatal(err)
		}
	}
	cmd := exec.CommandContext(e.t.Context(), kubeBin, append([]string{"kubectl", "--kubeconfig", cfg, "--request-timeout", "20s"}, args...)...)
	var out, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &stderr
	err := cmd.Run()
	if err != nil {
		err = fmt.Errorf("kubectl %s: %w: %s", strings.Join(args, " "), err, stderr.String())
	}
	return out.String(), err
}

func (e *env) mustKubectl(cluster string, args ...string) string {
	e.t.Helper()
	out, err := e.kubectl(cluster, args...)
	if err != nil {
		e.t.Fatal(err)
	}
	return out
}

// kubeNode is what the tests read of a Kubernetes Node.
type kubeNode struct {
	Metadata struct {
		Name   string            `json:"name"`
		Labels map[string]string `json:"labels"`
	} `json:"metadata"`
	Spec struct {
		Taints        []taint `json:"taints"`
		Unschedulable bool    `json:"unschedulable"`
	} `json:"spec"`
	Status struct {
		Conditions []struct {
			Type   string `json:"type"`
			Status string `json:"status"`
		} `json:"conditions"`
		NodeInfo struct {
			KubeletVersion string `json:"kubeletVersion"`
		} `json:"nodeInfo"`
	} `json:"status"`
}

type taint struct {
	Key    string `json:"key"`
	Effect string `json:"effect"`
}

func (n kubeNode) ready() bool {
	for _, c := range n.Status.Conditions {
		if c.Type == "Ready" {
			return c.Status == "True"
		}
	}
	return false
}

func (e *env) kubeNodes(cluster string) map[string]kubeNode {
	e.t.Helper()
	nodes, err := e.kubeNodesErr(cluster)
	if err != nil {
		e.t.Fatal(err)
	}
	return nodes
}

// kubeNodesErr is kubeNodes for a goroutine other than the test's.
func (e *env) kubeNodesErr(cluster string) (map[string]kubeNode, error) {
	out, err := e.kubectl(cluster, "get", "nodes", "-o", "json")
	if err != nil {
		return nil, err
	}
	var list struct{ Items []kubeNode }
	if err := json.Unmarshal([]byte(out), &list); err != nil {
		return nil, err
	}
	nodes := map[string]kubeNode{}
	for _, n := range list.Items {
		nodes[n.Metadata.Name] = n
	}
	return nodes, nil
}

// serverVersion is the version the cluster's API server reports.
func (e *env) serverVersion(cluster string) string {
	e.t.Helper()
	var ver struct {
		ServerVersion struct {
			GitVersion string `json:"gitVersion"`
		} `json:"serverVersion"`
	}
	if err := json.Unmarshal([]byte(e.mustKubectl(cluster, "version", "-o", "json")), &ver); err != nil {
		e.t.Fatal(err)
	}
	return ver.ServerVersion.GitVersion
}

// processesUnder lists the processes whose command line mentions dir.
func processesUnder(dir string) []string { return kilndtest.ProcessesUnder(dir) }

// logMachineLogs logs the end of each local machine's agent.log when the
// test failed: what a node did is often why (kilnd's own log is logged
// beside it).
func logMachineLogs(t testing.TB, data string) {
	if !t.Failed() {
		return
	}
	logs, _ := filepath.Glob(filepath.Join(data, "machines", "*", "*", "*", "agent.log"))
	for _, f := range logs {
		b, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		rel, _ := filepath.Rel(data, f)
		t.Logf("%s, its end:\n%s", rel, tail(strings.TrimSpace(string(b)), 15))
	}
}

// killProcessesUnder SIGKILLs every process whose command line mentions
// dir and logs them in one message, each by its pid, program and first
// three arguments (a whole command line of a Kubernetes component is a
// thousand characters): a report's short form of a failure keeps the
// test's last messages, which should be why it failed, not its cleanup.
func killProcessesUnder(t testing.TB, dir string) {
	var killed []string
	for _, p := range kilndtest.KillProcessesUnder(dir) {
		pid, cmd, _ := strings.Cut(p, ":")
		f := strings.Fields(cmd)
		if len(f) > 0 {
			f[0] = filepath.Base(f[0])
		}
		killed = append(killed, pid+" "+strings.Join(f[:min(4, len(f))], " "))
	}
	if len(killed) > 0 {
		t.Logf("killed %d processes left behind:\n%s", len(killed), strings.Join(killed, "\n"))
	}
}

// apiError is err's API answer, or an empty one when err is not an
// answer of the API.
func apiError(err error) *client.APIError {
	var ae *client.APIError
	if errors.As(err, &ae) {
		return ae
	}
	return &client.APIError{}
}

// isAPIError says whether err is the API's answer with that status, error
// code and target.
func isAPIError(err error, status int, code, target string) bool {
	ae := apiError(err)
	return ae.StatusCode == status && ae.Err.Code == code && ae.Err.Target == target
}

func tail(s string, n int) string {
	lines := strings.Split(s, "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}

// workerSample is what sampleWorkers saw.
type workerSample struct {
	samples, maxWorkers, minReady int
}

// sampleWorkers polls kubectl until the returned stop is called, counting
// the nodes of pool (labelled so, or not labelled yet: a worker that just
// joined) and those of them Ready and schedulable; stop returns the
// extremes seen.
func (e *env) sampleWorkers(cluster, pool string) (stop func() workerSample) {
	done := make(chan struct{})
	var (
		mu sync.Mutex
		ws = workerSample{minReady: 1 << 30}
		wg sync.WaitGroup
	)
	wg.Go(func() {
		for {
			select {
			case <-done:
				return
			case <-time.After(50 * time.Millisecond):
			}
			nodes, err := e.kubeNodesErr(cluster)
			if err != nil {
				continue
			}
			workers, ready := 0, 0
			for _, n := range nodes {
				p, labelled := n.Metadata.Labels[v1.LabelPool]
				_, cp := n.Metadata.Labels["node-role.kubernetes.io/"+v1.RoleControlPlane]
				if p == pool || (!labelled && !cp) {
					workers++
					if n.ready() && !n.Spec.Unschedulable {
						ready++
					}
				}
			}
			mu.Lock()
			ws.samples, ws.maxWorkers, ws.minReady = ws.samples+1, max(ws.maxWorkers, workers), min(ws.minReady, ready)
			mu.Unlock()
		}
	})
	return func() workerSample {
		close(done)
		wg.Wait()
		return ws
	}
}
