package check

import (
	"context"
	"errors"
	"log/slog"
	"time"

	v1 "kiln.dev/kiln/api/v1"
	"kiln.dev/kiln/internal/store"
)

// Writer is what Acts writes.
type Writer interface {
	BeginOperation(ctx context.Context, cl *store.Cluster, op *store.Operation, c store.Cond) error
	PutClusterStatus(ctx context.Context, cl *store.Cluster, c store.Cond) error
	AppendEvent(ctx context.Context, e *store.Event) error
}

// Acts are what a check does to a cluster it looked at. Each write is
// conditional on the cluster as the check read it: a user's change, or
// another replica's, wins, and the next pass sees the cluster as it is.
type Acts struct {
	Store Writer
	// Steps are the pending steps of an operation kind (plan.PendingSteps).
	Steps func(kind string) []v1.Step
	// Started is called with each operation begun (to wake the worker);
	// optional.
	Started func(*store.Operation)
	Logger  *slog.Logger
}

// Begin begins op (its Kind set, and its Reason, Nodes or Backup as it
// wants; the steps of its kind are set here) on next, the cluster as read
// with etag and changed as op wants (store.BeginBackground); then calls
// say, when set, to log and record why (op has its id now), and wakes the
// worker. It returns false, and no error, when the cluster changed since
// it was read.
func (a Acts) Begin(ctx context.Context, next *store.Cluster, etag string, op *store.Operation, now time.Time, say func()) (bool, error) {
	op.Steps = a.Steps(op.Kind)
	if begun, err := store.BeginBackground(ctx, a.Store, next, etag, op, now); !begun || err != nil {
		return false, err
	}
	if say != nil {
		say()
	}
	if a.Started != nil {
		a.Started(op)
	}
	return true, nil
}

// SetStatus writes next's status (next is cl as read, its status changed),
// conditional on cl's etag. It returns false, and no error, when the
// cluster changed since it was read or is gone.
func (a Acts) SetStatus(ctx context.Context, cl, next *store.Cluster) (bool, error) {
	err := a.Store.PutClusterStatus(ctx, next, store.Cond{IfMatch: cl.ETag})
	if errors.Is(err, store.ErrPreconditionFailed) || errors.Is(err, store.ErrNotFound) {
		return false, nil
	}
	return err == nil, err
}

// SetCondition sets want among cl's conditions (cl as read) and writes its
// status when that changes it, as SetStatus. It returns the condition's
// status before ("" when cl had none) and whether it wrote.
func (a Acts) SetCondition(ctx context.Context, cl *store.Cluster, want v1.Condition, now time.Time) (was string, written bool, err error) {
	for _, c := range cl.Status.Conditions {
		if c.Type == want.Type {
			was = c.Status
		}
	}
	conds, changed := v1.SetCondition(cl.Status.Conditions, want, now)
	if !changed {
		return was, false, nil
	}
	up := *cl
	up.Status.Conditions = conds
	written, err = a.SetStatus(ctx, cl, &up)
	return was, written, err
}

// Event records an event of cl (op: the operation it is about, or ""); a
// failure is logged, not returned: the check's work is done.
func (a Acts) Event(ctx context.Context, cl *store.Cluster, typ, reason, op, msg string) {
	e := &store.Event{Project: cl.Project, Cluster: cl.Name, ClusterUID: cl.UID, Event: v1.Event{Type: typ, Reason: reason, Message: msg, Operation: op}}
	if err := a.Store.AppendEvent(ctx, e); err != nil {
		a.Logger.Warn("record event", "cluster", cl.Key().String(), "reason", reason, "err", err)
	}
}
