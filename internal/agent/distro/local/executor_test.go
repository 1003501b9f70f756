package local

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	v1 "kiln.dev/kiln/api/v1"
	distrolocal "kiln.dev/kiln/internal/distro/local"
	"kiln.dev/kiln/internal/kubeapi"
	"kiln.dev/kiln/internal/pki"
	"kiln.dev/kiln/test/waitfor"
)

// cluster is a throwaway cluster for the real tests.
type cluster struct {
	ca       *pki.CA
	saKey    []byte
	saPub    []byte
	endpoint string
	members  []distrolocal.Member
}

func newCluster(t *testing.T, members []distrolocal.Member) *cluster {
	t.Helper()
	ca, err := pki.NewCA("kiln-test", pki.DefaultCAValidity, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	key, pub, err := pki.NewServiceAccountKey()
	if err != nil {
		t.Fatal(err)
	}
	var backends []string
	for _, m := range members {
		backends = append(backends, fmt.Sprintf("%s:%d", m.Address, distrolocal.APIServerPort))
	}
	return &cluster{ca: ca, saKey: key, saPub: pub, endpoint: proxy(t, backends...), members: members}
}

// params builds the install of node; join says whether a control-plane
// node joins etcd.
func (c *cluster) params(t *testing.T, node distrolocal.Node, join bool) v1.Instruction {
	t.Helper()
	p, err := distrolocal.BuildInstall(distrolocal.BuildInput{
		// The cluster CA stands for the front-proxy CA too: nothing here
		// goes through the aggregation layer.
		CA: c.ca, FrontProxyCA: c.ca, ServiceAccountKey: c.saKey, ServiceAccountPub: c.saPub,
		ClusterID: "/v1/projects/test/clusters/" + t.Name(), ClusterName: "test", KubernetesVersion: "v1.36.3",
		ServiceCIDR: "10.96.0.0/12", PodCIDR: "10.244.0.0/16", Endpoint: c.endpoint,
		Node: node, DedicatedControlPlane: true, ControlPlane: c.members, EtcdJoin: join,
	})
	if err != nil {
		t.Fatal(err)
	}
	raw, err := json.Marshal(p)
	if err != nil {
		t.Fatal(err)
	}
	return v1.Instruction{ID: "install-" + node.Name, Kind: v1.InstructionInstall, Params: raw}
}

// newExecutor is an Executor on its own root that stops its components
// when the test ends.
func newExecutor(t *testing.T, bin, name string) *Executor {
	t.Helper()
	return executorOn(t, bin, name, filepath.Join(t.TempDir(), name))
}

// executorOn is newExecutor on a given root.
func executorOn(t *testing.T, bin, name, root string) *Executor {
	t.Helper()
	e := &Executor{KubeBinary: bin, Root: root, Logger: testLogger(t).With("node", name),
		StepTimeout: 90 * time.Second, StopTimeout: 10 * time.Second}
	t.Cleanup(func() {
		e.Stop()
		e.Close()
		// KILN_TEST_KEEP_LOGS=DIR keeps every component's log in DIR/NODE/.
		if dir := os.Getenv("KILN_TEST_KEEP_LOGS"); dir != "" {
			_ = os.MkdirAll(filepath.Join(dir, name), 0o755)
			for _, c := range allComponents {
				if b, err := os.ReadFile(filepath.Join(e.Root, dirLog, c+".log")); err == nil {
					_ = os.WriteFile(filepath.Join(dir, name, c+".log"), b, 0o644)
				}
			}
		}
		if t.Failed() {
			for _, c := range allComponents {
				if tail := lastLines(filepath.Join(e.Root, dirLog, c+".log"), 40); tail != "" {
					t.Logf("%s: last lines of %s:\n%s", name, c, tail)
				}
			}
		}
	})
	return e
}

// install runs in and checks that every step of want succeeded.
func install(t *testing.T, e *Executor, in v1.Instruction, want []string) (time.Duration, *recorder) {
	t.Helper()
	rec := &recorder{}
	start := time.Now()
	if err := e.Execute(t.Context(), in, rec); err != nil {
		t.Fatalf("install %s: %v", in.ID, err)
	}
	took := time.Since(start)
	steps, states := rec.final()
	if !slices.Equal(steps, want) {
		t.Errorf("install %s: steps %v, want %v", in.ID, steps, want)
	}
	for _, s := range steps {
		if states[s].State != v1.StepSucceeded {
			t.Errorf("install %s: step %s %s: %s", in.ID, s, states[s].State, states[s].Message)
		}
	}
	return took, rec
}

func TestInstallControlPlaneAndWorker(t *testing.T) {
	bin := kubeBinary(t)
	cpAddr := freeAddress(t, "127.0.0.2")
	wAddr := freeAddress(t, "127.0.0.3", cpAddr)
	cp := distrolocal.Node{Name: "test-cp-0", Role: v1.RoleControlPlane, Address: cpAddr}
	worker := distrolocal.Node{Name: "test-default-0", Role: v1.RoleWorker, Address: wAddr}
	c := newCluster(t, []distrolocal.Member{{Name: cp.Name, Address: cp.Address}})

	cpExec := newExecutor(t, bin, "cp")
	cpIn := c.params(t, cp, false)
	cpTook, cpRec := install(t, cpExec, cpIn, controlPlaneSteps)
	t.Logf("control-plane install took %s", cpTook.Round(time.Millisecond))

	wExec := newExecutor(t, bin, "worker")
	wIn := c.params(t, worker, false)
	wTook, _ := install(t, wExec, wIn, workerSteps)
	t.Logf("worker install took %s", wTook.Round(time.Millisecond))

	// Both nodes Ready in Kubernetes itself, through the load balancer.
	admin := adminClient(t, c.ca, c.endpoint)
	readyStart := time.Now()
	waitfor.Cond(t, "both nodes Ready", 2*time.Minute, func() (bool, error) {
		nodes, err := admin.ListNodes(t.Context())
		if err != nil {
			return false, waitfor.NotYet(err)
		}
		ready := 0
		for _, n := range nodes {
			if n.Ready() {
				ready++
			}
		}
		if ready != 2 {
			return false, waitfor.NotYet(fmt.Errorf("%d of %d nodes Ready", ready, len(nodes)))
		}
		return true, nil
	})
	t.Logf("both nodes Ready %s after the worker's install", time.Since(readyStart).Round(time.Millisecond))
	n, err := admin.GetNode(t.Context(), cp.Name)
	if err != nil {
		t.Fatal(err)
	}
	controlPlaneTaint := func(t kubeapi.Taint) bool {
		return t.Key == "node-role.kubernetes.io/control-plane" && t.Effect == "NoSchedule"
	}
	if !slices.ContainsFunc(n.Taints, controlPlaneTaint) {
		t.Errorf("control-plane node taints %+v", n.Taints)
	}
	// The worker takes pods: no control-plane taint. (The node lifecycle
	// controller's not-ready taints may still be on a node that just
	// became Ready: it removes them on its own time.)
	if w, err := admin.GetNode(t.Context(), worker.Name); err != nil || slices.ContainsFunc(w.Taints, controlPlaneTaint) {
		t.Errorf("worker taints %+v (%v)", w.Taints, err)
	}
	// The plan's calls: label, namespace, ConfigMap.
	if err := admin.LabelNode(t.Context(), worker.Name, map[string]string{"node-role.kubernetes.io/worker": ""}); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if err := admin.EnsureNamespace(t.Context(), "kiln-system"); err != nil {
			t.Fatal(err)
		}
		if err := admin.ApplyConfigMap(t.Context(), "kiln-system", "kiln-cluster", map[string]string{"id": "x"}); err != nil {
			t.Fatal(err)
		}
	}
	if data, err := admin.GetConfigMap(t.Context(), "kiln-system", "kiln-cluster"); err != nil || data["id"] != "x" {
		t.Errorf("configmap: %v, %v", data, err)
	}
	w, err := admin.GetNode(t.Context(), worker.Name)
	if _, ok := w.Labels["node-role.kubernetes.io/worker"]; err != nil || !ok {
		t.Errorf("worker after label: %+v, %v", w.Labels, err)
	}
	if err == nil && w.Labels[HollowLabel] != "true" {
		t.Errorf("worker labels %v, want %s=true from its kubelet", w.Labels, HollowLabel)
	}
	if got := cpRec.logLines(APIServer); got == 0 {
		t.Errorf("no apiserver log line forwarded")
	}

	// The agent restarts: a new Executor on the same root resumes
	// supervising the running components, and installing again changes
	// nothing and is quick.
	before := pidsOf(cpExec.Root)
	cpExec.Close()
	cpExec = executorOn(t, bin, "cp-again", cpExec.Root)
	if err := cpExec.Resume(); err != nil {
		t.Fatal(err)
	}
	took, rec := install(t, cpExec, cpIn, controlPlaneSteps)
	t.Logf("second control-plane install took %s", took.Round(time.Millisecond))
	if took > 10*time.Second {
		t.Errorf("second control-plane install took %s", took)
	}
	_, states := rec.final()
	if m := states[StepStartAPIServer].Message; m != "already running" {
		t.Errorf("second install: start-apiserver %q", m)
	}
	if after := pidsOf(cpExec.Root); !slices.Equal(before, after) {
		t.Errorf("second install changed processes: %v -> %v", before, after)
	}
	took, _ = install(t, wExec, wIn, workerSteps)
	t.Logf("second installs: control plane and worker quick (worker %s)", took.Round(time.Millisecond))

	// Reset: no process, no directory left.
	for _, e := range []*Executor{wExec, cpExec} {
		pids := pidsOf(e.Root)
		if err := e.Execute(t.Context(), v1.Instruction{ID: "reset", Kind: v1.InstructionReset}, &recorder{}); err != nil {
			t.Fatalf("reset: %v", err)
		}
		for _, pf := range pids {
			if alive(pf) {
				t.Errorf("pid %d alive after reset", pf.PID)
			}
		}
		for _, d := range []string{dirEtc, dirEtcd, dirKubelet, dirAPIServer} {
			if _, err := os.Stat(filepath.Join(e.Root, d)); !os.IsNotExist(err) {
				t.Errorf("%s after reset: %v", d, err)
			}
		}
	}
}

