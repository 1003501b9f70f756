package v1

import (
	"time"
)

// Operation is the asynchronous record every change returns.
type Operation struct {
	ID              string              `json:"id"`
	Name            string              `json:"name"`
	Status          string              `json:"status"`
	StartTime       time.Time           `json:"startTime"`
	EndTime         *time.Time          `json:"endTime,omitempty"`
	PercentComplete int                 `json:"percentComplete"`
	Error           *Error              `json:"error,omitempty"`
	Properties      OperationProperties `json:"properties"`
}

// OperationProperties says what an operation does and how far it is.
type OperationProperties struct {
	Kind   string `json:"kind"`
	Target string `json:"target"`
	// TargetUID is the uid of the cluster the operation changes (Target
	// names it), so that an operation of a deleted cluster is told from
	// one of a cluster created later under its name.
	TargetUID string `json:"targetUid,omitempty"`
	Steps     []Step `json:"steps"`
	// RetryOf is the id of the Failed or Canceled operation this one
	// retries (POST .../clusters/{c}/retry): the steps that operation had
	// done are copied Succeeded or Skipped and not run again.
	RetryOf string `json:"retryOf,omitempty"`
	// Force marks a forced delete (DELETE ...?force=true): provider errors
	// are ignored and Leftovers lists what may be left behind.
	Force bool `json:"force,omitempty"`
	// Leftovers is what a forced delete may have left behind at the
	// provider, filled in when it ends.
	Leftovers []Leftover `json:"leftovers,omitempty"`
	// CancelRequested says who asked to cancel the operation, and when
	// (POST /v1/operations/{id}/cancel); the operation ends Canceled at
	// its next safe point.
	CancelRequested *CancelRequest `json:"cancelRequested,omitempty"`
	// Reason says why Kiln began the operation by itself (an autoscale
	// decision: which pods, which pool, why not another); empty for one a
	// client began.
	Reason string `json:"reason,omitempty"`
	// Nodes are the nodes a scale-down chose to remove (an autoscale
	// operation's underused nodes), in the order they go.
	Nodes []string `json:"nodes,omitempty"`
	// Pools are the pools an autoscale operation resized, each from its
	// size before to its new one.
	Pools []PoolResize `json:"pools,omitempty"`
	// Backup is the backup a backup operation takes, or a restore
	// operation puts back (of Target, or of RestoreFrom's cluster).
	Backup string `json:"backup,omitempty"`
}

// PoolResize is a worker pool's new size.
type PoolResize struct {
	Pool string `json:"pool"`
	From int    `json:"from"`
	To   int    `json:"to"`
}

// CancelRequest is a request to cancel an operation.
type CancelRequest struct {
	By   string    `json:"by"` // the principal, such as user:alice
	Time time.Time `json:"time"`
}

// Kinds of Leftover.
const (
	LeftoverMachine      = "machine"
	LeftoverLoadBalancer = "loadBalancer"
	LeftoverNetwork      = "network"
	LeftoverHost         = "host"
)

// Leftover is something a forced delete may have left behind: a machine
// the provider still reported, a load balancer or network it failed to
// delete, or a host that may still run Kubernetes.
type Leftover struct {
	Kind    string `json:"kind"`
	Name    string `json:"name,omitempty"`
	ID      string `json:"id,omitempty"`
	Message string `json:"message,omitempty"`
}

// Step is one named step of an operation's plan.
type Step struct {
	Name      string     `json:"name"`
	State     string     `json:"state"`
	Attempts  int        `json:"attempts"`
	StartTime *time.Time `json:"startTime,omitempty"`
	EndTime   *time.Time `json:"endTime,omitempty"`
	Message   string     `json:"message"`
	// DoneBy is the id of the operation that ran a step a retry kept
	// (Succeeded or Skipped, not run again); empty for the steps this
	// operation runs.
	DoneBy string `json:"doneBy,omitempty"`
	// FailedAttempts are the attempts at the step that failed before its
	// last one (StartTime to EndTime above), oldest first, the latest
	// MaxFailedAttempts of them.
	FailedAttempts []Attempt `json:"failedAttempts,omitempty"`
}

// FirstStart is when the step's first attempt started (its StartTime when
// none failed); nil before it started.
func (s Step) FirstStart() *time.Time {
	if len(s.FailedAttempts) > 0 {
		return &s.FailedAttempts[0].StartTime
	}
	return s.StartTime
}

// Attempt is one failed attempt at a step: when it ran and why it failed.
type Attempt struct {
	StartTime time.Time `json:"startTime"`
	EndTime   time.Time `json:"endTime"`
	Message   string    `json:"message"`
}

// MaxFailedAttempts is how many failed attempts a step keeps.
const MaxFailedAttempts = 10

// NextStep is something a person can do after an operation ended: the
// kiln command (the console offers the same as a button) and why.
type NextStep struct {
	// Action is retry, edit or force-delete.
	Action  string `json:"action"`
	Command string `json:"command"`
	Why     string `json:"why"`
}

// NextSteps are what can be done about op, an operation of cluster,
// once it ended Failed or Canceled (none otherwise): a retry only where it
// may succeed (canceled, or failed with a retryable error), else a change
// of the spec; a forced delete after a delete's failure. The console and
// the CLI both say these.
func NextSteps(op *Operation, cluster string) []NextStep {
	if op.Properties.Force {
		return nil
	}
	retry := NextStep{Action: "retry", Command: "kiln cluster retry " + cluster}
	edit := NextStep{Action: "edit", Command: "kiln cluster edit " + cluster,
		Why: "this failure is permanent, a retry would fail the same way: change what the error names and the change starts from here"}
	switch op.Status {
	case OpCanceled:
		retry.Why = "goes on from the step that stopped; a change or a delete also starts from here"
		return []NextStep{retry}
	case OpFailed:
		var out []NextStep
		retryable := op.Error != nil && op.Error.Retryable
		if retryable {
			retry.Why = "runs it again from the failed step: this failure can pass"
			out = append(out, retry)
		} else if op.Properties.Kind != KindDelete {
			out = append(out, edit)
		}
		if op.Properties.Kind == KindDelete && !retryable {
			out = append(out, NextStep{Action: "force-delete", Command: "kiln cluster delete " + cluster + " --force",
				Why: "deletes the cluster ignoring provider errors, listing what may be left behind: remove it in the cloud account"})
		}
		return out
	}
	return nil
}
