package e2e

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"kiln.dev/kiln/api/client"
	v1 "kiln.dev/kiln/api/v1"
	"kiln.dev/kiln/internal/plan"
	"kiln.dev/kiln/test/waitfor"
)

// TestDockerKills: a docker cluster is created (1+1), scaled to two workers,
// upgraded (v1.35.4 to v1.36.3), scaled back to one and deleted, and each
// operation meets one fault, at a random step, of three kinds:
//
//   - kilnd dies at the step: started before the operation with
//     --fault step.STEP.after-start (docs/faults.md), it SIGKILLs itself
//     once the step is marked Running; it is started again;
//   - the same, and while kilnd is down a node container of the cluster is
//     killed too (docker kill: SIGKILL to its init, everything in it dies
//     at once; its /var volume stays);
//   - a node container is killed while kilnd runs, as soon as kilnd's log
//     says it instructed that node (an install or an upgrade runs on it);
//     an operation that instructs no node gets the first kind instead.
//
// KILN_E2E_SEED replays a run (the seed is logged). After each operation:
//
//   - it ended in one terminal state, Succeeded: a node that died is
//     started again by the plan's next wait for it (MachineRestarted) and
//     its agent runs the instruction it had not finished again; a kilnd
//     that died resumes the operation at the step it was in;
//   - no duplicate or orphaned container: one container per Kiln node, one
//     node per container, by their machine label;
//   - no step completed twice: each of its steps has exactly one
//     StepSucceeded or StepSkipped event (written with its checkpoint), and
//     the cluster's Kubernetes has its nodes, Ready, at the version asked.
//
// After the delete nothing of the cluster is left in Docker.
func TestDockerKills(t *testing.T) {
	t.Parallel()
	seed := uint64(time.Now().UnixNano())
	if v := os.Getenv("KILN_E2E_SEED"); v != "" {
		var err error
		if seed, err = strconv.ParseUint(v, 10, 64); err != nil {
			t.Fatalf("KILN_E2E_SEED=%q: %v", v, err)
		}
	}
	t.Logf("seed %d (replay with KILN_E2E_SEED=%d)", seed, seed)
	rng := rand.New(rand.NewPCG(seed, seed))
	// The nodes reach the kilnd started again at the same address, and it
	// takes over the dead one's lease soon.
	args := []string{"--agent-listen", fmt.Sprintf("127.0.0.1:%d", freePort(t)), "--lease-ttl", "3s", "--lease-heartbeat", "1s"}
	e := startDocker(t, args...)
	args = append(args, "--system-images", systemImages)
	const cluster = "kills"
	cl := dockerCluster(cluster, "v1.35.4", 1, true, 1)
	// The health check stays out of it: a node that died is the plan's to
	// start again, not a repair's.
	cl.Spec.WorkerPools[0].UnhealthyTimeout = "30m"
	ctx := t.Context()

	// begin starts an operation (start returns its id) with one fault, and
	// returns what the fault was. instructs says whether the operation
	// instructs nodes (installs, upgrades), so that a node may be killed
	// while it carries one out.
	begin := func(kind string, instructs bool, start func() (string, error)) (opID, did string) {
		t.Helper()
		fault := rng.IntN(2)
		if instructs {
			fault = rng.IntN(3)
		}
		steps := plan.Steps(kind)
		if i := slices.Index(steps, plan.StepWaitNodesReady); fault == 1 && i > 0 {
			// A node killed after the operation's last wait for its
			// nodes stays down when it ends: the health check's to
			// repair (TestDockerCluster), not this test's.
			steps = steps[:i+1]
		}
		target := steps[rng.IntN(len(steps))]
		if fault < 2 {
			// kilnd dies at the step by itself.
			e.k.Kill(syscall.SIGKILL)
			<-e.k.Done()
			e.startKilnd("kilnd-armed", append(args, "--fault", "step."+target+".after-start")...)
		}
		before := e.operationIDs(cluster)
		opID, err := start()
		died := e.k
		// A kilnd that dies at the operation's first step may die before
		// its answer leaves: the change was recorded before the step
		// began, so the operation is found after the restart, as a
		// client that lost the answer would find it.
		lost := err != nil && fault < 2 && !errors.As(err, new(*client.APIError))
		if err != nil && !lost {
			t.Fatalf("%s: %v", kind, err)
		}
		if fault == 2 {
			node, ok := e.instructedNode(opID)
			if !ok {
				return opID, "no fault: the operation ended without instructing a node"
			}
			c := e.mustName("default", cluster, node)
			docker(t, "kill", c)
			return opID, fmt.Sprintf("docker kill %s as kilnd instructed node %s", c, node)
		}
		waitfor.Cond(t, "kilnd armed with step."+target+".after-start to die, or the operation to end", opWait, func() (bool, error) {
			select {
			case <-died.Done():
				return true, nil
			default:
			}
			if lost {
				return false, waitfor.NotYet(err)
			}
			op, err := e.c.GetOperation(ctx, opID)
			return err == nil && v1.Terminal(op.Status), nil
		})
		did = "kilnd died at step " + target
		hit := strings.Contains(died.LogText(), "kiln fault: point step."+target+".after-start hit")
		if !hit {
			did = "no fault: the operation ended without running step " + target
			died.Kill(syscall.SIGKILL)
			<-died.Done()
		}
		if containers := e.nodeContainers(cluster); hit && fault == 1 && len(containers) > 0 {
			c := containers[rng.IntN(len(containers))]
			docker(t, "kill", c)
			did += ", and docker kill " + c + " while kilnd was down"
		}
		e.startKilnd("kilnd-again", args...)
		if lost {
			opID = e.newOperation(cluster, before)
			did += ", before its answer to the " + kind + " reached the client (" + err.Error() + ")"
		}
		return opID, did
	}
	scale := func(size int) (string, error) {
		pools := slices.Clone(cl.Spec.WorkerPools)
		pools[0].Size = size
		_, id, err := e.c.PatchCluster(ctx, "default", cluster, map[string]any{"spec": map[string]any{"workerPools": pools}})
		return id, err
	}
	// check waits for the operation and checks what a user would.
	check := func(what, opID, did string, workers int, version string) {
		t.Helper()
		if opID == "" {
			// A delete whose answer was lost, over before it was
			// looked for: what is left in Docker is checked below.
			t.Logf("%s (%s): the cluster is gone", what, did)
			return
		}
		op := e.finish(opID)
		t.Logf("%s (%s): %s in %s", what, did, op.Status, op.EndTime.Sub(op.StartTime).Round(time.Second))
		if op.Status != v1.OpSucceeded {
			for _, s := range op.Properties.Steps {
				t.Logf("  %-30s %-9s attempts=%d %s", s.Name, s.State, s.Attempts, s.Message)
			}
			t.Fatalf("%s after %s: %s %+v", what, did, op.Status, op.Error)
		}
		if op.Properties.Kind == v1.KindDelete {
			return
		}
		completed := map[string]int{}
		for _, ev := range e.events(cluster) {
			if ev.Operation == opID && (ev.Reason == "StepSucceeded" || ev.Reason == "StepSkipped") {
				name, _, _ := strings.Cut(strings.TrimPrefix(ev.Message, "step "), " ")
				completed[name]++
			}
		}
		for _, s := range op.Properties.Steps {
			if completed[s.Name] != 1 {
				t.Errorf("%s: step %s completed %d times (events), want once", what, s.Name, completed[s.Name])
			}
		}
		nodes, err := e.c.ListNodes(ctx, "default", cluster)
		if err != nil {
			t.Fatal(err)
		}
		var names []string
		for _, n := range nodes {
			names = append(names, n.Name)
		}
		slices.Sort(names)
		if got := e.nodeContainers(cluster); !slices.Equal(got, e.containerNames(cluster, names)) {
			t.Errorf("%s: containers %v for nodes %v: want one each", what, got, names)
		}
		e.waitKubeNodes(cluster, names, version)
		if len(names) != 1+workers {
			t.Errorf("%s: nodes %v, want %d", what, names, 1+workers)
		}
	}

	opID, did := begin(v1.KindCreate, true, func() (string, error) {
		_, id, err := e.c.CreateCluster(ctx, "default", cl)
		return id, err
	})
	check("create", opID, did, 1, "v1.35.4")
	opID, did = begin(v1.KindUpdate, true, func() (string, error) { return scale(2) })
	check("scale to 2", opID, did, 2, "v1.35.4")
	opID, did = begin(v1.KindUpdate, true, func() (string, error) {
		_, id, err := e.c.PatchCluster(ctx, "default", cluster, map[string]any{"spec": map[string]any{"kubernetesVersion": "v1.36.3"}})
		return id, err
	})
	check("upgrade to v1.36.3", opID, did, 2, "v1.36.3")
	opID, did = begin(v1.KindUpdate, false, func() (string, error) { return scale(1) })
	check("scale to 1", opID, did, 1, "v1.36.3")
	opID, did = begin(v1.KindDelete, false, func() (string, error) {
		return e.c.DeleteCluster(ctx, "default", cluster)
	})
	check("delete", opID, did, 0, "")
	if left := e.dockerObjects("default", cluster); len(left) != 0 {
		t.Errorf("left after the delete: %v", left)
	}
}

