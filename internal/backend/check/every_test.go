package check_test

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"kiln.dev/kiln/internal/backend/check"
)

// Passes run until the context ends, a failed one is logged and the next
// runs all the same; Every answers the context's error.
func TestEvery(t *testing.T) {
	var buf bytes.Buffer
	log := slog.New(slog.NewTextHandler(&buf, nil))
	ctx, cancel := context.WithCancel(t.Context())
	var passes atomic.Int32
	err := check.Every(ctx, time.Millisecond, log, "the check", func(context.Context) error {
		if passes.Add(1) == 3 {
			cancel()
			return nil
		}
		return errors.New("boom")
	})
	if !errors.Is(err, context.Canceled) || passes.Load() != 3 {
		t.Errorf("Run = %v after %d passes, want Canceled after 3", err, passes.Load())
	}
	if got := strings.Count(buf.String(), `msg="the check" err=boom`); got != 2 {
		t.Errorf("log %q: %d failed passes logged, want 2", buf.String(), got)
	}
}
