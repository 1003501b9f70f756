// Package testlog is the slog logger tests hand the code they run: every
// line goes to the test's own log (t.Log), so it shows with the test that
// wrote it and only when it fails or runs with -v.
package testlog

import (
	"bytes"
	"log/slog"
	"strings"
	"sync"
	"testing"
)

// New returns a logger writing records of level and above to t's log.
func New(t testing.TB, level slog.Level) *slog.Logger {
	return slog.New(slog.NewTextHandler(writer{t}, &slog.HandlerOptions{Level: level}))
}

type writer struct{ t testing.TB }

func (w writer) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

// Buffer is a bytes.Buffer that goroutines may write while a test reads
// it: the log of a server the test runs, to look for a line in.
type Buffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *Buffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

// String is what was written so far.
func (b *Buffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}
