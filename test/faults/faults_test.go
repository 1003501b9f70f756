// Package faults is the fault suite (issue 8): kilnd replicas on one store
// run a load of cluster creates, scales and deletes on the sim provider while
// a fault loop kills a random replica with SIGKILL and restarts it; a checker
// then proves from the API, the sim's journal and its shared inventory that
// nothing was lost or done twice. FAULTS sets the number of kills (default
// unset: skipped; make test-all runs 15, make faults 100).
package faults

import (
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"kiln.dev/kiln/internal/store/postgres/pgtest"
	"kiln.dev/kiln/test/kilndtest"
)

var kilndBin string

func TestMain(m *testing.M) { os.Exit(kilndtest.RunWithKilnd(m, &kilndBin)) }

// faults is how many SIGKILLs a run injects (FAULTS). Unset, the suite is
// skipped: make test stays fast; make test-all sets FAULTS=15, make faults
// FAULTS=100.
func faults(t *testing.T) int {
	v := os.Getenv("FAULTS")
	if v == "" {
		t.Skip("SKIPPED: FAULTS is not set (make test-all runs 15 kills, make faults 100)")
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 {
		t.Fatalf("FAULTS=%q: want a whole number from 1", v)
	}
	return n
}

// TestFaultsPostgres: 3 replicas (--role all) on one PostgreSQL database.
func TestFaultsPostgres(t *testing.T) {
	faults(t)
	if os.Getenv("KILN_TEST_POSTGRES") == "" {
		t.Skip("SKIPPED: KILN_TEST_POSTGRES is not set, so the fault suite's PostgreSQL half (3 replicas) does not run; " +
			"start one with scripts/postgres.sh start and eval $(scripts/postgres.sh url)")
	}
	// A server of its own, which the suite restarts once in the middle of
	// the load.
	pg := pgtest.StartPrivate(t)
	run(t, 3, pg, []string{"--store", pg.URL})
}

// TestFaultsSQLite: one process on SQLite, killed with SIGKILL and restarted.
func TestFaultsSQLite(t *testing.T) {
	run(t, 1, nil, nil)
}

func run(t *testing.T, replicas int, pg *pgtest.Private, storeFlags []string) {
	data := t.TempDir()
	s := &suite{
		t:       t,
		data:    data,
		journal: filepath.Join(data, "sim-journal"),
		state:   filepath.Join(data, "sim-state"),
		procs:   make([]*kilndtest.Kilnd, replicas),
		pg:      pg,
	}
	s.args = append([]string{"--data-dir", data, "--sim", "--sim-journal", s.journal, "--sim-state", s.state,
		"--lease-ttl", "3s", "--lease-heartbeat", "1s", "--concurrency", "4", "--health-interval", "1h"}, storeFlags...)
	for i := range replicas {
		s.procs[i] = s.start(i)
	}
	s.token = kilndtest.Token(t, data)
	s.setup()

	kills := faults(t)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	const loaders = 3
	for g := range loaders {
		wg.Go(func() { s.load(g, stop) })
	}
	start := time.Now()
	for n := range kills {
		if pg != nil && n == kills/2 {
			// Once per run, half way: PostgreSQL itself restarts.
			s.restartPostgres()
		}
		// Kill only while something is running, so each kill interrupts work.
		time.Sleep(time.Duration(1500+rand.IntN(1500)) * time.Millisecond)
		i := rand.IntN(replicas)
		s.kill(i)
	}
	close(stop)
	wg.Wait()
	t.Logf("load and faults: %d kills in %s", kills, time.Since(start).Round(time.Second))
	s.check()
	s.checkOutage()
}

func (s *suite) start(i int) *kilndtest.Kilnd {
	return kilndtest.Start(s.t, kilndBin, fmt.Sprintf("replica-%d", i), nil, s.args...)
}

// kill sends SIGKILL to replica i, records when and which pid, and starts
// it again.
func (s *suite) kill(i int) {
	s.mu.Lock()
	k := s.procs[i]
	s.mu.Unlock()
	at := time.Now()
	k.Kill(syscall.SIGKILL)
	s.mu.Lock()
	s.kills = append(s.kills, killRecord{pid: k.Cmd.Process.Pid, at: at})
	s.mu.Unlock()
	n := s.start(i)
	s.mu.Lock()
	s.procs[i] = n
	s.mu.Unlock()
}
