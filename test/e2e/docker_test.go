package e2e

import (
	"bufio"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"maps"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	v1 "kiln.dev/kiln/api/v1"
	"kiln.dev/kiln/test/waitfor"
)

// Real nodes (issue 21): clusters of the docker provider, whose nodes are
// containers of Kiln's node image running the real kubelet on containerd,
// kube-proxy, the bridge pod network and CoreDNS, with every image pulled
// from kilnd's registry. They need a Docker engine, the node images (make
// node-image) and the system images (make system-images); without them
// they skip and say why.

// systemImages is where make system-images writes the archives kilnd seeds.
var systemImages = filepath.Join(repoRoot, "bin", "images")

// startDocker starts kilnd --dev with args, seeding the system images, and
// skips unless its docker provider is registered. Its machines run the node
// image kiln/node:VERSION, or KILN_NODE_IMAGE_REPO:VERSION when that is set
// (startKilnd).
func startDocker(t testing.TB, args ...string) *env {
	t.Helper()
	if _, err := os.Stat(filepath.Join(systemImages, "coredns.tar")); err != nil {
		t.Skipf("no system images in %s (make system-images): docker clusters SKIPPED", systemImages)
	}
	e := start(t, "kilnd", append([]string{"--system-images", systemImages}, args...)...)
	// Machines outlive kilnd by design; a test's must not outlive the test
	// (a failed one leaves its clusters): everything of this kilnd's
	// instance (its data dir's, as internal/daemon derives it) goes.
	instance := e.dockerInstance()
	own(instance)
	t.Cleanup(func() { removeSelected(instance) })
	waitfor.Cond(t, "kilnd's log to say whether the docker provider is registered", 30*time.Second, func() (bool, error) {
		log := e.k.LogText()
		if strings.Contains(log, "docker provider not registered") {
			t.Skipf("the docker provider is not registered (no Docker engine or no node image: make node-image): %s",
				regexp.MustCompile(`docker provider not registered.*`).FindString(log))
		}
		return strings.Contains(log, "docker provider registered"), nil
	})
	return e
}

// dockerInstance is the filter ("label=K=V") that selects the docker
// objects of the env's kilnd: its instance, as internal/daemon derives it
// from the data dir.
func (e *env) dockerInstance() string {
	sum := sha256.Sum256([]byte(e.data))
	return "label=kiln.dev/instance=k" + hex.EncodeToString(sum[:4])
}

// readyWorkers checks that the cluster's Kubernetes has the nodes it
// should, every one Ready, and returns the workers' names, sorted.
func (e *env) readyWorkers(cluster string, nodes, workers int) []string {
	e.t.Helper()
	got := e.kubeNodes(cluster)
	var ws []string
	for name, n := range got {
		if !n.ready() {
			e.t.Errorf("node %s is not Ready", name)
		}
		if _, cp := n.Metadata.Labels["node-role.kubernetes.io/control-plane"]; !cp {
			ws = append(ws, name)
		}
	}
	slices.Sort(ws)
	if len(got) != nodes || len(ws) != workers {
		e.t.Fatalf("nodes %v, workers %v: want %d nodes, %d workers", slices.Sorted(maps.Keys(got)), ws, nodes, workers)
	}
	return ws
}

func dockerCluster(name, version string, cp int, dedicated bool, workers int) *v1.Cluster {
	cl := localCluster(name, cp, dedicated, workers)
	cl.Spec.Provider, cl.Spec.KubernetesVersion = "docker", version
	if workers > 0 {
		// A stopped worker is replaced soon, even one of two (the default
		// 40% would hold the repair back).
		cl.Spec.WorkerPools[0].UnhealthyTimeout, cl.Spec.WorkerPools[0].MaxUnhealthy = "20s", "1"
	}
	return cl
}

