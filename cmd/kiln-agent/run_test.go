package main

import (
	"bytes"
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	v1 "kiln.dev/kiln/api/v1"
	"kiln.dev/kiln/internal/gateway"
	"kiln.dev/kiln/internal/gateway/gatewaytest"
)

// syncBuffer is a bytes.Buffer safe for the agent's goroutines.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// One command line starts a node: run joins first, then holds the session;
// the placeholder executor fails instructions, saying why.
func TestRunJoinsFirst(t *testing.T) {
	e := gatewaytest.New(t, gateway.Options{})
	c := e.CreateCluster("c", v1.ClusterSpec{NodeApproval: "auto"})
	creds, pass := c.WriteCredentials(t, t.TempDir())
	dataDir := t.TempDir()

	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan int, 1)
	var stderr syncBuffer
	go func() {
		done <- run(ctx, []string{"run", "--data-dir", dataDir, "--credentials", creds, "--passphrase", pass,
			"--node-name", "c-w-0", "--root", fixture(t, "nameserver 127.0.0.53\n")}, &syncBuffer{}, &stderr)
	}()
	defer func() {
		cancel()
		select {
		case code := <-done:
			if code != exitOK {
				t.Errorf("run exited %d:\n%s", code, stderr.String())
			}
		case <-time.After(10 * time.Second):
			t.Error("run did not stop")
		}
	}()
	gatewaytest.Eventually(t, 30*time.Second, "the node record", func() bool {
		_, err := e.Store.GetNode(context.Background(), c.Key, "c-w-0")
		return err == nil
	})
	e.Issue(c, "c-w-0", "i-1", v1.InstructionInstall)
	gatewaytest.Eventually(t, 30*time.Second, "the result of i-1", func() bool {
		in, err := e.Store.GetInstruction(context.Background(), "i-1")
		return err == nil && in.Result != nil
	})
	in, _ := e.Store.GetInstruction(context.Background(), "i-1")
	if in.Result.State != v1.StepFailed || !strings.Contains(in.Result.Message, "no distribution installed on this agent") {
		t.Errorf("result %+v", in.Result)
	}

	// Without an identity and without credentials: a usage error.
	code, _, errOut := runAgent(t, "run", "--data-dir", t.TempDir())
	if code != exitUsage || !strings.Contains(errOut, "no node identity") {
		t.Errorf("run without identity: exit %d, %q", code, errOut)
	}
}
