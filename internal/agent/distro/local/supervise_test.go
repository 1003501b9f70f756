package local

import (
	"fmt"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"kiln.dev/kiln/test/waitfor"
)

// fakeKube is a kiln-kube that prints a line and sleeps: enough to test
// supervision without Kubernetes.
func fakeKube(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "kiln-kube")
	script := "#!/bin/sh\necho \"$1 started with $*\"\nexec sleep 300\n"
	if err := os.WriteFile(bin, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	return bin
}

func TestSupervisor(t *testing.T) {
	root := t.TempDir()
	logs := newLogForwarder()
	t.Cleanup(logs.close)
	rec := &recorder{}
	logs.setSink(rec)
	s := newSupervisor(root, testLogger(t), 5*time.Second, logs)
	t.Cleanup(s.stopAll)
	sp := spec{name: Etcd, binary: fakeKube(t), args: []string{"--name", "x"}, hash: "one"}

	if already, err := s.ensure(sp); err != nil || already {
		t.Fatalf("first ensure: already=%v err=%v", already, err)
	}
	first, ok := s.readPID(Etcd)
	if !ok {
		t.Fatal("no live pid file after start")
	}
	waitfor.Cond(t, "the component's line forwarded", 10*time.Second, func() (bool, error) {
		return rec.logLines(Etcd) > 0, nil
	})
	if already, err := s.ensure(sp); err != nil || !already {
		t.Fatalf("second ensure: already=%v err=%v", already, err)
	}

	// A component that dies is started again.
	if err := syscall.Kill(first.PID, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	var second pidFile
	waitfor.Cond(t, "restart after a kill", 10*time.Second, func() (bool, error) {
		pf, ok := s.readPID(Etcd)
		if !ok || pf.PID == first.PID {
			return false, nil
		}
		second = pf
		return true, nil
	})

	// A new agent (supervisor) adopts the running process.
	s.release()
	s2 := newSupervisor(root, testLogger(t), 5*time.Second, logs)
	t.Cleanup(s2.stopAll)
	if already, err := s2.ensure(sp); err != nil || !already {
		t.Fatalf("ensure after restart: already=%v err=%v", already, err)
	}
	if pf, ok := s2.readPID(Etcd); !ok || pf != second {
		t.Fatalf("adopted %+v, want %+v", pf, second)
	}
	if !s2.running(Etcd) {
		t.Fatal("adopted component not running")
	}

	// A new configuration restarts it.
	sp.hash = "two"
	if already, err := s2.ensure(sp); err != nil || already {
		t.Fatalf("ensure new config: already=%v err=%v", already, err)
	}
	third, ok := s2.readPID(Etcd)
	if !ok || third.PID == second.PID || alive(second) {
		t.Fatalf("after a new config: %+v (old alive: %v)", third, alive(second))
	}

	// stopAll leaves nothing.
	s2.stopAll()
	if alive(third) {
		t.Fatal("process alive after stopAll")
	}
	if _, err := os.Stat(s2.pidPath(Etcd)); !os.IsNotExist(err) {
		t.Fatalf("pid file after stopAll: %v", err)
	}
}

func TestLastLines(t *testing.T) {
	path := filepath.Join(t.TempDir(), "x.log")
	var b []byte
	for i := range 500 {
		b = fmt.Appendf(b, "line %d\n", i)
	}
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
	if got, want := lastLines(path, 2), "line 498\nline 499"; got != want {
		t.Errorf("lastLines = %q, want %q", got, want)
	}
	if got := lastLines(filepath.Join(t.TempDir(), "none"), 2); got != "" {
		t.Errorf("lastLines(missing) = %q", got)
	}
}

// running reports whether the component is supervised and its process
// alive.
func (s *supervisor) running(name string) bool {
	s.mu.Lock()
	m := s.procs[name]
	s.mu.Unlock()
	if m == nil {
		return false
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	select {
	case <-m.exited:
		return false
	default:
		return true
	}
}