// operationIDs is the set of the cluster's operations; empty when there is
// no such cluster.
func (e *env) operationIDs(cluster string) map[string]bool {
	e.t.Helper()
	ops, err := e.c.ListOperations(e.t.Context(), "default", cluster)
	if err != nil && !client.IsNotFound(err) {
		e.t.Fatalf("operations of %s: %v", cluster, err)
	}
	ids := map[string]bool{}
	for _, op := range ops {
		ids[op.ID] = true
	}
	return ids
}

// newOperation returns the id (its name: the bare id the create answers)
// of the one operation of the cluster not in before;
// "" when the cluster is gone (a delete that ended).
func (e *env) newOperation(cluster string, before map[string]bool) string {
	e.t.Helper()
	ops, err := e.c.ListOperations(e.t.Context(), "default", cluster)
	if client.IsNotFound(err) {
		return ""
	}
	if err != nil {
		e.t.Fatalf("operations of %s: %v", cluster, err)
	}
	var found []string
	for _, op := range ops {
		if !before[op.ID] {
			found = append(found, op.Name) // the bare id, as the create answers it; ID is its path
		}
	}
	if len(found) != 1 {
		e.t.Fatalf("operations of %s begun by the request whose answer was lost: %v, want one", cluster, found)
	}
	return found[0]
}

