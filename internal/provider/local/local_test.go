package local

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"kiln.dev/kiln/internal/proc"
	"kiln.dev/kiln/test/waitfor"

	v1 "kiln.dev/kiln/api/v1"
	"kiln.dev/kiln/internal/provider"
	"kiln.dev/kiln/internal/provider/providertest"
)

var demo = provider.Cluster{Project: "p", Name: "demo"}

func cp(n int) provider.MachineSpec {
	return provider.MachineSpec{Name: "demo-cp-" + strconv.Itoa(n), Role: v1.RoleControlPlane}
}

func worker(n int) provider.MachineSpec {
	return provider.MachineSpec{Name: "demo-default-" + strconv.Itoa(n), Role: v1.RoleWorker, Pool: "default"}
}

func TestContract(t *testing.T) {
	l := newLocal(t, testOpts{})
	providertest.Run(t, l, providertest.WithBootstrap(providertest.Bootstrap{
		Read: func(_ context.Context, c provider.Cluster, m provider.Machine) (*provider.Bootstrap, error) {
			dir, err := l.machineDir(c, m.Name)
			if err != nil {
				return nil, err
			}
			var b provider.Bootstrap
			if err := readJSON(filepath.Join(dir, "credentials.json"), &b.Credentials); err != nil {
				return nil, err
			}
			pass, err := os.ReadFile(filepath.Join(dir, "passphrase"))
			b.Passphrase = strings.TrimSuffix(string(pass), "\n")
			for _, f := range []string{"credentials.json", "passphrase"} {
				if st, err := os.Stat(filepath.Join(dir, f)); err != nil || st.Mode().Perm() != 0o600 {
					return nil, fmt.Errorf("%s: %v, %v; want mode 0600", f, st, err)
				}
			}
			return &b, err
		},
		// The process's command line and environment, which any user of
		// the host reads, and the machine's tag.
		Viewable: func(_ context.Context, c provider.Cluster, m provider.Machine) ([]string, error) {
			dir, err := l.machineDir(c, m.Name)
			if err != nil {
				return nil, err
			}
			pf, _, err := readPID(dir)
			if err != nil {
				return nil, err
			}
			var out []string
			for _, f := range []string{filepath.Join(dir, "machine.json"), fmt.Sprintf("/proc/%d/cmdline", pf.PID), fmt.Sprintf("/proc/%d/environ", pf.PID)} {
				b, err := os.ReadFile(f)
				if err != nil {
					return nil, err
				}
				out = append(out, string(b))
			}
			return out, nil
		},
	}))
}

func TestMachinesHaveTheirOwnAddressAndDir(t *testing.T) {
	l := newLocal(t, testOpts{})
	addrs := map[string]string{}
	for _, s := range []provider.MachineSpec{cp(0), worker(0), worker(1)} {
		m, err := l.EnsureMachine(t.Context(), demo, s)
		if err != nil {
			t.Fatalf("EnsureMachine(%s): %v", s.Name, err)
		}
		if a, err := netip.ParseAddr(m.Address); err != nil || !a.IsLoopback() {
			t.Errorf("machine %s address %q is not a loopback address", m.Name, m.Address)
		}
		for name, addr := range addrs {
			if addr == m.Address {
				t.Errorf("machines %s and %s share address %s", name, m.Name, addr)
			}
		}
		addrs[m.Name] = m.Address
	}
	for name, addr := range addrs {
		// The fake agent really bound its own address.
		if got := greetEventually(t, addr+":6443"); got != name {
			t.Errorf("%s:6443 answered as %q, want %q", addr, got, name)
		}
		dir := filepath.Join(l.opts.Dir, "p", "demo", name)
		for _, f := range []string{"machine.json", "agent.pid", "agent.log", "root"} {
			if _, err := os.Stat(filepath.Join(dir, f)); err != nil {
				t.Errorf("machine %s: %v", name, err)
			}
		}
		b, _ := os.ReadFile(filepath.Join(dir, "agent.log"))
		if !strings.Contains(string(b), "fake agent "+name+" listening") {
			t.Errorf("agent.log of %s does not hold the process's output:\n%s", name, b)
		}
	}
}

