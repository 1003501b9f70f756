package local

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"kiln.dev/kiln/internal/provider"
	"kiln.dev/kiln/test/waitfor"
)

// stoppedNow returns what StoppedMachines reports of l's demo cluster, by
// name.
func stoppedNow(t *testing.T, l *Local) map[string]provider.StoppedMachine {
	t.Helper()
	ss, err := l.StoppedMachines(t.Context(), demo)
	if err != nil {
		t.Fatalf("StoppedMachines: %v", err)
	}
	out := map[string]provider.StoppedMachine{}
	for _, s := range ss {
		out[s.Name] = s
	}
	return out
}

// TestStoppedMachines: a machine whose agent exits at once is reported with
// its exit status, when it exited and the lines it wrote since it was
// started, by this kilnd and by a later one; started again, it is not
// reported until it stops again (killed: the signal); one whose end nobody
// recorded is reported with its status unknown. A running machine is never
// reported.
func TestStoppedMachines(t *testing.T) {
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	var starts atomic.Int32
	dir := t.TempDir()
	command := func(m Machine) (*exec.Cmd, error) {
		cmd := exec.Command(exe)
		cmd.Env = append(os.Environ(), fakeEnv+"=agent", "FAKE_NAME="+m.Name, "FAKE_ADDR="+m.Address)
		if m.Name == "demo-cp-0" && starts.Add(1) == 1 { // its first run exits at once
			cmd.Env = append(cmd.Env, "FAKE_EXIT=3")
		}
		return cmd, nil
	}
	l := newLocal(t, testOpts{dir: dir, command: command})
	began := time.Now()
	for _, m := range []provider.MachineSpec{cp(0), worker(0)} {
		if _, err := l.EnsureMachine(t.Context(), demo, m); err != nil {
			t.Fatal(err)
		}
	}
	waitfor.Cond(t, "demo-cp-0 to be reported stopped", 10*time.Second, func() (bool, error) {
		return len(stoppedNow(t, l)) > 0, nil
	})
	got := stoppedNow(t, l)
	s := got["demo-cp-0"]
	if len(got) != 1 || !strings.Contains(s.Reason, "exited with status 3") {
		t.Fatalf("stopped machines %+v, want demo-cp-0 exited with status 3", got)
	}
	if s.At.Before(began.Add(-time.Second)) || s.At.After(time.Now()) {
		t.Errorf("exited at %s, want between %s and now", s.At, began)
	}
	// Its stdout and stderr, in order; not the provider's own banner.
	want := []string{"fake agent starting", "join: read credentials: no such file or directory"}
	if diff := cmp.Diff(want, s.LogTail); diff != "" {
		t.Errorf("log tail (-want +got):\n%s", diff)
	}

	// A later kilnd on the same directory says the same.
	later, err := New(Options{Dir: dir, Command: command, AddressPool: l.opts.AddressPool, Logger: testLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(got, stoppedNow(t, later)); diff != "" {
		t.Errorf("a later kilnd reports (-this +later):\n%s", diff)
	}

	// Started again, it runs: nothing is reported.
	m, err := l.EnsureMachine(t.Context(), demo, cp(0))
	if err != nil {
		t.Fatal(err)
	}
	greetEventually(t, m.Address+":6443")
	if got := stoppedNow(t, l); len(got) != 0 {
		t.Fatalf("after the restart: stopped %+v, want none", got)
	}

	// Killed.
	pid := status(t, l, demo, m.Name).PID
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	waitfor.Cond(t, "demo-cp-0 to be reported killed", 10*time.Second, func() (bool, error) {
		return strings.Contains(stoppedNow(t, l)["demo-cp-0"].Reason, "killed by signal killed"), nil
	})
	if tail := stoppedNow(t, l)["demo-cp-0"].LogTail; len(tail) != 1 || !strings.HasPrefix(tail[0], "fake agent demo-cp-0 listening") {
		t.Errorf("log tail after the restart %q, want only this run's line", tail)
	}

	// Nobody recorded how it ended (an earlier kilnd started it and was gone).
	if err := os.Remove(filepath.Join(dir, "p", "demo", "demo-cp-0", "agent.exit")); err != nil {
		t.Fatal(err)
	}
	if s := stoppedNow(t, l)["demo-cp-0"]; !strings.Contains(s.Reason, "exit status is unknown") || !s.At.IsZero() {
		t.Errorf("without a record: %+v, want its status unknown and no time", s)
	}
}
