package e2e

import (
	"fmt"
	"net"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"kiln.dev/kiln/api/client"
	v1 "kiln.dev/kiln/api/v1"
	"kiln.dev/kiln/test/waitfor"
)

// TestKilndLostMidInstall: kilnd is killed while nodes install; agents lose
// their sessions, keep installing, and reconnect with backoff to the kilnd
// that comes back. The operation ends Succeeded, each node got exactly one
// install instruction, and each ran once.
func TestKilndLostMidInstall(t *testing.T) {
	t.Parallel()
	agentPort := freePort(t) // agents find the restarted kilnd at the same address
	args := []string{"--agent-listen", fmt.Sprintf("127.0.0.1:%d", agentPort), "--lease-ttl", "3s", "--lease-heartbeat", "1s"}
	e := start(t, "kilnd-before", args...)
	_, opID, err := e.c.CreateCluster(t.Context(), "default", localCluster("re", 1, true, 2))
	if err != nil {
		t.Fatal(err)
	}
	waitfor.Cond(t, "the control plane's install to be under way", 2*time.Minute, func() (bool, error) {
		n, err := e.c.GetNode(t.Context(), "default", "re", "re-cp-0")
		if client.IsNotFound(err) {
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

	for _, node := range []string{"re-cp-0", "re-default-0", "re-default-1"} {
		e.installedOnce("re", node, filepath.Join(e.data, "machines", "default", "re", node, "agent"))
	}
	if nodes := e.kubeNodes("re"); len(nodes) != 3 {
		t.Errorf("%d nodes in Kubernetes after the restart, want 3", len(nodes))
	}
}

func freePort(t testing.TB) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}
