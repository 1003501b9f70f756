package v1

import (
	"errors"
	"fmt"
	"net/http"
)

// Error codes. docs/errors.md lists each with its HTTP status.
const (
	CodeInvalidParameter   = "InvalidParameter"
	CodeMissingParameter   = "MissingParameter"
	CodeInvalidRequest     = "InvalidRequest"
	CodeUnsupportedMedia   = "UnsupportedMediaType"
	CodeRequestTooLarge    = "RequestTooLarge"
	CodeUnauthorized       = "Unauthorized"
	CodeForbidden          = "Forbidden"
	CodeNotFound           = "NotFound"
	CodeMethodNotAllowed   = "MethodNotAllowed"
	CodeConflict           = "Conflict"
	CodePreconditionFailed = "PreconditionFailed"
	CodeThrottled          = "Throttled"
	CodeInternal           = "Internal"
	CodeUnavailable        = "Unavailable"
	CodeProviderError      = "ProviderError"
	CodeQuotaExceeded      = "QuotaExceeded"
	CodeTimeout            = "Timeout"
	CodeDequeueLimit       = "DequeueLimitExceeded"
	CodeCanceled           = "Canceled"
)

// Error is the one error shape of the API, also used in operations.
type Error struct {
	Code    string  `json:"code"`
	Message string  `json:"message"`
	Target  string  `json:"target,omitempty"`
	Details []Error `json:"details,omitempty"`
}

// ErrorResponse is the body of every error response.
type ErrorResponse struct {
	Error Error `json:"error"`
}

// APIError is what the client returns for a non-2xx response.
type APIError struct {
	StatusCode int
	Err        Error
}

func (e *APIError) Error() string {
	msg := fmt.Sprintf("%s: %s", e.Err.Code, e.Err.Message)
	if e.Err.Target != "" {
		msg += " (" + e.Err.Target + ")"
	}
	for _, d := range e.Err.Details {
		if d.Target != "" {
			msg += fmt.Sprintf("\n  %s: %s", d.Target, d.Message)
		} else {
			msg += "\n  " + d.Message
		}
	}
	return msg
}

// IsNotFound reports whether err is an API 404.
func IsNotFound(err error) bool { return statusOf(err) == http.StatusNotFound }

// IsConflict reports whether err is an API 409.
func IsConflict(err error) bool { return statusOf(err) == http.StatusConflict }

func statusOf(err error) int {
	var e *APIError
	if errors.As(err, &e) {
		return e.StatusCode
	}
	return 0
}
