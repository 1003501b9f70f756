package local

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"syscall"
	"time"

	"kiln.dev/kiln/internal/proc"
)

// markerEnv is set in every machine process's environment to its machine
// directory, so a machine whose pid file was never written (kilnd died
// between starting it and writing the file) is still found.
const markerEnv = "KILN_LOCAL_MACHINE_DIR"

// pidFile is agent.pid: the process and its start time. A pid alone is not
// enough: after the process exits the kernel may give its pid to another
// process; the start time tells them apart.
type pidFile struct {
	PID        int       `json:"pid"` // also the process group id
	StartTicks uint64    `json:"startTicks"`
	Started    time.Time `json:"started"`
}

// alive reports whether the recorded process still runs: same pid, same start
// time, not a zombie.
func (p pidFile) alive() bool {
	return proc.Alive(p.PID, p.StartTicks)
}

// group returns the live processes of the recorded process's group: the
// agent and everything it started that stayed in its group. When the pid
// now belongs to another process, the group is gone (Linux does not reuse a
// pid while a process group of that id has members).
func (p pidFile) group() []int {
	if st, err := proc.ReadStat(p.PID); err == nil && st.Start != p.StartTicks {
		return nil
	}
	var pids []int
	forEachProc(func(pid int, st proc.Stat) {
		if st.Pgrp == p.PID && !st.Dead() {
			pids = append(pids, pid)
		}
	})
	return pids
}

func forEachProc(fn func(pid int, st proc.Stat)) {
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if st, err := proc.ReadStat(pid); err == nil {
			fn(pid, st)
		}
	}
}

// findByMarker looks for a live process group leader started for dir: the
// fallback when agent.pid is missing.
func findByMarker(dir string) (pidFile, bool) {
	want := []byte(markerEnv + "=" + dir + "\x00")
	var found pidFile
	forEachProc(func(pid int, st proc.Stat) {
		if found.PID != 0 || st.Pgrp != pid || st.Dead() {
			return
		}
		env, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/environ")
		if err == nil && bytes.Contains(append([]byte{0}, env...), append([]byte{0}, want...)) {
			found = pidFile{PID: pid, StartTicks: st.Start}
		}
	})
	return found, found.PID != 0
}

// start starts the machine's process in its own process group with its
// output appended to agent.log, records it in agent.pid and reaps it in the
// background when it exits. Callers hold the directory lock.
func (l *Local) start(m Machine) (pidFile, error) {
	cmd, err := l.opts.Command(m)
	if err == nil && cmd == nil {
		err = errors.New("Command returned no process")
	}
	if err != nil {
		return pidFile{}, fmt.Errorf("start machine %q: %w", m.Name, err)
	}
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	// Its own group: kilnd's Ctrl-C does not reach it, and Delete reaches
	// all of it.
	cmd.SysProcAttr.Setpgid, cmd.SysProcAttr.Pgid = true, 0
	if cmd.Dir == "" {
		cmd.Dir = m.Root
	}
	if cmd.Env == nil {
		cmd.Env = os.Environ()
	}
	cmd.Env = append(cmd.Env, markerEnv+"="+m.Dir)
	logf, err := os.OpenFile(filepath.Join(m.Dir, "agent.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return pidFile{}, fmt.Errorf("start machine %q: %w", m.Name, err)
	}
	defer logf.Close() // the process has its own copy
	fmt.Fprintf(logf, startBanner+"%s (%s) at %s ---\n", m.Name, m.Address, time.Now().UTC().Format(time.RFC3339))
	if cmd.Stdout == nil {
		cmd.Stdout = logf
	}
	if cmd.Stderr == nil {
		cmd.Stderr = logf
	}
	if err := cmd.Start(); err != nil {
		return pidFile{}, fmt.Errorf("start machine %q: %w", m.Name, err)
	}
	pid := cmd.Process.Pid
	// Read before Wait below reaps it, so /proc/<pid> exists even if it
	// already exited.
	st, statErr := proc.ReadStat(pid)
	pf := pidFile{PID: pid, StartTicks: st.Start, Started: time.Now().UTC()}
	done := make(chan struct{})
	l.wmu.Lock()
	l.waits[pid] = done
	l.wmu.Unlock()
	go func() {
		_ = cmd.Wait() // reap it, so that an exited machine is not a zombie that looks alive
		l.recordExit(m, pf, cmd.ProcessState)
		l.wmu.Lock()
		delete(l.waits, pid)
		l.wmu.Unlock()
		close(done)
	}()
	if statErr != nil {
		return pidFile{}, fmt.Errorf("start machine %q: %w", m.Name, statErr)
	}
	if err := writeJSON(filepath.Join(m.Dir, "agent.pid"), pf); err != nil {
		_ = syscall.Kill(-pid, syscall.SIGKILL)
		return pidFile{}, fmt.Errorf("start machine %q: %w", m.Name, err)
	}
	return pf, nil
}

// exitFile is agent.exit: how the machine's process ended, written by the
// kilnd that started it (only a parent sees a process's exit status), so
// that a later kilnd can say it too.
type exitFile struct {
	PID        int       `json:"pid"`
	StartTicks uint64    `json:"startTicks"`
	Code       int       `json:"code"`             // the exit status; -1 when a signal ended it
	Signal     string    `json:"signal,omitempty"` // the signal that ended it
	Exited     time.Time `json:"exited"`
}

// of reports whether e records the end of process pf.
func (e exitFile) of(pf pidFile) bool { return e.PID == pf.PID && e.StartTicks == pf.StartTicks }

// recordExit writes agent.exit for the machine's process pf, reaped with
// state.
func (l *Local) recordExit(m Machine, pf pidFile, state *os.ProcessState) {
	e := exitFile{PID: pf.PID, StartTicks: pf.StartTicks, Code: state.ExitCode(), Exited: time.Now().UTC()}
	if ws, ok := state.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		e.Signal = ws.Signal().String()
	}
	l.log.Info("machine's process exited", "cluster", m.Project+"/"+m.Cluster, "machine", m.Name,
		"pid", pf.PID, "code", e.Code, "signal", e.Signal)
	if err := writeJSON(filepath.Join(m.Dir, "agent.exit"), e); err != nil {
		l.log.Warn("could not record how the machine's process ended", "machine", m.Name, "err", err)
	}
}

