package local

import (
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"testing"
	"time"

	v1 "kiln.dev/kiln/api/v1"
	distrolocal "kiln.dev/kiln/internal/distro/local"
	"kiln.dev/kiln/internal/kubeapi"
	"kiln.dev/kiln/internal/pki"
	"kiln.dev/kiln/test/testlog"
)

// kubeBinary finds kiln-kube (KILN_KUBE_BIN, or bin/kiln-kube at the
// repository's root) or skips the test.
func kubeBinary(t *testing.T) string {
	t.Helper()
	if testing.Short() {
		t.Skip("real Kubernetes components: not in -short")
	}
	path := os.Getenv("KILN_KUBE_BIN")
	if path == "" {
		abs, err := filepath.Abs(filepath.Join("..", "..", "..", "..", "bin", "kiln-kube"))
		if err != nil {
			t.Fatal(err)
		}
		path = abs
	}
	if _, err := os.Stat(path); err != nil {
		t.Skipf("no kiln-kube at %s: run `make kube` (or set KILN_KUBE_BIN) to run the real local distribution tests", path)
	}
	return path
}

// recorder is an agent.Reporter that keeps what it is told.
type recorder struct {
	mu       sync.Mutex
	progress []v1.StepProgress
	lines    map[string]int
}

func (r *recorder) Progress(step, state, msg string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.progress = append(r.progress, v1.StepProgress{Step: step, State: state, Message: msg})
}

func (r *recorder) Log(stream, _ string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.lines == nil {
		r.lines = map[string]int{}
	}
	r.lines[stream]++
}

// final returns each step's last state and message, in first-seen order.
func (r *recorder) final() (steps []string, states map[string]v1.StepProgress) {
	r.mu.Lock()
	defer r.mu.Unlock()
	states = map[string]v1.StepProgress{}
	for _, p := range r.progress {
		if _, ok := states[p.Step]; !ok {
			steps = append(steps, p.Step)
		}
		states[p.Step] = p
	}
	return steps, states
}

func (r *recorder) logLines(stream string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.lines[stream]
}

// proxy is a TCP load balancer on 127.0.0.1 in front of backends, as the
// local provider's.
func proxy(t *testing.T, backends ...string) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				for _, b := range backends {
					bc, err := net.DialTimeout("tcp", b, time.Second)
					if err != nil {
						continue
					}
					defer bc.Close()
					go func() { _, _ = io.Copy(bc, c); bc.Close() }()
					_, _ = io.Copy(c, bc)
					return
				}
			}()
		}
	}()
	return l.Addr().String()
}

// freeAddress returns a loopback address on which every component port is
// free, preferring want.
func freeAddress(t *testing.T, want string, avoid ...string) string {
	t.Helper()
	cands := []string{want}
	for i := 2; i < 250; i++ {
		cands = append(cands, "127.0.91."+strconv.Itoa(i))
	}
next:
	for _, a := range cands {
		for _, av := range avoid {
			if a == av {
				continue next
			}
		}
		for _, port := range []int{distrolocal.EtcdClientPort, distrolocal.EtcdPeerPort, distrolocal.APIServerPort, distrolocal.ControllerManagerPort, distrolocal.SchedulerPort, distrolocal.KubeletPort} {
			l, err := net.Listen("tcp", net.JoinHostPort(a, strconv.Itoa(port)))
			if err != nil {
				continue next
			}
			l.Close()
		}
		return a
	}
	t.Fatal("no free loopback address")
	return ""
}

// adminClient is a cluster-admin kubeapi client against server.
func adminClient(t *testing.T, ca *pki.CA, server string) *kubeapi.Client {
	t.Helper()
	cert, key, err := ca.Issue(pki.AdminRequest("kiln-test-admin"))
	if err != nil {
		t.Fatal(err)
	}
	c, err := kubeapi.New("https://"+server, ca.CertPEM(), cert, key)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return c
}

func testLogger(t *testing.T) *slog.Logger { return testlog.New(t, slog.LevelInfo) }

// pidsOf returns the pids recorded under root/run.
func pidsOf(root string) []pidFile {
	var out []pidFile
	s := &supervisor{root: root}
	for _, c := range allComponents {
		if pf, ok := s.readPID(c); ok {
			out = append(out, pf)
		}
	}
	return out
}
