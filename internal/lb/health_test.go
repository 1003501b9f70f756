package lb

import (
	"context"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"kiln.dev/kiln/test/waitfor"
)

// readiness is a Check whose verdicts the test sets, by backend.
type readiness struct {
	mu    sync.Mutex
	ready map[string]bool
}

func (r *readiness) set(b string, ready bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.ready[b] = ready
}

func (r *readiness) check(ctx context.Context, b string) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if !r.ready[b] {
		return errors.New("not ready")
	}
	return nil
}

// answers dials the proxy n times and counts the answers by backend.
func answers(t *testing.T, p *Proxy, n int) map[string]int {
	t.Helper()
	seen := map[string]int{}
	for range n {
		c, _, name := dial(t, p.Addr())
		if c != nil {
			c.Close()
		}
		seen[name]++
	}
	return seen
}

// A backend that accepts connections but fails its check gets none while
// another is ready, and gets them again when it is the only one that
// accepts; once it passes its check it is in the round robin again.
func TestHealthChecksSteerConnections(t *testing.T) {
	starting, ready := backend(t, "starting"), backend(t, "ready")
	r := &readiness{ready: map[string]bool{ready: true}}
	var mu sync.Mutex
	bs := []string{starting, ready}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := New(ln, func() []string { mu.Lock(); defer mu.Unlock(); return append([]string(nil), bs...) }, nil)
	p.CheckHealth(r.check, 20*time.Millisecond)
	go p.Serve()
	t.Cleanup(p.Close)

	waitfor.Cond(t, "the first checks", 5*time.Second, func() (bool, error) {
		p.health.mu.Lock()
		defer p.health.mu.Unlock()
		return len(p.health.ready) == 2, nil
	})
	if seen := answers(t, p, 6); seen["ready"] != 6 {
		t.Errorf("answers by backend = %v; want every one from the ready backend", seen)
	}

	// The ready one goes: the other, not ready by its check, still answers.
	mu.Lock()
	bs = []string{starting, refused(t)}
	mu.Unlock()
	if seen := answers(t, p, 3); seen["starting"] != 3 {
		t.Errorf("with the ready backend gone, answers = %v; want the unready one that accepts", seen)
	}

	// Both ready: both answer in turn.
	mu.Lock()
	bs = []string{starting, ready}
	mu.Unlock()
	r.set(starting, true)
	waitfor.Cond(t, "the starting backend's check to pass", 5*time.Second, func() (bool, error) {
		p.health.mu.Lock()
		defer p.health.mu.Unlock()
		return p.health.ready[starting] && p.health.ready[ready], nil
	})
	if seen := answers(t, p, 6); seen["starting"] != 3 || seen["ready"] != 3 {
		t.Errorf("answers by backend = %v; want 3 each, in turn", seen)
	}
}

// APIServerReady passes a server whose /readyz answers 200 over TLS, and
// fails one answering 500, one that does not answer TLS, and a refused one.
func TestAPIServerReady(t *testing.T) {
	readyz := http.StatusOK
	var mu sync.Mutex
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		defer mu.Unlock()
		if r.URL.Path != "/readyz" {
			http.NotFound(w, r)
			return
		}
		w.WriteHeader(readyz)
	}))
	t.Cleanup(srv.Close)
	check := APIServerReady()
	addr := strings.TrimPrefix(srv.URL, "https://")
	if err := check(t.Context(), addr); err != nil {
		t.Errorf("a ready server: %v", err)
	}
	mu.Lock()
	readyz = http.StatusInternalServerError
	mu.Unlock()
	var notReady *NotReadyError
	if err := check(t.Context(), addr); !errors.As(err, &notReady) || notReady.Status != http.StatusInternalServerError || notReady.Backend != addr {
		t.Errorf("a server whose /readyz answers 500: %v, want a NotReadyError with that status and backend", err)
	}
	// Accepts and says nothing (an API server that restarts on a busy
	// machine): the check's context ends it.
	silent := backend(t, "silent")
	ctx, cancel := context.WithTimeout(t.Context(), 200*time.Millisecond)
	defer cancel()
	if err := check(ctx, silent); err == nil {
		t.Error("a backend that does not speak TLS passed")
	}
	if err := check(t.Context(), refused(t)); err == nil {
		t.Error("a refused backend passed")
	}
}
