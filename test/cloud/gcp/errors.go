package gcp

import (
	"encoding/json"
	"fmt"
	"net/http"
)

// apiError is an error as Google's APIs answer it: an HTTP status and a
// body {"error":{"code":404,"message":...,"errors":[{"message","domain",
// "reason"}]}} with Compute's reason (notFound, alreadyExists,
// resourceInUseByAnotherResource, forbidden, invalid), which the Go client
// reads into googleapi.Error (Code, Message, Errors[].Reason).
type apiError struct {
	Code    int          `json:"code"`
	Message string       `json:"message"`
	Errors  []errorEntry `json:"errors"`
	Status  string       `json:"status,omitempty"`
}

type errorEntry struct {
	Message string `json:"message"`
	Domain  string `json:"domain"`
	Reason  string `json:"reason"`
}

func (e *apiError) Error() string { return fmt.Sprintf("%d %s: %s", e.Code, e.reason(), e.Message) }

func (e *apiError) reason() string {
	if len(e.Errors) == 0 {
		return ""
	}
	return e.Errors[0].Reason
}

// statuses are the canonical status Google's error body names for an
// HTTP status.
var statuses = map[int]string{
	400: "INVALID_ARGUMENT", 401: "UNAUTHENTICATED", 403: "PERMISSION_DENIED", 404: "NOT_FOUND",
	409: "ALREADY_EXISTS", 412: "FAILED_PRECONDITION", 429: "RESOURCE_EXHAUSTED", 500: "INTERNAL", 503: "UNAVAILABLE",
}

func errorf(status int, reason, format string, args ...any) *apiError {
	msg := fmt.Sprintf(format, args...)
	return &apiError{Code: status, Message: msg, Status: statuses[status],
		Errors: []errorEntry{{Message: msg, Domain: "global", Reason: reason}}}
}

// The errors Compute answers to any call; the resources' own are beside
// them.

func notFound(path string) *apiError {
	return errorf(http.StatusNotFound, "notFound", "The resource '%s' was not found", path)
}

func alreadyExists(path string) *apiError {
	return errorf(http.StatusConflict, "alreadyExists", "The resource '%s' already exists", path)
}

func invalid(format string, args ...any) *apiError {
	return errorf(http.StatusBadRequest, "invalid", format, args...)
}

func inUse(kind, path, by string) *apiError {
	return errorf(http.StatusBadRequest, "resourceInUseByAnotherResource",
		"The %s resource '%s' is already being used by '%s'", kind, path, by)
}

// forbidden is IAM's refusal, naming the permission and the resource.
func forbidden(permission, path string) *apiError {
	return errorf(http.StatusForbidden, "forbidden", "Required '%s' permission for '%s'", permission, path)
}

// writeError writes err as Google's APIs do; an error that is no apiError
// is a 500 (the double's own failure, such as its state file).
func writeError(w http.ResponseWriter, err error) {
	e, ok := err.(*apiError)
	if !ok {
		e = errorf(http.StatusInternalServerError, "backendError", "%v", err)
	}
	if e.Code == http.StatusUnauthorized {
		w.Header().Set("WWW-Authenticate", `Bearer realm="https://accounts.google.com/", error="invalid_token"`)
	}
	writeJSON(w, e.Code, struct {
		Error *apiError `json:"error"`
	}{e})
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json; charset=UTF-8")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}
