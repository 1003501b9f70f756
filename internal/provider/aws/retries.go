package aws

import (
	"context"
	"sync/atomic"

	"github.com/aws/smithy-go/middleware"

	"kiln.dev/kiln/internal/provider"
)

// countRetries adds to the SDK's stack what tells the step (provider.
// Retried) how many times a call was tried again by the SDK's retryer
// (throttling, 5xx): each call counts its attempts, and reports those
// beyond the first when it returns.
func countRetries(stack *middleware.Stack) error {
	if err := stack.Initialize.Add(middleware.InitializeMiddlewareFunc("KilnCountRetries",
		func(ctx context.Context, in middleware.InitializeInput, next middleware.InitializeHandler) (middleware.InitializeOutput, middleware.Metadata, error) {
			n := new(int32)
			out, md, err := next.HandleInitialize(middleware.WithStackValue(ctx, attemptsKey{}, n), in)
			if a := atomic.LoadInt32(n); a > 1 {
				provider.Retried(ctx, int(a-1))
			}
			return out, md, err
		}), middleware.Before); err != nil {
		return err
	}
	return stack.Finalize.Insert(middleware.FinalizeMiddlewareFunc("KilnCountAttempt",
		func(ctx context.Context, in middleware.FinalizeInput, next middleware.FinalizeHandler) (middleware.FinalizeOutput, middleware.Metadata, error) {
			if n, ok := middleware.GetStackValue(ctx, attemptsKey{}).(*int32); ok {
				atomic.AddInt32(n, 1)
			}
			return next.HandleFinalize(ctx, in)
		}), "Retry", middleware.After)
}

type attemptsKey struct{}
