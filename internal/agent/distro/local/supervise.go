package local

import (
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"time"

	"kiln.dev/kiln/internal/proc"
)

// Supervision defaults.
const (
	minRestartDelay = 500 * time.Millisecond
	maxRestartDelay = 30 * time.Second
	// stableAfter: a component that ran this long restarts at once after an
	// exit (its backoff is reset).
	stableAfter = time.Minute
	// adoptedPoll is how often an adopted process (not a child of this
	// agent) is checked for life.
	adoptedPoll = 500 * time.Millisecond
	// DefaultStopTimeout is how long a component has to exit after SIGTERM
	// before SIGKILL.
	DefaultStopTimeout = 15 * time.Second
)

// supervisor runs components as children of this process (same process
// group, so whoever kills the agent's group kills them too), restarts them
// when they exit, and adopts the ones a previous agent started.
type supervisor struct {
	root        string
	log         *slog.Logger
	stopTimeout time.Duration
	logs        *logForwarder

	mu    sync.Mutex
	procs map[string]*managed
}

// managed is one supervised component.
type managed struct {
	spec spec
	sup  *supervisor
	stop chan struct{} // closed by halt: do not restart
	done chan struct{} // closed when the supervising goroutine returns

	mu      sync.Mutex
	pid     int
	exited  chan struct{} // closed when the current process is gone
	started time.Time
}

func newSupervisor(root string, log *slog.Logger, stopTimeout time.Duration, logs *logForwarder) *supervisor {
	return &supervisor{root: root, log: log, stopTimeout: stopTimeout, logs: logs,
		procs: map[string]*managed{}}
}

func (s *supervisor) pidPath(name string) string {
	return filepath.Join(s.root, dirRun, name+".pid")
}

func (s *supervisor) logPath(name string) string {
	return filepath.Join(s.root, dirLog, name+".log")
}

// ensure makes sp run: it leaves a supervised process of the same spec
// alone, adopts a live process of the same spec started by an earlier
// agent, and otherwise (re)starts it. It reports whether it was already
// running.
func (s *supervisor) ensure(sp spec) (already bool, err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if m, ok := s.procs[sp.name]; ok {
		if m.spec.hash == sp.hash {
			return true, nil
		}
		s.log.Info("component configuration changed; restarting", "component", sp.name)
		m.halt(s.stopTimeout)
		delete(s.procs, sp.name)
	}
	m := &managed{spec: sp, sup: s, stop: make(chan struct{}), done: make(chan struct{})}
	if pf, ok := s.readPID(sp.name); ok {
		if pf.Hash == sp.hash {
			s.log.Info("adopting running component", "component", sp.name, "pid", pf.PID)
			m.pid, m.exited, m.started = pf.PID, watchAdopted(pf, m.stop), time.Now()
			s.logs.follow(sp.name, s.logPath(sp.name), true)
			s.procs[sp.name] = m
			go m.supervise()
			return true, nil
		}
		s.log.Info("stopping component started with another configuration", "component", sp.name, "pid", pf.PID)
		stopPID(pf, s.stopTimeout)
	}
	if err := m.spawn(); err != nil {
		return false, err
	}
	s.procs[sp.name] = m
	go m.supervise()
	return false, nil
}

// stopOrder: the components that use the API server stop together first,
// then the API server (its shutdown still reaches etcd), then etcd.
var stopOrder = [][]string{{Kubelet, KubeProxy, Scheduler, ControllerManager}, {APIServer}, {Etcd}}

// stopAll stops every component, supervised or recorded in a pid file, in
// stopOrder.
func (s *supervisor) stopAll() {
	for _, stage := range stopOrder {
		s.stop(stage...)
	}
}