// docker runs the docker CLI and returns its trimmed output.
func docker(t testing.TB, args ...string) string {
	t.Helper()
	out, err := exec.Command("docker", args...).CombinedOutput()
	if err != nil {
		t.Fatalf("docker %s: %v: %s", strings.Join(args, " "), err, out)
	}
	return strings.TrimSpace(string(out))
}

// dockerFilter selects the docker objects of a cluster of the env's kilnd
// by their labels (its instance, so a cluster of the same name in a test
// running beside this one is not seen).
func (e *env) dockerFilter(project, cluster string) []string {
	return []string{"--filter", e.dockerInstance(), "--filter", "label=kiln.dev/project=" + project, "--filter", "label=kiln.dev/cluster=" + cluster}
}

// dockerObjects lists what Docker holds of a cluster by its labels:
// "container NAME ID STATE", "network NAME", "volume NAME", sorted.
func (e *env) dockerObjects(project, cluster string) []string {
	t := e.t
	t.Helper()
	filter := e.dockerFilter(project, cluster)
	var out []string
	add := func(kind, lines string) {
		for l := range strings.Lines(lines) {
			if l = strings.TrimSpace(l); l != "" {
				out = append(out, kind+" "+l)
			}
		}
	}
	add("container", docker(t, append(append([]string{"ps", "-a"}, filter...), "--format", "{{.Names}} {{.ID}} {{.State}}")...))
	add("network", docker(t, append(append([]string{"network", "ls"}, filter...), "--format", "{{.Name}}")...))
	add("volume", docker(t, append(append([]string{"volume", "ls"}, filter...), "--format", "{{.Name}}")...))
	slices.Sort(out)
	return out
}

// nodeContainer is the container of a node, by the machine label.
func (e *env) nodeContainer(project, cluster, node string) (name, id string) {
	t := e.t
	t.Helper()
	out := docker(t, append(append([]string{"ps", "-a"}, e.dockerFilter(project, cluster)...),
		"--filter", "label=kiln.dev/machine="+node, "--format", "{{.Names}} {{.ID}}")...)
	name, id, ok := strings.Cut(out, " ")
	if !ok || strings.Contains(id, "\n") {
		t.Fatalf("containers of node %s: %q, want one", node, out)
	}
	return name, id
}

// helloImage builds test/node's hello program and packs it as an image
// archive; it returns the archive's path.
func helloImage(t testing.TB) string {
	t.Helper()
	dir := t.TempDir()
	build := exec.Command("go", "build", "-ldflags", "-s -w", "-o", filepath.Join(dir, "hello"), "./test/node/testdata/hello")
	build.Dir, build.Env = repoRoot, append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build hello: %v: %s", err, out)
	}
	archive := filepath.Join(dir, "hello.tar")
	pack := exec.Command(filepath.Join(repoRoot, "scripts", "oci-archive.sh"), archive, "kiln.dev/hello:1", filepath.Join(dir, "hello"))
	if out, err := pack.CombinedOutput(); err != nil {
		t.Fatalf("pack hello: %v: %s", err, out)
	}
	return archive
}

const helloWorkload = `apiVersion: apps/v1
kind: Deployment
metadata: {name: hello}
spec:
  replicas: 4
  selector: {matchLabels: {app: hello}}
  template:
    metadata: {labels: {app: hello}}
    spec:
      topologySpreadConstraints:
      - {maxSkew: 1, topologyKey: kubernetes.io/hostname, whenUnsatisfiable: DoNotSchedule, nodeTaintsPolicy: Honor, labelSelector: {matchLabels: {app: hello}}}
      securityContext:
        runAsNonRoot: true
        runAsUser: 1000
        runAsGroup: 3000
        fsGroup: 2000
        seccompProfile: {type: RuntimeDefault}
      containers:
      - name: hello
        image: hello:1
        ports: [{containerPort: 8080}]
        securityContext:
          allowPrivilegeEscalation: false
          readOnlyRootFilesystem: true
          capabilities: {drop: [ALL]}
        volumeMounts: [{name: data, mountPath: /data}]
      volumes: [{name: data, emptyDir: {}}]
---
apiVersion: v1
kind: Service
metadata: {name: hello}
spec:
  type: NodePort
  selector: {app: hello}
  ports: [{port: 80, targetPort: 8080, nodePort: 30080}]
`

