// Package faults is the fault suite (issue 8): kilnd replicas on one store
// run a load of cluster creates, scales and deletes on the sim provider while
// a fault loop kills a random replica with SIGKILL and restarts it, and
// stops one now and then with SIGTERM; a checker then proves from the API,
// the sim's journal, its shared inventory and the store's leases that
// nothing was lost or done twice. FAULTS sets the number of kills (default
// unset: skipped; make test-all runs 15, make faults 100).
package faults

import (
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"regexp"
	"slices"
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
	run(t, 3, pg, []string{"--store", pg.URL}, nil)
}

// TestFaultsSQLite: one process on SQLite, killed with SIGKILL and restarted.
func TestFaultsSQLite(t *testing.T) {
	faults(t)
	run(t, 1, nil, nil, nil)
}

// drainTimeout is the replicas' --drain-timeout: short, so that a SIGTERM
// interrupts the longer operations (a create takes a few seconds at 150 ms a
// step) and hands their leases back, while the shorter ones finish in the
// drain; with kilnd's default of 30 s every sim operation would finish in
// the drain and no hand-back would be seen.
const drainTimeout = 500 * time.Millisecond

// sigtermOneIn is how often a restart stops the replica with SIGTERM instead
// of SIGKILL: one in sigtermOneIn. SIGTERMs do not count towards FAULTS.
const sigtermOneIn = 4

// run runs the suite: until FAULTS kills, or for a soak (soak_test.go)
// until its time is up.
func run(t *testing.T, replicas int, pg *pgtest.Private, storeFlags []string, soak *soak) {
	data := t.TempDir()
	s := &suite{
		t:       t,
		data:    data,
		journal: filepath.Join(data, "sim-journal"),
		state:   filepath.Join(data, "sim-state"),
		procs:   make([]*kilndtest.Kilnd, replicas),
		pg:      pg,
		storeURL: func() string {
			if pg != nil {
				return pg.URL
			}
			return ""
		}(),
		armed:    map[int]string{},
		born:     map[int]time.Time{},
		stopping: map[int]bool{},
		deaths:   make(chan death, 1024),
		soak:     soak,
	}
	s.args = append([]string{"--data-dir", data, "--sim", "--sim-journal", s.journal, "--sim-state", s.state,
		"--lease-ttl", "3s", "--lease-heartbeat", "1s", "--drain-timeout", drainTimeout.String(),
		"--concurrency", "4", "--health-interval", "1h"}, storeFlags...)
	local := s.setupLocal(replicas)
	// No watcher may report on the test once it has returned.
	defer func() {
		s.mu.Lock()
		s.closing = true
		s.mu.Unlock()
	}()
	for i := range replicas {
		s.procs[i] = s.start(i, "")
	}
	s.token = kilndtest.Token(t, data)
	s.setup()

	want := 0
	if soak == nil {
		want = faults(t)
	}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	const loaders = 3
	for g := range loaders {
		wg.Go(func() { s.load(g, stop) })
	}
	if local {
		wg.Go(func() { s.localLoad(stop) })
	}
	start := time.Now()
	if soak != nil {
		wg.Go(func() { soak.sample(s, stop) })
	}
	// enough says whether the loop has injected its faults (or, in a soak,
	// spent its time), half whether it is half way.
	enough := func() bool { return s.counted() >= want }
	half := func() bool { return s.counted() >= want/2 }
	if soak != nil {
		enough = func() bool { return time.Since(start) >= soak.duration }
		half = func() bool { return time.Since(start) >= soak.duration/2 }
	}
	// Act only while something is running, so each fault interrupts work.
	// A soak kills less often: its sim fails steps with the runner's
	// backoff of seconds, and an operation killed on 5 claims in a row
	// fails by design (DequeueLimitExceeded).
	every, spread := 1500, 1500
	if soak != nil {
		every, spread = 4000, 4000
	}
	interval := func() <-chan time.Time { return time.After(time.Duration(every+rand.IntN(spread)) * time.Millisecond) }
	next := interval()
	pgRestarted := false
	for !enough() {
		if pg != nil && !pgRestarted && half() {
			// Once per run, half way: PostgreSQL itself restarts.
			s.restartPostgres()
			pgRestarted = true
		}
		select {
		case d := <-s.deaths:
			s.restartDead(d)
			continue
		case <-next:
		}
		next = interval()
		if hold, why := s.holdKills(); hold {
			s.held++
			t.Logf("fault loop holds (local cluster %s)", why)
			continue
		}
		i := s.pick()
		if i < 0 {
			continue
		}
		if rand.IntN(sigtermOneIn) == 0 {
			s.sigterm(i)
		} else {
			s.kill(i)
		}
	}
	// From here on restarts are unarmed, but a process armed before may
	// still reach its point: restart it while the load ends and the checker
	// reads.
	s.mu.Lock()
	s.noArm = true
	s.mu.Unlock()
	checked, serviced := make(chan struct{}), make(chan struct{})
	defer func() { close(checked); <-serviced }()
	go func() {
		defer close(serviced)
		for {
			select {
			case d := <-s.deaths:
				s.restartDead(d)
			case <-checked:
				return
			}
		}
	}()
	close(stop)
	wg.Wait()
	t.Logf("load and faults: %d kills and %d SIGTERMs in %s", s.counted(), s.count(faultSIGTERM), time.Since(start).Round(time.Second))
	operations, js := s.check()
	s.checkOutage()
	s.summary(operations, js)
	if soak != nil {
		soak.report(s)
	}
}

