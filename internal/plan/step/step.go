// Package step is what the plan's step families share of the run they are
// a step of: the small context every family's steps see (Context), and the
// answers a step gives the runner besides success or an error (a skip, a
// cancel noticed). The runner (package plan) implements Context; each
// family declares the rest of what it needs as an interface of its own,
// sized to its use, and imports neither the runner nor another family.
package step

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"kiln.dev/kiln/internal/provider"
	"kiln.dev/kiln/internal/store"
)

// Context is what every step sees of its run: the cluster and operation
// it works on, the run's logger and clock, and how it reports what it does.
type Context interface {
	// Cluster is the run's cluster record; a step changes its status and
	// saves it with SaveStatus.
	Cluster() *store.Cluster
	// Operation is the operation the step is a step of.
	Operation() *store.Operation
	Log() *slog.Logger
	Now() time.Time
	// Note sets what the step's message says when it succeeds.
	Note(msg string)
	// Progress shows what one part of the step (a node, a pack) is doing
	// in the running step's message.
	Progress(ctx context.Context, part, what string)
	// Event appends to the cluster's timeline, best effort.
	Event(ctx context.Context, typ, reason, msg string)
	// SaveStatus writes the cluster's status, fenced with the run's lease;
	// field names what changed in its error ("save status.profile: ...").
	SaveStatus(ctx context.Context, field string) error
	// Canceling reports whether the run noticed a request to cancel its
	// operation: a step that loops stops at its next safe point with
	// ErrCancelRequested.
	Canceling() bool
}

// ErrCancelRequested is what a step returns at a safe point once the run
// noticed a request to cancel its operation (Context.Canceling).
var ErrCancelRequested = errors.New("the operation's cancel was requested")

// SkipError is returned by a step that has nothing to do for this cluster
// (a provider without load balancers); the runner marks the step Skipped
// with the reason as its message.
type SkipError struct{ Reason string }

func (e *SkipError) Error() string { return e.Reason }

// Skipped is a SkipError with a formatted reason.
func Skipped(format string, args ...any) error {
	return &SkipError{Reason: fmt.Sprintf(format, args...)}
}

// Names are the machines' names, in their order.
func Names(ms []provider.MachineSpec) []string {
	out := make([]string, len(ms))
	for i, m := range ms {
		out[i] = m.Name
	}
	return out
}

// ClusterID is the API path of the cluster k.
func ClusterID(k store.Key) string { return "/v1/projects/" + k.Project + "/clusters/" + k.Name }
