// Package testlog is the slog logger tests hand the code they run: every
// line goes to the test's own log (t.Log), so it shows with the test that
// wrote it and only when it fails or runs with -v.
package testlog

import (
	"log/slog"
	"strings"
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
