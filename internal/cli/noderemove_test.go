package cli

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	v1 "kiln.dev/kiln/api/v1"
)

// kiln node remove CLUSTER NODE sends DELETE .../nodes/NODE and says which
// operation removes it; it takes exactly its two arguments, and its help
// says what it does and refuses.
func TestNodeRemove(t *testing.T) {
	var mu sync.Mutex
	var got []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		got = append(got, r.Method+" "+r.URL.Path)
		mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Azure-AsyncOperation", "http://"+r.Host+"/v1/operations/op-1")
		w.WriteHeader(http.StatusAccepted)
		_ = json.NewEncoder(w).Encode(v1.Cluster{Name: "edge1", Spec: v1.ClusterSpec{Provider: "edge"},
			Status: v1.ClusterStatus{ProvisioningState: v1.StateUpdating, CurrentOperation: "op-1"}})
	}))
	t.Cleanup(srv.Close)
	env := []string{"HOME=" + t.TempDir(), "KILN_SERVER=" + srv.URL, "KILN_TOKEN=tok", "KILN_PROJECT=p"}

	code, _, stderr := runCLI(t, env, "", "node", "remove", "edge1", "host-c", "--yes")
	if code != ExitOK {
		t.Fatalf("exit %d; stderr:\n%s", code, stderr)
	}
	if want := []string{"DELETE /v1/projects/p/clusters/edge1/nodes/host-c"}; strings.Join(got, ",") != strings.Join(want, ",") {
		t.Errorf("requests %v, want %v", got, want)
	}
	if !strings.Contains(stderr, `Removing node "host-c" from cluster "edge1" (operation op-1)`) {
		t.Errorf("stderr does not name the operation:\n%s", stderr)
	}

	got = nil
	for _, args := range [][]string{{"node", "remove", "edge1"}, {"node", "remove", "edge1", "a", "b"}} {
		if code, _, _ := runCLI(t, env, "", args...); code != ExitUsage {
			t.Errorf("kiln %v: exit %d, want %d", args, code, ExitUsage)
		}
	}
	if len(got) > 0 {
		t.Errorf("a usage error sent %v", got)
	}

	_, help, _ := runCLI(t, env, "", "node", "remove", "--help")
	for _, want := range []string{"remove CLUSTER NODE", "kubeadm reset", "even number", "--wait", "--yes"} {
		if !strings.Contains(help, want) {
			t.Errorf("help lacks %q:\n%s", want, help)
		}
	}
}
