package daemon

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"golang.org/x/sync/errgroup"

	"kiln.dev/kiln/api/client"
	v1 "kiln.dev/kiln/api/v1"
)

// startDev starts an all-in-one dev kilnd in this process and returns a
// client logged in with its admin token.
func startDev(tb testing.TB) *client.Client {
	tb.Helper()
	d, err := Start(tb.Context(), Config{
		DataDir:     tb.TempDir(),
		Listen:      "127.0.0.1:0",
		AgentListen: "127.0.0.1:0",
		Dev:         true,
		Logger:      slog.New(slog.NewTextHandler(io.Discard, nil)),
	})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if err := d.Shutdown(ctx); err != nil {
			tb.Errorf("shutdown: %v", err)
		}
	})
	return client.New(d.URL, d.Token, client.WithCA(d.CACert))
}

func simCluster(name string, workers int, labels map[string]string) *v1.Cluster {
	return &v1.Cluster{Name: name, Spec: v1.ClusterSpec{
		Provider:     "sim",
		ControlPlane: v1.ControlPlane{Size: 1},
		WorkerPools:  []v1.WorkerPool{{Name: "default", Size: workers}},
		Labels:       labels,
	}}
}

func wait(t *testing.T, c *client.Client, opID string) *v1.Operation {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	op, err := c.WaitOperation(ctx, opID, nil)
	if err != nil {
		t.Fatalf("wait for operation %s: %v", opID, err)
	}
	return op
}

func nodeNames(t *testing.T, c *client.Client, cluster string) []string {
	t.Helper()
	nodes, err := c.ListNodes(t.Context(), "default", cluster)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, n := range nodes {
		if n.State != v1.NodeReady {
			t.Errorf("node %s is %s, want READY", n.Name, n.State)
		}
		names = append(names, n.Name)
	}
	slices.Sort(names)
	return names
}

// TestCreateScaleDelete drives a cluster through its life on the sim
// provider, through the HTTP API and the Go client, as a user would.
func TestCreateScaleDelete(t *testing.T) {
	ctx := t.Context()
	c := startDev(t)

	_, opID, err := c.CreateCluster(ctx, "default", simCluster("life", 2, nil))
	if err != nil {
		t.Fatal(err)
	}
	op := wait(t, c, opID)
	if op.Status != v1.OpSucceeded || op.PercentComplete != 100 || op.Properties.Kind != v1.KindCreate {
		t.Fatalf("create: status %s, %d%%, kind %s, error %+v", op.Status, op.PercentComplete, op.Properties.Kind, op.Error)
	}
	for _, s := range op.Properties.Steps {
		want := v1.StepSucceeded
		if s.Name == "ensure-cluster-pki" || s.Name == "install-access" || s.Name == "install-network-policy" || s.Name == "apply-profile" {
			want = v1.StepSkipped // the sim's machines run no agent; no kube-router; the cluster has no profile
		}
		if s.State != want || s.Attempts != 1 {
			t.Errorf("create step %s: %s after %d attempts", s.Name, s.State, s.Attempts)
		}
	}
	cl, err := c.GetCluster(ctx, "default", "life")
	if err != nil {
		t.Fatal(err)
	}
	if cl.Status.ProvisioningState != v1.StateSucceeded || cl.Status.Endpoint == "" || cl.Status.Nodes.Ready != 3 {
		t.Errorf("after create: %+v", cl.Status)
	}
	if diff := cmp.Diff([]string{"life-cp-0", "life-default-0", "life-default-1"}, nodeNames(t, c, "life")); diff != "" {
		t.Errorf("nodes after create (-want +got):\n%s", diff)
	}

	// Scale up with an etag-guarded replace.
	cl.Spec.WorkerPools[0].Size = 4
	_, opID, err = c.PutCluster(ctx, "default", cl, cl.ETag)
	if err != nil {
		t.Fatal(err)
	}
	if op := wait(t, c, opID); op.Status != v1.OpSucceeded || op.Properties.Kind != v1.KindUpdate {
		t.Fatalf("scale up: %s %+v", op.Status, op.Error)
	}
	if got := len(nodeNames(t, c, "life")); got != 5 {
		t.Errorf("after scale up: %d nodes, want 5", got)
	}

	// The etag read before the scale is stale now.
	var stale *client.APIError
	if _, _, err := c.PutCluster(ctx, "default", cl, cl.ETag); !errors.As(err, &stale) || stale.StatusCode != 412 {
		t.Errorf("replace with a stale etag: %v, want 412", err)
	}

	// Scale down with a merge patch: the newest workers go first.
	_, opID, err = c.PatchCluster(ctx, "default", "life", map[string]any{
		"spec": map[string]any{"workerPools": []map[string]any{{"name": "default", "size": 1}}},
	})
	if err != nil {
		t.Fatal(err)
	}
	if op := wait(t, c, opID); op.Status != v1.OpSucceeded {
		t.Fatalf("scale down: %s %+v", op.Status, op.Error)
	}
	if diff := cmp.Diff([]string{"life-cp-0", "life-default-0"}, nodeNames(t, c, "life")); diff != "" {
		t.Errorf("nodes after scale down (-want +got):\n%s", diff)
	}

	opID, err = c.DeleteCluster(ctx, "default", "life")
	if err != nil {
		t.Fatal(err)
	}
	if op := wait(t, c, opID); op.Status != v1.OpSucceeded || op.Properties.Kind != v1.KindDelete {
		t.Fatalf("delete: %s %+v", op.Status, op.Error)
	}
	if _, err := c.GetCluster(ctx, "default", "life"); !client.IsNotFound(err) {
		t.Errorf("get after delete: %v, want 404", err)
	}
}

