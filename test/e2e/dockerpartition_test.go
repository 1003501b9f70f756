package e2e

import (
	"maps"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	v1 "kiln.dev/kiln/api/v1"
	"kiln.dev/kiln/internal/agent/journal"
	"kiln.dev/kiln/internal/gateway"
	"kiln.dev/kiln/test/waitfor"
)

// agentDataDir is where a docker machine's agent keeps its identity and
// journal (internal/daemon: dockerAgent).
const agentDataDir = "/var/lib/kiln-agent"

// dockerLink is a docker node's link to its cluster's network, cut and
// healed as a pulled cable would be: `docker network disconnect` leaves the
// container its loopback only, so nothing reaches it or leaves it (kilnd,
// the control plane, the registry) and no side gets an error; its
// processes run on. The heal connects it again at the address it had, so
// its kubelet's node IP stays right.
type dockerLink struct {
	t                  testing.TB
	network, container string
	address            string
}

func (e *env) newDockerLink(project, cluster, node string) *dockerLink {
	t := e.t
	t.Helper()
	name, _ := e.nodeContainer(project, cluster, node)
	l := &dockerLink{t: t, network: e.dockerNetwork(project, cluster), container: name}
	l.address = containerAddress(t, name)
	if l.address == "" {
		t.Fatalf("container %s has no address on %s", name, l.network)
	}
	return l
}

func (l *dockerLink) cut() time.Time {
	l.t.Helper()
	docker(l.t, "network", "disconnect", l.network, l.container)
	return time.Now()
}

func (l *dockerLink) heal() time.Time {
	l.t.Helper()
	docker(l.t, "network", "connect", "--ip", l.address, l.network, l.container)
	return time.Now()
}

// copyAgentDir copies a docker node's agent data dir (identity, key,
// journal) out of its container, which may be cut off from its network,
// into a new directory here, and returns it.
func copyAgentDir(t testing.TB, container string) string {
	t.Helper()
	dst := filepath.Join(t.TempDir(), "agent")
	docker(t, "cp", container+":"+agentDataDir, dst)
	return dst
}

