// Package agent is kiln-agent's node side: Join registers the node with the
// controller (credential + passphrase exchanged for a node certificate; the
// key never leaves the node) and saves its identity; Run holds the session
// (mTLS websocket): it reports facts, prechecks, heartbeats, progress and
// log lines, and runs the instructions it receives through an Executor,
// exactly once across reconnects and restarts (see package journal).
//
// The agent never imports the store: everything it shares with the
// controller is in api/v1. docs/agent-protocol.md is the protocol.
package agent

import (
	"context"
	"errors"
	"fmt"
	"strings"

	v1 "kiln.dev/kiln/api/v1"
	"kiln.dev/kiln/internal/failure"
)

// Version is the agent's version, sent in every hello.
var Version = "dev"

// Errors.
var (
	// ErrRefused: the controller refused the registration or the session
	// (wrong credential or passphrase, expired or foreign certificate, a
	// deleted node). Trying again does not help; the error says what does.
	ErrRefused = errors.New("refused by the controller")
	// ErrRetryable is wrapped by an executor's error when running the
	// instruction again may succeed; the result says so.
	ErrRetryable = errors.New("retryable")
	// ErrNoDistribution: this agent has nothing to install with.
	ErrNoDistribution = errors.New("no distribution installed on this agent")
)

// RefusedError is a refusal with the controller's status and message.
// errors.Is(err, ErrRefused) holds.
type RefusedError struct {
	What    string // "registration" or "session"
	Status  int
	Code    string
	Message string
}

func (e *RefusedError) Error() string {
	return fmt.Sprintf("%s refused by the controller (%d %s): %s", e.What, e.Status, e.Code, e.Message)
}

func (e *RefusedError) Is(target error) bool { return target == ErrRefused }

// Reporter is how an executor reports while it runs an instruction.
type Reporter interface {
	// Progress reports a step of the instruction: state is a v1.Step*
	// state (Running, Succeeded, Failed).
	Progress(step, state, message string)
	// Log sends a line of a component's output (stream: etcd, apiserver,
	// kubelet, ...) to `kiln node logs`.
	Log(stream, line string)
}

// Retryable returns the error of an instruction that may succeed when it
// runs again: a retryable *failure.Error whose cause wraps ErrRetryable (so
// Run reports the result as retryable) and cause. The cause prints as
// "retryable": the message already says what failed.
func Retryable(code string, cause error, format string, args ...any) *failure.Error {
	return &failure.Error{Code: code, Message: strings.TrimSpace(fmt.Sprintf(format, args...)), Retryable: true,
		Err: retryableCause{cause}}
}

type retryableCause struct{ cause error }

func (c retryableCause) Error() string   { return "retryable" }
func (c retryableCause) Unwrap() []error { return []error{ErrRetryable, c.cause} }

// Executor runs instructions. Execute must be idempotent: an instruction
// interrupted by a crash is run again from the start. It returns nil when
// the instruction succeeded; an error is the failed result's message
// (wrapping ErrRetryable makes the result retryable).
type Executor interface {
	Execute(ctx context.Context, in v1.Instruction, report Reporter) error
}

// ExecutorFunc is a function as an Executor.
type ExecutorFunc func(ctx context.Context, in v1.Instruction, report Reporter) error

// Execute calls f.
func (f ExecutorFunc) Execute(ctx context.Context, in v1.Instruction, report Reporter) error {
	return f(ctx, in, report)
}

// NoDistribution is the executor of an agent without a distribution: it
// fails every instruction, saying so.
type NoDistribution struct{}

// Execute fails with ErrNoDistribution.
func (NoDistribution) Execute(_ context.Context, in v1.Instruction, report Reporter) error {
	report.Progress(in.Kind, v1.StepFailed, ErrNoDistribution.Error())
	return fmt.Errorf("instruction %s (%s): %w", in.ID, in.Kind, ErrNoDistribution)
}
