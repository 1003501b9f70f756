package aws

import (
	"errors"
	"fmt"
	"strings"

	"github.com/aws/smithy-go"

	v1 "kiln.dev/kiln/api/v1"
	"kiln.dev/kiln/internal/failure"
)

// APICode is the AWS error code of err, "" when it is not an AWS answer.
func APICode(err error) string {
	var ae smithy.APIError
	if errors.As(err, &ae) {
		return ae.ErrorCode()
	}
	return ""
}

// APIMessage is the AWS error message of err.
func APIMessage(err error) string {
	var ae smithy.APIError
	if errors.As(err, &ae) {
		return ae.ErrorMessage()
	}
	return err.Error()
}

// classify turns an AWS error into one a user can act on. what says what
// was being done ("create the VPC of cluster c1"); target is the spec field
// at fault for the errors a user fixes there ("" when none).
//
//   - throttling (RequestLimitExceeded, Throttling) and eventual
//     consistency (a *.NotFound right after a create), AWS's own faults
//     (5xx, InternalError, ServiceUnavailable) and DependencyViolation (a
//     resource still going away) are retryable;
//   - bad credentials are InvalidCredentials, a missing permission names
//     the action, a vCPU or address limit is QuotaExceeded; these and every
//     other client error are terminal.
func classify(err error, target, format string, args ...any) error {
	if err == nil {
		return nil
	}
	var fe *failure.Error
	if errors.As(err, &fe) {
		return err
	}
	what := fmt.Sprintf(format, args...)
	code, msg := APICode(err), APIMessage(err)
	retry := func(why string) error {
		return failure.Retryable(v1.CodeProviderError, err, "%s: %s (AWS %s); retrying", what, why, code)
	}
	terminal := func(kind, hint string) error {
		e := failure.Terminal(kind, "%s: AWS answered %s: %s%s", what, code, msg, hint)
		e.Target, e.Err = target, err
		return e
	}
	switch {
	case code == "":
		return failure.Retryable(v1.CodeProviderError, err, "%s: AWS could not be reached; retrying", what)
	case code == "RequestLimitExceeded" || code == "Throttling" || code == "ThrottlingException" || code == "RequestThrottled" || code == "SlowDown":
		return failure.Retryable(v1.CodeThrottled, err, "%s: AWS throttled the calls (%s); retrying with backoff", what, code)
	case strings.HasSuffix(code, ".NotFound") || code == "NatGatewayNotFound":
		return retry("not visible yet right after its creation (AWS is eventually consistent)")
	case code == "DependencyViolation" || code == "ResourceInUse" || code == "DeleteConflict" || code == "InvalidIPAddress.InUse":
		return retry("something that depends on it is still being removed")
	case code == "InternalError" || code == "InternalFailure" || code == "ServiceUnavailable" || code == "Unavailable":
		return retry("AWS failed on its side")
	case code == "AuthFailure" || code == "InvalidClientTokenId" || code == "SignatureDoesNotMatch" || code == "UnrecognizedClientException" || code == "ExpiredToken":
		e := failure.Terminal(v1.CodeInvalidCredentials, "%s: AWS refused the cloud account's credentials (%s); update the account's %s and %s", what, code, CredentialKeyID, CredentialSecret)
		e.Target, e.Err = "spec.cloudAccount", err
		return e
	case code == "UnauthorizedOperation" || code == "AccessDenied" || code == "AccessDeniedException":
		e := failure.Terminal(v1.CodeForbidden, "%s: the cloud account's credentials lack a permission: %s", what, msg)
		e.Target, e.Err = "spec.cloudAccount", err
		return e
	case code == "VcpuLimitExceeded" || code == "AddressLimitExceeded" || code == "VpcLimitExceeded" || code == "InstanceLimitExceeded" || code == "NatGatewayLimitExceeded":
		return terminal(v1.CodeQuotaExceeded, "; ask AWS for a higher quota or make the cluster smaller")
	case code == "TooManyLoadBalancers" || code == "TooManyTargetGroups" || code == "TooManyListeners":
		return terminal(v1.CodeQuotaExceeded, quotaMessage(code))
	case code == "InsufficientInstanceCapacity":
		return terminal(v1.CodeQuotaExceeded, "; choose another instance type or zone")
	}
	return terminal(v1.CodeProviderError, "")
}
