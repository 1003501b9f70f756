package waitfor_test

import (
	"errors"
	"fmt"
	"runtime"
	"strings"
	"testing"
	"time"

	"kiln.dev/kiln/test/waitfor"
)

// recorder stands in for the test Cond fails: Fatalf records the message
// and ends the goroutine, as testing.T's does.
type recorder struct {
	testing.TB
	failed string
}

func (r *recorder) Helper() {}

func (r *recorder) Fatalf(format string, args ...any) {
	r.failed = fmt.Sprintf(format, args...)
	runtime.Goexit()
}

// run calls Cond on a goroutine of its own, as a test would on its own, and
// returns the failure, empty if Cond returned.
func run(timeout time.Duration, cond func() (bool, error)) string {
	r := &recorder{}
	done := make(chan struct{})
	go func() {
		defer close(done)
		waitfor.Cond(r, "the thing", timeout, cond)
	}()
	<-done
	return r.failed
}

func TestCond(t *testing.T) {
	boom := errors.New("boom")
	tests := []struct {
		name string
		cond func(calls int) (bool, error)
		want string // the failure; empty when Cond returns
	}{
		{
			name: "true at once",
			cond: func(int) (bool, error) { return true, nil },
		},
		{
			name: "true on the third call",
			cond: func(calls int) (bool, error) { return calls == 3, nil },
		},
		{
			name: "never true",
			cond: func(int) (bool, error) { return false, nil },
			want: "timed out after 50ms waiting for the thing",
		},
		{
			name: "an error fails at once",
			cond: func(calls int) (bool, error) { return calls == 3, boom },
			want: "waiting for the thing: boom",
		},
		{
			name: "not yet, then true",
			cond: func(calls int) (bool, error) {
				if calls < 3 {
					return false, waitfor.NotYet(boom)
				}
				return true, nil
			},
		},
		{
			name: "true with a reason is true",
			cond: func(int) (bool, error) { return true, waitfor.NotYet(boom) },
		},
		{
			name: "not yet until the deadline names the last reason",
			cond: func(calls int) (bool, error) {
				return false, waitfor.NotYet(fmt.Errorf("call %d: %w", calls, boom))
			},
			want: "timed out after 50ms waiting for the thing: call ",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			calls := 0
			// A case that must time out gets 50ms; one that must not, a
			// minute: three polls took longer than 50ms on a loaded machine.
			timeout := 50 * time.Millisecond
			if tt.want == "" {
				timeout = time.Minute
			}
			got := run(timeout, func() (bool, error) {
				calls++
				return tt.cond(calls)
			})
			if !strings.HasPrefix(got, tt.want) || (tt.want == "" && got != "") {
				t.Errorf("Cond failed with %q, want %q", got, tt.want)
			}
		})
	}
}

// Cond keeps asking until the deadline, and asks once more after it.
func TestCondAsksAfterTheDeadline(t *testing.T) {
	start := time.Now()
	var last time.Time
	run(30*time.Millisecond, func() (bool, error) {
		last = time.Now()
		return false, nil
	})
	if d := last.Sub(start); d < 30*time.Millisecond {
		t.Errorf("last call %s after the start, want at least the 30ms timeout", d)
	}
}

func TestNotYetNil(t *testing.T) {
	if err := waitfor.NotYet(nil); err != nil {
		t.Errorf("NotYet(nil) = %v, want nil", err)
	}
}