func TestMachineHasItsOwnProcessGroup(t *testing.T) {
	l := newLocal(t, testOpts{})
	if _, err := l.EnsureMachine(t.Context(), demo, cp(0)); err != nil {
		t.Fatal(err)
	}
	s := status(t, l, demo, "demo-cp-0")
	pgid, err := syscall.Getpgid(s.PID)
	if err != nil {
		t.Fatal(err)
	}
	// A Ctrl-C or crash of kilnd signals kilnd's group, not the machine's.
	if pgid != s.PID || pgid == syscall.Getpgrp() {
		t.Errorf("machine pgid = %d (pid %d, ours %d); want its own group", pgid, s.PID, syscall.Getpgrp())
	}
}

func TestEnsureMachineRestartsAKilledMachine(t *testing.T) {
	l := newLocal(t, testOpts{})
	m, err := l.EnsureMachine(t.Context(), demo, cp(0))
	if err != nil {
		t.Fatal(err)
	}
	greetEventually(t, m.Address+":6443")
	before := status(t, l, demo, m.Name)
	if err := syscall.Kill(before.PID, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	waitfor.Cond(t, "the machine to be seen as stopped", 10*time.Second, func() (bool, error) {
		return !status(t, l, demo, m.Name).Running, nil
	})
	again, err := l.EnsureMachine(t.Context(), demo, cp(0))
	if err != nil {
		t.Fatal(err)
	}
	after := status(t, l, demo, m.Name)
	if !after.Running || after.PID == before.PID {
		t.Errorf("after EnsureMachine: running %v pid %d (was %d); want a new running process", after.Running, after.PID, before.PID)
	}
	if again.ID != m.ID || again.Address != m.Address || after.Dir != before.Dir {
		t.Errorf("restarted machine = %+v in %s, want the same as %+v in %s", again, after.Dir, m, before.Dir)
	}
	if got := greetEventually(t, m.Address+":6443"); got != m.Name {
		t.Errorf("restarted machine answered as %q", got)
	}
	// A running machine is left alone.
	if _, err := l.EnsureMachine(t.Context(), demo, cp(0)); err != nil {
		t.Fatal(err)
	}
	if s := status(t, l, demo, m.Name); s.PID != after.PID {
		t.Errorf("EnsureMachine of a running machine restarted it (pid %d -> %d)", after.PID, s.PID)
	}
}

// TestDeleteMachine: a deleted machine's processes are killed at once,
// whether or not they would end on SIGTERM; a stopped one's get SIGTERM and
// the stop timeout (SIGKILL after it), and its directory stays.
func TestDeleteMachine(t *testing.T) {
	for _, tc := range []struct {
		name     string
		env      []string
		stop     bool // StopMachine rather than DeleteMachine
		wantSlow bool // SIGTERM is ignored: SIGKILL after the stop timeout
	}{
		{name: "stops on SIGTERM", env: []string{"FAKE_CHILD=1"}},
		{name: "ignores SIGTERM", env: []string{"FAKE_CHILD=1", "FAKE_IGNORE_TERM=1"}},
		{name: "stop, stops on SIGTERM", env: []string{"FAKE_CHILD=1"}, stop: true},
		{name: "stop, ignores SIGTERM", env: []string{"FAKE_CHILD=1", "FAKE_IGNORE_TERM=1"}, stop: true, wantSlow: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			const timeout = 500 * time.Millisecond
			l := newLocal(t, testOpts{env: tc.env, stopTimeout: timeout})
			m, err := l.EnsureMachine(t.Context(), demo, cp(0))
			if err != nil {
				t.Fatal(err)
			}
			greetEventually(t, m.Address+":6443")
			s := status(t, l, demo, m.Name)
			var child int
			waitfor.Cond(t, "the fake agent's child", 10*time.Second, func() (bool, error) {
				b, err := os.ReadFile(filepath.Join(s.Dir, "root", "child.pid"))
				child, _ = strconv.Atoi(string(b))
				return err == nil && child > 0, nil
			})
			op, do := "DeleteMachine", l.DeleteMachine
			if tc.stop {
				op, do = "StopMachine", l.StopMachine
			}
			start := time.Now()
			if err := do(t.Context(), demo, m.Name); err != nil {
				t.Fatal(err)
			}
			took := time.Since(start)
			if slow := took >= timeout; slow != tc.wantSlow {
				t.Errorf("%s took %s with a stop timeout of %s", op, took, timeout)
			}
			if _, err := os.Stat(s.Dir); tc.stop && err != nil {
				t.Errorf("machine dir after StopMachine: %v, want it kept", err)
			} else if !tc.stop && !os.IsNotExist(err) {
				t.Errorf("machine dir after DeleteMachine: %v, want it gone", err)
			}
			pf := pidFile{PID: s.PID}
			if st, err := proc.ReadStat(s.PID); err == nil {
				pf.StartTicks = st.Start
			}
			if live := pf.group(); len(live) > 0 {
				t.Errorf("processes %v of the machine's group are alive after %s", live, op)
			}
			if st, err := proc.ReadStat(child); err == nil && !st.Dead() {
				t.Errorf("the agent's child %d is alive after %s", child, op)
			}
			// Zombies of the child are reaped by init, a moment later.
			waitfor.Cond(t, "kill -0 on the machine's group to fail", 15*time.Second, func() (bool, error) { return groupGone(s.PID), nil })
			if tc.stop {
				if st := status(t, l, demo, m.Name); st.Running {
					t.Errorf("Status after StopMachine: %+v, want not running", st)
				}
				return
			}
			if _, err := l.Status(t.Context(), demo, m.Name); err == nil {
				t.Errorf("Status after DeleteMachine found the machine")
			}
			if err := l.DeleteMachine(t.Context(), demo, m.Name); err != nil {
				t.Errorf("DeleteMachine twice: %v", err)
			}
		})
	}
}