// Fault kinds.
const (
	faultSIGKILL = "sigkill"     // the loop's kill -9
	faultPoint   = "fault-point" // the process killed itself at its armed fault point
	faultSIGTERM = "sigterm"     // the loop's graceful stop
	faultExit    = "exit"        // exited by itself at no fault point: a bug, reported
)

// faultRecord is one replica process the loop stopped, or that died at its
// fault point.
type faultRecord struct {
	replica int
	pid     int
	at      time.Time
	kind    string
	armed   string // the process's --fault spec, "" when unarmed
	point   string // fault-point: the point it hit
	leases  int    // sigterm: the leases it held just before
}

// String names the fault for a log line or a violation's message, with how
// to replay it when it was a fault point.
func (f faultRecord) String() string {
	at := f.at.Format("15:04:05.000")
	switch f.kind {
	case faultPoint:
		return fmt.Sprintf("replica-%d pid %d hit fault point %s at %s (armed %s; replay with KILN_FAULT=%s)",
			f.replica, f.pid, f.point, at, f.armed, f.armed)
	case faultSIGTERM:
		return fmt.Sprintf("replica-%d pid %d stopped with SIGTERM at %s (holding %d leases)", f.replica, f.pid, at, f.leases)
	default:
		return fmt.Sprintf("replica-%d pid %d killed with SIGKILL at %s", f.replica, f.pid, at)
	}
}

// death is a replica process that exited without the loop stopping it.
type death struct {
	replica int
	k       *kilndtest.Kilnd
	at      time.Time
}

// start starts replica i, armed with the fault point spec unless it is
// empty, and watches it: a process that exits without the loop stopping it
// is reported on s.deaths (an error too, unless it hit its fault point).
func (s *suite) start(i int, spec string) *kilndtest.Kilnd {
	args := s.args
	if spec != "" {
		args = slices.Concat(args, []string{"--fault", spec})
	}
	k := kilndtest.Start(s.t, kilndBin, fmt.Sprintf("replica-%d", i), nil, args...)
	pid := k.Cmd.Process.Pid
	if spec != "" {
		s.t.Logf("replica-%d: pid %d armed with --fault %s", i, pid, spec)
	}
	s.mu.Lock()
	s.armed[pid] = spec
	s.born[pid] = time.Now()
	s.mu.Unlock()
	go func() {
		<-k.Done()
		at := time.Now()
		s.mu.Lock()
		defer s.mu.Unlock()
		if s.closing || s.stopping[pid] {
			return
		}
		if _, hit := faultHit(k); !hit {
			s.t.Errorf("replica-%d: pid %d exited by itself (code %d), at no fault point; log:\n%s", i, pid, k.ExitCode(), k.LogText())
		}
		select {
		case s.deaths <- death{replica: i, k: k, at: at}:
		default:
		}
	}()
	return k
}

