package local

import (
	"io"
	"net"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	v1 "kiln.dev/kiln/api/v1"
	"kiln.dev/kiln/internal/provider"
	"kiln.dev/kiln/test/waitfor"
)

// names returns who answered n connections through addr.
func names(t *testing.T, addr string, n int) map[string]int {
	t.Helper()
	got := map[string]int{}
	for range n {
		name, err := greet(addr)
		if err != nil {
			t.Fatalf("connection through the load balancer: %v", err)
		}
		got[name]++
	}
	return got
}

func ensureMachines(t *testing.T, l *Local, specs ...provider.MachineSpec) []provider.Machine {
	t.Helper()
	var ms []provider.Machine
	for _, s := range specs {
		m, err := l.EnsureMachine(t.Context(), demo, s)
		if err != nil {
			t.Fatalf("EnsureMachine(%s): %v", s.Name, err)
		}
		greetEventually(t, m.Address+":6443")
		ms = append(ms, m)
	}
	return ms
}

func TestLoadBalancerSpreadsAndSkipsDeadBackends(t *testing.T) {
	l := newLocal(t, testOpts{})
	lb, err := l.EnsureLoadBalancer(t.Context(), demo)
	if err != nil {
		t.Fatal(err)
	}
	if host, _, _ := net.SplitHostPort(lb.Address); host != "127.0.0.1" {
		t.Errorf("load balancer address %s, want it on 127.0.0.1", lb.Address)
	}
	// No backend yet: the connection is accepted and closed.
	if _, err := greet(lb.Address); err == nil {
		t.Errorf("a connection without backends was answered")
	}
	ensureMachines(t, l, cp(0), cp(1), worker(0))
	got := names(t, lb.Address, 6)
	if got["demo-cp-0"] != 3 || got["demo-cp-1"] != 3 || len(got) != 2 {
		t.Errorf("6 connections reached %v, want 3 on each control-plane machine and none on the worker", got)
	}

	s := status(t, l, demo, "demo-cp-0")
	if err := syscall.Kill(-s.PID, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	waitfor.Cond(t, "demo-cp-0 to stop", 10*time.Second, func() (bool, error) { return !status(t, l, demo, "demo-cp-0").Running, nil })
	if got := names(t, lb.Address, 4); got["demo-cp-1"] != 4 {
		t.Errorf("with demo-cp-0 dead, 4 connections reached %v, want all on demo-cp-1", got)
	}

	// Passthrough both ways: the fake API server echoes.
	c, err := net.Dial("tcp", lb.Address)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := c.Write([]byte("ping\n")); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, len("demo-cp-1\nping\n"))
	if _, err := io.ReadFull(c, buf); err != nil || string(buf) != "demo-cp-1\nping\n" {
		t.Errorf("echo through the load balancer = %q, %v", buf, err)
	}

	if err := l.DeleteLoadBalancer(t.Context(), demo); err != nil {
		t.Fatal(err)
	}
	// Deleting closes the listener and the open connections.
	if _, err := c.Read(buf); err == nil {
		t.Errorf("a connection outlived DeleteLoadBalancer")
	}
	if _, err := net.DialTimeout("tcp", lb.Address, time.Second); err == nil {
		t.Errorf("the load balancer still listens after DeleteLoadBalancer")
	}
	if _, err := os.Stat(filepath.Join(l.opts.Dir, "p", "demo", "lb.json")); !os.IsNotExist(err) {
		t.Errorf("lb.json after DeleteLoadBalancer: %v, want it gone", err)
	}
}

func TestRestartAdoptsMachinesAndLoadBalancers(t *testing.T) {
	dir := t.TempDir()
	first := newLocal(t, testOpts{dir: dir})
	created := ensureMachines(t, first, cp(0), worker(0))
	lb, err := first.EnsureLoadBalancer(t.Context(), demo)
	if err != nil {
		t.Fatal(err)
	}
	pids := map[string]int{}
	for _, m := range created {
		pids[m.Name] = status(t, first, demo, m.Name).PID
	}
	if err := first.Close(); err != nil { // kilnd stops
		t.Fatal(err)
	}
	if _, err := net.DialTimeout("tcp", lb.Address, time.Second); err == nil {
		t.Errorf("the load balancer still listens after Close")
	}

	second := newLocal(t, testOpts{dir: dir}) // kilnd starts again over the same data dir
	if err := second.RestoreLoadBalancers(t.Context()); err != nil {
		t.Fatal(err)
	}
	if got := names(t, lb.Address, 2); got["demo-cp-0"] != 2 {
		t.Errorf("after the restart, the load balancer reached %v; want demo-cp-0", got)
	}
	again, err := second.EnsureLoadBalancer(t.Context(), demo)
	if err != nil || again != lb {
		t.Errorf("EnsureLoadBalancer after the restart = %+v, %v; want %+v", again, err, lb)
	}
	listed, err := second.ListMachines(t.Context(), demo)
	if err != nil {
		t.Fatal(err)
	}
	if len(listed) != len(created) {
		t.Fatalf("after the restart ListMachines = %+v, want %+v", listed, created)
	}
	for i, m := range created {
		if listed[i] != m {
			t.Errorf("after the restart machine %d = %+v, want %+v", i, listed[i], m)
		}
		found, err := second.EnsureMachine(t.Context(), demo, provider.MachineSpec{Name: m.Name, Role: m.Role, Pool: m.Pool})
		if err != nil || found != m {
			t.Errorf("EnsureMachine(%s) after the restart = %+v, %v; want %+v", m.Name, found, err, m)
		}
		if s := status(t, second, demo, m.Name); !s.Running || s.PID != pids[m.Name] {
			t.Errorf("machine %s after the restart: running %v pid %d, want the same process %d", m.Name, s.Running, s.PID, pids[m.Name])
		}
	}
}

func TestLoadBalancerPortTaken(t *testing.T) {
	dir := t.TempDir()
	first := newLocal(t, testOpts{dir: dir})
	lb, err := first.EnsureLoadBalancer(t.Context(), demo)
	if err != nil {
		t.Fatal(err)
	}
	first.Close()
	squatter, err := net.Listen("tcp", lb.Address)
	if err != nil {
		t.Fatal(err)
	}
	defer squatter.Close()
	second := newLocal(t, testOpts{dir: dir})
	_, err = second.EnsureLoadBalancer(t.Context(), demo)
	wantFailure(t, err, v1.CodeProviderError, true)
	squatter.Close()
	if got, err := second.EnsureLoadBalancer(t.Context(), demo); err != nil || got != lb {
		t.Errorf("EnsureLoadBalancer once the port is free = %+v, %v; want %+v", got, err, lb)
	}
}

func TestClosedProviderRefusesLoadBalancers(t *testing.T) {
	l := newLocal(t, testOpts{})
	l.Close()
	_, err := l.EnsureLoadBalancer(t.Context(), demo)
	wantFailure(t, err, v1.CodeProviderError, true)
}
