package faults

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"kiln.dev/kiln/internal/store/postgres/pgtest"
)

// The soak (make soak; issue 27): the fault suite's load, with upgrades and a
// sim that fails now and then, runs for SOAK (a duration, e.g. 30m) while
// one replica, the observed one, runs throughout: its resident memory and
// open files are sampled every soakSample, to show a leak as a curve that
// keeps rising. On PostgreSQL 3 replicas share the store and the other two
// are killed, stopped and armed with fault points as in the fault suite
// (and PostgreSQL restarts once, half way); on SQLite the one process is
// the observed one, so the faults are the sim's. The end is the fault
// suite's checker (every operation Succeeded, each cluster as its last
// operation made it, nothing twice), then the curve and whether it is flat.
// Printed, not asserted: memory a Go process keeps is not a leak by
// itself; the checker's violations fail the test.

// observedReplica is the replica a soak watches and never stops.
const observedReplica = 0

// soakSample is how often the observed replica is sampled.
const soakSample = 30 * time.Second

// soakKeep is how many clusters each loader keeps at most in a soak, so
// that the fleet stays the same size and memory that grows is not simply
// more clusters.
const soakKeep = 5

func soakDuration(t *testing.T) time.Duration {
	v := os.Getenv("SOAK")
	if v == "" {
		t.Skip("SKIPPED: SOAK is not set (make soak runs SOAK=30m)")
	}
	d, err := time.ParseDuration(v)
	if err != nil || d < time.Minute {
		t.Fatalf("SOAK=%q: want a duration of a minute or more (30m)", v)
	}
	return d
}

// TestSoak runs the soak on PostgreSQL when KILN_TEST_POSTGRES is set, else
// on SQLite.
func TestSoak(t *testing.T) {
	so := &soak{duration: soakDuration(t)}
	if os.Getenv("KILN_TEST_POSTGRES") == "" {
		t.Log("soak on SQLite: one process, the observed one; no kills (set KILN_TEST_POSTGRES for 3 replicas, 2 of them killed)")
		run(t, 1, nil, nil, so)
		return
	}
	pg := pgtest.StartPrivate(t)
	run(t, 3, pg, []string{"--store", pg.URL}, so)
}

type soak struct {
	duration time.Duration
	mu       sync.Mutex
	samples  []soakPoint
}

// soakPoint is one sample of the observed replica.
type soakPoint struct {
	at     time.Duration // since the soak began
	rssKiB int
	files  int
	ops    int // operations the load had started by then
}

// sample samples the observed replica every soakSample until stop.
func (so *soak) sample(s *suite, stop <-chan struct{}) {
	begin := time.Now()
	tick := time.NewTicker(soakSample)
	defer tick.Stop()
	for {
		s.mu.Lock()
		pid, ops := s.procs[observedReplica].Cmd.Process.Pid, len(s.ops)
		s.mu.Unlock()
		rss, files, err := usage(pid)
		if err != nil {
			s.errorf("soak: sample the observed replica (pid %d): %v", pid, err)
			return
		}
		so.mu.Lock()
		so.samples = append(so.samples, soakPoint{at: time.Since(begin), rssKiB: rss, files: files, ops: ops})
		so.mu.Unlock()
		select {
		case <-stop:
			return
		case <-tick.C:
		}
	}
}

// usage is a process's resident memory (KiB, VmRSS) and open files.
func usage(pid int) (rssKiB, files int, err error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, 0, err
	}
	for l := range strings.Lines(string(b)) {
		if v, ok := strings.CutPrefix(l, "VmRSS:"); ok {
			rssKiB, _ = strconv.Atoi(strings.TrimSuffix(strings.TrimSpace(v), " kB"))
		}
	}
	fds, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
	return rssKiB, len(fds), err
}

// report prints the observed replica's curve and the soak's one line:
//
//	soak summary: 30m0s on postgres, 1865 operations, 778 kills and SIGTERMs, 140 clusters whose sim failed a step
//	  twice in each process; observed replica RSS 124→137 MiB (max 141), open files 14→18 (max 18): flat
//
// Flat means the last third's highest is within 20% (memory) or 10 files
// of the middle third's highest: the first third is warm-up (caches,
// pools, the Go heap finding its size).
func (so *soak) report(s *suite) {
	so.mu.Lock()
	defer so.mu.Unlock()
	pts := so.samples
	if len(pts) < 3 {
		s.t.Logf("soak summary: %d samples, too few to say", len(pts))
		return
	}
	var b strings.Builder
	b.WriteString("soak: the observed replica\n      at   RSS MiB  files  operations started\n")
	for _, p := range pts {
		fmt.Fprintf(&b, "  %6s  %8.1f  %5d  %d\n", p.at.Round(time.Second), float64(p.rssKiB)/1024, p.files, p.ops)
	}
	s.t.Log(b.String())
	third := len(pts) / 3
	maxOf := func(ps []soakPoint, f func(soakPoint) int) int {
		m := 0
		for _, p := range ps {
			m = max(m, f(p))
		}
		return m
	}
	rss := func(p soakPoint) int { return p.rssKiB }
	files := func(p soakPoint) int { return p.files }
	middle, last := pts[third:2*third], pts[2*third:]
	verdict := "flat"
	var rising []string
	if maxOf(last, rss) > maxOf(middle, rss)*12/10 {
		rising = append(rising, "memory")
	}
	if maxOf(last, files) > maxOf(middle, files)+10 {
		rising = append(rising, "open files")
	}
	if len(rising) > 0 {
		verdict = "RISING (" + strings.Join(rising, ", ") + "): look for a leak"
	}
	storeName := "sqlite"
	if s.pg != nil {
		storeName = "postgres"
	}
	first, end := pts[0], pts[len(pts)-1]
	failing := 0
	for name := range s.final {
		if !isLocal(name) && failStep(name) != "" {
			failing++
		}
	}
	s.t.Logf("soak summary: %s on %s, %d operations, %d kills and SIGTERMs, %d clusters whose sim failed a step twice in each process; observed replica RSS %.0f→%.0f MiB (max %.0f), open files %d→%d (max %d): %s",
		so.duration, storeName, end.ops, s.counted()+s.count(faultSIGTERM), failing,
		float64(first.rssKiB)/1024, float64(end.rssKiB)/1024, float64(maxOf(pts, rss))/1024,
		first.files, end.files, maxOf(pts, files), verdict)
}
