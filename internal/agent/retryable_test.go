package agent_test

import (
	"errors"
	"io/fs"
	"testing"

	v1 "kiln.dev/kiln/api/v1"
	"kiln.dev/kiln/internal/agent"
	"kiln.dev/kiln/internal/failure"
)

// A Retryable error is a retryable *failure.Error that the agent reports as
// retryable (it wraps ErrRetryable) and that still matches its cause.
func TestRetryable(t *testing.T) {
	err := error(agent.Retryable(v1.CodeUnavailable, fs.ErrNotExist, " fetch %s failed \n", "x"))
	if !errors.Is(err, agent.ErrRetryable) || !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("%v: does not match ErrRetryable and its cause", err)
	}
	fe := failure.From(err)
	if !fe.Retryable || fe.Code != v1.CodeUnavailable || fe.Message != "fetch x failed" {
		t.Errorf("failure %+v", fe)
	}
	// The text is the product: the step's message, which does not repeat
	// the cause.
	if got, want := err.Error(), "Unavailable: fetch x failed: retryable"; got != want {
		t.Errorf("Error() = %q, want %q", got, want)
	}
}
