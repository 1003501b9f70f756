package azure

import (
	"context"
	"errors"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore/runtime"

	v1 "kiln.dev/kiln/api/v1"
	"kiln.dev/kiln/internal/failure"
	"kiln.dev/kiln/internal/provider"
)

// Long-running operations (every PUT but a resource group's, every DELETE,
// a virtual machine's start and update) go through the SDK's pollers, and
// each poller's resume token is kept in the step's checkpoint
// (provider.Checkpoint) under its resource's key, its type and name in the
// cluster's group ("virtualNetworks/kiln-vnet",
// "virtualNetworks/kiln-vnet/subnets/pool-a"), from the
// moment ARM answers the request until the operation ends. A step run
// again (a worker that died waiting, a timeout) resumes the very operation
// at the start of that resource's part (resume), waits for its end and
// only then reads by name, as Cluster API's Azure provider keeps
// longRunningOperationStates: nothing is written twice.

// await drives a long-running operation the SDK began (a PUT, a DELETE, an
// action) to its end with the SDK's poller, which waits as ARM's
// Retry-After says, for at most Options.WaitTimeout. The poller's resume
// token is kept in the step's checkpoint under key first, and dropped when
// the operation ends. An operation that ended Failed is an operationFailed
// (classify says it with Azure's code and message).
//
// It is called as await[T](ctx, n, c, key, what)(client.BeginX(...)).
func await[T any](ctx context.Context, n *Azure, c *cluster, key, what string) func(*runtime.Poller[T], error) (T, error) {
	return func(p *runtime.Poller[T], err error) (T, error) {
		return wait(ctx, n, c, key, what, p, err)
	}
}

func wait[T any](ctx context.Context, n *Azure, c *cluster, key, what string, p *runtime.Poller[T], err error) (T, error) {
	var zero T
	if err != nil {
		return zero, classify(err, c.api.account, "%s", what)
	}
	if !p.Done() {
		token, err := p.ResumeToken()
		if err == nil {
			err = provider.CheckpointOf(ctx).Set(ctx, key, token)
		}
		if err != nil {
			if ctx.Err() != nil {
				return zero, ctx.Err()
			}
			return zero, failure.Retryable(v1.CodeInternal, err, "%s: cannot keep Azure's operation in the step's checkpoint; retrying", what)
		}
	}
	return settle(ctx, n, c, key, what, p)
}

// settle polls p until its operation ends and then drops key's token; one
// cut short (ctx, the timeout, a poll that failed) keeps it for the next
// attempt.
func settle[T any](ctx context.Context, n *Azure, c *cluster, key, what string, p *runtime.Poller[T]) (T, error) {
	var zero T
	wctx, cancel := context.WithTimeout(ctx, n.opts.WaitTimeout)
	defer cancel()
	v, err := p.PollUntilDone(wctx, &runtime.PollUntilDoneOptions{Frequency: n.opts.PollFrequency})
	switch {
	case err == nil:
		n.forget(ctx, key)
		return v, nil
	case ctx.Err() != nil:
		return zero, ctx.Err()
	case errors.Is(err, context.DeadlineExceeded):
		return zero, failure.Retryable(v1.CodeTimeout, err, "%s: Azure's operation did not end within %s; retrying", what, n.opts.WaitTimeout)
	}
	if _, _, ok := APIError(err); ok && p.Done() {
		n.forget(ctx, key)
		err = operationFailed{err}
	}
	return zero, classify(err, c.api.account, "%s", what)
}

// forget drops key's token: its operation ended. A token that could not
// be dropped (the lease lost) only makes the next attempt poll an ended
// operation once.
func (n *Azure) forget(ctx context.Context, key string) {
	if err := provider.CheckpointOf(ctx).Set(ctx, key, ""); err != nil {
		n.log.Warn("could not drop a resume token from the step's checkpoint", "key", key, "err", err)
	}
}

// resume picks up the operation whose resume token the step's checkpoint
// keeps under key, one an earlier attempt began and did not see end, and
// waits for its end (the token then dropped): a part calls it before it
// reads its resource, so that it reads what that operation made rather
// than writing again. Without a token it does nothing; a token of another
// kind of operation (T: a delete's under the key of a resource being made)
// is left to the code that began it. An operation that ended Failed is the
// error, as await says it; the next attempt writes the resource again.
func resume[T any](ctx context.Context, n *Azure, c *cluster, key, what string) error {
	token := provider.CheckpointOf(ctx).Get(key)
	if token == "" {
		return nil
	}
	p, err := runtime.NewPollerFromResumeToken[T](token, c.api.pipeline, nil)
	if err != nil {
		n.log.Debug("a resume token that is not this operation's", "key", key, "err", err)
		return nil
	}
	n.log.Info("resuming Azure's operation", "cluster", c.Project+"/"+c.Name, "key", key)
	_, err = settle(ctx, n, c, key, what+" (resumed)", p)
	return err
}
