package e2e

import (
	"fmt"
	"net"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	v1 "kiln.dev/kiln/api/v1"
	"kiln.dev/kiln/internal/agent/journal"
	"kiln.dev/kiln/internal/store"
	"kiln.dev/kiln/internal/store/sqlite"
	"kiln.dev/kiln/test/kilndtest"
)

// TestKilndLostMidInstall: kilnd is killed while nodes install; agents lose
// their sessions, keep installing, and reconnect with backoff to the kilnd
// that comes back. The operation ends Succeeded, each node got exactly one
// install instruction, and each ran once.
func TestKilndLostMidInstall(t *testing.T) {
	agentPort := freePort(t) // agents find the restarted kilnd at the same address
	args := []string{"--agent-listen", fmt.Sprintf("127.0.0.1:%d", agentPort), "--lease-ttl", "3s", "--lease-heartbeat", "1s"}
	e := start(t, "kilnd-before", args...)
	_, opID, err := e.c.CreateCluster(t.Context(), "default", localCluster("re", 1, true, 2))
	if err != nil {
		t.Fatal(err)
	}
	kilndtest.WaitFor(t, "the control plane's install to be under way", 2*time.Minute, func() (bool, error) {
		n, err := e.c.GetNode(t.Context(), "default", "re", "re-cp-0")
		if v1.IsNotFound(err) {
			return false, nil
		}
		return err == nil && n.State == v1.NodeProvisioning, err
	})
	e.k.Kill(syscall.SIGKILL)

	e.startKilnd("kilnd-after", args...)
	op := e.wait("re", opID)
	if op.Status != v1.OpSucceeded {
		t.Fatalf("operation %s", op.Status)
	}

	st, err := sqlite.Open(t.Context(), filepath.Join(e.data, "kiln.db"), kilndtest.Sealer(t, e.data))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	k := store.Key{Project: "default", Name: "re"}
	for _, node := range []string{"re-cp-0", "re-default-0", "re-default-1"} {
		ins, err := st.ListInstructions(t.Context(), k, node, false)
		if err != nil {
			t.Fatal(err)
		}
		if len(ins) != 1 || ins[0].Result == nil || ins[0].Result.State != v1.StepSucceeded {
			t.Errorf("node %s: %d instructions (want exactly one, Succeeded): %+v", node, len(ins), ins)
			continue
		}
		// The agent's journal counts every run it started, across its own
		// restarts: the instruction ran once. (Progress events cannot say
		// so: one the agent sent to the kilnd that was killed is lost.)
		j, err := journal.Open(filepath.Join(e.data, "machines", "default", "re", node, "agent"), nil)
		if err != nil {
			t.Fatal(err)
		}
		entry, ok, err := j.Get(ins[0].ID)
		if err != nil {
			t.Fatal(err)
		}
		runs := entry.Attempts
		if !ok {
			runs = 0
		}
		if runs != 1 {
			t.Errorf("node %s ran its install %d times, want once", node, runs)
		}
	}
	if nodes := e.kubeNodes("re"); len(nodes) != 3 {
		t.Errorf("%d nodes in Kubernetes after the restart, want 3", len(nodes))
	}
}

func freePort(t *testing.T) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}