// checkHello applies helloWorkload to cluster (the image hello:1 pushed to
// its project), hardened as Kubernetes' "restricted" Pod Security Standard
// asks (not root, a user and groups of its own, a read-only root
// filesystem, no capabilities, the runtime's seccomp profile), and checks
// what a user of the cluster would: the security context in force, 4 replicas
// spread over both workers, their logs and exec, port-forward, pod to pod
// across workers by address, the Service by ClusterIP and by name
// (CoreDNS) from a pod, and by NodePort from this machine on workerIP.
func (e *env) checkHello(cluster string, workers []string, workerIP string) {
	t := e.t
	t.Helper()
	// The pushed image runs, 4 replicas spread over both workers.
	e.apply(cluster, helloWorkload)
	byNode := e.waitPodsByNode(cluster, "app=hello", func(m map[string]int) bool { return m[workers[0]] == 2 && m[workers[1]] == 2 })
	t.Logf("hello pods by node: %v", byNode)
	// Each starts, hardened as it is: a container that cannot start says
	// why in its state (as "can't get final child's PID from pipe" did on
	// nodes without CAP_SYS_PTRACE).
	waitfor.Cond(t, "the 4 hello pods' containers ready", time.Minute, func() (bool, error) {
		states, err := e.kubectl(cluster, "get", "pods", "-l", "app=hello", "-o",
			`jsonpath={range .items[*]}{.metadata.name} ready={.status.containerStatuses[0].ready} {.status.containerStatuses[0].state}{"\n"}{end}`)
		if err != nil {
			return false, waitfor.NotYet(err)
		}
		ready := strings.Count(states, " ready=true ")
		return ready == 4, waitfor.NotYet(fmt.Errorf("%d ready:\n%s", ready, states))
	})
	pods := e.runningPods(cluster, "app=hello")
	var a, b podInfo
	for _, p := range pods {
		switch p.node {
		case workers[0]:
			a = p
		case workers[1]:
			b = p
		}
	}
	waitfor.Cond(t, "the log of pod "+a.name, 30*time.Second, func() (bool, error) {
		out, err := e.kubectl(cluster, "logs", a.name)
		return err == nil && strings.Contains(out, "hello from "+a.name), waitfor.NotYet(fmt.Errorf("%v: %q", err, out))
	})
	if out := e.mustKubectl(cluster, "exec", a.name, "--", "/hello", "once"); !strings.Contains(out, "hello from "+a.name) {
		t.Errorf("kubectl exec: %q", out)
	}
	// The pod's security context is in force: its user and group, fsGroup
	// among its groups and owning its volume, the root read-only.
	out := e.mustKubectl(cluster, "exec", a.name, "--", "/hello", "whoami", "/data")
	for _, want := range []string{"uid=1000 gid=3000 ", "root=read-only", "/data=gid:2000,writable"} {
		if !strings.Contains(out, want) {
			t.Errorf("the hardened pod %s says %q, want %q in it", a.name, out, want)
		}
	}
	if !regexp.MustCompile(`groups=(\d+,)*2000(,\d+)* `).MatchString(out) {
		t.Errorf("the hardened pod %s says %q: fsGroup 2000 is not among its groups", a.name, out)
	}
	// Pod to pod across workers, by address; the Service by ClusterIP and by name.
	clusterIP := strings.TrimSpace(e.mustKubectl(cluster, "get", "service", "hello", "-o", "jsonpath={.spec.clusterIP}"))
	for _, url := range []string{"http://" + b.ip + ":8080/", "http://" + clusterIP + "/", "http://hello.default.svc.cluster.local/"} {
		waitfor.Cond(t, "GET "+url+" from pod "+a.name, 30*time.Second, func() (bool, error) {
			out, err := e.kubectl(cluster, "exec", a.name, "--", "/hello", "get", url)
			return err == nil && strings.Contains(out, "hello from hello-"), waitfor.NotYet(fmt.Errorf("%v: %q", err, out))
		})
	}
	if out := e.mustKubectl(cluster, "exec", a.name, "--", "/hello", "get", "http://"+b.ip+":8080/"); !strings.Contains(out, "hello from "+b.name) {
		t.Errorf("pod %s on %s by its address from %s: %q", b.name, b.node, a.node, out)
	}
	if out := e.mustKubectl(cluster, "exec", a.name, "--", "/hello", "lookup", "hello.default.svc.cluster.local"); !strings.Contains(out, clusterIP) {
		t.Errorf("the Service's name does not resolve to %s through CoreDNS: %q", clusterIP, out)
	}
	// NodePort from the host, on a worker's address.
	waitfor.Cond(t, "the NodePort from the host", 30*time.Second, func() (bool, error) {
		body, err := httpGet("http://" + workerIP + ":30080/")
		return err == nil && strings.Contains(body, "hello from hello-"), waitfor.NotYet(fmt.Errorf("%v: %q", err, body))
	})
	// port-forward to a pod.
	e.portForward(cluster, "pod/"+b.name, "hello from "+b.name)
	t.Log("logs, exec, port-forward, pod to pod, ClusterIP, Service name and NodePort answered")

}

