package azure

import (
	"context"
	"errors"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore/runtime"

	v1 "kiln.dev/kiln/api/v1"
	"kiln.dev/kiln/internal/failure"
)

// await drives a long-running operation the SDK began (a PUT or a DELETE)
// to its end with the SDK's poller, which waits as ARM's Retry-After says,
// for at most Options.WaitTimeout. An operation that ended Failed is an
// operationFailed (classify says it with Azure's code and message).
//
// The poller's resume token is not kept: the provider contract has no
// place for it yet (docs/provider-azure.md, "Crashes"). A step run again
// after a crash finds the resource by its name and writes it again, which
// ARM answers with the operation's outcome or a new one.
//
// It is called as await[T](ctx, n, c, what)(client.BeginX(...)).
func await[T any](ctx context.Context, n *Azure, c *cluster, what string) func(*runtime.Poller[T], error) (T, error) {
	return func(p *runtime.Poller[T], err error) (T, error) {
		return wait(ctx, n, c, what, p, err)
	}
}

func wait[T any](ctx context.Context, n *Azure, c *cluster, what string, p *runtime.Poller[T], err error) (T, error) {
	var zero T
	if err != nil {
		return zero, classify(err, c.api.account, "%s", what)
	}
	wctx, cancel := context.WithTimeout(ctx, n.opts.WaitTimeout)
	defer cancel()
	v, err := p.PollUntilDone(wctx, &runtime.PollUntilDoneOptions{Frequency: n.opts.PollFrequency})
	switch {
	case err == nil:
		return v, nil
	case ctx.Err() != nil:
		return zero, ctx.Err()
	case errors.Is(err, context.DeadlineExceeded):
		return zero, failure.Retryable(v1.CodeTimeout, err, "%s: Azure's operation did not end within %s; retrying", what, n.opts.WaitTimeout)
	}
	if _, _, ok := APIError(err); ok && p.Done() {
		err = operationFailed{err}
	}
	return zero, classify(err, c.api.account, "%s", what)
}
