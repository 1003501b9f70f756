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
	"encoding/json"
	"errors"
	"fmt"
	"io"
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

// DataReporter is an optional capability of a Reporter, found with a type
// assertion (Run's has it): the data a succeeded instruction hands back.
type DataReporter interface {
	// SetData sets the data of the instruction's result
	// (v1.InstructionResult.Data), kept in the journal with it; the last
	// call wins. A failed instruction's result carries none.
	SetData(data json.RawMessage)
}

// Transferer is an optional capability of a Reporter, found with a type
// assertion (Run's has it): a request to the controller's agent listener
// with the node's current certificate, for a body the session does not
// carry (an etcd snapshot). Its errors are *failure.Error: a 4xx answer is
// terminal and carries the controller's code and message (a
// *TransferError); a 5xx, 429 or 408 answer, or no answer, is retryable
// (Retryable); the end of ctx is ctx's error.
type Transferer interface {
	// Upload PUTs size bytes of body, streamed, to path (v1.AgentSnapshotPath
	// + instruction id), with sha256Hex, their digest, in SnapshotSHA256Header.
	Upload(ctx context.Context, path string, body io.Reader, size int64, sha256Hex string) error
	// Download GETs path and writes its body to w. It returns how many
	// bytes it wrote, and the digest the controller sent in
	// SnapshotSHA256Header ("" if none): the caller checks what it wrote.
	Download(ctx context.Context, path string, w io.Writer) (n int64, sha256Hex string, err error)
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
