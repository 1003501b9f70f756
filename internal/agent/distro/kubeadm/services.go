package kubeadm

import (
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sync"
	"syscall"
	"time"

	"kiln.dev/kiln/internal/atomicfile"
	"kiln.dev/kiln/internal/proc"
)

// Services of an install from Kiln (a plan's commands with Service): the
// agent starts them, starts them again when they exit, and, since it
// records them (servicesFile), supervises them again when it starts: a
// restarted agent adopts the ones still running. Each runs in a process
// group of its own, so it outlives the agent (the kubelet keeps the node's
// pods while the agent restarts); its output goes to /var/log/kiln/NAME.log.

// Where services are recorded and log, under the executor's root.
const (
	servicesFile = "var/lib/kiln/services.json"
	servicesLogs = "var/log/kiln"
)

// Supervision of services.
const (
	serviceMinDelay = time.Second
	serviceMaxDelay = 20 * time.Second
	// serviceStable: a service that ran this long restarts after the
	// shortest delay.
	serviceStable = time.Minute
	servicePoll   = 500 * time.Millisecond
	// ServiceStopTimeout is how long a service has after SIGTERM before
	// SIGKILL.
	ServiceStopTimeout = 20 * time.Second
)

// serviceRecord is one service as recorded: what it runs and its process
// (pid and start time: a pid alone may be reused).
type serviceRecord struct {
	Name  string   `json:"name"`
	Argv  []string `json:"argv"`
	PID   int      `json:"pid"`
	Start uint64   `json:"start"`
}

// services supervises the executor's services.
type services struct {
	root string
	log  *slog.Logger
	env  func() []string // the environment a service starts with

	mu      sync.Mutex
	running map[string]*service
}

// service is one supervised service: a goroutine watches its process and
// starts it again until stop is closed.
type service struct {
	rec  serviceRecord
	stop chan struct{}
	done chan struct{}
}

func newServices(root string, log *slog.Logger, env func() []string) *services {
	return &services{root: root, log: log, env: env, running: map[string]*service{}}
}

// ensure makes name run argv: a service of that name running argv is left
// alone (it reports true), one running something else is stopped first.
func (s *services) ensure(name string, argv []string) (bool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if sv, ok := s.running[name]; ok {
		if slices.Equal(sv.rec.Argv, argv) {
			return true, nil
		}
		s.log.Info("service changed: restarting it", "service", name)
		s.halt(sv)
	}
	rec := serviceRecord{Name: name, Argv: argv}
	if err := s.spawn(&rec); err != nil {
		return false, err
	}
	s.watch(rec)
	return false, s.save()
}

// restart stops service name and starts it again with the same argv;
// false when no service of that name is supervised.
func (s *services) restart(name string) (bool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	sv, ok := s.running[name]
	if !ok {
		return false, nil
	}
	s.log.Info("restarting service", "service", name)
	s.halt(sv)
	rec := serviceRecord{Name: name, Argv: sv.rec.Argv}
	if err := s.spawn(&rec); err != nil {
		return true, errors.Join(err, s.save())
	}
	s.watch(rec)
	return true, s.save()
}

// stop stops the services named; one not running is no error.
func (s *services) stop(names []string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	stopped := false
	for _, name := range names {
		if sv, ok := s.running[name]; ok {
			s.log.Info("stopping service", "service", name)
			s.halt(sv)
			stopped = true
		}
	}
	if !stopped {
		return nil
	}
	return s.save()
}

