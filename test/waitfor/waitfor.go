// Package waitfor is the one way Kiln's tests wait: on a condition, with a
// deadline, never with a fixed sleep. It imports the standard library only,
// so the tests of every package, internal ones included, can use it without
// an import cycle.
package waitfor

import (
	"errors"
	"testing"
	"time"
)

// Poll intervals: the first polls come quickly, so a unit test whose
// condition holds within milliseconds does not wait long, and later polls
// slow down to maxPoll, so a condition that takes minutes (a real cluster)
// is not asked about more often than it needs; and a condition that takes
// longer than maxPoll to answer is asked no more often than it takes.
const (
	firstPoll = 5 * time.Millisecond
	maxPoll   = 50 * time.Millisecond
)

// Cond calls cond until it reports true, failing t if timeout passes first.
// what names the condition ("the cluster to be deleted"); the failure says
// "timed out after <timeout> waiting for <what>".
//
// An error from cond fails t at once, naming what it waited for, unless it
// is wrapped by NotYet: then it is the reason cond is not true yet (ignored
// when cond is true), and the last such reason is part of the failure when
// the deadline passes.
//
// cond is always called at least once, and once more after the deadline
// passed before Cond gives up. Cond calls t.Fatalf, so it must run on the
// test's goroutine.
func Cond(t testing.TB, what string, timeout time.Duration, cond func() (bool, error)) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	wait := firstPoll
	var last error // the last reason cond gave for not being true yet
	for {
		asked := time.Now()
		ok, err := cond()
		took := time.Since(asked)
		var nyt notYet
		isNotYet := errors.As(err, &nyt)
		switch {
		case err != nil && !isNotYet:
			t.Fatalf("waiting for %s: %v", what, err)
		case ok:
			return
		case isNotYet:
			last = nyt.err
		}
		if time.Now().After(deadline) {
			if last != nil {
				t.Fatalf("timed out after %s waiting for %s: %v", timeout, what, last)
			}
			t.Fatalf("timed out after %s waiting for %s", timeout, what)
		}
		// A condition that takes long to ask (a kubectl, a query) is asked
		// no more often than it takes.
		time.Sleep(max(wait, took))
		wait = min(2*wait, maxPoll)
	}
}

// NotYet marks err, returned by a condition, as a reason the condition does
// not hold yet rather than a failure: Cond polls again and names the last
// such reason if it times out. NotYet(nil) is nil.
func NotYet(err error) error {
	if err == nil {
		return nil
	}
	return notYet{err}
}

type notYet struct{ err error }

func (e notYet) Error() string { return "not yet: " + e.err.Error() }
func (e notYet) Unwrap() error { return e.err }
