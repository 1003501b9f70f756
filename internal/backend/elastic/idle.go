package elastic

import (
	"context"
	"time"

	v1 "kiln.dev/kiln/api/v1"
	"kiln.dev/kiln/internal/store"
)

// DefaultIdleEvery is how often a cluster the loop reads only for its
// Idle condition (no autoscaled pool, no spec.idleStop, no job) is read:
// less often than the others, to spare their API servers.
const DefaultIdleEvery = 5 * time.Minute

// idleOnly says the loop reads the cluster only for its Idle condition.
func idleOnly(cl *store.Cluster, jobs []*store.Job) bool {
	return !Autoscaled(&cl.Spec) && cl.Spec.IdleStop == nil && len(jobs) == 0
}

// idleCondition is the Idle condition of what the loop saw: busy says
// what keeps the cluster busy ("" when idle), observed whether it could
// read the cluster's Kubernetes at all.
func idleCondition(busy string, observed bool) v1.Condition {
	switch {
	case !observed:
		return v1.Condition{Type: v1.ConditionIdle, Status: "Unknown", Reason: v1.IdleNotObserved,
			Message: "Kiln could not read the cluster's pods and jobs"}
	case busy == "":
		return v1.Condition{Type: v1.ConditionIdle, Status: "True", Reason: v1.IdleNoWorkload, Message: v1.IdleMessage}
	}
	return v1.Condition{Type: v1.ConditionIdle, Status: "False", Reason: v1.IdleWorkload,
		Message: "a pod runs outside the system namespaces, or a job of Kiln's"}
}

// markIdle writes the cluster's Idle condition when it changes,
// conditional on the cluster as read: when the pass changed the cluster
// (began an operation) it writes nothing, and the next pass does.
func (c *Controller) markIdle(ctx context.Context, cl *store.Cluster, want v1.Condition, now time.Time) error {
	_, written, err := c.acts.SetCondition(ctx, cl, want, now)
	if written {
		c.opts.Logger.Debug("idle condition", "cluster", cl.Key().String(), "status", want.Status, "reason", want.Reason)
	}
	return err
}
