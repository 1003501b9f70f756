package gcp

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	compute "cloud.google.com/go/compute/apiv1"
	"cloud.google.com/go/compute/apiv1/computepb"

	v1 "kiln.dev/kiln/api/v1"
	"kiln.dev/kiln/internal/failure"
	"kiln.dev/kiln/internal/provider"
)

// Operations: every mutation answers a compute#operation, waited on with
// the SDK's op.Wait. Its name, with its scope ("global/NAME",
// "regions/REGION/NAME"), is kept in the step's checkpoint
// (provider.Checkpoint) under its resource's key ("networks/NAME",
// "subnetworks/REGION/NAME") from the moment Compute answers until the
// operation ends. A step run again (a worker that died waiting, a
// timeout) first waits on that very operation (resume, through the
// operations' /wait), and only then reads the resource by name: nothing is
// written twice.

// resumePause is the pause between waits on an operation that Compute
// answered still RUNNING.
const resumePause = 500 * time.Millisecond

// opFailed is an operation that ended with errors: Compute's code of its
// first error (QUOTA_EXCEEDED, RESOURCE_NOT_READY, ...), its message, and
// the operation's httpErrorStatusCode.
type opFailed struct {
	code, message string
	status        int
}

func (e *opFailed) Error() string {
	return fmt.Sprintf("the operation ended with %s: %s", e.code, e.message)
}

// failedOf is the error an operation ended with, or nil.
func failedOf(op *computepb.Operation) *opFailed {
	errs := op.GetError().GetErrors()
	if op.GetStatus() != computepb.Operation_DONE || len(errs) == 0 {
		return nil
	}
	msgs := make([]string, 0, len(errs))
	for _, e := range errs {
		msgs = append(msgs, e.GetMessage())
	}
	return &opFailed{code: errs[0].GetCode(), message: strings.Join(msgs, "; "), status: int(op.GetHttpErrorStatusCode())}
}

// await waits for the operation a mutation answered (op, or the call's
// error err), keeping its name in the step's checkpoint under key while
// it runs. scope is where the operation is ("global", "regions/R"). An
// operation that ended with errors is an *opFailed; the call's own error
// is returned as it is, for the caller to read (a 404, a 409).
func (g *GCP) await(ctx context.Context, c *cluster, key, scope string, op *compute.Operation, err error) error {
	if err != nil {
		return err
	}
	cp := provider.CheckpointOf(ctx)
	if !op.Done() {
		if err := cp.Set(ctx, key, scope+"/"+op.Name()); err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			return failure.Retryable(v1.CodeInternal, err, "cannot keep Compute's operation %s in the step's checkpoint; retrying", op.Name())
		}
	}
	wctx, cancel := context.WithTimeout(ctx, g.opts.WaitTimeout)
	defer cancel()
	err = op.Wait(wctx)
	switch {
	case ctx.Err() != nil:
		return ctx.Err()
	case errors.Is(err, context.DeadlineExceeded):
		return failure.Retryable(v1.CodeTimeout, err, "Compute's operation %s did not end within %s; retrying", op.Name(), g.opts.WaitTimeout)
	case err != nil && !op.Done():
		return err // a read of the operation failed: it may still run, its name kept
	}
	g.forget(ctx, key)
	if f := failedOf(op.Proto()); f != nil {
		return f
	}
	return err
}

// forget drops key's operation: it ended. One that could not be dropped
// (the lease lost) only makes the next attempt wait on an ended operation
// once.
func (g *GCP) forget(ctx context.Context, key string) {
	if err := provider.CheckpointOf(ctx).Set(ctx, key, ""); err != nil {
		g.log.Warn("could not drop an operation from the step's checkpoint", "key", key, "err", err)
	}
}

// resume waits on the operation the step's checkpoint keeps under key, one
// an earlier attempt began and did not see end, through the operations'
// /wait (which answers when it is DONE, or after a while: asked again
// until then). Without one it does nothing; one Compute no longer has
// (operations are kept for a while, then dropped) counts as ended. An
// operation that ended with errors is an *opFailed, as await says it.
func (g *GCP) resume(ctx context.Context, c *cluster, key string) error {
	v := provider.CheckpointOf(ctx).Get(key)
	if v == "" {
		return nil
	}
	i := strings.LastIndex(v, "/")
	scope, name := v[:i], v[i+1:]
	g.log.Info("waiting on Compute's operation an earlier attempt began", "cluster", c.Project+"/"+c.Name, "key", key, "operation", name)
	wctx, cancel := context.WithTimeout(ctx, g.opts.WaitTimeout)
	defer cancel()
	for {
		var op *computepb.Operation
		var err error
		if region, ok := strings.CutPrefix(scope, "regions/"); ok {
			op, err = c.api.regionOps.Wait(wctx, &computepb.WaitRegionOperationRequest{Project: c.api.project, Region: region, Operation: name})
		} else if zone, ok := strings.CutPrefix(scope, "zones/"); ok {
			op, err = c.api.zoneOps.Wait(wctx, &computepb.WaitZoneOperationRequest{Project: c.api.project, Zone: zone, Operation: name})
		} else {
			op, err = c.api.globalOps.Wait(wctx, &computepb.WaitGlobalOperationRequest{Project: c.api.project, Operation: name})
		}
		switch {
		case ctx.Err() != nil:
			return ctx.Err()
		case errors.Is(err, context.DeadlineExceeded):
			return failure.Retryable(v1.CodeTimeout, err, "Compute's operation %s did not end within %s; retrying", name, g.opts.WaitTimeout)
		case httpStatus(err) == http.StatusNotFound:
			g.forget(ctx, key)
			return nil
		case err != nil:
			return err
		case op.GetStatus() != computepb.Operation_DONE:
			// Compute's /wait answers after a while when the
			// operation runs on; asked again after a pause.
			t := time.NewTimer(resumePause)
			select {
			case <-wctx.Done():
				t.Stop()
			case <-t.C:
			}
			continue
		}
		g.forget(ctx, key)
		if f := failedOf(op); f != nil {
			return f
		}
		return nil
	}
}
