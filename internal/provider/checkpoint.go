package provider

import "context"

// Checkpoint is what a step keeps for its provider between its attempts,
// and across workers: a worker that dies in the middle of a step leaves it
// to the next one, which runs the step again with the same checkpoint. A
// provider keeps there what lets it pick up an operation of its cloud where
// it was (the azure provider: each long-running operation's poller resume
// token, keyed by resource) instead of writing again.
//
// The plan runner gives each step one (WithCheckpoint), kept in the
// operation's stored step record and never shown in the API (what is kept
// may hold URLs of the account's cloud); it is dropped when the step
// succeeds. Values are small strings.
type Checkpoint interface {
	// Get is the value kept under key, or "".
	Get(key string) string
	// Set keeps value under key ("" drops the key) and has it stored
	// before it returns: the write is fenced with the worker's lease, so
	// a worker that lost it gets an error and changes nothing.
	Set(ctx context.Context, key, value string) error
}

type checkpointKey struct{}

// WithCheckpoint returns ctx carrying cp.
func WithCheckpoint(ctx context.Context, cp Checkpoint) context.Context {
	return context.WithValue(ctx, checkpointKey{}, cp)
}

// CheckpointOf is the checkpoint ctx carries; without one (a provider
// called outside a step) a checkpoint that keeps nothing.
func CheckpointOf(ctx context.Context) Checkpoint {
	if cp, ok := ctx.Value(checkpointKey{}).(Checkpoint); ok && cp != nil {
		return cp
	}
	return noCheckpoint{}
}

type noCheckpoint struct{}

func (noCheckpoint) Get(string) string                         { return "" }
func (noCheckpoint) Set(context.Context, string, string) error { return nil }