// readPID returns the machine's recorded process, falling back to a search
// by marker. ok is false when there is no process to speak of.
func readPID(dir string) (pf pidFile, ok bool, err error) {
	err = readJSON(filepath.Join(dir, "agent.pid"), &pf)
	if errors.Is(err, fs.ErrNotExist) {
		pf, ok = findByMarker(dir)
		return pf, ok, nil
	}
	return pf, err == nil, err
}

// stop ends the process group: SIGTERM, then SIGKILL after the stop timeout,
// and returns once no process of the group is left.
func (l *Local) stop(ctx context.Context, pf pidFile) error {
	if len(pf.group()) == 0 {
		return l.reaped(ctx, pf.PID) // its exit is recorded before the machine's directory goes
	}
	if err := signalGroup(pf.PID, syscall.SIGTERM); err != nil {
		return err
	}
	if err := l.waitGone(ctx, pf, l.opts.StopTimeout); err == nil {
		return l.reaped(ctx, pf.PID)
	} else if ctx.Err() != nil {
		return err
	}
	l.log.Warn("machine did not stop after SIGTERM; killing it", "pid", pf.PID, "timeout", l.opts.StopTimeout)
	return l.kill(ctx, pf)
}

// kill ends the process group with SIGKILL and returns once no process of
// the group is left: for a machine that is deleted (nothing of it is kept,
// so nothing needs to wind down) and for what is left of one whose agent
// exited.
func (l *Local) kill(ctx context.Context, pf pidFile) error {
	if len(pf.group()) > 0 { // the pid may have been reused since
		if err := signalGroup(pf.PID, syscall.SIGKILL); err != nil {
			return err
		}
	}
	if err := l.waitGone(ctx, pf, 10*time.Second); err != nil {
		return providerError(err, "machine process group %d survived SIGKILL", pf.PID)
	}
	return l.reaped(ctx, pf.PID)
}

func signalGroup(pgid int, sig syscall.Signal) error {
	err := syscall.Kill(-pgid, sig)
	if err != nil && !errors.Is(err, syscall.ESRCH) {
		return providerError(err, "cannot signal machine process group %d", pgid)
	}
	return nil
}

var errTimeout = errors.New("timed out")

// waitGone polls until the group has no live process, d passes or ctx ends.
func (l *Local) waitGone(ctx context.Context, pf pidFile, d time.Duration) error {
	deadline := time.NewTimer(d)
	defer deadline.Stop()
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for len(pf.group()) > 0 {
		select {
		case <-ctx.Done():
			return fmt.Errorf("wait for machine process group %d to exit: %w", pf.PID, ctx.Err())
		case <-deadline.C:
			return errTimeout
		case <-tick.C:
		}
	}
	return nil
}

// reaped waits until this process has reaped pid, if this process started
// it, so that no zombie is left behind.
func (l *Local) reaped(ctx context.Context, pid int) error {
	l.wmu.Lock()
	done := l.waits[pid]
	l.wmu.Unlock()
	if done == nil {
		return nil
	}
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("wait for machine process %d to be reaped: %w", pid, ctx.Err())
	}
}