// podInfo is what the test reads of a pod.
type podInfo struct{ name, node, ip string }

func (e *env) runningPods(cluster, selector string) []podInfo {
	e.t.Helper()
	out := e.mustKubectl(cluster, "get", "pods", "-l", selector, "--field-selector", "status.phase=Running",
		"-o", `jsonpath={range .items[*]}{.metadata.name} {.spec.nodeName} {.status.podIP}{"\n"}{end}`)
	var pods []podInfo
	for l := range strings.Lines(out) {
		if f := strings.Fields(l); len(f) == 3 {
			pods = append(pods, podInfo{f[0], f[1], f[2]})
		}
	}
	return pods
}

// TestDockerCluster: a 1+2 docker cluster runs real containers: nodes Ready
// on containerd, an image pushed with kiln image push runs in 4 replicas
// spread over both workers, its logs and exec answer, port-forward works,
// pods reach pods of the other worker by address, a Service answers by
// ClusterIP and by name (CoreDNS) from a pod and by NodePort from the host,
// and as a Service of type LoadBalancer (checkLoadBalancer);
// a cluster of another project cannot pull the image; a restarted node
// comes back Ready as the same container, a stopped one is made Ready
// again; an in-place upgrade of a control plane runs the new kubelet; and
// deleting a cluster leaves nothing of it in Docker or the host's iptables,
// and nothing of the other cluster changes.
func TestDockerCluster(t *testing.T) {
	t.Parallel()
	e := startDocker(t, "--policy-check-interval", "2s")
	archive := helloImage(t)
	e.kiln("project", "create", "other")

	web := dockerCluster("web", "", 1, true, 2)
	// A worker restarted below must be back before the health check
	// replaces it: with three other tests on the machine its restart took
	// over 35 s, the 20 s of dockerCluster plus the 15 s to NOT_READY.
	web.Spec.WorkerPools[0].UnhealthyTimeout = "90s"
	_, webOp, err := e.c.CreateCluster(t.Context(), "default", web)
	if err != nil {
		t.Fatal(err)
	}
	side := dockerCluster("side", "v1.35.4", 1, false, 0)
	_, sideOp, err := e.c.CreateCluster(t.Context(), "other", side)
	if err != nil {
		t.Fatal(err)
	}
	t0 := time.Now()
	e.kiln("image", "push", archive, "hello:1")
	op := e.wait("web", webOp)
	t.Logf("cluster web (docker, 1+2) Succeeded in %s", op.EndTime.Sub(op.StartTime).Round(time.Second))
	if _, err := e.c.WaitOperation(t.Context(), sideOp, nil); err != nil {
		t.Fatalf("cluster other/side: %v", err)
	}
	t.Logf("both clusters Succeeded %s after the creates", time.Since(t0).Round(time.Second))

	// Three nodes Ready, on containerd, at the cluster's version.
	workers := e.readyWorkers("web", 3, 2)
	info := e.mustKubectl("web", "get", "nodes", "-o", `jsonpath={range .items[*]}{.status.nodeInfo.containerRuntimeVersion} {.status.nodeInfo.kubeletVersion}{"\n"}{end}`)
	for l := range strings.Lines(info) {
		if !strings.HasPrefix(l, "containerd://") {
			t.Errorf("a node runs %q, want containerd", strings.TrimSpace(l))
		}
	}

	workerIP := containerAddress(t, e.mustName("default", "web", workers[1]))
	e.checkHello("web", workers, workerIP)
	e.checkLoadBalancer("default", "web", func() string { return e.dockerLoadBalancers("default", "web") })
	e.checkPolicyNotEnforced("web")

	// The system images came from kilnd's registry too: CoreDNS runs.
	if out := e.mustKubectl("web", "get", "deployment", "-n", "kube-system", "coredns", "-o", "jsonpath={.status.availableReplicas}"); out == "" || out == "0" {
		t.Errorf("CoreDNS has %q available replicas", out)
	}

	// Another project's cluster cannot pull default's image.
	e.apply("other/side", strings.Replace(strings.Replace(helloWorkload, "replicas: 4", "replicas: 1", 1), "30080", "30081", 1))
	waitfor.Cond(t, "the pull of hello:1 to be refused in project other", 90*time.Second, func() (bool, error) {
		out, err := e.kubectl("other/side", "get", "events", "--field-selector", "reason=Failed", "-o", "jsonpath={.items[*].message}")
		return err == nil && strings.Contains(out, "hello:1"), waitfor.NotYet(fmt.Errorf("%v: events %q", err, out))
	})
	if running := e.runningPods("other/side", "app=hello"); len(running) != 0 {
		t.Errorf("project other runs default's image: %v", running)
	}

	// docker restart of a worker: the same container, Ready again.
	before := e.dockerObjects("default", "web")
	name1, id1 := e.nodeContainer("default", "web", workers[1])
	restarted := time.Now().Add(-time.Second).UTC()
	docker(t, "restart", name1)
	// Ready as reported by a kubelet that runs again (not the status from before the restart).
	waitfor.Cond(t, "node "+workers[1]+" Ready again after docker restart, from its restarted kubelet", 2*time.Minute, func() (bool, error) {
		out, err := e.kubectl("web", "get", "node", workers[1], "-o",
			`jsonpath={.status.conditions[?(@.type=="Ready")].status} {.status.conditions[?(@.type=="Ready")].lastHeartbeatTime}`)
		status, beat, _ := strings.Cut(strings.TrimSpace(out), " ")
		at, perr := time.Parse(time.RFC3339, beat)
		return err == nil && perr == nil && status == "True" && at.After(restarted), waitfor.NotYet(fmt.Errorf("%v: %q", err, out))
	})
	if out, err := exec.Command("docker", "exec", name1, "sh", "-c", "ps -eo args").CombinedOutput(); err != nil ||
		!strings.Contains(string(out), "kiln-kube-v1.36.3 kubelet") && !strings.Contains(string(out), "kiln-kube kubelet") ||
		!strings.Contains(string(out), "kube-proxy") {
		t.Errorf("after docker restart node %s runs (%v):\n%s", workers[1], err, out)
	}
	if _, id := e.nodeContainer("default", "web", workers[1]); id != id1 {
		t.Errorf("node %s is container %s after the restart, was %s", workers[1], id, id1)
	}
	if after := e.dockerObjects("default", "web"); !slices.Equal(before, after) {
		t.Errorf("docker objects changed across a node's restart:\nbefore %v\nafter  %v", before, after)
	}

	// docker stop of a worker: its node is not Ready for Kiln (its agent stopped heartbeating), and
	// the health checker replaces it: three Ready nodes again, the stopped container gone. The
	// restart is over, so the pool's unhealthyTimeout goes down to 20 s first: a patch of it
	// takes effect for the next check.
	pools := e.cluster("web").Spec.WorkerPools
	pools[0].UnhealthyTimeout = "20s"
	_, patchOp, err := e.c.PatchCluster(t.Context(), "default", "web", map[string]any{"spec": map[string]any{"workerPools": pools}})
	if err != nil {
		t.Fatal(err)
	}
	e.wait("web", patchOp)
	name0, id0 := e.nodeContainer("default", "web", workers[0])
	docker(t, "stop", name0)
	stopped := time.Now()
	// Meanwhile, an in-place upgrade of side's control plane: the new kubelet runs.
	_, upOp, err := e.c.PatchCluster(t.Context(), "other", "side", map[string]any{"spec": map[string]any{"kubernetesVersion": "v1.36.3"}})
	if err != nil {
		t.Fatal(err)
	}
	// The cluster's health says so within two heartbeats (10 s), before
	// the node turns NOT_READY: Degraded, naming the node (30 s allowed for
	// a loaded machine; the time it took is logged).
	waitfor.Cond(t, "cluster web's health to be Degraded naming "+workers[0]+" after docker stop", 30*time.Second, func() (bool, error) {
		h := e.cluster("web").Status.Health
		return h != nil && h.State == v1.HealthDegraded && strings.Contains(h.Message, workers[0]), waitfor.NotYet(fmt.Errorf("health %+v", h))
	})
	t.Logf("health Degraded %s after the stop", time.Since(stopped).Round(100*time.Millisecond))
	if out := e.kiln("cluster", "describe", "web"); !strings.Contains(out, "Health:") || !strings.Contains(out, "Degraded") {
		t.Errorf("kiln cluster describe web does not say Degraded:\n%s", out)
	}
	waitfor.Cond(t, "node "+workers[0]+" not READY in Kiln after docker stop", 2*time.Minute, func() (bool, error) {
		n, err := e.c.GetNode(t.Context(), "default", "web", workers[0])
		return err == nil && n.State != v1.NodeReady, waitfor.NotYet(fmt.Errorf("%v: %+v", err, n))
	})
	uid0 := e.mustKubectl("web", "get", "node", workers[0], "-o", "jsonpath={.metadata.uid}")
	waitfor.Cond(t, "three Ready nodes again after a worker was stopped, "+workers[0]+" a new Node on a new container", 5*time.Minute, func() (bool, error) {
		out, err := e.kubectl("web", "get", "nodes", "-o",
			`jsonpath={range .items[*]}{.metadata.name} {.metadata.uid} {.status.conditions[?(@.type=="Ready")].status}{"\n"}{end}`)
		ready, replaced := 0, false
		for l := range strings.Lines(out) {
			if f := strings.Fields(l); len(f) == 3 && f[2] == "True" {
				ready++
				replaced = replaced || (f[0] == workers[0] && f[1] != uid0)
			}
		}
		ids := docker(t, append([]string{"ps", "-aq", "--no-trunc"}, e.dockerFilter("default", "web")...)...)
		return err == nil && ready == 3 && replaced && !strings.Contains(ids, id0[:12]),
			waitfor.NotYet(fmt.Errorf("%v: nodes %q; containers %q", err, out, ids))
	})
	t.Logf("repaired %s after the stop: nodes now %v", time.Since(stopped).Round(time.Second), slices.Sorted(maps.Keys(e.kubeNodes("web"))))
	waitfor.Cond(t, "cluster web Healthy again after the repair", time.Minute, func() (bool, error) {
		h := e.cluster("web").Status.Health
		return h != nil && h.State == v1.HealthHealthy, waitfor.NotYet(fmt.Errorf("health %+v", h))
	})
	// The repair operation ends a moment after its node is Ready: the
	// delete below would be refused while it runs.
	ops, err := e.c.ListOperations(t.Context(), "default", "web")
	if err != nil {
		t.Fatal(err)
	}
	repairs := 0
	for _, op := range ops {
		if op.Properties.Kind == v1.KindRepair {
			repairs++
			e.wait("web", op.ID)
		}
	}
	if repairs == 0 {
		t.Errorf("no repair operation on web after its worker was replaced")
	}

	if op, err := e.c.WaitOperation(t.Context(), upOp, nil); err != nil || op.Status != v1.OpSucceeded {
		t.Fatalf("upgrade of other/side: %v %+v", err, op)
	}
	for name, n := range e.kubeNodes("other/side") {
		if n.Status.NodeInfo.KubeletVersion != "v1.36.3" {
			t.Errorf("node %s runs kubelet %s after the upgrade, want v1.36.3", name, n.Status.NodeInfo.KubeletVersion)
		}
	}

	// Delete web: nothing of it is left, in Docker or in the host's
	// iptables; side is untouched.
	sideBefore := e.dockerObjects("other", "side")
	subnet := docker(t, "network", "inspect", "-f", "{{range .IPAM.Config}}{{.Subnet}}{{end}}", e.dockerNetwork("default", "web"))
	delOp, err := e.c.DeleteCluster(t.Context(), "default", "web")
	if err != nil {
		t.Fatal(err)
	}
	if op, err := e.c.WaitOperation(t.Context(), delOp, nil); err != nil || op.Status != v1.OpSucceeded {
		t.Fatalf("delete web: %v %+v", err, op)
	}
	if left := e.dockerObjects("default", "web"); len(left) != 0 {
		t.Errorf("left after delete: %v", left)
	}
	if rules, err := exec.Command("iptables-save").CombinedOutput(); err == nil && strings.Contains(string(rules), subnet) {
		t.Errorf("host iptables rules still name web's subnet %s:\n%s", subnet, grepLines(string(rules), subnet))
	}
	if after := e.dockerObjects("other", "side"); !slices.Equal(sideBefore, after) {
		t.Errorf("deleting web changed side:\nbefore %v\nafter  %v", sideBefore, after)
	}
	delOp, err = e.c.DeleteCluster(t.Context(), "other", "side")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.c.WaitOperation(t.Context(), delOp, nil); err != nil {
		t.Fatal(err)
	}
	if left := e.dockerObjects("other", "side"); len(left) != 0 {
		t.Errorf("left after delete: %v", left)
	}
}