// stop stops the named components together, supervised or recorded in a
// pid file, and removes their pid files. What runs them is left alone:
// ensure starts them again.
func (s *supervisor) stop(names ...string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var wg sync.WaitGroup
	for _, name := range names {
		m := s.procs[name]
		delete(s.procs, name)
		wg.Go(func() {
			if m != nil {
				m.halt(s.stopTimeout)
			}
			if pf, ok := s.readPID(name); ok {
				stopPID(pf, s.stopTimeout)
			}
			s.logs.unfollow(name)
			_ = os.Remove(s.pidPath(name))
		})
	}
	wg.Wait()
}

// release stops supervising without stopping the processes (the agent is
// shutting down; a next agent adopts them).
func (s *supervisor) release() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for name, m := range s.procs {
		close(m.stop)
		<-m.done
		delete(s.procs, name)
	}
}

// spawn starts the process of m's spec. It touches only m and the
// component's files, so it needs no supervisor lock.
func (m *managed) spawn() error {
	s, sp := m.sup, m.spec
	for _, d := range append([]string{filepath.Join(s.root, dirRun), filepath.Join(s.root, dirLog)}, sp.dirs...) {
		if err := os.MkdirAll(d, 0o700); err != nil {
			return fmt.Errorf("start %s: %w", sp.name, err)
		}
	}
	logFile, offset, err := openLog(s.logPath(sp.name))
	if err != nil {
		return fmt.Errorf("start %s: %w", sp.name, err)
	}
	defer logFile.Close()
	cmd := exec.Command(sp.binary, append([]string{sp.subcommand()}, sp.args...)...)
	cmd.Dir = s.root
	cmd.Env = append(os.Environ(), sp.env...)
	cmd.Stdout, cmd.Stderr = logFile, logFile
	// No Setpgid or Setsid: the component stays in the agent's process
	// group, so whoever stops the agent's group stops it too.
	s.log.Info("starting component", "component", sp.name)
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start %s: %w", sp.name, err)
	}
	pf := pidFile{PID: cmd.Process.Pid, Hash: sp.hash}
	if st, err := proc.ReadStat(pf.PID); err == nil {
		pf.Start = st.Start
	}
	if err := writeJSON(s.pidPath(sp.name), pf); err != nil {
		s.log.Warn("write pid file", "component", sp.name, "err", err)
	}
	exited := make(chan struct{})
	go func() {
		err := cmd.Wait()
		s.log.Info("component exited", "component", sp.name, "pid", pf.PID, "err", err)
		close(exited)
	}()
	m.mu.Lock()
	m.pid, m.exited, m.started = pf.PID, exited, time.Now()
	m.mu.Unlock()
	s.logs.followFrom(sp.name, s.logPath(sp.name), offset)
	return nil
}

// supervise restarts the component each time it exits, with backoff, until
// halt.
func (m *managed) supervise() {
	defer close(m.done)
	delay := minRestartDelay
	for {
		m.mu.Lock()
		exited, started := m.exited, m.started
		m.mu.Unlock()
		select {
		case <-m.stop:
			return
		case <-exited:
		}
		if time.Since(started) > stableAfter {
			delay = minRestartDelay
		}
		for {
			m.sup.log.Warn("component stopped; restarting", "component", m.spec.name, "in", delay)
			t := time.NewTimer(delay)
			select {
			case <-m.stop:
				t.Stop()
				return
			case <-t.C:
			}
			delay = min(delay*2, maxRestartDelay)
			select {
			case <-m.stop:
				return
			default:
			}
			err := m.spawn()
			if err == nil {
				break
			}
			m.sup.log.Error("restart component", "component", m.spec.name, "err", err)
		}
	}
}

// halt stops supervising and stops the process: SIGTERM, then SIGKILL after
// timeout.
func (m *managed) halt(timeout time.Duration) {
	close(m.stop)
	<-m.done
	m.mu.Lock()
	pid, exited := m.pid, m.exited
	m.mu.Unlock()
	select {
	case <-exited:
		return
	default:
	}
	if terminate(pid, exited, timeout) {
		m.sup.log.Warn("component ignored SIGTERM; killed", "component", m.spec.name, "pid", pid)
	}
}