// TestInstallThreeControlPlanes: the first control-plane node founds etcd,
// the other two join it at the same time (kiln-kube etcd --join retries
// while an earlier member has not started); with one node's components
// stopped, the API still answers through the load balancer.
func TestInstallThreeControlPlanes(t *testing.T) {
	bin := kubeBinary(t)
	var nodes []distrolocal.Node
	var members []distrolocal.Member
	var used []string
	for i, want := range []string{"127.0.0.4", "127.0.0.5", "127.0.0.6"} {
		addr := freeAddress(t, want, used...)
		used = append(used, addr)
		n := distrolocal.Node{Name: fmt.Sprintf("ha-cp-%d", i), Role: v1.RoleControlPlane, Address: addr}
		nodes = append(nodes, n)
		members = append(members, distrolocal.Member{Name: n.Name, Address: n.Address})
	}
	c := newCluster(t, members)
	execs := make([]*Executor, len(nodes))
	for i, n := range nodes {
		execs[i] = newExecutor(t, bin, n.Name)
	}
	start := time.Now()
	install(t, execs[0], c.params(t, nodes[0], false), controlPlaneSteps)
	t.Logf("first control-plane node installed in %s", time.Since(start).Round(time.Millisecond))

	start = time.Now()
	errs := make(chan error, 2)
	for i := 1; i < 3; i++ {
		go func() {
			errs <- execs[i].Execute(t.Context(), c.params(t, nodes[i], true), &recorder{})
		}()
	}
	for range 2 {
		if err := <-errs; err != nil {
			t.Fatalf("joining control-plane node: %v", err)
		}
	}
	t.Logf("two joining control-plane nodes installed in %s", time.Since(start).Round(time.Millisecond))

	admin := adminClient(t, c.ca, c.endpoint)
	waitfor.Cond(t, "three nodes Ready", 2*time.Minute, func() (bool, error) {
		list, err := admin.ListNodes(t.Context())
		if err != nil {
			return false, waitfor.NotYet(err)
		}
		ready := 0
		for _, n := range list {
			if n.Ready() {
				ready++
			}
		}
		if ready != 3 {
			return false, waitfor.NotYet(fmt.Errorf("%d of %d nodes Ready", ready, len(list)))
		}
		return true, nil
	})
	// Every member serves, and writes made through one are read through
	// another (the ConfigMap goes through the load balancer, the read
	// through the last node's own API server).
	if err := admin.EnsureNamespace(t.Context(), "kiln-system"); err != nil {
		t.Fatal(err)
	}
	if err := admin.ApplyConfigMap(t.Context(), "kiln-system", "kiln-cluster", map[string]string{"id": "ha"}); err != nil {
		t.Fatal(err)
	}
	last := adminClient(t, c.ca, fmt.Sprintf("%s:%d", nodes[2].Address, distrolocal.APIServerPort))
	if data, err := last.GetConfigMap(t.Context(), "kiln-system", "kiln-cluster"); err != nil || data["id"] != "ha" {
		t.Fatalf("read through the third node: %v, %v", data, err)
	}

	// Stop the first node's components: the API still answers.
	execs[0].Stop()
	waitfor.Cond(t, "API through the load balancer without the first node", time.Minute, func() (bool, error) {
		_, err := admin.GetConfigMap(t.Context(), "kiln-system", "kiln-cluster")
		return err == nil, waitfor.NotYet(err)
	})

	// Stop the other two at once, so neither loses quorum while its API
	// server shuts down.
	done := make(chan struct{})
	go func() { execs[1].Stop(); close(done) }()
	execs[2].Stop()
	<-done
}
