package client

import (
	"errors"
	"fmt"
	"net/http"

	v1 "kiln.dev/kiln/api/v1"
)

// APIError is what the client returns for a non-2xx response.
type APIError struct {
	StatusCode int
	Err        v1.Error
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
