package process

import (
	"io"
	"net/http"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"kiln.dev/kiln/api/client"
	v1 "kiln.dev/kiln/api/v1"
	"kiln.dev/kiln/internal/store"
	"kiln.dev/kiln/internal/store/sqlite"
	"kiln.dev/kiln/test/kilndtest"
	"kiln.dev/kiln/test/waitfor"
)

// TestSigtermHandsLeasesBack stops kilnd with SIGTERM while a plan is stuck
// in a step: kilnd stops claiming, waits the drain timeout, cancels the run
// and releases its lease at once (the lease is free in the store, not left
// to expire), exits 0, and a new kilnd finishes the operation.
func TestSigtermHandsLeasesBack(t *testing.T) {
	ctx := t.Context()
	data := t.TempDir()
	args := []string{"--dev", "--data-dir", data, "--drain-timeout", "1s", "--lease-ttl", "1h", "--lease-heartbeat", "1s"}
	first := startKilnd(t, "kilnd-draining", nil, args...)
	c := first.Client(readToken(t, data))

	cl := simCluster("stuck", 0, 1)
	cl.Spec.Labels = map[string]string{"sim.kiln.dev/hang-step": "ensure-network"}
	_, opID, err := c.CreateCluster(ctx, "default", cl)
	if err != nil {
		t.Fatal(err)
	}
	waitfor.Cond(t, "ensure-network to be running", 30*time.Second, func() (bool, error) {
		op, err := c.GetOperation(ctx, opID)
		if err != nil {
			return false, err
		}
		return stepState(op, "ensure-network") == v1.StepRunning, nil
	})

	// A client in the middle of a long-poll must not hold the shutdown up:
	// it gets the current state at once.
	req, err := http.NewRequestWithContext(ctx, "GET", first.URL()+"/v1/operations/"+opID+"?wait=60s", nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+readToken(t, data))
	type answer struct {
		status int
		err    error
	}
	polled := make(chan answer, 1)
	go func() {
		resp, err := first.HTTPClient().Do(req)
		if err != nil {
			polled <- answer{err: err}
			return
		}
		resp.Body.Close()
		polled <- answer{status: resp.StatusCode}
	}()

	waitfor.Cond(t, "the long-poll to wait", 30*time.Second, func() (bool, error) {
		return metric(t, first, data, "kiln_http_long_polls_waiting") == "1", nil
	})
	first.Kill(syscall.SIGTERM)
	if code := first.ExitCode(); code != 0 {
		t.Fatalf("kilnd exited with %d after SIGTERM; log:\n%s", code, first.LogText())
	}
	select {
	case a := <-polled:
		if a.err != nil || a.status != http.StatusOK {
			t.Errorf("long-poll open at shutdown: status %d, error %v; want 200 with the current state", a.status, a.err)
		}
	case <-time.After(30 * time.Second):
		t.Error("a long-poll was still open after kilnd exited")
	}

	// With a one-hour TTL, only a release makes the cluster claimable now.
	st, err := sqlite.Open(ctx, filepath.Join(data, "kiln.db"))
	if err != nil {
		t.Fatal(err)
	}
	got, err := st.GetCluster(ctx, store.Key{Project: "default", Name: "stuck"})
	st.Close()
	if err != nil {
		t.Fatal(err)
	}
	if got.Lease.Owner != "" || got.Lease.Expiry.After(time.Now()) {
		t.Fatalf("after SIGTERM the lease is still held: %+v", got.Lease)
	}

	// A new kilnd without the hang finishes the job.
	second := startKilnd(t, "kilnd-after-drain", nil, args...)
	c = second.Client(readToken(t, data))
	if _, _, err := c.PatchCluster(ctx, "default", "stuck", map[string]any{"spec": map[string]any{"labels": nil}}); !client.IsConflict(err) {
		t.Fatalf("a change while the create is unfinished: %v, want 409", err)
	}
}

// metric reads one unlabelled metric's value from kilnd's /metrics.
func metric(t *testing.T, k *kilndtest.Kilnd, dataDir, name string) string {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), "GET", k.URL()+"/metrics", nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+readToken(t, dataDir))
	resp, err := k.HTTPClient().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	for line := range strings.SplitSeq(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, name+" "); ok {
			return v
		}
	}
	return ""
}

func stepState(op *v1.Operation, name string) string {
	for _, s := range op.Properties.Steps {
		if s.Name == name {
			return s.State
		}
	}
	return ""
}
