package server

import (
	"errors"
	"fmt"
	"log/slog"
	"net/http"

	v1 "kiln.dev/kiln/api/v1"
	"kiln.dev/kiln/internal/failure"
	"kiln.dev/kiln/internal/store"
)

// apiError is an error with its HTTP status and the body a user reads. The
// cause, if any, is for the log only.
type apiError struct {
	status int
	body   v1.Error
	cause  error
}

func (e *apiError) Error() string {
	if e.cause != nil {
		return fmt.Sprintf("%d %s: %s: %v", e.status, e.body.Code, e.body.Message, e.cause)
	}
	return fmt.Sprintf("%d %s: %s", e.status, e.body.Code, e.body.Message)
}

func (e *apiError) Unwrap() error { return e.cause }

func newError(status int, code, target, format string, args ...any) *apiError {
	return &apiError{status: status, body: v1.Error{Code: code, Target: target, Message: fmt.Sprintf(format, args...)}}
}

func badRequest(target, format string, args ...any) *apiError {
	return newError(http.StatusBadRequest, v1.CodeInvalidParameter, target, format, args...)
}

func invalidRequest(format string, args ...any) *apiError {
	return newError(http.StatusBadRequest, v1.CodeInvalidRequest, "", format, args...)
}

// notFound is a 404 for what is not a record (a route, a profile).
func notFound(target, format string, args ...any) *apiError {
	return newError(http.StatusNotFound, v1.CodeNotFound, target, format, args...)
}

// missing is the 404 for a record that does not exist: `cluster "nope"
// not found in project "default"`, target its kind.
func missing(o ref) *apiError {
	return &apiError{status: http.StatusNotFound, body: v1.Error{
		Code: v1.CodeNotFound, Target: o.kind, Message: o.noun() + " not found" + o.where()}}
}

// conflict is a 409 about record o: the message is o, then what it says
// of it (`cluster "dev" in project "default" is Creating: ...`).
func conflict(o ref, target, format string, args ...any) *apiError {
	return newError(http.StatusConflict, v1.CodeConflict, target, "%s %s", o, fmt.Sprintf(format, args...))
}

// unavailable is a 503 for a part Kiln reaches that did not answer (a
// cluster's Kubernetes API): what, and to retry.
func unavailable(what string) *apiError {
	return newError(http.StatusServiceUnavailable, v1.CodeUnavailable, "", "%s did not answer; retry in a moment", what)
}

// because records the error's cause, for the log.
func (e *apiError) because(cause error) *apiError {
	e.cause = cause
	return e
}

// withHint adds a sentence on what to do to an error's message.
func (e *apiError) withHint(hint string) *apiError {
	e.body.Message += "; " + hint
	return e
}

// validationError is the 400 for a list of validation failures: the first
// failure's code and target on top, every failure in details.
func validationError(what string, failures []v1.Error) *apiError {
	fe := failure.Findings("the "+what, failures)
	return &apiError{status: http.StatusBadRequest, body: v1.Error{
		Code: fe.Code, Target: fe.Target, Message: fe.Message, Details: fe.Details,
	}}
}

// conflictError is the 409 for a change of cluster o refused because an
// operation runs.
func conflictError(o ref, ce *store.ConflictError) *apiError {
	return conflict(o, operationPath(ce.Operation),
		"is %s: operation %s is still running; wait for it to finish and try again", ce.State, ce.Operation).because(ce)
}