// TestDockerCreateSurvivesKill: kilnd killed with SIGKILL while it makes
// a docker cluster's machines; after a restart the create completes with no
// duplicate container, network or volume.
func TestDockerCreateSurvivesKill(t *testing.T) {
	t.Parallel()
	// Its machines reach the kilnd started again at the same address.
	agents := []string{"--agent-listen", fmt.Sprintf("127.0.0.1:%d", freePort(t))}
	e := startDocker(t, agents...)
	cl := dockerCluster("crash", "", 1, false, 1)
	_, opID, err := e.c.CreateCluster(t.Context(), "default", cl)
	if err != nil {
		t.Fatal(err)
	}
	waitfor.Cond(t, "the first container of cluster crash", 2*time.Minute, func() (bool, error) {
		for _, o := range e.dockerObjects("default", "crash") {
			if strings.HasPrefix(o, "container ") {
				return true, nil
			}
		}
		return false, nil
	})
	e.k.Kill(syscall.SIGKILL)
	<-e.k.Done()
	t.Logf("killed kilnd with %v", e.dockerObjects("default", "crash"))
	e.startKilnd("kilnd-again", append(agents, "--system-images", systemImages)...)
	e.wait("crash", opID)
	var containers, networks, volumes int
	for _, o := range e.dockerObjects("default", "crash") {
		switch strings.Fields(o)[0] {
		case "container":
			containers++
		case "network":
			networks++
		case "volume":
			volumes++
		}
	}
	if containers != 2 || networks != 1 || volumes != 2 {
		t.Errorf("after the create: %v; want 2 containers, 1 network, 2 volumes", e.dockerObjects("default", "crash"))
	}
	if n := len(e.kubeNodes("crash")); n != 2 {
		t.Errorf("%d Kubernetes nodes, want 2", n)
	}
	delOp, err := e.c.DeleteCluster(t.Context(), "default", "crash")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.c.WaitOperation(t.Context(), delOp, nil); err != nil {
		t.Fatal(err)
	}
	if left := e.dockerObjects("default", "crash"); len(left) != 0 {
		t.Errorf("left after delete: %v", left)
	}
}