// TestDockerPartition: a docker cluster of a control plane and a worker
// (its pool's unhealthyTimeout 60 s), whose worker container is taken off
// the cluster's network three times:
//
//  1. while its install instruction runs (the worker made by a scale-up):
//     Kiln's node goes NOT_READY; after the heal the scale-up succeeds, and
//     each node got one install instruction, which its agent's journal
//     shows it started once;
//  2. once Ready, for less than unhealthyTimeout: NOT_READY, then READY
//     again with the same container and kubelet; no repair operation
//     starts, and no instruction is issued or run;
//  3. once Ready, for longer: a repair operation starts, not before the
//     node's last heartbeat plus unhealthyTimeout, and replaces the worker:
//     the old container is gone, Kubernetes' node of that name is a new
//     object on the new container, Ready, and the cluster has its two
//     nodes. The old node's identity (its agent's data dir, copied out
//     during the cut) comes back on the cluster's network in a container
//     of its own: its session is refused (the repair removed the node,
//     revoking its certificate) and its agent stops, while the new node
//     stays READY.
func TestDockerPartition(t *testing.T) {
	t.Parallel()
	e := startDocker(t, "--health-interval", "2s")
	ctx := t.Context()
	const cluster, timeout = "cut", 60 * time.Second
	// The worker comes with a scale-up of a pool made empty, once the
	// control plane is Ready: a worker's install ends by waiting for the
	// node's pod range, which the control plane's controller-manager gives,
	// so the controller-manager is stopped (SIGSTOP) before the scale-up,
	// which holds the worker's install open until it goes on. (Stopping it
	// during the create, once the control plane's node had its range, lost
	// the race on a busy machine: the create was over first.)
	cl := dockerCluster(cluster, "", 1, true, 1)
	cl.Spec.WorkerPools[0].Size = 0
	cl.Spec.WorkerPools[0].UnhealthyTimeout = timeout.String()
	e.create(cl)
	worker := cluster + "-default-0"

	t.Log("1: the worker's link is cut while its install runs")
	if out := e.mustKubectl(cluster, "get", "node", cluster+"-cp-0", "-o", "jsonpath={.spec.podCIDR}"); out == "" {
		t.Fatalf("the control plane's node has no pod range after the create")
	}
	cpContainer, _ := e.nodeContainer("default", cluster, cluster+"-cp-0")
	const controllerManager = "kiln-kube[^ ]* controller-manager "
	docker(t, "exec", cpContainer, "pkill", "-STOP", "-f", controllerManager)
	pools := e.cluster(cluster).Spec.WorkerPools
	pools[0].Size = 1
	_, opID, err := e.c.PatchCluster(ctx, "default", cluster, map[string]any{"spec": map[string]any{"workerPools": pools}})
	if err != nil {
		t.Fatal(err)
	}
	var link *dockerLink
	var install journal.Entry
	waitfor.Cond(t, "the worker's agent to start its install", opWait, func() (bool, error) {
		if _, err := e.c.GetNode(ctx, "default", cluster, worker); err != nil {
			return false, waitfor.NotYet(err)
		}
		if link == nil {
			link = e.newDockerLink("default", cluster, worker)
		}
		for _, en := range journalEntries(t, copyAgentDir(t, link.container)) {
			if en.Kind == v1.InstructionInstall {
				install = en
				return true, nil
			}
		}
		return false, nil
	})
	cutAt := link.cut()
	for _, en := range journalEntries(t, copyAgentDir(t, link.container)) {
		if en.ID == install.ID && en.Result != nil {
			t.Fatalf("the worker's install %s had finished when its link went down (%s): the cut did not fall in the install", en.ID, en.Result.State)
		}
	}
	docker(t, "exec", cpContainer, "pkill", "-CONT", "-f", controllerManager)
	notReadyAt := e.waitNodeState(cluster, worker, v1.NodeNotReady)
	healAt := link.heal()
	op := e.wait(cluster, opID)
	t.Logf("cut during the install: %s; Kiln NOT_READY after %s; the scale-up Succeeded %s after the heal",
		healAt.Sub(cutAt).Round(time.Millisecond), notReadyAt.Sub(cutAt).Round(time.Millisecond), op.EndTime.Sub(healAt).Round(time.Second))
	cp, _ := e.nodeContainer("default", cluster, cluster+"-cp-0")
	e.installedOnce(cluster, cluster+"-cp-0", copyAgentDir(t, cp))
	waitfor.Cond(t, "the worker's agent to record the acknowledgement of its install", time.Minute, func() (bool, error) {
		en := journalEntries(t, copyAgentDir(t, link.container))
		return len(en) == 1 && en[0].Acked != nil, nil
	})
	if ins := e.installedOnce(cluster, worker, copyAgentDir(t, link.container)); ins == nil || ins.ID != install.ID {
		t.Fatalf("the worker's instruction is %+v, want %s, the one that ran across the cut", ins, install.ID)
	}
	e.waitNodeState(cluster, worker, v1.NodeReady)
	e.waitKubeReady(cluster, worker, true)

	t.Log("2: the worker's link is cut, once Ready, for less than unhealthyTimeout")
	instructionsBefore := e.instructions(cluster, worker)
	journalBefore := journalEntries(t, copyAgentDir(t, link.container))
	_, containerID := e.nodeContainer("default", cluster, worker)
	kubelet := kubeletPID(t, link.container)
	cutAt = link.cut()
	n := e.nodeWhen(cluster, worker, v1.NodeNotReady)
	healAt = link.heal()
	lastBeat := lastHeartbeat(t, n)
	readyAt := e.waitNodeState(cluster, worker, v1.NodeReady)
	e.waitKubeReady(cluster, worker, true)
	down := readyAt.Sub(lastBeat)
	t.Logf("short cut: %s; NOT_READY after %s; READY %s after the heal, %s after the last heartbeat before the cut (unhealthyTimeout %s)",
		healAt.Sub(cutAt).Round(time.Millisecond), n.seen.Sub(cutAt).Round(time.Millisecond),
		readyAt.Sub(healAt).Round(time.Millisecond), down.Round(time.Millisecond), timeout)
	if down >= timeout {
		t.Fatalf("the short cut kept the node unhealthy for %s, not less than unhealthyTimeout %s: the test proves nothing", down, timeout)
	}
	if ops := e.repairs(cluster); len(ops) != 0 {
		t.Errorf("a partition shorter than unhealthyTimeout started a repair: %+v", ops)
	}
	if _, id := e.nodeContainer("default", cluster, worker); id != containerID {
		t.Errorf("the worker is container %s after the short cut, was %s", id, containerID)
	}
	if pid := kubeletPID(t, link.container); pid != kubelet {
		t.Errorf("the worker's kubelet is pid %d after the short cut, was %d", pid, kubelet)
	}
	if d := cmp.Diff(instructionsBefore, e.instructions(cluster, worker)); d != "" {
		t.Errorf("the worker's instructions changed across the short cut (-before +after):\n%s", d)
	}
	if d := cmp.Diff(journalBefore, journalEntries(t, copyAgentDir(t, link.container))); d != "" {
		t.Errorf("the worker's journal changed across the short cut (-before +after):\n%s", d)
	}

	t.Log("3: the worker's link is cut, once Ready, for longer than unhealthyTimeout")
	image := docker(t, "inspect", "-f", "{{.Config.Image}}", link.container)
	hosts := strings.Fields(docker(t, "inspect", "-f", `{{range .HostConfig.ExtraHosts}}{{.}} {{end}}`, link.container))
	uid := e.mustKubectl(cluster, "get", "node", worker, "-o", "jsonpath={.metadata.uid}")
	cutAt = link.cut()
	n = e.nodeWhen(cluster, worker, v1.NodeNotReady)
	lastBeat = lastHeartbeat(t, n)
	oldIdentity := copyAgentDir(t, link.container)
	var repair *v1.Operation
	waitfor.Cond(t, "a repair operation to start", 3*time.Minute, func() (bool, error) {
		if ops := e.repairs(cluster); len(ops) > 0 {
			repair = &ops[0]
			return true, nil
		}
		return false, nil
	})
	after := repair.StartTime.Sub(lastBeat)
	t.Logf("long cut: NOT_READY after %s; the repair %s started %s after the cut, %s after the last heartbeat (unhealthyTimeout %s)",
		n.seen.Sub(cutAt).Round(time.Millisecond), repair.ID, repair.StartTime.Sub(cutAt).Round(time.Millisecond), after.Round(time.Millisecond), timeout)
	if after < timeout {
		t.Errorf("the repair started %s after the node's last heartbeat, before its unhealthyTimeout %s", after, timeout)
	}
	repair = e.finish(repair.ID)
	if repair.Status != v1.OpSucceeded {
		t.Fatalf("repair %s: %s %+v", repair.ID, repair.Status, repair.Error)
	}
	if out, err := exec.Command("docker", "inspect", containerID).CombinedOutput(); err == nil {
		t.Errorf("the partitioned worker's container %s is still there after the repair:\n%s", containerID, out)
	}
	newName, newID := e.nodeContainer("default", cluster, worker)
	if newID == containerID {
		t.Fatalf("the worker is still container %s after the repair", newID)
	}
	e.waitKubeReady(cluster, worker, true)
	nodes := e.kubeNodes(cluster)
	if names := slices.Sorted(maps.Keys(nodes)); !slices.Equal(names, []string{cluster + "-cp-0", worker}) {
		t.Errorf("Kubernetes' nodes after the repair: %v", names)
	}
	if now := e.mustKubectl(cluster, "get", "node", worker, "-o", "jsonpath={.metadata.uid}"); now == uid {
		t.Errorf("Kubernetes' node %s is the object of the replaced machine (uid %s)", worker, uid)
	}
	newAddress := containerAddress(t, newName)
	if ip := e.mustKubectl(cluster, "get", "node", worker, "-o", `jsonpath={.status.addresses[?(@.type=="InternalIP")].address}`); ip != newAddress {
		t.Errorf("Kubernetes' node %s has the address %s, want the new container's %s", worker, ip, newAddress)
	}
	e.installedOnce(cluster, worker, copyAgentDir(t, newName))
	if ns, err := e.c.ListNodes(ctx, "default", cluster); err != nil || len(ns) != 2 {
		t.Errorf("Kiln's nodes after the repair: %+v %v, want 2", ns, err)
	}

	// The old node comes back: its agent, with the identity it had,
	// on the cluster's network.
	args := []string{"run", "--name", "kiln-e2e-old-" + strconv.FormatInt(time.Now().UnixNano(), 36),
		"--network", link.network, "-v", oldIdentity + ":" + agentDataDir, "--entrypoint", "kiln-agent"}
	for _, h := range hosts {
		args = append(args, "--add-host", h)
	}
	name := args[2]
	t.Cleanup(func() { _ = exec.Command("docker", "rm", "-f", name).Run() })
	docker(t, append(args, "-d", image, "run", "--data-dir", agentDataDir)...)
	waitfor.Cond(t, "the old node's agent to stop", time.Minute, func() (bool, error) {
		return docker(t, "inspect", "-f", "{{.State.Status}}", name) == "exited", nil
	})
	logs, _ := exec.Command("docker", "logs", name).CombinedOutput()
	code := docker(t, "inspect", "-f", "{{.State.ExitCode}}", name)
	t.Logf("the old node's agent exited with status %s:\n%s", code, tail(string(logs), 5))
	// The repair removed the old node, revoking its certificate.
	want := "of node " + worker + " was revoked at"
	if code == "0" || !strings.Contains(string(logs), "refused by the controller") || !strings.Contains(string(logs), want) {
		t.Errorf("the old node's agent: status %s, log without %q", code, want)
	}
	refused := false
	for _, ev := range e.events(cluster) {
		refused = refused || ev.Reason == gateway.ReasonSessionRefused && ev.Node == worker && strings.Contains(ev.Message, want)
	}
	if !refused {
		t.Errorf("no %s event for node %s saying %q", gateway.ReasonSessionRefused, worker, want)
	}
	if got, err := e.c.GetNode(ctx, "default", cluster, worker); err != nil || got.State != v1.NodeReady {
		t.Errorf("the new node after the old one tried to come back: %+v %v, want READY", got, err)
	}
	if names := slices.Sorted(maps.Keys(e.kubeNodes(cluster))); !slices.Equal(names, []string{cluster + "-cp-0", worker}) {
		t.Errorf("Kubernetes' nodes after the old node tried to come back: %v", names)
	}
}

