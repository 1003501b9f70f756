// Package priority marks the work a user is waiting on, so that what
// serves it can put it ahead of the background's. In one kilnd process the
// API and the backend's runs share one store writer: during a wave of
// operations the runs' checkpoints fill it, and a user's PUT would wait
// behind them.
package priority

import "context"

type foregroundKey struct{}

// Foreground marks ctx as a request's that a user waits on: a store serves
// its writes ahead of the background's.
func Foreground(ctx context.Context) context.Context {
	return context.WithValue(ctx, foregroundKey{}, true)
}

// IsForeground reports whether ctx was marked by Foreground.
func IsForeground(ctx context.Context) bool {
	v, _ := ctx.Value(foregroundKey{}).(bool)
	return v
}
