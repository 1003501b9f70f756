package local

import (
	"encoding/json"
	"os"
	"syscall"
	"time"

	"kiln.dev/kiln/internal/atomicfile"
	"kiln.dev/kiln/internal/proc"
)

// pidFile is Root/run/<component>.pid: the process, its start time (so a
// reused pid is not mistaken for it) and the spec it runs.
type pidFile struct {
	PID   int    `json:"pid"`
	Start uint64 `json:"start"` // /proc/PID/stat starttime, clock ticks since boot
	Hash  string `json:"hash"`
}

// readPID reads a component's pid file and reports whether that process is
// still alive (same pid and start time).
func (s *supervisor) readPID(name string) (pidFile, bool) {
	b, err := os.ReadFile(s.pidPath(name))
	if err != nil {
		return pidFile{}, false
	}
	var pf pidFile
	if json.Unmarshal(b, &pf) != nil || pf.PID <= 0 {
		return pidFile{}, false
	}
	return pf, alive(pf)
}

// alive reports whether the process of pf runs: its pid exists, has not
// finished, and started when pf says.
func alive(pf pidFile) bool { return proc.Alive(pf.PID, pf.Start) }

// watchAdopted returns a channel closed when the adopted process of pf is
// gone (or stop is closed and it is gone).
func watchAdopted(pf pidFile, stop <-chan struct{}) chan struct{} {
	gone := make(chan struct{})
	go func() {
		defer close(gone)
		t := time.NewTicker(adoptedPoll)
		defer t.Stop()
		for alive(pf) {
			select {
			case <-t.C:
			case <-stop:
				// Keep watching: halt waits on gone after its signal.
				for alive(pf) {
					<-t.C
				}
				return
			}
		}
	}()
	return gone
}

// stopPID stops a process this agent did not start (see terminate).
func stopPID(pf pidFile, timeout time.Duration) {
	if !alive(pf) {
		return
	}
	gone := make(chan struct{})
	go func() {
		defer close(gone)
		t := time.NewTicker(50 * time.Millisecond)
		defer t.Stop()
		for alive(pf) {
			<-t.C
		}
	}()
	terminate(pf.PID, gone, timeout)
}

// terminate stops pid and returns once gone is closed: SIGTERM; a second
// SIGTERM after a third of timeout (kube-apiserver then exits at once
// instead of waiting for long-running requests, such as other nodes'
// watches through the load balancer, to drain); SIGKILL after timeout. It
// reports whether SIGKILL was needed.
func terminate(pid int, gone <-chan struct{}, timeout time.Duration) bool {
	_ = syscall.Kill(pid, syscall.SIGTERM)
	second := time.NewTimer(timeout / 3)
	defer second.Stop()
	kill := time.NewTimer(timeout)
	defer kill.Stop()
	for {
		select {
		case <-gone:
			return false
		case <-second.C:
			_ = syscall.Kill(pid, syscall.SIGTERM)
		case <-kill.C:
			_ = syscall.Kill(pid, syscall.SIGKILL)
			<-gone
			return true
		}
	}
}

// writeJSON writes v as JSON, mode 0600, atomically, making its directory
// first.
func writeJSON(path string, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	return atomicfile.WriteMkdirAll(path, b, 0o600)
}