// lastHeartbeat is the node's last heartbeat as Kiln showed it.
func lastHeartbeat(t testing.TB, n seenNode) time.Time {
	t.Helper()
	if n.LastHeartbeat == nil {
		t.Fatalf("node %s is %s with no last heartbeat", n.Name, n.State)
	}
	return *n.LastHeartbeat
}

// repairs lists the cluster's repair operations.
func (e *env) repairs(cluster string) []v1.Operation {
	e.t.Helper()
	ops, err := e.c.ListOperations(e.t.Context(), "default", cluster)
	if err != nil {
		e.t.Fatal(err)
	}
	var out []v1.Operation
	for _, op := range ops {
		if op.Properties.Kind == v1.KindRepair {
			out = append(out, op)
		}
	}
	return out
}

// kubeletPID is the pid of the kubelet in a docker node's container.
func kubeletPID(t testing.TB, container string) int {
	t.Helper()
	out := docker(t, "exec", container, "sh", "-c", "ps -eo pid=,args= | grep '[k]ubelet ' | grep -v kube-proxy")
	for l := range strings.Lines(out) {
		if f := strings.Fields(l); len(f) > 1 {
			if pid, err := strconv.Atoi(f[0]); err == nil {
				return pid
			}
		}
	}
	t.Fatalf("no kubelet in %s:\n%s", container, out)
	return 0
}
