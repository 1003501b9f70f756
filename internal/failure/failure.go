// Package failure classifies errors that end or delay an operation: each has
// a code and a message a user can act on, and is either retryable (back off
// and try the step again) or terminal (the operation fails).
package failure

import (
	"context"
	"errors"
	"fmt"

	v1 "kiln.dev/kiln/api/v1"
)

// Error is a classified error. Message is for the user; Err is the cause, for
// the log.
type Error struct {
	Code      string
	Message   string
	Target    string
	Retryable bool
	// Details are the individual failures of a validation, when several.
	Details []v1.Error
	Err     error
}

func (e *Error) Error() string {
	if e.Err != nil {
		return fmt.Sprintf("%s: %s: %v", e.Code, e.Message, e.Err)
	}
	return e.Code + ": " + e.Message
}

func (e *Error) Unwrap() error { return e.Err }

// Terminal returns an error that fails the operation.
func Terminal(code, format string, args ...any) *Error {
	return &Error{Code: code, Message: fmt.Sprintf(format, args...)}
}

// Retryable returns an error after which the step is tried again.
func Retryable(code string, cause error, format string, args ...any) *Error {
	return &Error{Code: code, Message: fmt.Sprintf(format, args...), Retryable: true, Err: cause}
}

// Findings returns the terminal error of a validation that found problems
// in what (non-empty): the first finding's code and target, every finding in
// Details.
func Findings(what string, findings []v1.Error) *Error {
	first := findings[0]
	msg := first.Message
	if len(findings) > 1 {
		msg = fmt.Sprintf("%s has %d problems; the first: %s", what, len(findings), first.Message)
	}
	return &Error{Code: first.Code, Target: first.Target, Message: msg, Details: findings}
}

// From classifies any error. A *Error is returned as is; a context error is
// a retryable Canceled; anything else is a retryable Internal error whose
// message says nothing about internals.
func From(err error) *Error {
	if err == nil {
		return nil
	}
	var e *Error
	if errors.As(err, &e) {
		return e
	}
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return &Error{Code: v1.CodeCanceled, Message: "the step was interrupted", Retryable: true, Err: err}
	}
	return &Error{Code: v1.CodeInternal, Message: "an internal error occurred; the step will be retried", Retryable: true, Err: err}
}
