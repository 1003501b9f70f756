// Package process tests kilnd as users run it: real processes on loopback,
// killed and restarted, several sharing one store.
package process

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	v1 "kiln.dev/kiln/api/v1"
	"kiln.dev/kiln/internal/store"
	"kiln.dev/kiln/internal/store/postgres"
	"kiln.dev/kiln/internal/store/postgres/pgtest"
	"kiln.dev/kiln/internal/store/sqlite"
)

var kilndBin string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "kiln-process-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	kilndBin = filepath.Join(dir, "kilnd")
	build := exec.Command("go", "build", "-o", kilndBin, "kiln.dev/kiln/cmd/kilnd")
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "build kilnd:", err)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// kilnd is one running kilnd process.
type kilnd struct {
	t    *testing.T
	cmd  *exec.Cmd
	addr string
	log  string // path of its stderr
	done chan struct{}
}

var listenRE = regexp.MustCompile(`msg="kilnd listening" addr=(\S+)`)

// startKilnd starts kilnd with args (plus --listen 127.0.0.1:0) and waits
// until it reports its address. env is added to the process environment.
func startKilnd(t *testing.T, name string, env []string, args ...string) *kilnd {
	t.Helper()
	logPath := filepath.Join(t.TempDir(), name+".log")
	logFile, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(kilndBin, append([]string{"--listen", "127.0.0.1:0", "--agent-listen", "127.0.0.1:0"}, args...)...)
	cmd.Env = append(os.Environ(), env...)
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	k := &kilnd{t: t, cmd: cmd, log: logPath, done: make(chan struct{})}
	addr := make(chan string, 1)
	go func() {
		defer close(k.done)
		defer logFile.Close()
		sc := bufio.NewScanner(stderr)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for sc.Scan() {
			line := sc.Text()
			fmt.Fprintln(logFile, line)
			if m := listenRE.FindStringSubmatch(line); m != nil {
				select {
				case addr <- m[1]:
				default:
				}
			}
		}
		io.Copy(logFile, stderr)
		cmd.Wait()
	}()
	t.Cleanup(func() { k.kill(syscall.SIGKILL) })
	select {
	case k.addr = <-addr:
	case <-k.done:
		t.Fatalf("%s exited before listening; log:\n%s", name, k.logText())
	case <-time.After(60 * time.Second):
		t.Fatalf("%s did not report its address in 60s; log:\n%s", name, k.logText())
	}
	return k
}

func (k *kilnd) url() string { return "http://" + k.addr }

func (k *kilnd) logText() string {
	b, _ := os.ReadFile(k.log)
	return string(b)
}

// kill sends sig and waits for the process to exit.
func (k *kilnd) kill(sig syscall.Signal) {
	if k.cmd.Process == nil {
		return
	}
	k.cmd.Process.Signal(sig)
	select {
	case <-k.done:
	case <-time.After(60 * time.Second):
		k.cmd.Process.Kill()
		<-k.done
	}
}

// storeKind is where the kilnd processes of a test keep their records.
type storeKind struct {
	name string
	// setup returns the kilnd flags that select the store, and a function
	// that opens the same store from the test (for reading what a crashed
	// process left).
	setup func(t *testing.T, dataDir string) (flags []string, open func() store.Store)
}

var storeKinds = []storeKind{
	{name: "sqlite", setup: func(t *testing.T, dataDir string) ([]string, func() store.Store) {
		return nil, func() store.Store {
			st, err := sqlite.Open(t.Context(), filepath.Join(dataDir, "kiln.db"))
			if err != nil {
				t.Fatal(err)
			}
			return st
		}
	}},
	{name: "postgres", setup: func(t *testing.T, _ string) ([]string, func() store.Store) {
		url := pgtest.FreshDB(t)
		return []string{"--store", url}, func() store.Store {
			st, err := postgres.Open(t.Context(), url)
			if err != nil {
				t.Fatal(err)
			}
			return st
		}
	}},
}

// forEachStore runs test once per store kind, each in its own subtest.
func forEachStore(t *testing.T, test func(t *testing.T, storeFlags []string, open func() store.Store, dataDir string)) {
	for _, k := range storeKinds {
		t.Run(k.name, func(t *testing.T) {
			dataDir := t.TempDir()
			flags, open := k.setup(t, dataDir)
			test(t, flags, open, dataDir)
		})
	}
}

func readToken(t *testing.T, dataDir string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dataDir, "admin.token"))
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(b))
}

// simCluster is a cluster on the sim provider whose every step takes latency.
func simCluster(name string, latency time.Duration, workers int) *v1.Cluster {
	return &v1.Cluster{
		Name: name,
		Spec: v1.ClusterSpec{
			Provider:     "sim",
			ControlPlane: v1.ControlPlane{Size: 1},
			WorkerPools:  []v1.WorkerPool{{Name: "default", Size: workers}},
			Labels:       map[string]string{"sim.kiln.dev/step-latency": latency.String()},
		},
	}
}

// waitFor polls cond until it returns true or the deadline passes.
func waitFor(t *testing.T, what string, timeout time.Duration, cond func() (bool, error)) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		ok, err := cond()
		if err != nil {
			t.Fatalf("waiting for %s: %v", what, err)
		}
		if ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", timeout, what)
		}
		<-tick.C
	}
}

// waitTerminal waits for every operation to end and returns them by id.
func waitTerminal(t *testing.T, ctx context.Context, c *v1.Client, ids []string) map[string]*v1.Operation {
	t.Helper()
	var (
		mu   sync.Mutex
		ops  = map[string]*v1.Operation{}
		errs []error
		wg   sync.WaitGroup
	)
	for _, id := range ids {
		wg.Go(func() {
			op, err := c.WaitOperation(ctx, id, nil)
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				errs = append(errs, fmt.Errorf("operation %s: %w", id, err))
				return
			}
			ops[id] = op
		})
	}
	wg.Wait()
	for _, err := range errs {
		t.Error(err)
	}
	if len(errs) > 0 {
		t.FailNow()
	}
	return ops
}