// instructedNode waits until kilnd's log says the operation instructed a
// node, and returns the node; false when the operation ends first.
func (e *env) instructedNode(opID string) (node string, ok bool) {
	e.t.Helper()
	re := regexp.MustCompile(`msg="instructing node" .*operation=` + regexp.QuoteMeta(opID) + ` node=(\S+)`)
	waitfor.Cond(e.t, "operation "+opID+" to instruct a node, or to end", opWait, func() (bool, error) {
		if m := re.FindStringSubmatch(e.k.LogText()); m != nil {
			node, ok = m[1], true
			return true, nil
		}
		op, err := e.c.GetOperation(e.t.Context(), opID)
		return err == nil && v1.Terminal(op.Status), nil
	})
	return node, ok
}

// nodeContainers lists the names of the cluster's containers (of the
// env's kilnd), sorted.
func (e *env) nodeContainers(cluster string) []string {
	t := e.t
	t.Helper()
	out := docker(t, append(append([]string{"ps", "-a"}, e.dockerFilter("default", cluster)...), "--format", "{{.Names}}")...)
	names := strings.Fields(out)
	slices.Sort(names)
	return names
}

// containerNames is the names the containers of nodes have, sorted.
func (e *env) containerNames(cluster string, nodes []string) []string {
	e.t.Helper()
	var out []string
	for _, n := range nodes {
		out = append(out, e.mustName("default", cluster, n))
	}
	slices.Sort(out)
	return out
}

// waitKubeNodes waits until the cluster's Kubernetes has exactly nodes,
// every one Ready with a kubelet of version.
func (e *env) waitKubeNodes(cluster string, nodes []string, version string) {
	e.t.Helper()
	waitfor.Cond(e.t, fmt.Sprintf("Kubernetes nodes %v Ready at %s", nodes, version), 3*time.Minute, func() (bool, error) {
		got, err := e.kubeNodesErr(cluster)
		if err != nil {
			return false, waitfor.NotYet(err)
		}
		var names []string
		for name, n := range got {
			if !n.ready() || n.Status.NodeInfo.KubeletVersion != version {
				return false, waitfor.NotYet(fmt.Errorf("node %s Ready=%t at %s", name, n.ready(), n.Status.NodeInfo.KubeletVersion))
			}
			names = append(names, name)
		}
		slices.Sort(names)
		return slices.Equal(names, nodes), waitfor.NotYet(fmt.Errorf("nodes %v", names))
	})
}
