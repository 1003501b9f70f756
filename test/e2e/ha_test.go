package e2e

import (
	"path/filepath"
	"slices"
	"testing"
	"time"

	v1 "kiln.dev/kiln/api/v1"
	"kiln.dev/kiln/internal/gateway"
	"kiln.dev/kiln/test/waitfor"
)

// TestThreeControlPlanes: a cluster of three control-plane nodes keeps
// answering through its load balancer, and keeps accepting writes, when one
// node's processes are killed; Kiln shows that node NOT_READY.
func TestThreeControlPlanes(t *testing.T) {
	t.Parallel()
	e := start(t, "kilnd")
	start := time.Now()
	e.create(localCluster("ha", 3, false, 0))
	t.Logf("3 control planes: create to Succeeded in %s", time.Since(start).Round(time.Millisecond))

	nodes := e.kubeNodes("ha")
	for _, n := range []string{"ha-cp-0", "ha-cp-1", "ha-cp-2"} {
		if !nodes[n].ready() {
			t.Fatalf("node %s not Ready: %+v", n, nodes[n])
		}
	}

	// Lose the first control-plane node: its agent, etcd, apiserver, ...
	dead := filepath.Join(e.data, "machines", "default", "ha", "ha-cp-0")
	killProcessesUnder(t, dead)
	waitfor.Cond(t, "ha-cp-0's processes to be gone", 30*time.Second, func() (bool, error) {
		return len(processesUnder(dead)) == 0, nil
	})

	// The API answers and writes through the load balancer (two etcd members
	// of three are a quorum).
	waitfor.Cond(t, "the API to answer without ha-cp-0", 60*time.Second, func() (bool, error) {
		_, err := e.kubectl("ha", "create", "configmap", "after-loss", "--from-literal=ok=yes")
		return err == nil, nil
	})
	if got := e.mustKubectl("ha", "get", "configmap", "after-loss", "-o", "jsonpath={.data.ok}"); got != "yes" {
		t.Errorf("configmap written after the loss reads %q", got)
	}

	// Kiln notices the node is gone: it marks it NOT_READY, and its event
	// says so. (The state itself may be READY again by the time the test
	// looks: the machine health check starts a stopped control-plane machine
	// a moment later, 0.4 s in a run beside three other tests.)
	waitfor.Cond(t, "Kiln to mark ha-cp-0 NOT_READY (its NodeNotReady event)", time.Minute, func() (bool, error) {
		return slices.ContainsFunc(e.events("ha"), func(ev v1.Event) bool {
			return ev.Reason == gateway.ReasonNotReady && ev.Node == "ha-cp-0"
		}), nil
	})
}
