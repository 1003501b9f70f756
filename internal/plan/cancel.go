package plan

import (
	"context"
	"fmt"
	"time"

	v1 "kiln.dev/kiln/api/v1"
	"kiln.dev/kiln/internal/failure"
	"kiln.dev/kiln/internal/plan/backup"
	"kiln.dev/kiln/internal/plan/step"
)

// Cancel. The API records a request to cancel an operation in the store
// (store.RequestCancel); whichever worker holds the cluster's lease, in
// this process or another, notices it and stops at a safe point:
//
//   - between steps: every checkpoint's write returns the operation's
//     cancel request (store.SaveOperation), and the checkpoint that ends
//     a step starts the next, whose work then does not begin; a run that
//     takes up a step without such a checkpoint (its first, a retry) reads
//     the request before it;
//   - inside steps, where they wait and poll anyway (nodes to register,
//     approve or be ready, an instruction's result, Kubernetes to report
//     nodes Ready, a node's drain, where the node stays cordoned), and in
//     the back-off between attempts, where a watcher that reads the
//     operation every CancelPoll wakes them;
//   - in the provider's step hook, before the step does anything.
//
// A provider call in flight is never interrupted: it ends, and the step
// stops at its next safe point or the run before the next step. The step
// it stopped at ends Canceled, the steps after it stay Pending, the
// operation ends Canceled and the cluster Canceled (failedProvisioningState
// says what it was doing), in one FinishOperation that releases the lease.
// Everything the plan does is idempotent, so a later change, a retry or a
// delete continues from what is there.

// canceledFailure is runStep's answer for a step stopped by a cancel.
func canceledFailure() *failure.Error {
	return &failure.Error{Code: v1.CodeCanceled, Message: "canceled", Retryable: true, Err: step.ErrCancelRequested}
}

// noticeCancel makes the run stop at its next safe point.
func (x *run) noticeCancel(req *v1.CancelRequest) {
	x.cancelOnce.Do(func() {
		x.cancelReq = req
		x.log.Info("cancel requested; stopping at the next safe point", "by", req.By)
		close(x.canceled)
	})
}

func (x *run) canceling() bool {
	select {
	case <-x.canceled:
		return true
	default:
		return false
	}
}

// pollCancel reads whether a cancel was requested.
func (x *run) pollCancel(ctx context.Context) error {
	req, err := x.ops.CancelRequest(ctx, x.op.ID)
	if err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		return fmt.Errorf("read the operation's cancel request: %w", err)
	}
	if req != nil {
		x.noticeCancel(req)
	}
	return nil
}

// watchCancel reads whether a cancel was requested every CancelPoll until
// one is, or stop is called.
func (x *run) watchCancel(ctx context.Context) (stop func()) {
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		t := time.NewTicker(x.r.opts.CancelPoll)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-x.canceled:
				return
			case <-t.C:
			}
			if err := x.pollCancel(ctx); err != nil && ctx.Err() == nil {
				x.log.Debug("could not read the cancel request", "err", err)
			}
		}
	}()
	return func() { cancel(); <-done }
}

// cancelable is ctx, also cancelled (with cause step.ErrCancelRequested) when a
// cancel is requested: for waits that are safe to stop at any moment.
func (x *run) cancelable(ctx context.Context) (context.Context, func()) {
	ctx, cancel := context.WithCancelCause(ctx)
	go func() {
		select {
		case <-x.canceled:
			cancel(step.ErrCancelRequested)
		case <-ctx.Done():
		}
	}()
	return ctx, func() { cancel(nil) }
}

// pause waits d, or until ctx ends (its error) or a cancel is requested
// (step.ErrCancelRequested).
func (x *run) pause(ctx context.Context, d time.Duration) error {
	if x.canceling() {
		return step.ErrCancelRequested
	}
	if d <= 0 {
		return ctx.Err()
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	case <-x.canceled:
		return step.ErrCancelRequested
	}
}

// cancel ends the operation Canceled at step i: running says whether the
// step had started (it stopped at a safe point inside) or was about to.
func (x *run) cancel(ctx context.Context, i int, running bool) error {
	now := x.r.opts.Now().UTC()
	by := x.cancelReq.By
	s := &x.op.Steps[i]
	was := s.Message
	if running {
		s.Message = fmt.Sprintf("canceled by %s while running", by)
		if was != "" {
			s.Message += " (" + was + ")"
		}
		s.EndTime = &now
	} else if s.State == v1.StepRunning {
		// Started by the checkpoint that brought the request.
		s.Message = fmt.Sprintf("canceled by %s before it started its work", by)
		s.EndTime = &now
	} else {
		s.Message = fmt.Sprintf("canceled by %s before it started", by)
	}
	s.State = v1.StepCanceled
	msg := fmt.Sprintf("canceled by %s at step %s", by, s.Name)
	x.op.Status, x.op.EndTime = v1.OpCanceled, &now
	x.op.Error = &v1.Error{Code: v1.CodeCanceled, Message: msg, Target: step.ClusterID(x.cl.Key())}

	st := &x.cl.Status
	if leavesCluster(x.op) {
		backup.New(backupRun{view{x}}).Fail(ctx, msg)
		st.ProvisioningState, st.UpdatedAt = v1.StateSucceeded, now
	} else {
		switch st.ProvisioningState {
		case v1.StateCreating, v1.StateUpdating, v1.StateDeleting:
			st.FailedProvisioningState = st.ProvisioningState
		}
		st.ProvisioningState = v1.StateCanceled
		st.LastError = &v1.StatusError{Code: v1.CodeCanceled, Message: msg, Step: s.Name, Retryable: true}
		st.UpdatedAt = now
	}

	x.log.Info("operation canceled", "step", s.Name, "by", by, "running", running)
	stepEv := x.newEvent("Warning", "StepCanceled", fmt.Sprintf("step %s: %s", s.Name, s.Message))
	end := x.newEvent("Warning", "OperationCanceled", fmt.Sprintf(
		"%s operation %s; the cluster is Canceled: a change (PUT, PATCH), a retry or a delete continues from here", x.op.Kind, msg))
	if err := x.finishOperation(ctx, false, stepEv, end); err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		return fmt.Errorf("finish canceled operation: %w", err)
	}
	return nil
}
