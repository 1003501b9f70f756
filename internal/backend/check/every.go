package check

import (
	"context"
	"log/slog"
	"time"
)

// Every calls pass every interval, the first time one interval from now,
// until ctx ends, and returns ctx's error. A pass that fails is logged as
// what (unless ctx ended meanwhile); the next pass runs all the same.
func Every(ctx context.Context, interval time.Duration, log *slog.Logger, what string, pass func(context.Context) error) error {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
		}
		if err := pass(ctx); err != nil && ctx.Err() == nil {
			log.Warn(what, "err", err)
		}
	}
}