// resume supervises the recorded services again: a live process is
// adopted, a dead one started again.
func (s *services) resume() error {
	b, err := os.ReadFile(filepath.Join(s.root, servicesFile))
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	var recs []serviceRecord
	if err := json.Unmarshal(b, &recs); err != nil {
		return fmt.Errorf("%s: %w", servicesFile, err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	var errs []error
	for _, rec := range recs {
		if proc.Alive(rec.PID, rec.Start) {
			s.log.Info("service still running: supervising it again", "service", rec.Name, "pid", rec.PID)
		} else if err := s.spawn(&rec); err != nil {
			errs = append(errs, err)
			continue
		}
		s.watch(rec)
	}
	return errors.Join(append(errs, s.save())...)
}

// release stops supervising and leaves the processes running (the agent is
// stopping; the next one adopts them).
func (s *services) release() {
	s.mu.Lock()
	all := s.running
	s.running = map[string]*service{}
	for _, sv := range all {
		close(sv.stop)
	}
	// A watcher may be waiting for the lock to start its service again: it
	// sees stop closed once it has it.
	s.mu.Unlock()
	for _, sv := range all {
		<-sv.done
	}
}

// spawn starts rec's argv and records its process in rec.
func (s *services) spawn(rec *serviceRecord) error {
	logDir := filepath.Join(s.root, servicesLogs)
	if err := os.MkdirAll(logDir, 0o755); err != nil {
		return fmt.Errorf("start service %s: %w", rec.Name, err)
	}
	logFile, err := os.OpenFile(filepath.Join(logDir, rec.Name+".log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o640)
	if err != nil {
		return fmt.Errorf("start service %s: %w", rec.Name, err)
	}
	defer logFile.Close()
	cmd := exec.Command(rec.Argv[0], rec.Argv[1:]...)
	cmd.Dir = "/"
	cmd.Env = s.env()
	cmd.Stdout, cmd.Stderr = logFile, logFile
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start service %s: %w", rec.Name, err)
	}
	rec.PID = cmd.Process.Pid
	if st, err := proc.ReadStat(rec.PID); err == nil {
		rec.Start = st.Start
	}
	// Reaped here; the watcher sees it gone through /proc.
	go func() { _ = cmd.Wait() }()
	s.log.Info("service started", "service", rec.Name, "pid", rec.PID, "log", filepath.Join(logDir, rec.Name+".log"))
	return nil
}

// watch supervises rec's process until the service is halted.
func (s *services) watch(rec serviceRecord) {
	sv := &service{rec: rec, stop: make(chan struct{}), done: make(chan struct{})}
	s.running[rec.Name] = sv
	go func() {
		defer close(sv.done)
		delay, started := serviceMinDelay, time.Now()
		t := time.NewTicker(servicePoll)
		defer t.Stop()
		for {
			select {
			case <-sv.stop:
				return
			case <-t.C:
			}
			s.mu.Lock()
			cur := sv.rec
			s.mu.Unlock()
			if proc.Alive(cur.PID, cur.Start) {
				continue
			}
			if time.Since(started) > serviceStable {
				delay = serviceMinDelay
			}
			s.log.Warn("service exited: starting it again", "service", cur.Name, "in", delay)
			select {
			case <-sv.stop:
				return
			case <-time.After(delay):
			}
			delay = min(delay*2, serviceMaxDelay)
			s.mu.Lock()
			select {
			case <-sv.stop: // halted meanwhile
				s.mu.Unlock()
				return
			default:
			}
			if err := s.spawn(&cur); err != nil {
				s.log.Error("start service again", "service", cur.Name, "err", err)
			} else {
				sv.rec, started = cur, time.Now()
				if err := s.save(); err != nil {
					s.log.Warn("record services", "err", err)
				}
			}
			s.mu.Unlock()
		}
	}()
}

// halt stops supervising sv and stops its process group: SIGTERM, SIGKILL
// after ServiceStopTimeout. Called with s.mu held.
func (s *services) halt(sv *service) {
	close(sv.stop)
	s.mu.Unlock()
	<-sv.done
	s.mu.Lock()
	delete(s.running, sv.rec.Name)
	rec := sv.rec
	if !proc.Alive(rec.PID, rec.Start) {
		return
	}
	_ = syscall.Kill(-rec.PID, syscall.SIGTERM)
	deadline := time.Now().Add(ServiceStopTimeout)
	for proc.Alive(rec.PID, rec.Start) {
		if time.Now().After(deadline) {
			s.log.Warn("service ignored SIGTERM: killing it", "service", rec.Name, "pid", rec.PID)
			_ = syscall.Kill(-rec.PID, syscall.SIGKILL)
			deadline = time.Now().Add(time.Hour)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// save records the running services. Called with s.mu held.
func (s *services) save() error {
	recs := make([]serviceRecord, 0, len(s.running))
	for _, name := range slices.Sorted(maps.Keys(s.running)) {
		recs = append(recs, s.running[name].rec)
	}
	path := filepath.Join(s.root, servicesFile)
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	return atomicfile.WriteJSON(path, recs, 0o600)
}

// adopt supervises the recorded services still running, so that a plan's
// stop commands stop them, and starts the ones named in start that are not
// (an uninstall: containerd, which kubeadm reset asks to remove the
// containers); the others are forgotten. It returns the services it
// supervises.
func (s *services) adopt(start ...string) ([]string, error) {
	b, err := os.ReadFile(filepath.Join(s.root, servicesFile))
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var recs []serviceRecord
	if err := json.Unmarshal(b, &recs); err != nil {
		return nil, fmt.Errorf("%s: %w", servicesFile, err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	var names []string
	var errs []error
	for _, rec := range recs {
		if _, ok := s.running[rec.Name]; ok {
			names = append(names, rec.Name)
			continue
		}
		if !proc.Alive(rec.PID, rec.Start) {
			if !slices.Contains(start, rec.Name) {
				continue
			}
			if err := s.spawn(&rec); err != nil {
				errs = append(errs, err)
				continue
			}
		}
		s.watch(rec)
		names = append(names, rec.Name)
	}
	return names, errors.Join(append(errs, s.save())...)
}

// names are the services supervised.
func (s *services) names() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Sorted(maps.Keys(s.running))
}