func TestAlive(t *testing.T) {
	st, err := proc.ReadStat(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	if !(pidFile{PID: os.Getpid(), StartTicks: st.Start}).alive() {
		t.Errorf("this process is not alive by its own start time")
	}
	// The pid of an exited process given to another: the start time differs.
	if (pidFile{PID: os.Getpid(), StartTicks: st.Start + 1}).alive() {
		t.Errorf("a reused pid is seen as the recorded process")
	}
	if (pidFile{PID: os.Getpid(), StartTicks: st.Start + 1}).group() != nil {
		t.Errorf("the group of a reused pid is seen as the recorded one")
	}
}

func TestAddressPoolExhausted(t *testing.T) {
	l := newLocal(t, testOpts{poolSize: 1})
	if _, err := l.EnsureMachine(t.Context(), demo, cp(0)); err != nil {
		t.Fatal(err)
	}
	// Waiting frees no address: the operation fails and says what to do.
	_, err := l.EnsureMachine(t.Context(), demo, cp(1))
	wantFailure(t, err, v1.CodeQuotaExceeded, false)
	// Deleting a machine frees its address.
	if err := l.DeleteMachine(t.Context(), demo, "demo-cp-0"); err != nil {
		t.Fatal(err)
	}
	if _, err := l.EnsureMachine(t.Context(), demo, cp(1)); err != nil {
		t.Errorf("EnsureMachine after freeing the address: %v", err)
	}
}

func TestCorruptMachineFile(t *testing.T) {
	l := newLocal(t, testOpts{})
	dir := filepath.Join(l.opts.Dir, "p", "demo", "demo-cp-0")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "machine.json")
	if err := os.WriteFile(path, []byte("{not json"), 0o600); err != nil {
		t.Fatal(err)
	}
	_, err := l.EnsureMachine(t.Context(), demo, cp(0))
	e := wantFailure(t, err, v1.CodeProviderError, false)
	if !strings.Contains(e.Message, path) {
		t.Errorf("message %q does not name %s", e.Message, path)
	}
	_, err = l.ListMachines(t.Context(), demo)
	wantFailure(t, err, v1.CodeProviderError, false)
	os.Remove(path)
}

