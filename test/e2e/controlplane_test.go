package e2e

import (
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"kiln.dev/kiln/test/waitfor"
)

// TestControlPlaneGrows: a one-node control plane grows to 3 and then to 5
// through PATCH, each new member joining etcd; kubectl sees every
// control-plane node Ready. The proof that the five are voting etcd members:
// with two of them killed, the API still takes writes (3 of 5 is a quorum;
// it would not be with fewer members).
func TestControlPlaneGrows(t *testing.T) {
	t.Parallel()
	e := start(t, "kilnd")
	e.create(localCluster("grow", 1, false, 0))

	for _, size := range []int{3, 5} {
		began := time.Now()
		_, opID, err := e.c.PatchCluster(t.Context(), "default", "grow",
			map[string]any{"spec": map[string]any{"controlPlane": map[string]any{"size": size}}})
		if err != nil {
			t.Fatalf("grow to %d: %v", size, err)
		}
		op := e.wait("grow", opID)
		t.Logf("grow to %d: Succeeded in %s", size, time.Since(began).Round(time.Millisecond))
		for _, s := range op.Properties.Steps {
			t.Logf("  %-30s %-9s attempts %d  %s", s.Name, s.State, s.Attempts, stepDuration(s))
		}
		nodes := e.kubeNodes("grow")
		for i := range size {
			name := fmt.Sprintf("grow-cp-%d", i)
			n, ok := nodes[name]
			if !ok || !n.ready() {
				t.Fatalf("after growing to %d: node %s present %v, Ready %v", size, name, ok, n.ready())
			}
			if _, ok := n.Metadata.Labels["node-role.kubernetes.io/control-plane"]; !ok {
				t.Errorf("node %s labels %v", name, n.Metadata.Labels)
			}
		}
		if len(nodes) != size {
			t.Errorf("after growing to %d: %d nodes in Kubernetes", size, len(nodes))
		}
	}

	// One controller-manager and one scheduler act at a time: every node's,
	// the first one's too, takes part in leader election.
	for _, p := range processesUnder(filepath.Join(e.data, "machines", "default", "grow")) {
		if strings.Contains(p, "--leader-elect=false") {
			t.Errorf("a control-plane component runs without leader election: %s", p)
		}
	}

	for _, name := range []string{"grow-cp-0", "grow-cp-1"} {
		dead := filepath.Join(e.data, "machines", "default", "grow", name)
		killProcessesUnder(t, dead)
		waitfor.Cond(t, name+"'s processes to be gone", 30*time.Second, func() (bool, error) {
			return len(processesUnder(dead)) == 0, nil
		})
	}
	waitfor.Cond(t, "the API to take a write with two of five members gone", 90*time.Second, func() (bool, error) {
		_, err := e.kubectl("grow", "create", "configmap", "quorum", "--from-literal=ok=yes")
		return err == nil, nil
	})
	if got := e.mustKubectl("grow", "get", "configmap", "quorum", "-o", "jsonpath={.data.ok}"); got != "yes" {
		t.Errorf("configmap written with two members gone reads %q", got)
	}
}
