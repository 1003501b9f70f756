// Package gatewaytest runs a real agent gateway for tests: a SQLite store in
// a temporary directory, the gateway's handler behind TLS on loopback with
// a serving certificate from a fresh agent CA, and helpers to create
// clusters with their secrets as a create plan would. Tests only.
package gatewaytest

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	v1 "kiln.dev/kiln/api/v1"
	"kiln.dev/kiln/internal/gateway"
	"kiln.dev/kiln/internal/store"
	"kiln.dev/kiln/internal/store/sqlite"
	"kiln.dev/kiln/internal/trust"
	"kiln.dev/kiln/test/waitfor"
)

// Logger is a debug logger writing to t's output until t's cleanups run.
// A session runs on a goroutine of its own that the gateway does not wait
// for: once an Env's Stop closed its connection, it may log its end after
// the test has completed, and a write to a completed test's output panics.
// Such late lines are dropped.
func Logger(t testing.TB) *slog.Logger {
	w := &untilCleanup{w: t.Output()}
	t.Cleanup(w.stop)
	return slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

// untilCleanup writes to w until stop.
type untilCleanup struct {
	mu      sync.Mutex
	w       io.Writer
	stopped bool
}

func (u *untilCleanup) Write(p []byte) (int, error) {
	u.mu.Lock()
	defer u.mu.Unlock()
	if u.stopped {
		return len(p), nil
	}
	return u.w.Write(p)
}

func (u *untilCleanup) stop() {
	u.mu.Lock()
	defer u.mu.Unlock()
	u.stopped = true
}

// Project is the project every cluster of an Env is in.
const Project = "p"

// Store is the store of an Env: what the gateway needs, and what tests do
// beside it: begin and claim a cluster's create, keep its secrets and issue
// instructions as its plan would (trust's functions, with the cluster
// secret updates), and read what the gateway wrote.
type Store interface {
	gateway.Store
	store.Projects
	store.Clusters
	store.Leases
	store.Nodes
	store.NodeLogs
	store.Instructions
	store.Events
	store.ClusterSecrets
}

// Env is a running gateway.
type Env struct {
	T       testing.TB
	Store   Store
	Gateway *gateway.Gateway
	CAPEM   []byte // the agent CA: agents trust it as the controller's
	URL     string // https://127.0.0.1:PORT

	tlsConfig *tls.Config
	addr      string
	mu        sync.Mutex
	srv       *http.Server
	done      chan struct{}
	// partitioned and conns are Partition's (partition.go).
	partitioned bool
	dropped     int
	conns       map[*partConn]bool
	// handlers counts running requests: sessions outlive Server.Close
	// (hijacked), and must not log after the test ended.
	handlers sync.WaitGroup
}

// New starts a gateway with opts (Store and Logger are filled in).
func New(t testing.TB, opts gateway.Options) *Env {
	t.Helper()
	dir := t.TempDir()
	opened, err := sqlite.Open(t.Context(), filepath.Join(dir, "kiln.db"))
	if err != nil {
		t.Fatalf("open store: %v", err)
	}
	st, ok := opened.(Store)
	if !ok {
		t.Fatalf("the SQLite store %T does not update cluster secrets", opened)
	}
	if err := st.PutProject(t.Context(), &v1.Project{Name: Project, ID: "/v1/projects/" + Project}, store.Cond{}); err != nil {
		t.Fatalf("put project: %v", err)
	}
	ca, err := gateway.EnsureAgentCA(dir)
	if err != nil {
		t.Fatalf("agent CA: %v", err)
	}
	cfg, err := gateway.ServerTLSConfig(ca, "127.0.0.1:0")
	if err != nil {
		t.Fatalf("TLS config: %v", err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	e := &Env{T: t, Store: st, CAPEM: ca.CertPEM(), tlsConfig: cfg, addr: ln.Addr().String()}
	e.URL = "https://" + e.addr
	opts.Store = st
	if opts.Logger == nil {
		opts.Logger = Logger(t)
	}
	opts.Controller, opts.ControllerCA = e.URL, e.CAPEM
	e.Gateway = gateway.New(opts)
	e.serve(ln)
	ctx, cancel := context.WithCancel(context.Background())
	swept := make(chan struct{})
	go func() { defer close(swept); e.Gateway.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		<-swept
		e.Stop()
		opened.Close()
	})
	return e
}

func (e *Env) serve(ln net.Listener) {
	h := e.Gateway.Handler()
	counted := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		e.handlers.Add(1)
		defer e.handlers.Done()
		h.ServeHTTP(w, r)
	})
	srv := &http.Server{Handler: counted, TLSConfig: e.tlsConfig.Clone(), ReadHeaderTimeout: 10 * time.Second}
	done := make(chan struct{})
	go func() { defer close(done); srv.ServeTLS(partListener{Listener: ln, e: e}, "", "") }()
	e.mu.Lock()
	e.srv, e.done = srv, done
	e.mu.Unlock()
}

