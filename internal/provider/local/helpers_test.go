package local

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"os/signal"
	"strconv"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"kiln.dev/kiln/internal/failure"
	"kiln.dev/kiln/internal/provider"
	"kiln.dev/kiln/test/testlog"
	"kiln.dev/kiln/test/waitfor"
)

// The test binary is also the fake agent: started with fakeEnv set, TestMain
// runs fakeAgent instead of the tests.
const fakeEnv = "KILN_LOCAL_FAKE_AGENT"

func TestMain(m *testing.M) {
	switch os.Getenv(fakeEnv) {
	case "agent":
		fakeAgent()
	case "child":
		fakeChild()
	default:
		os.Exit(m.Run())
	}
}

// fakeAgent acts as a machine's agent and API server: it listens on
// FAKE_ADDR:6443 and greets every connection with its name, then echoes.
// FAKE_IGNORE_TERM makes it (and its child) survive SIGTERM; FAKE_CHILD
// makes it start a child in its process group, as the agent starts etcd;
// FAKE_EXIT=N makes it write two lines and exit with status N at once.
func fakeAgent() {
	if code := os.Getenv("FAKE_EXIT"); code != "" {
		n, _ := strconv.Atoi(code)
		fmt.Println("fake agent starting")
		fmt.Fprintln(os.Stderr, "join: read credentials: no such file or directory")
		os.Exit(n)
	}
	if os.Getenv("FAKE_IGNORE_TERM") != "" {
		signal.Ignore(syscall.SIGTERM)
	}
	if os.Getenv("FAKE_CHILD") != "" {
		cmd := exec.Command(os.Args[0])
		cmd.Env = append(os.Environ(), fakeEnv+"=child")
		if err := cmd.Start(); err != nil {
			fmt.Println("fake agent: start child:", err)
			os.Exit(1)
		}
		os.WriteFile("child.pid", []byte(strconv.Itoa(cmd.Process.Pid)), 0o600) // in its root
	}
	name, addr := os.Getenv("FAKE_NAME"), os.Getenv("FAKE_ADDR")
	ln, err := net.Listen("tcp", net.JoinHostPort(addr, strconv.Itoa(APIServerPort)))
	if err != nil {
		fmt.Println("fake agent: listen:", err)
		os.Exit(1)
	}
	fmt.Printf("fake agent %s listening on %s\n", name, ln.Addr())
	for {
		c, err := ln.Accept()
		if err != nil {
			os.Exit(1)
		}
		go func() {
			defer c.Close()
			fmt.Fprintln(c, name)
			s := bufio.NewScanner(c)
			for s.Scan() {
				fmt.Fprintln(c, s.Text())
			}
		}()
	}
}

func fakeChild() {
	if os.Getenv("FAKE_IGNORE_TERM") != "" {
		signal.Ignore(syscall.SIGTERM)
	}
	for {
		time.Sleep(time.Hour) // a long-lived process, like etcd; not a wait for a condition
	}
}

// octet gives every test its own address pool, 127.77.<octet>.0/24, so tests
// and anything else on this computer do not share addresses.
var octet atomic.Int32

type testOpts struct {
	env         []string
	poolSize    int
	stopTimeout time.Duration
	dir         string
	command     func(Machine) (*exec.Cmd, error) // instead of the fake agent
}

