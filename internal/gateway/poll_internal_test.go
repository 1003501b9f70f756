package gateway

import (
	"fmt"
	"testing"
	"time"
)

// TestSessionPoll: PollInterval up to MaxSessionPolls×PollInterval sessions,
// then sessions/MaxSessionPolls seconds, each with a tenth of jitter.
func TestSessionPoll(t *testing.T) {
	for _, tc := range []struct {
		sessions int
		want     time.Duration
	}{
		{0, 2 * time.Second},
		{500, 2 * time.Second},
		{1000, 4 * time.Second},
		{10000, 40 * time.Second},
	} {
		t.Run(fmt.Sprint(tc.sessions), func(t *testing.T) {
			g := New(Options{PollInterval: 2 * time.Second})
			for i := range tc.sessions {
				g.sessions[nodeKey{"p", "c", fmt.Sprint(i)}] = &session{}
			}
			for range 100 {
				if d := g.sessionPoll(); d < tc.want-tc.want/10 || d > tc.want+tc.want/10 {
					t.Fatalf("next poll in %s, want %s ± a tenth", d, tc.want)
				}
			}
		})
	}
}