// toAPIError maps any error to what the user sees. o names the record the
// handler worked on, for NotFound, Conflict and the etag errors.
func toAPIError(err error, o ref) *apiError {
	if ae, ok := errors.AsType[*apiError](err); ok {
		return ae
	}
	if ce, ok := errors.AsType[*store.ConflictError](err); ok {
		return conflictError(o, ce)
	}
	if mbe, ok := errors.AsType[*http.MaxBytesError](err); ok {
		return &apiError{status: http.StatusRequestEntityTooLarge, cause: err, body: v1.Error{
			Code: v1.CodeRequestTooLarge, Message: fmt.Sprintf("the request body is larger than %d bytes", mbe.Limit),
		}}
	}
	switch {
	case errors.Is(err, store.ErrNotFound):
		return missing(o).because(err)
	case errors.Is(err, store.ErrExists):
		return errExists(o).because(err)
	case errors.Is(err, store.ErrPreconditionFailed):
		return errStale(o).because(err)
	case errors.Is(err, store.ErrConflict):
		return conflict(o, "", "is busy with another operation; try again when it finishes").because(err)
	case errors.Is(err, store.ErrBadPageToken):
		return &apiError{status: http.StatusBadRequest, cause: err, body: v1.Error{
			Code: v1.CodeInvalidParameter, Target: "skipToken", Message: "skipToken is not one this server handed out; start again from the first page"}}
	case errors.Is(err, store.ErrNotEmpty):
		return conflict(o, o.kind, "is not empty; delete what it holds first").because(err)
	case store.Unavailable(err):
		// The database is out of reach (restarting, failing over): nothing
		// is known to have been written, and the same request can succeed
		// in a moment. writeError adds Retry-After.
		return &apiError{status: http.StatusServiceUnavailable, cause: err, body: v1.Error{
			Code: v1.CodeUnavailable, Message: "the store is not reachable; retry after Retry-After seconds"}}
	}
	return &apiError{status: http.StatusInternalServerError, cause: err, body: v1.Error{
		Code: v1.CodeInternal, Message: "an internal error occurred; the request id identifies it to an operator",
	}}
}

// errExists is the 412 for a create (If-None-Match: *) of a record that
// exists.
func errExists(o ref) *apiError {
	return newError(http.StatusPreconditionFailed, v1.CodePreconditionFailed, "If-None-Match", "%s already exists", o)
}

// errStale is the 412 for a write whose If-Match is not the record's etag.
func errStale(o ref) *apiError {
	return newError(http.StatusPreconditionFailed, v1.CodePreconditionFailed, "If-Match",
		"the etag of %s does not match If-Match; read it again and retry", o)
}

// errBusy is the 409 for a write that lost every race with other writers
// of the record.
func errBusy(o ref) error {
	return conflict(o, "", "kept changing while this request was processed; try again")
}

// writeError answers with the error shape. A 500's cause is logged here,
// once; the response says nothing about it. what is the kind of record the
// route works on (Server.handle).
func (s *Server) writeError(w http.ResponseWriter, r *http.Request, err error, what string) {
	if gone := r.Context().Err(); gone != nil && errors.Is(err, gone) {
		// The client went away mid-request (a closed page, a canceled
		// poll): nobody reads the answer, and the server did not fail.
		s.log.DebugContext(r.Context(), "client went away",
			slog.String("requestId", requestID(r.Context())), slog.Any("error", err))
		w.WriteHeader(StatusClientClosedRequest)
		return
	}
	ae := toAPIError(err, refOf(r, what))
	if ae.status >= 500 {
		s.log.ErrorContext(r.Context(), "request failed",
			slog.String("requestId", requestID(r.Context())), slog.Any("error", err))
		ae.body.Message = fmt.Sprintf("%s (request id %s)", ae.body.Message, requestID(r.Context()))
	}
	if ae.status == http.StatusServiceUnavailable && w.Header().Get("Retry-After") == "" {
		w.Header().Set("Retry-After", retryAfterUnavailable)
	}
	w.Header().Set(codeHeader, ae.body.Code)
	writeJSON(w, ae.status, v1.ErrorResponse{Error: ae.body})
}

// StatusClientClosedRequest is the status a request is counted with (in
// metrics and the request log) when its client went away before the
// answer: nginx's 499.
const StatusClientClosedRequest = 499

// retryAfterUnavailable is the Retry-After, in seconds, of a 503 that did
// not set its own: every 503 is retryable (docs/errors.md).
const retryAfterUnavailable = "2"

// codeHeader carries an error answer's code, as Azure's x-ms-error-code
// does: clients and the audit log read it without parsing the body.
const codeHeader = "X-Kiln-Error-Code"

// errorBody writes an error shape without a handler context (middleware).
func errorBody(w http.ResponseWriter, status int, code, target, message string) {
	w.Header().Set(codeHeader, code)
	writeJSON(w, status, v1.ErrorResponse{Error: v1.Error{Code: code, Target: target, Message: message}})
}
