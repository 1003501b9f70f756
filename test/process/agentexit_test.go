package process

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"kiln.dev/kiln/api/client"
	v1 "kiln.dev/kiln/api/v1"
	"kiln.dev/kiln/test/waitfor"
)

// TestAgentThatExitsIsReported: kilnd --dev whose local machines run an
// agent that writes a line and exits with status 3 (issue 19: the create
// waited at wait-nodes-registered with nothing to show until it was
// canceled). Within a minute, far inside the step's 20-minute timeout, the
// step's attempt fails with MachineStopped, its message saying the exit
// status and the agent's last line, and the cluster has a MachineStopped
// event of the node saying the same.
func TestAgentThatExitsIsReported(t *testing.T) {
	dir := t.TempDir()
	agent := filepath.Join(dir, "kiln-agent")
	script := "#!/bin/sh\necho 'fake agent: cannot join: nothing to join with' >&2\nexit 3\n"
	if err := os.WriteFile(agent, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	data := filepath.Join(dir, "data")
	k := startKilnd(t, "kilnd", nil, "--dev", "--data-dir", data, "--agent-binary", agent, "--kube-binary", dir)
	c := k.Client(readToken(t, data))
	ctx := t.Context()

	cl := &v1.Cluster{Name: "quits", Spec: v1.ClusterSpec{Provider: "local", ControlPlane: v1.ControlPlane{Size: 1}}}
	_, opID, err := c.CreateCluster(ctx, "default", cl)
	if err != nil {
		t.Fatal(err)
	}
	var step v1.Step
	waitfor.Cond(t, "wait-nodes-registered to fail an attempt", time.Minute, func() (bool, error) {
		op, err := c.GetOperation(ctx, opID)
		if err != nil {
			return false, err
		}
		for _, s := range op.Properties.Steps {
			if s.Name == "wait-nodes-registered" {
				step = s
			}
		}
		if v1.Terminal(op.Status) {
			return true, nil
		}
		return strings.Contains(step.Message, "failed"), nil
	})
	t.Logf("%s (%s): %s", step.Name, step.State, step.Message)
	for _, want := range []string{"quits-cp-0", "exited with status 3", "cannot join: nothing to join with"} {
		if !strings.Contains(step.Message, want) {
			t.Errorf("step %s (%s) says %q, without %q", step.Name, step.State, step.Message, want)
		}
	}
	events, err := c.ListEvents(ctx, "default", "quits")
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, ev := range events {
		if ev.Reason == "MachineStopped" && ev.Node == "quits-cp-0" &&
			strings.Contains(ev.Message, "exited with status 3") && strings.Contains(ev.Message, "cannot join") {
			found = true
		}
	}
	if !found {
		t.Errorf("no MachineStopped event of quits-cp-0 with the exit status and the log line; events: %+v", events)
	}

	// Nothing is left waiting: cancel, then delete.
	if _, err := c.CancelOperation(ctx, opID); err != nil && !client.IsConflict(err) {
		t.Fatal(err)
	}
	wctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	if _, err := c.WaitOperation(wctx, opID, nil); err != nil {
		t.Fatal(err)
	}
	delID, err := c.DeleteCluster(ctx, "default", "quits")
	if err != nil {
		t.Fatal(err)
	}
	if op, err := c.WaitOperation(wctx, delID, nil); err != nil || op.Status != v1.OpSucceeded {
		t.Fatalf("delete: %v %+v", err, op)
	}
}