// restart starts replica i again, armed with a random fault point one time
// in armOneIn.
func (s *suite) restart(i int) {
	spec := ""
	s.mu.Lock()
	arm := !s.noArm && s.localBusy == ""
	s.mu.Unlock()
	if arm && rand.IntN(armOneIn) == 0 {
		spec = randomPoint()
	}
	n := s.start(i, spec)
	s.mu.Lock()
	delete(s.clients, s.procs[i]) // its connections are dead
	s.procs[i] = n
	s.mu.Unlock()
}

// pick chooses the replica to stop: an unarmed one when there is one, so
// that armed processes live until they reach their point, else one armed
// for armedGrace already; -1 when there is none (every replica is armed and
// young: the loop waits for them).
func (s *suite) pick() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	var unarmed, old []int
	for i, k := range s.procs {
		pid := k.Cmd.Process.Pid
		switch {
		case s.soak != nil && i == observedReplica:
			// A soak watches this one for leaks: it lives throughout.
		case s.armed[pid] == "":
			unarmed = append(unarmed, i)
		case time.Since(s.born[pid]) > armedGrace:
			old = append(old, i)
		}
	}
	if len(unarmed) > 0 {
		return unarmed[rand.IntN(len(unarmed))]
	}
	if len(old) > 0 {
		return old[rand.IntN(len(old))]
	}
	return -1
}

// record adds a fault and logs it.
func (s *suite) record(f faultRecord) {
	s.mu.Lock()
	s.faults = append(s.faults, f)
	s.mu.Unlock()
	if f.kind == faultPoint || f.kind == faultSIGTERM {
		s.t.Logf("fault: %s", f)
	}
}

// counted is how many kills (SIGKILLs and fault points) the loop has made.
func (s *suite) counted() int {
	return s.count(faultSIGKILL) + s.count(faultPoint)
}

func (s *suite) count(kind string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for _, f := range s.faults {
		if f.kind == kind {
			n++
		}
	}
	return n
}

// stopped marks replica i's process as stopped by the loop and returns it.
func (s *suite) stopped(i int) (*kilndtest.Kilnd, string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	k := s.procs[i]
	s.stopping[k.Cmd.Process.Pid] = true
	return k, s.armed[k.Cmd.Process.Pid]
}

// kill sends SIGKILL to replica i, records when and which pid, and starts
// it again.
func (s *suite) kill(i int) {
	k, armed := s.stopped(i)
	at := time.Now()
	k.Kill(syscall.SIGKILL)
	f := faultRecord{replica: i, pid: k.Cmd.Process.Pid, at: at, kind: faultSIGKILL, armed: armed}
	if point, hit := faultHit(k); hit {
		// It reached its point just before: that was the kill.
		f.kind, f.point = faultPoint, point
	}
	s.record(f)
	s.restart(i)
}

// restartDead records the death of a process that exited by itself (at its
// fault point) and starts its replica again.
func (s *suite) restartDead(d death) {
	s.mu.Lock()
	current := s.procs[d.replica] == d.k
	pid := d.k.Cmd.Process.Pid
	armed := s.armed[pid]
	s.stopping[pid] = true
	s.mu.Unlock()
	if !current {
		return
	}
	f := faultRecord{replica: d.replica, pid: pid, at: d.at, kind: faultExit, armed: armed}
	if point, hit := faultHit(d.k); hit {
		f.kind, f.point = faultPoint, point
	}
	s.record(f)
	s.restart(d.replica)
}

// faultRE matches the line internal/fault writes when a point fires.
var faultRE = regexp.MustCompile(`kiln fault: point (\S+) hit `)

// faultHit says whether the process died at its fault point, and which.
func faultHit(k *kilndtest.Kilnd) (point string, hit bool) {
	m := faultRE.FindStringSubmatch(k.LogText())
	if m == nil {
		return "", false
	}
	return m[1], true
}
