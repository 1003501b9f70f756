package local

import (
	"errors"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	v1 "kiln.dev/kiln/api/v1"
	"kiln.dev/kiln/test/waitfor"
)

func TestDefaults(t *testing.T) {
	l, err := New(Options{Dir: t.TempDir(), Command: func(Machine) (*exec.Cmd, error) { return nil, errors.New("unused") }})
	if err != nil {
		t.Fatal(err)
	}
	want := AddressRange{netip.MustParseAddr("127.0.0.2"), netip.MustParseAddr("127.0.255.254")}
	if l.opts.AddressPool != want || l.opts.LBHost != "127.0.0.1" {
		t.Errorf("defaults: pool %s, LB host %s", l.opts.AddressPool, l.opts.LBHost)
	}
	if _, err := New(Options{Dir: t.TempDir()}); err == nil {
		t.Errorf("New without Command succeeded")
	}
}

// A relative Dir is made absolute: machines run in their own directories,
// where a relative path that Command hands them names nothing.
func TestRelativeDir(t *testing.T) {
	wd := t.TempDir()
	t.Chdir(wd)
	l := newLocal(t, testOpts{dir: "machines"})
	if want := filepath.Join(wd, "machines"); l.opts.Dir != want {
		t.Errorf("Dir = %q, want %q", l.opts.Dir, want)
	}
}

func TestCommandWritesFilesAndMayFail(t *testing.T) {
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	calls := 0
	l := newLocal(t, testOpts{command: func(m Machine) (*exec.Cmd, error) {
		calls++
		if calls == 1 {
			return nil, errors.New("credentials not ready")
		}
		// What kilnd does: write the agent's credentials, then run it.
		if err := os.WriteFile(filepath.Join(m.Dir, "credentials.json"), []byte("{}"), 0o600); err != nil {
			return nil, err
		}
		if _, err := os.Stat(m.Root); err != nil {
			return nil, err
		}
		cmd := exec.Command(exe)
		cmd.Env = append(os.Environ(), fakeEnv+"=agent", "FAKE_NAME="+m.Name, "FAKE_ADDR="+m.Address)
		return cmd, nil
	}})
	_, err = l.EnsureMachine(t.Context(), demo, cp(0))
	wantFailure(t, err, v1.CodeProviderError, true)
	m, err := l.EnsureMachine(t.Context(), demo, cp(0))
	if err != nil {
		t.Fatalf("EnsureMachine once Command works: %v", err)
	}
	s := status(t, l, demo, m.Name)
	if !s.Running {
		t.Errorf("machine is not running")
	}
	if _, err := os.Stat(filepath.Join(s.Dir, "credentials.json")); err != nil {
		t.Errorf("the file Command wrote: %v", err)
	}
	if got := greetEventually(t, m.Address+":6443"); got != m.Name {
		t.Errorf("machine answered as %q", got)
	}
}

// kilnd can die between starting a machine and writing agent.pid: the
// machine is found by the marker in its environment.
func TestMachineWithoutPidFileIsFound(t *testing.T) {
	l := newLocal(t, testOpts{})
	m, err := l.EnsureMachine(t.Context(), demo, cp(0))
	if err != nil {
		t.Fatal(err)
	}
	before := status(t, l, demo, m.Name)
	if err := os.Remove(filepath.Join(before.Dir, "agent.pid")); err != nil {
		t.Fatal(err)
	}
	if s := status(t, l, demo, m.Name); !s.Running || s.PID != before.PID {
		t.Errorf("without agent.pid: running %v pid %d, want %d", s.Running, s.PID, before.PID)
	}
	if _, err := l.EnsureMachine(t.Context(), demo, cp(0)); err != nil {
		t.Fatal(err)
	}
	if s := status(t, l, demo, m.Name); s.PID != before.PID {
		t.Errorf("EnsureMachine started a second process %d next to %d", s.PID, before.PID)
	}
	if _, err := os.Stat(filepath.Join(before.Dir, "agent.pid")); err != nil {
		t.Errorf("EnsureMachine did not record the process it found: %v", err)
	}
	if err := l.DeleteMachine(t.Context(), demo, m.Name); err != nil {
		t.Fatal(err)
	}
	waitfor.Cond(t, "the machine's group to be gone", 15*time.Second, func() (bool, error) { return groupGone(before.PID), nil })
}
