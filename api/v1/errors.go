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
	CodeImmutableField     = "ImmutableField"
	CodeInvalidCredentials = "InvalidCredentials"
	CodeUnsupportedVersion = "UnsupportedVersion"
	CodeNodeCountMismatch  = "NodeCountMismatch"
	CodeDrainTimeout       = "DrainTimeout"
	CodeMachineStopped     = "MachineStopped"
)

// CodeInfo is one row of the error-code table: the HTTP status an API
// answer with the code carries (0 when the code appears only in operations
// and validation findings) and whether trying the same thing again later can
// succeed without changing the request.
type CodeInfo struct {
	Code      string
	Status    int
	Retryable bool
}

// Codes is the error-code table; docs/errors.md documents each row, and a
// test keeps the two equal.
var Codes = []CodeInfo{
	{CodeInvalidParameter, http.StatusBadRequest, false},
	{CodeMissingParameter, http.StatusBadRequest, false},
	{CodeImmutableField, http.StatusBadRequest, false},
	{CodeUnsupportedVersion, http.StatusBadRequest, false},
	{CodeInvalidRequest, http.StatusBadRequest, false},
	{CodeInvalidCredentials, http.StatusBadRequest, false},
	{CodeQuotaExceeded, http.StatusBadRequest, false},
	{CodeUnauthorized, http.StatusUnauthorized, false},
	{CodeForbidden, http.StatusForbidden, false},
	{CodeNotFound, http.StatusNotFound, false},
	{CodeMethodNotAllowed, http.StatusMethodNotAllowed, false},
	{CodeConflict, http.StatusConflict, true},
	{CodeNodeCountMismatch, http.StatusConflict, false},
	{CodePreconditionFailed, http.StatusPreconditionFailed, false},
	{CodeRequestTooLarge, http.StatusRequestEntityTooLarge, false},
	{CodeUnsupportedMedia, http.StatusUnsupportedMediaType, false},
	{CodeThrottled, http.StatusTooManyRequests, true},
	{CodeInternal, http.StatusInternalServerError, true},
	{CodeProviderError, http.StatusServiceUnavailable, true},
	{CodeUnavailable, http.StatusServiceUnavailable, true},
	{CodeTimeout, 0, true},
	{CodeMachineStopped, 0, true},
	{CodeDrainTimeout, 0, false},
	{CodeDequeueLimit, 0, false},
	{CodeCanceled, 0, true},
}

// LookupCode returns the table row of code.
func LookupCode(code string) (CodeInfo, bool) {
	for _, c := range Codes {
		if c.Code == code {
			return c, true
		}
	}
	return CodeInfo{}, false
}

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