// TestConflictWhileRunning: a change while an operation runs is refused with
// a 409 naming it, and is accepted once the operation has ended.
func TestConflictWhileRunning(t *testing.T) {
	ctx := t.Context()
	c := startDev(t)
	_, opID, err := c.CreateCluster(ctx, "default", simCluster("busy", 1, map[string]string{"sim.kiln.dev/step-latency": "100ms"}))
	if err != nil {
		t.Fatal(err)
	}
	_, _, err = c.PatchCluster(ctx, "default", "busy", map[string]any{"spec": map[string]any{"labels": map[string]string{"x": "y"}}})
	var apiErr *client.APIError
	if !errors.As(err, &apiErr) || apiErr.StatusCode != 409 || apiErr.Err.Code != v1.CodeConflict ||
		!strings.Contains(apiErr.Err.Message+apiErr.Err.Target, opID) {
		t.Fatalf("patch during create: %v; want 409 naming %s", err, opID)
	}
	wait(t, c, opID)
	if _, _, err := c.PatchCluster(ctx, "default", "busy", map[string]any{"spec": map[string]any{"labels": map[string]string{"x": "y"}}}); err != nil {
		t.Fatalf("patch after create: %v", err)
	}
}

// TestTerminalFailureIsReported: an injected terminal fault fails the
// operation and the cluster with a code, the step and a message.
func TestTerminalFailureIsReported(t *testing.T) {
	ctx := t.Context()
	c := startDev(t)
	_, opID, err := c.CreateCluster(ctx, "default", simCluster("doomed", 1, map[string]string{"sim.kiln.dev/fail-terminal": "ensure-worker-machines"}))
	if err != nil {
		t.Fatal(err)
	}
	op := wait(t, c, opID)
	if op.Status != v1.OpFailed || op.Error == nil || op.Error.Code != v1.CodeProviderError {
		t.Fatalf("operation: %s %+v; want Failed with ProviderError", op.Status, op.Error)
	}
	cl, err := c.GetCluster(ctx, "default", "doomed")
	if err != nil {
		t.Fatal(err)
	}
	le := cl.Status.LastError
	if cl.Status.ProvisioningState != v1.StateFailed || cl.Status.FailedProvisioningState != v1.StateCreating ||
		le == nil || le.Step != "ensure-worker-machines" || le.Code != v1.CodeProviderError || le.Retryable {
		t.Errorf("cluster status: %+v, lastError %+v", cl.Status, le)
	}
}

// BenchmarkCreateToSucceeded measures create-to-Succeeded on the sim
// provider with zero step latency, through the HTTP API: one cluster at a
// time (latency), then waves of 8 concurrent clients (throughput).
func BenchmarkCreateToSucceeded(b *testing.B) {
	c := startDev(b)
	ctx := b.Context()
	create := func(name string) error {
		_, opID, err := c.CreateCluster(ctx, "default", simCluster(name, 2, nil))
		if err != nil {
			return err
		}
		op, err := c.WaitOperation(ctx, opID, nil)
		if err == nil && op.Status != v1.OpSucceeded {
			err = fmt.Errorf("create %s: %s %+v", name, op.Status, op.Error)
		}
		return err
	}
	b.Run("sequential", func(b *testing.B) {
		for i := 0; b.Loop(); i++ {
			if err := create(fmt.Sprintf("seq-%d", i)); err != nil {
				b.Fatal(err)
			}
		}
		b.ReportMetric(float64(b.Elapsed().Milliseconds())/float64(b.N), "ms/cluster")
	})
	b.Run("parallel-8", func(b *testing.B) {
		const wave = 64
		for i := 0; b.Loop(); i++ {
			names := make(chan string, wave)
			for j := range wave {
				names <- fmt.Sprintf("par-%d-%d", i, j)
			}
			close(names)
			var g errgroup.Group
			for range 8 {
				g.Go(func() error {
					for n := range names {
						if err := create(n); err != nil {
							return err
						}
					}
					return nil
				})
			}
			if err := g.Wait(); err != nil {
				b.Fatal(err)
			}
		}
		b.ReportMetric(float64(wave*b.N)/b.Elapsed().Seconds(), "clusters/s")
	})
}
