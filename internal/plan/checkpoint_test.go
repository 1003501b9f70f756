package plan_test

import (
	"context"
	"errors"
	"path/filepath"
	"sync"
	"testing"
	"time"

	v1 "kiln.dev/kiln/api/v1"
	"kiln.dev/kiln/internal/plan"
	"kiln.dev/kiln/internal/provider"
	"kiln.dev/kiln/internal/provider/sim"
	"kiln.dev/kiln/internal/store"
	"kiln.dev/kiln/internal/store/postgres"
	"kiln.dev/kiln/internal/store/postgres/pgtest"
	"kiln.dev/kiln/internal/store/sqlite"
)

// resumable is the sim with an ensure-network that keeps a resume token in
// the step's checkpoint, as the azure provider keeps its pollers': the
// first attempt keeps it and dies waiting (its checkpoint handed to the
// test); an attempt that finds one drops it and makes the network.
type resumable struct {
	*sim.Sim
	kept chan provider.Checkpoint
	mu   sync.Mutex
	read []string // what each attempt found under tokenKey
}

const tokenKey = "virtualNetworks/kiln-vnet"

func (p *resumable) EnsureNetwork(ctx context.Context, c provider.Cluster) (provider.Network, error) {
	cp := provider.CheckpointOf(ctx)
	token := cp.Get(tokenKey)
	p.mu.Lock()
	p.read = append(p.read, token)
	p.mu.Unlock()
	if token == "" {
		if err := cp.Set(ctx, tokenKey, "token-1"); err != nil {
			return provider.Network{}, err
		}
		p.kept <- cp
		<-ctx.Done() // the worker dies waiting for the operation
		return provider.Network{}, ctx.Err()
	}
	if err := cp.Set(ctx, tokenKey, ""); err != nil {
		return provider.Network{}, err
	}
	return p.Sim.EnsureNetwork(ctx, c)
}

// TestCheckpointSurvivesRestart: what a step keeps in its checkpoint is
// stored with the step at once; a worker that dies in the middle of the
// step leaves it to the next, whose runner (another store handle, as after
// a restart) reads it back in its attempt at the step; the dead worker's
// lease no longer writes it; the step's success drops it. On SQLite, and
// on PostgreSQL when KILN_TEST_POSTGRES is set.
func TestCheckpointSurvivesRestart(t *testing.T) {
	t.Run("sqlite", func(t *testing.T) {
		path := filepath.Join(t.TempDir(), "kiln.db")
		testCheckpointSurvivesRestart(t, func() (store.Store, error) { return sqlite.Open(t.Context(), path) })
	})
	t.Run("postgres", func(t *testing.T) {
		url := pgtest.FreshDB(t)
		testCheckpointSurvivesRestart(t, func() (store.Store, error) { return postgres.Open(t.Context(), url) })
	})
}

func testCheckpointSurvivesRestart(t *testing.T, open func() (store.Store, error)) {
	st, err := open()
	if err != nil {
		t.Fatal(err)
	}
	e := newEnvOn(t, st)
	p := &resumable{Sim: e.sim, kept: make(chan provider.Checkpoint, 1)}
	e.reg["sim"] = p
	op := e.begin("c", v1.KindCreate, spec(1, nil))

	first := e.claim("first")
	ctx, kill := context.WithCancel(t.Context())
	errc := make(chan error, 1)
	go func() { errc <- e.runner().Run(ctx, first) }()
	var dead provider.Checkpoint
	select {
	case dead = <-p.kept:
	case err := <-errc:
		t.Fatalf("the first run ended (%v) before its step kept a token", err)
	case <-time.After(10 * time.Second):
		t.Fatal("the first run's ensure-network kept no token within 10s")
	}
	if got := e.op(op.ID).Checkpoints[plan.StepEnsureNetwork][tokenKey]; got != "token-1" {
		t.Fatalf("the stored step's checkpoint holds %q while the step runs; want token-1, stored at once", got)
	}
	kill()
	if err := <-errc; !errors.Is(err, context.Canceled) {
		t.Fatalf("the killed run returned %v; want context.Canceled", err)
	}
	if err := e.st.ReleaseLease(t.Context(), first.Key(), first.Lease.Fence()); err != nil {
		t.Fatal(err)
	}

	// A restart: another store handle and runner.
	st2, err := open()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st2.Close() })
	e.st = st2
	second := e.claim("second")
	// The dead worker's checkpoint writes with its lost lease: refused,
	// and the stored token stays.
	if err := dead.Set(context.Background(), tokenKey, "token-stale"); !errors.Is(err, store.ErrLeaseLost) {
		t.Errorf("a checkpoint's write under a lost lease: %v; want store.ErrLeaseLost", err)
	}
	if got := e.op(op.ID).Checkpoints[plan.StepEnsureNetwork][tokenKey]; got != "token-1" {
		t.Errorf("after the stale write the stored checkpoint holds %q; want token-1", got)
	}
	if err := e.runner().Run(t.Context(), second); err != nil {
		t.Fatalf("the second run: %v", err)
	}
	got := e.op(op.ID)
	if got.Status != v1.OpSucceeded {
		t.Fatalf("operation %s (%v); want Succeeded", got.Status, got.Error)
	}
	p.mu.Lock()
	read := p.read
	p.mu.Unlock()
	if len(read) != 2 || read[0] != "" || read[1] != "token-1" {
		t.Errorf("ensure-network's attempts read %q from the checkpoint; want nothing, then the first's token-1", read)
	}
	if n := attempts(got)[plan.StepEnsureNetwork]; n != 2 {
		t.Errorf("ensure-network ran %d attempts; want 2", n)
	}
	if got.Checkpoints != nil {
		t.Errorf("the ended operation keeps checkpoints %v; want none", got.Checkpoints)
	}
}
