package agent

import (
	"context"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

	v1 "kiln.dev/kiln/api/v1"
	"kiln.dev/kiln/test/waitfor"
)

// TestWatchNotices: nothing is sent while the cloud gives no notice; its
// notice is sent once it appears, stamped with when it was first seen.
func TestWatchNotices(t *testing.T) {
	var given atomic.Bool
	var polls atomic.Int64
	at := time.Date(2030, 1, 2, 3, 6, 0, 0, time.UTC)
	r := &runner{out: newOutbox(time.Now), log: slog.New(slog.DiscardHandler), opts: RunOptions{
		Now:        time.Now,
		NoticePoll: 10 * time.Millisecond,
		Notices: func(context.Context) (*v1.Interruption, error) {
			polls.Add(1)
			if !given.Load() {
				return nil, nil
			}
			return &v1.Interruption{Kind: v1.InterruptionSpot, Action: "terminate", At: at}, nil
		},
	}}
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan struct{})
	go func() { defer close(done); r.watchNotices(ctx) }()
	defer func() { cancel(); <-done }()

	afterPolls := func(n int64) {
		t.Helper()
		from := polls.Load()
		waitfor.Cond(t, "more polls", 5*time.Second, func() (bool, error) { return polls.Load() >= from+n, nil })
	}
	afterPolls(3)
	if msgs := r.out.take(); len(msgs) != 0 {
		t.Fatalf("sent %+v before any notice", msgs)
	}
	given.Store(true)
	var got []v1.AgentMessage
	waitfor.Cond(t, "the notice sent", 5*time.Second, func() (bool, error) {
		got = append(got, r.out.take()...)
		return len(got) > 0, nil
	})
	n := got[0].Notice
	if got[0].Type != v1.AgentNotice || n == nil || !n.At.Equal(at) || n.Noticed.IsZero() {
		t.Fatalf("sent %+v", got[0])
	}
	afterPolls(3)
	if again := r.out.take(); len(again) != 0 {
		t.Errorf("the notice was sent again within %s: %+v", noticeRepeat, again)
	}
}
