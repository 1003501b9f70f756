// Package process tests kilnd as users run it: real processes on loopback,
// killed and restarted, several sharing one store.
package process

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"kiln.dev/kiln/api/client"
	v1 "kiln.dev/kiln/api/v1"
	"kiln.dev/kiln/internal/store"
	"kiln.dev/kiln/internal/store/postgres"
	"kiln.dev/kiln/internal/store/postgres/pgtest"
	"kiln.dev/kiln/internal/store/sqlite"
	"kiln.dev/kiln/test/kilndtest"
)

var kilndBin string

func TestMain(m *testing.M) { os.Exit(kilndtest.RunWithKilnd(m, &kilndBin)) }

// storeKind is where the kilnd processes of a test keep their records.
type storeKind struct {
	name string
	// setup returns the kilnd flags that select the store, and a function
	// that opens the same store from the test (for reading what a crashed
	// process left).
	setup func(t *testing.T, dataDir string) (flags []string, open func() store.Store)
}

var storeKinds = []storeKind{
	{name: "sqlite", setup: func(t *testing.T, dataDir string) ([]string, func() store.Store) {
		return nil, func() store.Store {
			st, err := sqlite.Open(t.Context(), filepath.Join(dataDir, "kiln.db"))
			if err != nil {
				t.Fatal(err)
			}
			return st
		}
	}},
	{name: "postgres", setup: func(t *testing.T, _ string) ([]string, func() store.Store) {
		url := pgtest.FreshDB(t)
		return []string{"--store", url}, func() store.Store {
			st, err := postgres.Open(t.Context(), url)
			if err != nil {
				t.Fatal(err)
			}
			return st
		}
	}},
}

// forEachStore runs test once per store kind, each in its own subtest.
func forEachStore(t *testing.T, test func(t *testing.T, storeFlags []string, open func() store.Store, dataDir string)) {
	for _, k := range storeKinds {
		t.Run(k.name, func(t *testing.T) {
			dataDir := t.TempDir()
			flags, open := k.setup(t, dataDir)
			test(t, flags, open, dataDir)
		})
	}
}

func readToken(t *testing.T, dataDir string) string { return kilndtest.Token(t, dataDir) }

// simCluster is a cluster on the sim provider whose every step takes latency.
func simCluster(name string, latency time.Duration, workers int) *v1.Cluster {
	return &v1.Cluster{
		Name: name,
		Spec: v1.ClusterSpec{
			Provider:     "sim",
			ControlPlane: v1.ControlPlane{Size: 1},
			WorkerPools:  []v1.WorkerPool{{Name: "default", Size: workers}},
			Labels:       map[string]string{"sim.kiln.dev/step-latency": latency.String()},
		},
	}
}

// waitTerminal waits for every operation to end and returns them by id.
func waitTerminal(t *testing.T, ctx context.Context, c *client.Client, ids []string) map[string]*v1.Operation {
	t.Helper()
	var (
		mu   sync.Mutex
		ops  = map[string]*v1.Operation{}
		errs []error
		wg   sync.WaitGroup
	)
	for _, id := range ids {
		wg.Go(func() {
			op, err := c.WaitOperation(ctx, id, nil)
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				errs = append(errs, fmt.Errorf("operation %s: %w", id, err))
				return
			}
			ops[id] = op
		})
	}
	wg.Wait()
	for _, err := range errs {
		t.Error(err)
	}
	if len(errs) > 0 {
		t.FailNow()
	}
	return ops
}

// startKilnd starts the kilnd built for this package.
func startKilnd(t *testing.T, name string, env []string, args ...string) *kilndtest.Kilnd {
	t.Helper()
	return kilndtest.Start(t, kilndBin, name, env, args...)
}
