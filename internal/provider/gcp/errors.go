package gcp

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"

	"cloud.google.com/go/auth"
	"google.golang.org/api/googleapi"

	v1 "kiln.dev/kiln/api/v1"
	"kiln.dev/kiln/internal/failure"
)

// APIError is Google's status, reason and message of err: Compute's error
// body {"error": {"code", "message", "errors": [{"reason"}]}}, or the
// token endpoint's {"error", "error_description"} (status 0 then: the
// token was refused). ok is false when err is no answer of Google's (it
// could not be reached).
func APIError(err error) (status int, reason, msg string, ok bool) {
	var ge *googleapi.Error
	if errors.As(err, &ge) {
		if len(ge.Errors) > 0 {
			reason = ge.Errors[0].Reason
		}
		msg = ge.Message
		if msg == "" {
			msg = http.StatusText(ge.Code)
		}
		return ge.Code, reason, msg, true
	}
	var ae *auth.Error
	if errors.As(err, &ae) && ae.Response != nil {
		var b struct {
			Error       string `json:"error"`
			Description string `json:"error_description"`
		}
		if json.Unmarshal(ae.Body, &b) == nil && b.Error != "" {
			return 0, b.Error, b.Description, true
		}
		return 0, "", ae.Error(), true
	}
	return 0, "", "", false
}

func httpStatus(err error) int {
	s, _, _, _ := APIError(err)
	return s
}

// isNotFound reports whether Compute answered 404 (a read or a delete of
// something that is not there).
func isNotFound(err error) bool { return httpStatus(err) == http.StatusNotFound }

// isAlreadyExists reports whether Compute answered 409 alreadyExists (an
// insert that raced another).
func isAlreadyExists(err error) bool { return httpStatus(err) == http.StatusConflict }

// classify turns an error of Google's into Kiln's, its message saying what
// was being done, and Google's reason or code and message:
//
//	the token endpoint refusing the key         terminal InvalidCredentials (spec.cloudAccount)
//	401                                         terminal InvalidCredentials (spec.cloudAccount)
//	403 rateLimitExceeded, 429                  retryable Throttled
//	403 accessNotConfigured (Compute not enabled)  terminal InvalidParameter (spec.cloudAccount)
//	403 (a permission the account lacks)        terminal Forbidden (spec.cloudAccount), naming it
//	an operation ended QUOTA_EXCEEDED, 403 quotaExceeded  terminal QuotaExceeded
//	an operation ended with another error       retryable ProviderError (the next attempt writes again)
//	400 resourceInUseByAnotherResource, 5xx, Google not reached  retryable ProviderError
//	400 invalid                                 terminal InvalidParameter
//	anything else                               terminal ProviderError
func classify(err error, account, format string, args ...any) error {
	if err == nil {
		return nil
	}
	var fe *failure.Error
	if errors.As(err, &fe) {
		return fe
	}
	what := fmt.Sprintf(format, args...)
	var of *opFailed
	if errors.As(err, &of) {
		if of.code == "QUOTA_EXCEEDED" || strings.HasSuffix(of.code, "QUOTA_EXCEEDED") {
			e := failure.Terminal(v1.CodeQuotaExceeded, "%s: Compute Engine: %s: %s; ask for a higher quota or make a smaller cluster", what, of.code, of.message)
			e.Err = err
			return e
		}
		return failure.Retryable(v1.CodeProviderError, err, "%s: Compute Engine's operation ended with %s: %s", what, of.code, of.message)
	}
	status, reason, msg, ok := APIError(err)
	if !ok {
		return failure.Retryable(v1.CodeProviderError, err, "%s: Google Cloud could not be reached: %v", what, err)
	}
	terminal := func(code, format string, args ...any) error {
		e := failure.Terminal(code, format, args...)
		e.Err = err
		if code == v1.CodeInvalidCredentials || code == v1.CodeForbidden || reason == "accessNotConfigured" {
			e.Target = "spec.cloudAccount"
		}
		return e
	}
	switch {
	case status == 0:
		return terminal(v1.CodeInvalidCredentials, "%s: Google refused the service-account key of cloud account %q (%s: %s); update its credentials.%s",
			what, account, reason, msg, v1.GCPServiceAccountKey)
	case status == http.StatusUnauthorized:
		return terminal(v1.CodeInvalidCredentials, "%s: Compute Engine refused the token of cloud account %q: %s; check its credentials.%s", what, account, msg, v1.GCPServiceAccountKey)
	case status == http.StatusTooManyRequests || reason == "rateLimitExceeded" || reason == "userRateLimitExceeded":
		return failure.Retryable(v1.CodeThrottled, err, "%s: Compute Engine throttled the call: %s", what, msg)
	case reason == "accessNotConfigured":
		return terminal(v1.CodeInvalidParameter, "%s: the Compute Engine API is not enabled in the project of cloud account %q: %s", what, account, msg)
	case reason == "quotaExceeded":
		return terminal(v1.CodeQuotaExceeded, "%s: Compute Engine: %s", what, msg)
	case status == http.StatusForbidden:
		return terminal(v1.CodeForbidden, "%s: the service account of cloud account %q may not: %s; grant it a role with that permission", what, account, msg)
	case reason == "resourceInUseByAnotherResource", reason == "resourceNotReady", status >= 500:
		return failure.Retryable(v1.CodeProviderError, err, "%s: Compute Engine: %s", what, msg)
	case status == http.StatusBadRequest:
		return terminal(v1.CodeInvalidParameter, "%s: Compute Engine: %s", what, msg)
	}
	return terminal(v1.CodeProviderError, "%s: Compute Engine: %d %s: %s", what, status, reason, msg)
}