// newLocal returns a Local over a fresh directory (or o.dir) whose machines
// run the fake agent, and deletes every machine it left when the test ends.
func newLocal(t *testing.T, o testOpts) *Local {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	if o.dir == "" {
		o.dir = t.TempDir()
	}
	if o.poolSize == 0 {
		o.poolSize = 250
	}
	if o.stopTimeout == 0 {
		o.stopTimeout = 5 * time.Second
	}
	n := byte(octet.Add(1))
	l, err := New(Options{
		Dir: o.dir,
		Command: func(m Machine) (*exec.Cmd, error) {
			if o.command != nil {
				return o.command(m)
			}
			// The real command's join files, when the plan handed bootstrap
			// data; then the fake agent in its place.
			if m.Bootstrap != nil {
				if _, err := AgentCommand("kiln-agent", "")(m); err != nil {
					return nil, err
				}
			}
			cmd := exec.Command(exe)
			cmd.Env = append(os.Environ(), fakeEnv+"=agent", "FAKE_NAME="+m.Name, "FAKE_ADDR="+m.Address)
			cmd.Env = append(cmd.Env, o.env...)
			return cmd, nil
		},
		Logger:      testLogger(t),
		AddressPool: AddressRange{netip.AddrFrom4([4]byte{127, 77, n, 1}), netip.AddrFrom4([4]byte{127, 77, n, byte(o.poolSize)})},
		StopTimeout: o.stopTimeout,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cleanupDir(t, l) })
	return l
}

// cleanupDir closes l and deletes every machine under its directory.
func cleanupDir(t *testing.T, l *Local) {
	l.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	projects, _ := subdirs(l.opts.Dir)
	for _, p := range projects {
		clusters, _ := subdirs(p)
		for _, cd := range clusters {
			files, _ := machinesIn(cd)
			for _, f := range files {
				c := provider.Cluster{Project: f.Project, Name: f.Cluster}
				// A machine started by another Local over the same directory
				// (a test of a restart) is reaped by that one, which writes
				// its exit record while this one removes the directory: the
				// delete is retryable and tried again, as a plan would.
				err := l.DeleteMachine(ctx, c, f.Name)
				for try := 1; err != nil && try < 3; try++ {
					err = l.DeleteMachine(ctx, c, f.Name)
				}
				if err != nil {
					t.Errorf("cleanup: delete machine %s: %v", f.Name, err)
				}
			}
		}
	}
	// The processes l started are reaped by goroutines of l, which log: wait
	// for them here, or they log after the test has ended.
	waitfor.Cond(t, "the machines' processes to be reaped", time.Minute, func() (bool, error) {
		l.wmu.Lock()
		defer l.wmu.Unlock()
		return len(l.waits) == 0, nil
	})
}

func testLogger(t *testing.T) *slog.Logger { return testlog.New(t, slog.LevelDebug) }

// greet connects to addr and returns the first line, the name of the fake
// agent that answered.
func greet(addr string) (string, error) {
	c, err := net.DialTimeout("tcp", addr, 2*time.Second)
	if err != nil {
		return "", err
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(5 * time.Second))
	line, err := bufio.NewReader(c).ReadString('\n')
	if err != nil {
		return "", fmt.Errorf("read greeting from %s: %w", addr, err)
	}
	return line[:len(line)-1], nil
}

// greetEventually waits until addr answers (a fake agent starting up).
func greetEventually(t *testing.T, addr string) string {
	t.Helper()
	var name string
	waitfor.Cond(t, "an answer from "+addr, 10*time.Second, func() (bool, error) {
		var err error
		name, err = greet(addr)
		return err == nil, waitfor.NotYet(err)
	})
	return name
}

func status(t *testing.T, l *Local, c provider.Cluster, name string) Status {
	t.Helper()
	s, err := l.Status(t.Context(), c, name)
	if err != nil {
		t.Fatalf("Status(%q): %v", name, err)
	}
	return s
}

// groupGone reports whether no process of group pgid is left, zombies
// included (kill -0 on the group).
func groupGone(pgid int) bool {
	return errors.Is(syscall.Kill(-pgid, 0), syscall.ESRCH)
}

func wantFailure(t *testing.T, err error, code string, retryable bool) *failure.Error {
	t.Helper()
	var e *failure.Error
	if !errors.As(err, &e) {
		t.Fatalf("error %v is not a failure.Error", err)
	}
	if e.Code != code || e.Retryable != retryable {
		t.Fatalf("error = code %q retryable %v (%v), want code %q retryable %v", e.Code, e.Retryable, err, code, retryable)
	}
	return e
}