func TestBadNames(t *testing.T) {
	l := newLocal(t, testOpts{})
	for _, c := range []provider.Cluster{{Project: "p", Name: ".."}, {Project: "a/b", Name: "c"}, {Project: "p", Name: ""}} {
		_, err := l.EnsureNetwork(t.Context(), c)
		wantFailure(t, err, v1.CodeInvalidParameter, false)
	}
	_, err := l.EnsureMachine(t.Context(), demo, provider.MachineSpec{Name: "../x"})
	wantFailure(t, err, v1.CodeInvalidParameter, false)
}

func TestDeleteNetworkWaitsForMachines(t *testing.T) {
	l := newLocal(t, testOpts{})
	if _, err := l.EnsureNetwork(t.Context(), demo); err != nil {
		t.Fatal(err)
	}
	if _, err := l.EnsureMachine(t.Context(), demo, worker(0)); err != nil {
		t.Fatal(err)
	}
	wantFailure(t, l.DeleteNetwork(t.Context(), demo), v1.CodeProviderError, true)
	if err := l.DeleteMachine(t.Context(), demo, "demo-default-0"); err != nil {
		t.Fatal(err)
	}
	if err := l.DeleteNetwork(t.Context(), demo); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(l.opts.Dir, "p")); !os.IsNotExist(err) {
		t.Errorf("project dir after the last network was deleted: %v, want it gone", err)
	}
}

// TestAllocationSkipsBusyAddresses: an address whose node ports another
// process holds (another kilnd's machine, a leftover) is not handed out.
func TestAllocationSkipsBusyAddresses(t *testing.T) {
	busy, err := net.Listen("tcp", "127.0.0.2:6443")
	if err != nil {
		t.Skipf("cannot hold 127.0.0.2:6443 for the test: %v", err)
	}
	defer busy.Close()
	l := newLocal(t, testOpts{})
	m, err := l.EnsureMachine(t.Context(), demo, provider.MachineSpec{Name: "demo-cp-0", Role: v1.RoleControlPlane})
	if err != nil {
		t.Fatal(err)
	}
	if m.Address == "127.0.0.2" {
		t.Fatalf("got the address whose apiserver port is taken")
	}
}

func TestParseAddressRange(t *testing.T) {
	for _, tc := range []struct {
		name, in string
		want     string // the range as String prints it; "" for an error
	}{
		{"range", "127.0.1.2-127.0.1.254", "127.0.1.2-127.0.1.254"},
		{"spaces", "127.0.1.2 - 127.0.1.9", "127.0.1.2-127.0.1.9"},
		{"one address", "127.0.1.2-127.0.1.2", "127.0.1.2-127.0.1.2"},
		{"no dash", "127.0.1.2", ""},
		{"not an address", "127.0.1.2-x", ""},
		{"IPv6", "::1-::2", ""},
		{"backwards", "127.0.1.9-127.0.1.2", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r, err := ParseAddressRange(tc.in)
			if tc.want == "" {
				if err == nil {
					t.Fatalf("ParseAddressRange(%q) = %s, want an error", tc.in, r)
				}
				return
			}
			if err != nil || r.String() != tc.want {
				t.Fatalf("ParseAddressRange(%q) = %s, %v; want %s", tc.in, r, err, tc.want)
			}
		})
	}
}