// containerAddress is a container's address on its network.
func containerAddress(t testing.TB, container string) string {
	t.Helper()
	return docker(t, "inspect", "-f", "{{range .NetworkSettings.Networks}}{{.IPAddress}}{{end}}", container)
}

func (e *env) mustName(project, cluster, node string) string {
	name, _ := e.nodeContainer(project, cluster, node)
	return name
}

func (e *env) dockerNetwork(project, cluster string) string {
	t := e.t
	t.Helper()
	out := docker(t, append(append([]string{"network", "ls"}, e.dockerFilter(project, cluster)...), "--format", "{{.Name}}")...)
	if out == "" || strings.Contains(out, "\n") {
		t.Fatalf("networks of %s/%s: %q, want one", project, cluster, out)
	}
	return out
}

func grepLines(s, sub string) string {
	var b strings.Builder
	for l := range strings.Lines(s) {
		if strings.Contains(l, sub) {
			b.WriteString(l)
		}
	}
	return b.String()
}

// httpGet GETs url on a connection of its own: a kept-alive one would
// reach what was there when it was opened (a load balancer's port after
// the Service moved away from it: its connection tracking entry lives on).
func httpGet(url string) (string, error) {
	c := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
	resp, err := c.Get(url)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return string(b), err
}

// waitKubeNode waits, up to two minutes, until Kubernetes' node name
// satisfies ok.
func (e *env) waitKubeNode(cluster, name, what string, ok func(kubeNode) bool) {
	e.t.Helper()
	waitfor.Cond(e.t, "node "+name+" "+what, 2*time.Minute, func() (bool, error) {
		nodes, err := e.kubeNodesErr(cluster)
		if err != nil {
			return false, waitfor.NotYet(err)
		}
		n, found := nodes[name]
		return found && ok(n), waitfor.NotYet(fmt.Errorf("node %s found=%v ready=%v", name, found, n.ready()))
	})
}

// portForward runs kubectl port-forward to target's port 8080 and checks
// that a GET through it answers with want.
func (e *env) portForward(cluster, target, want string) {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(e.t.Context(), time.Minute)
	defer cancel()
	cfg := filepath.Join(e.data, "default-"+cluster+".kubeconfig")
	cmd := exec.CommandContext(ctx, kubeBin, "kubectl", "--kubeconfig", cfg, "port-forward", target, ":8080")
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		e.t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		e.t.Fatal(err)
	}
	defer func() { cancel(); _ = cmd.Wait() }()
	re := regexp.MustCompile(`Forwarding from 127\.0\.0\.1:(\d+)`)
	sc := bufio.NewScanner(stdout)
	for sc.Scan() {
		if m := re.FindStringSubmatch(sc.Text()); m != nil {
			body, err := httpGet("http://127.0.0.1:" + m[1] + "/")
			if err != nil || !strings.Contains(body, want) {
				e.t.Errorf("through kubectl port-forward %s: %v: %q, want %q", target, err, body, want)
			}
			return
		}
	}
	e.t.Errorf("kubectl port-forward %s said no port: %v", target, sc.Err())
}
