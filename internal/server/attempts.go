package server

import (
	"context"
	"iter"
	"math/rand/v2"
	"time"
)

// maxAttempts bounds the read-check-write loop of a write that races
// another writer of the same record.
const maxAttempts = 8

// attempts yields the tries of a read-check-write loop that races other
// writers of the same record: up to maxAttempts, with a short growing,
// jittered pause before each try after the first, so that a user's write
// does not lose every race to a busy writer (an agent reporting right
// after it registered writes its node several times a second). It stops
// early when ctx ends; the caller then answers with errBusy or ctx's error.
func attempts(ctx context.Context) iter.Seq[int] {
	return func(yield func(int) bool) {
		pause := 5 * time.Millisecond
		for i := range maxAttempts {
			if i > 0 {
				t := time.NewTimer(pause/2 + rand.N(pause))
				select {
				case <-ctx.Done():
					t.Stop()
					return
				case <-t.C:
				}
				pause = min(2*pause, 200*time.Millisecond)
			}
			if !yield(i) {
				return
			}
		}
	}
}
