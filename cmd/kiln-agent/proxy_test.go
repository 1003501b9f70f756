package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"kiln.dev/kiln/test/waitfor"
)

// TestProxyInitial: a proxy whose --config file does not exist yet starts
// with --initial (how the docker provider starts a Service's load
// balancer); an existing file wins over it; an --initial that cannot be
// used is refused, named.
func TestProxyInitial(t *testing.T) {
	backend := func(name string) string {
		s := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, name) }))
		t.Cleanup(s.Close)
		return strings.TrimPrefix(s.URL, "http://")
	}
	a, b := backend("a"), backend("b")
	conf := func(port int, to string) string {
		return fmt.Sprintf(`{"ports": [{"port": %d, "backends": [%q]}]}`, port, to)
	}
	// start runs the proxy until the test ends and waits for port to
	// answer with want.
	start := func(t *testing.T, port int, want string, args ...string) {
		ctx, cancel := context.WithCancel(t.Context())
		done := make(chan int, 1)
		var errOut bytes.Buffer
		go func() {
			done <- run(ctx, append([]string{"proxy", "--listen", "127.0.0.1"}, args...), io.Discard, &errOut)
		}()
		t.Cleanup(func() { cancel(); <-done })
		waitfor.Cond(t, fmt.Sprintf("the proxy on port %d to answer %q", port, want), 10*time.Second, func() (bool, error) {
			select {
			case code := <-done:
				done <- code
				t.Fatalf("the proxy ended: exit %d, %s", code, errOut.String())
			default:
			}
			r, err := http.Get(fmt.Sprintf("http://127.0.0.1:%d/", port))
			if err != nil {
				return false, waitfor.NotYet(err)
			}
			body, _ := io.ReadAll(r.Body)
			r.Body.Close()
			return string(body) == want, waitfor.NotYet(fmt.Errorf("answered %q", body))
		})
	}

	t.Run("no file: --initial", func(t *testing.T) {
		port := freePort(t)
		start(t, port, "a", "--config", filepath.Join(t.TempDir(), "missing.json"), "--initial", conf(port, a))
	})
	t.Run("the file wins", func(t *testing.T) {
		port := freePort(t)
		file := filepath.Join(t.TempDir(), "lb.json")
		if err := os.WriteFile(file, []byte(conf(port, b)), 0o644); err != nil {
			t.Fatal(err)
		}
		start(t, port, "b", "--config", file, "--initial", conf(port, a))
	})
	t.Run("a bad --initial is named", func(t *testing.T) {
		code, _, errOut := runAgent(t, "proxy", "--config", filepath.Join(t.TempDir(), "missing.json"), "--initial", `{"ports": [{"port": 0}]}`)
		if code == exitOK || !strings.Contains(errOut, "--initial: ports[0].port") {
			t.Errorf("exit %d, stderr %q: want a failure naming --initial's ports[0].port", code, errOut)
		}
	})
}

// freePort is a TCP port of 127.0.0.1 that was free a moment ago.
func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}
