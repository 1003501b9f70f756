package azure

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
)

// armError is an error as Azure Resource Manager answers it: an HTTP status
// and a body {"error":{"code":...,"message":...}} with ARM's code, which the
// SDK reads into azcore.ResponseError.ErrorCode.
type armError struct {
	Status  int    `json:"-"`
	Code    string `json:"code"`
	Message string `json:"message"`
	// Target is the parameter at fault, where ARM names one.
	Target string `json:"target,omitempty"`
	// RetryAfter, in seconds, is sent as Retry-After (throttling).
	RetryAfter int `json:"-"`
}

func (e *armError) Error() string { return fmt.Sprintf("%d %s: %s", e.Status, e.Code, e.Message) }

func errorf(status int, code, format string, args ...any) *armError {
	return &armError{Status: status, Code: code, Message: fmt.Sprintf(format, args...)}
}

// The errors ARM answers to any call; the resource providers' own are
// beside the resources they are about.

func badRequest(code, format string, args ...any) *armError {
	return errorf(http.StatusBadRequest, code, format, args...)
}

func groupNotFound(group string) *armError {
	return errorf(http.StatusNotFound, "ResourceGroupNotFound", "Resource group '%s' could not be found.", group)
}

func resourceNotFound(typ, name, group string) *armError {
	return errorf(http.StatusNotFound, "ResourceNotFound",
		"The Resource '%s/%s' under resource group '%s' was not found. For more details please go to https://aka.ms/ARMResourceNotFoundFix", typ, name, group)
}

// childNotFound is what the network resource provider answers for a
// nested resource (a subnet, a security rule) that does not exist: a
// plain NotFound naming its id, not ARM's ResourceNotFound.
func childNotFound(id string) *armError {
	return errorf(http.StatusNotFound, "NotFound", "Resource %s not found.", id)
}

func parentNotFound(parent string) *armError {
	return errorf(http.StatusNotFound, "ParentResourceNotFound",
		"Can not perform requested operation on nested resource. Parent resource '%s' not found.", parent)
}

func invalidReference(ref, by string) *armError {
	return badRequest("InvalidResourceReference",
		"Resource %s referenced by resource %s was not found. Please make sure that the referenced resource exists, and that both resources are in the same region.", ref, by)
}

// writeARMError writes err as ARM does; an error that is no armError is an
// InternalServerError (the double's own failure, such as its state file).
func writeARMError(w http.ResponseWriter, err error) {
	e, ok := err.(*armError)
	if !ok {
		e = errorf(http.StatusInternalServerError, "InternalServerError", "%v", err)
	}
	if e.RetryAfter > 0 {
		w.Header().Set("Retry-After", strconv.Itoa(e.RetryAfter))
	}
	if e.Status == http.StatusUnauthorized {
		// As ARM: the SDK's bearer policy reads the challenge; without
		// claims in it, it hands the 401 to the caller.
		w.Header().Set("WWW-Authenticate", `Bearer authorization_uri="", error="invalid_token", error_description="`+e.Message+`"`)
	}
	writeJSON(w, e.Status, struct {
		Error *armError `json:"error"`
	}{e})
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json; charset=utf-8")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}
