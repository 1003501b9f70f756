package agent_test

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	v1 "kiln.dev/kiln/api/v1"
	"kiln.dev/kiln/internal/agent"
	"kiln.dev/kiln/internal/agent/state"
	"kiln.dev/kiln/internal/gateway/gatewaytest"
	"kiln.dev/kiln/internal/store"
)

const wait = 10 * time.Second

var passing = []v1.PrecheckResult{{Name: "os", Result: v1.PrecheckPass, Message: "fixture"}}

func fixedPrechecks(context.Context) []v1.PrecheckResult { return passing }

func logger(t *testing.T) *slog.Logger {
	return slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelDebug}))
}

// node is one agent's data dir and options.
type node struct {
	t    *testing.T
	env  *gatewaytest.Env
	c    *gatewaytest.Cluster
	join agent.JoinOptions
}

func newNode(t *testing.T, e *gatewaytest.Env, c *gatewaytest.Cluster, name string) *node {
	dir := t.TempDir()
	creds, pass := c.WriteCredentials(t, t.TempDir())
	return &node{t: t, env: e, c: c, join: agent.JoinOptions{
		CredentialsFile: creds, PassphraseFile: pass, DataDir: dir, NodeName: name,
		Prechecks: fixedPrechecks, Logger: logger(t),
	}}
}

func (n *node) Join() {
	n.t.Helper()
	if _, err := agent.Join(context.Background(), n.join); err != nil {
		n.t.Fatalf("join: %v", err)
	}
}

// running is an agent.Run in the background.
type running struct {
	cancel context.CancelFunc
	done   chan error
	once   sync.Once
}

func (n *node) Run(ex agent.Executor) *running {
	ctx, cancel := context.WithCancel(context.Background())
	r := &running{cancel: cancel, done: make(chan error, 1)}
	go func() {
		r.done <- agent.Run(ctx, agent.RunOptions{DataDir: n.join.DataDir, Executor: ex, Prechecks: fixedPrechecks,
			MaxBackoff: 100 * time.Millisecond, Logger: logger(n.t)})
	}()
	n.t.Cleanup(func() { r.Stop(n.t) })
	return r
}

// Stop ends the agent (as a kill would, but cleanly enough for the test
// to go on) and waits for it.
func (r *running) Stop(t *testing.T) {
	r.once.Do(func() {
		r.cancel()
		select {
		case err := <-r.done:
			if err != nil {
				t.Errorf("run: %v", err)
			}
		case <-time.After(wait):
			t.Fatal("agent did not stop")
		}
	})
}

func (n *node) get(name string) *store.Node {
	n.t.Helper()
	got, err := n.env.Store.GetNode(context.Background(), n.c.Key, name)
	if err != nil {
		n.t.Fatalf("get node %s: %v", name, err)
	}
	return got
}

func (n *node) result(id string) *v1.InstructionResult {
	in, err := n.env.Store.GetInstruction(context.Background(), id)
	if err != nil {
		n.t.Fatalf("get instruction %s: %v", id, err)
	}
	return in.Result
}

// counter is a fake executor: it counts runs per instruction; an
// instruction listed in block waits for its channel (or ctx) before
// finishing.
type counter struct {
	mu      sync.Mutex
	runs    map[string]int
	done    map[string]int
	block   map[string]chan struct{}
	started chan string
}

func newCounter() *counter {
	return &counter{runs: map[string]int{}, done: map[string]int{}, block: map[string]chan struct{}{}, started: make(chan string, 16)}
}

func (c *counter) hold(id string) chan struct{} {
	c.mu.Lock()
	defer c.mu.Unlock()
	ch := make(chan struct{})
	c.block[id] = ch
	return ch
}

func (c *counter) Execute(ctx context.Context, in v1.Instruction, report agent.Reporter) error {
	c.mu.Lock()
	c.runs[in.ID]++
	ch := c.block[in.ID]
	c.mu.Unlock()
	c.started <- in.ID
	report.Progress("install", v1.StepRunning, "")
	report.Log("fake", "running "+in.ID)
	if ch != nil {
		select {
		case <-ch:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	report.Progress("install", v1.StepSucceeded, "")
	c.mu.Lock()
	c.done[in.ID]++
	c.mu.Unlock()
	return nil
}

func (c *counter) count(id string) (runs, done int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.runs[id], c.done[id]
}

func (c *counter) waitStarted(t *testing.T, id string) {
	t.Helper()
	select {
	case got := <-c.started:
		if got != id {
			t.Fatalf("executor started %s, want %s", got, id)
		}
	case <-time.After(wait):
		t.Fatalf("executor did not start %s", id)
	}
}

// refusedSaying reports whether err is the controller's refusal (it matches
// ErrRefused) as a 401 Unauthorized whose message, what the operator reads,
// contains want.
func refusedSaying(err error, want string) bool {
	var r *agent.RefusedError
	return errors.Is(err, agent.ErrRefused) && errors.As(err, &r) &&
		r.Status == http.StatusUnauthorized && r.Code == v1.CodeUnauthorized && strings.Contains(r.Message, want)
}

// tlsFiles reads the certificate files in dir (state.WriteTLSFiles) and checks them: a
// certificate and its key (mode 0600) that match, and the controller's CA of the state there. It
// returns the certificate (PEM). The files, not the state, are compared with each other: a
// renewing agent may have saved a newer state already.
func tlsFiles(dir string) (string, error) {
	st, err := saved(dir)
	if err != nil {
		return "", err
	}
	read := func(name string) ([]byte, error) { return os.ReadFile(filepath.Join(dir, filepath.FromSlash(name))) }
	cert, err := read(state.TLSCertFile)
	if err != nil {
		return "", err
	}
	key, err := read(state.TLSKeyFile)
	if err != nil {
		return "", err
	}
	if _, err := tls.X509KeyPair(cert, key); err != nil {
		return "", fmt.Errorf("%s and %s: %w", state.TLSCertFile, state.TLSKeyFile, err)
	}
	ca, err := read(state.TLSControllerCAFile)
	if err != nil {
		return "", err
	}
	if st.ControllerCA == "" || string(ca) != st.ControllerCA {
		return "", fmt.Errorf("%s is not the state's controller CA", state.TLSControllerCAFile)
	}
	info, err := os.Stat(filepath.Join(dir, filepath.FromSlash(state.TLSKeyFile)))
	if err != nil {
		return "", err
	}
	if info.Mode().Perm() != 0o600 {
		return "", fmt.Errorf("%s has mode %v, want 0600", state.TLSKeyFile, info.Mode().Perm())
	}
	return string(cert), nil
}

// saved reads the state in dir (state.File) without its key. Unlike state.Load, it changes
// nothing: Load finishes a save it finds cut short, which a running agent may be in the middle of.
func saved(dir string) (*state.State, error) {
	data, err := os.ReadFile(filepath.Join(dir, state.File))
	if err != nil {
		return nil, err
	}
	var st state.State
	if err := json.Unmarshal(data, &st); err != nil {
		return nil, err
	}
	return &st, nil
}