// Stop closes every session and the listener: agents cannot connect until
// Start.
func (e *Env) Stop() {
	e.mu.Lock()
	srv, done := e.srv, e.done
	e.srv = nil
	e.mu.Unlock()
	if srv == nil {
		return
	}
	e.releaseSilenced()
	e.Gateway.CloseSessions()
	srv.Close()
	<-done
	e.handlers.Wait()
}

// Start serves again on the same address after Stop.
func (e *Env) Start() {
	e.T.Helper()
	var ln net.Listener
	// The port may still be being released.
	waitfor.Cond(e.T, "listening again on "+e.addr, 5*time.Second, func() (bool, error) {
		var err error
		ln, err = net.Listen("tcp", e.addr)
		return err == nil, waitfor.NotYet(err)
	})
	e.serve(ln)
}

// Cluster is a cluster created by CreateCluster.
type Cluster struct {
	Key         store.Key
	Fence       store.Fence
	Credentials v1.AgentCredentials
	Passphrase  string
}

// CreateCluster writes cluster name (Creating, with spec), takes its lease
// and ensures its secrets, as the first step of a create plan does.
func (e *Env) CreateCluster(name string, spec v1.ClusterSpec) *Cluster {
	e.T.Helper()
	ctx := context.Background()
	k := store.Key{Project: Project, Name: name}
	cl := &store.Cluster{Project: Project, Name: name, Spec: spec, Status: v1.ClusterStatus{ProvisioningState: v1.StateCreating}}
	op := &store.Operation{ID: "op-" + name, Project: Project, Cluster: name, Kind: v1.KindCreate, Status: v1.OpInProgress, StartTime: time.Now()}
	if err := e.Store.BeginOperation(ctx, cl, op, store.Cond{IfNoneMatch: "*"}); err != nil {
		e.T.Fatalf("create cluster %s: %v", name, err)
	}
	var fence store.Fence
	for {
		got, err := e.Store.ClaimCluster(ctx, "test-"+name, time.Hour)
		if err != nil {
			e.T.Fatalf("claim cluster %s: %v", name, err)
		}
		if got.Name == name {
			fence = got.Lease.Fence()
			break
		}
	}
	s, err := trust.EnsureSecrets(ctx, e.Store, k, fence, 0)
	if err != nil {
		e.T.Fatalf("ensure secrets of %s: %v", name, err)
	}
	if !s.Created {
		e.T.Fatalf("secrets of new cluster %s not created", name)
	}
	creds, pass, err := e.Gateway.Credentials(ctx, k)
	if err != nil {
		e.T.Fatalf("credentials of %s: %v", name, err)
	}
	if pass != s.Passphrase || creds.Secret != s.CredentialSecret || creds.ID != s.CredentialID {
		e.T.Fatalf("stored clear credentials of %s differ from those created", name)
	}
	return &Cluster{Key: k, Fence: fence, Credentials: creds, Passphrase: pass}
}

// WriteCredentials writes the credentials file and the passphrase file of c
// into dir and returns their paths.
func (c *Cluster) WriteCredentials(t testing.TB, dir string) (creds, pass string) {
	t.Helper()
	creds, pass = filepath.Join(dir, "credentials.json"), filepath.Join(dir, "passphrase")
	if err := writeJSON(creds, c.Credentials); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(pass, []byte(c.Passphrase+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return creds, pass
}

// Issue writes an instruction for node of c, as a plan step does, and
// wakes the node's session.
func (e *Env) Issue(c *Cluster, node, id, kind string) {
	e.T.Helper()
	in := &store.Instruction{Project: c.Key.Project, Cluster: c.Key.Name, Node: node,
		Instruction: v1.Instruction{ID: id, Kind: kind}}
	if err := e.Store.PutInstruction(context.Background(), in, store.Cond{Fence: &c.Fence}); err != nil && !errors.Is(err, store.ErrExists) {
		e.T.Fatalf("put instruction %s: %v", id, err)
	}
	e.Gateway.Notify(c.Key, node)
}

func writeJSON(path string, v any) error {
	data, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(path, data, 0o600)
}
