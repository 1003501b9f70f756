package kubeadm

import (
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"syscall"
	"testing"
	"time"

	"kiln.dev/kiln/internal/proc"
	"kiln.dev/kiln/test/waitfor"
)

// A service runs in a process group of its own, is started again when it
// exits, is left alone when asked for again with the same argv, outlives
// the agent (release) and is supervised again by the next one (resume),
// and stops with its group.
func TestServices(t *testing.T) {
	root := t.TempDir()
	env := func() []string { return os.Environ() }
	s := newServices(root, slog.New(slog.DiscardHandler), env)
	argv := []string{"/bin/sh", "-c", "echo started; exec sleep 600"}
	already, err := s.ensure("sleeper", argv)
	if err != nil || already {
		t.Fatalf("ensure: %v, already %v", err, already)
	}
	first := record(t, root, "sleeper")
	if !proc.Alive(first.PID, first.Start) {
		t.Fatalf("service not running: %+v", first)
	}
	if st, err := proc.ReadStat(first.PID); err != nil || st.Pgrp != first.PID {
		t.Errorf("service's process group: %+v, %v; want its own (%d)", st, err, first.PID)
	}
	if already, err := s.ensure("sleeper", argv); err != nil || !already {
		t.Errorf("ensure again: %v, already %v; want it left alone", err, already)
	}

	// Killed once it has written its line (on a busy machine the shell
	// may not have run yet): started again, with a new process.
	waitLog(t, root, "sleeper", "started\n")
	if err := syscall.Kill(first.PID, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	var second serviceRecord
	waitfor.Cond(t, "the service started again", 10*time.Second, func() (bool, error) {
		second = record(t, root, "sleeper")
		return second.PID != first.PID && proc.Alive(second.PID, second.Start), nil
	})
	// The new process writes its line once it runs: a moment after it
	// is alive on a busy machine.
	waitLog(t, root, "sleeper", "started\nstarted\n")

	// The agent stops: the service runs on; the next agent adopts it.
	s.release()
	if !proc.Alive(second.PID, second.Start) {
		t.Fatal("the service stopped with the agent")
	}
	next := newServices(root, slog.New(slog.DiscardHandler), env)
	if err := next.resume(); err != nil {
		t.Fatal(err)
	}
	if got := record(t, root, "sleeper"); got.PID != second.PID {
		t.Errorf("after resume the service is pid %d, want %d adopted", got.PID, second.PID)
	}
	if already, err := next.ensure("sleeper", argv); err != nil || !already {
		t.Errorf("ensure after resume: %v, already %v; want the adopted one left alone", err, already)
	}

	if err := next.stop([]string{"sleeper", "not-running"}); err != nil {
		t.Fatal(err)
	}
	if proc.Alive(second.PID, second.Start) {
		t.Error("the service runs after stop")
	}
	if recs := records(t, root); len(recs) != 0 {
		t.Errorf("services recorded after stop: %+v", recs)
	}
}

// restart gives a supervised service a new process running the same
// command; a service not supervised is not started.
func TestServicesRestart(t *testing.T) {
	root := t.TempDir()
	s := newServices(root, slog.New(slog.DiscardHandler), os.Environ)
	defer s.release()
	argv := []string{"/bin/sleep", "600"}
	if _, err := s.ensure("kubelet", argv); err != nil {
		t.Fatal(err)
	}
	first := record(t, root, "kubelet")
	if ok, err := s.restart("kubelet"); err != nil || !ok {
		t.Fatalf("restart: %v, %v", ok, err)
	}
	second := record(t, root, "kubelet")
	if second.PID == first.PID || !proc.Alive(second.PID, second.Start) || !slices.Equal(second.Argv, argv) {
		t.Errorf("after restart: %+v (before %+v), want a new live process of %q", second, first, argv)
	}
	if proc.Alive(first.PID, first.Start) {
		t.Error("the old process runs on")
	}
	if ok, err := s.restart("not-supervised"); err != nil || ok {
		t.Errorf("restart of a service not supervised: %v, %v", ok, err)
	}
	if err := s.stop([]string{"kubelet"}); err != nil {
		t.Fatal(err)
	}
}

// A service whose process died while no agent ran is started again by
// resume.
func TestServicesResumeStartsDead(t *testing.T) {
	root := t.TempDir()
	s := newServices(root, slog.New(slog.DiscardHandler), os.Environ)
	if _, err := s.ensure("sleeper", []string{"/bin/sleep", "600"}); err != nil {
		t.Fatal(err)
	}
	s.release()
	first := record(t, root, "sleeper")
	_ = syscall.Kill(first.PID, syscall.SIGKILL)
	waitfor.Cond(t, "the killed service gone", 5*time.Second, func() (bool, error) { return !proc.Alive(first.PID, first.Start), nil })
	next := newServices(root, slog.New(slog.DiscardHandler), os.Environ)
	if err := next.resume(); err != nil {
		t.Fatal(err)
	}
	got := record(t, root, "sleeper")
	if got.PID == first.PID || !proc.Alive(got.PID, got.Start) {
		t.Errorf("after resume: %+v, want a new live process", got)
	}
	if err := next.stop([]string{"sleeper"}); err != nil {
		t.Fatal(err)
	}
}

// waitLog waits for service name's log to hold want.
func waitLog(t *testing.T, root, name, want string) {
	t.Helper()
	waitfor.Cond(t, "the log of "+name+" to read "+fmt.Sprintf("%q", want), 10*time.Second, func() (bool, error) {
		b, err := os.ReadFile(filepath.Join(root, servicesLogs, name+".log"))
		return err == nil && string(b) == want, waitfor.NotYet(fmt.Errorf("log %q, %v", b, err))
	})
}

func records(t *testing.T, root string) []serviceRecord {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(root, servicesFile))
	if err != nil {
		t.Fatal(err)
	}
	var recs []serviceRecord
	if err := json.Unmarshal(b, &recs); err != nil {
		t.Fatal(err)
	}
	return recs
}

func record(t *testing.T, root, name string) serviceRecord {
	t.Helper()
	for _, r := range records(t, root) {
		if r.Name == name {
			return r
		}
	}
	t.Fatalf("no service %s recorded", name)
	return serviceRecord{}
}
