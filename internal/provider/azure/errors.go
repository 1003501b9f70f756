package azure

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/runtime"
	"github.com/Azure/azure-sdk-for-go/sdk/azidentity"

	v1 "kiln.dev/kiln/api/v1"
	"kiln.dev/kiln/internal/failure"
)

// APIError is Azure's code and message of err: ARM's {"error": {"code",
// "message"}} (of a call, or of a long-running operation that ended
// Failed), or Entra ID's {"error", "error_description"}. ok is false when
// err is no answer of Azure's (it could not be reached).
func APIError(err error) (code, msg string, ok bool) {
	var re *azcore.ResponseError
	if errors.As(err, &re) {
		code, msg = re.ErrorCode, http.StatusText(re.StatusCode)
		if re.RawResponse != nil {
			if body, err := runtime.Payload(re.RawResponse); err == nil {
				var b struct {
					Error struct{ Code, Message string } `json:"error"`
				}
				if json.Unmarshal(body, &b) == nil && b.Error.Message != "" {
					msg = b.Error.Message
					if code == "" {
						code = b.Error.Code
					}
				}
			}
		}
		return code, msg, true
	}
	var ae *azidentity.AuthenticationFailedError
	if errors.As(err, &ae) && ae.RawResponse != nil {
		code, msg = "", ae.Error()
		if body, err := runtime.Payload(ae.RawResponse); err == nil {
			var b struct {
				Error       string `json:"error"`
				Description string `json:"error_description"`
			}
			if json.Unmarshal(body, &b) == nil && b.Error != "" {
				code, msg = b.Error, b.Description
				if i := strings.IndexAny(msg, "\r\n"); i > 0 {
					msg = msg[:i] // Entra adds a trace and correlation id on lines of their own
				}
			}
		}
		return code, msg, true
	}
	return "", "", false
}

// operationFailed is a long-running operation that ended Failed (the
// SDK's poller returns its error as a ResponseError): what was being done
// is said by the caller.
type operationFailed struct{ err error }

func (e operationFailed) Error() string { return e.err.Error() }
func (e operationFailed) Unwrap() error { return e.err }

// ARM's codes, by what a user does about them.
var (
	// A network the spec asks for that Azure cannot make: the node CIDR.
	cidrCodes = []string{"NetcfgSubnetRangesOverlap", "NetcfgSubnetRangeOutsideVnet", "NetcfgInvalidSubnet",
		"InvalidAddressPrefixFormat", "InvalidCIDRNotation", "VnetAddressSpaceOverlapsWithAlreadyPeeredVnet"}
	// A region Azure does not offer (the account's, or the spec's).
	regionCodes = []string{"LocationNotAvailableForResourceGroup", "LocationNotAvailableForResourceType",
		"InvalidResourceLocation", "InvalidResourceGroupLocation", "NoRegisteredProviderFound"}
	// The subscription's limits.
	quotaCodes = []string{"QuotaExceeded", "OperationNotAllowed", "PublicIPCountLimitReached",
		"SubscriptionResourceGroupLimitExceeded", "NatGatewayLimitReached", "ResourceQuotaExceeded"}
	// Something else is being done to it, or to its group: it passes.
	busyCodes = []string{"AnotherOperationInProgress", "ResourceGroupBeingDeleted", "Conflict", "RetryableError",
		"ReferencedResourceNotProvisioned", "InUseSubnetCannotBeDeleted", "Canceled"}
	// The token was refused: the account's credentials.
	authCodes = []string{"AuthenticationFailed", "InvalidAuthenticationToken", "ExpiredAuthenticationToken",
		"InvalidAuthenticationTokenAudience", "InvalidAuthenticationTokenTenant"}
)

// classify turns an Azure error into one a user can act on. account is the
// cloud account's name; what says what was being done ("create the virtual
// network of cluster c1").
//
//   - throttling (429, after the SDK's own retries, which honour
//     Retry-After), ARM's own faults (5xx), a resource or group something
//     else is changing, an operation that ended Failed for a reason a user
//     cannot fix (AllocationFailed, InternalServerError): retryable, the
//     next attempt writes the resource again and converges;
//   - the account's secret, client or tenant refused by Entra ID, a token
//     ARM refused, the subscription unknown: InvalidCredentials naming the
//     account and the credential; a role the application lacks: Forbidden;
//     a node CIDR or region Azure refuses: InvalidParameter naming the spec
//     field; a limit: QuotaExceeded; every other refusal: terminal, with
//     Azure's code and message.
func classify(err error, account, format string, args ...any) error {
	if err == nil {
		return nil
	}
	var fe *failure.Error
	if errors.As(err, &fe) {
		return err
	}
	what := fmt.Sprintf(format, args...)
	code, msg, ok := APIError(err)
	var failed operationFailed
	lro := errors.As(err, &failed)
	var re *azcore.ResponseError
	status := 0
	if errors.As(err, &re) && !lro {
		status = re.StatusCode
	}
	terminal := func(kind, target, hint string) error {
		e := failure.Terminal(kind, "%s: Azure answered %s: %s%s", what, code, msg, hint)
		e.Target, e.Err = target, err
		return e
	}
	var ae *azidentity.AuthenticationFailedError
	switch {
	case !ok && errors.As(err, &ae):
		return failure.Retryable(v1.CodeProviderError, err, "%s: Microsoft Entra ID could not be reached to sign in with cloud account %q; retrying", what, account)
	case !ok:
		return failure.Retryable(v1.CodeProviderError, err, "%s: Azure could not be reached; retrying", what)
	case errors.As(err, &ae):
		field := map[string]string{"invalid_client": v1.AzureClientSecret, "unauthorized_client": v1.AzureClientID,
			"invalid_tenant": v1.AzureTenant, "invalid_request": v1.AzureTenant}[code]
		hint := "check the account's " + strings.Join(v1.AzureCredentials[:4], ", ")
		if field != "" {
			hint = "update the account's " + field
		}
		e := failure.Terminal(v1.CodeInvalidCredentials, "%s: Microsoft Entra ID refused cloud account %q (%s: %s); %s", what, account, code, msg, hint)
		e.Target, e.Err = "spec.cloudAccount", err
		return e
	case status == http.StatusTooManyRequests:
		return failure.Retryable(v1.CodeThrottled, err, "%s: Azure throttled the calls (%s) beyond the SDK's retries; retrying with backoff", what, code)
	case slices.Contains(authCodes, code) || status == http.StatusUnauthorized:
		e := failure.Terminal(v1.CodeInvalidCredentials, "%s: Azure Resource Manager refused the token of cloud account %q (%s: %s); check the account's %s", what, account, code, msg, v1.AzureTenant)
		e.Target, e.Err = "spec.cloudAccount", err
		return e
	case code == "SubscriptionNotFound" || code == "InvalidSubscriptionId":
		e := failure.Terminal(v1.CodeInvalidCredentials, "%s: Azure has no subscription of cloud account %q that its application may use (%s: %s); update the account's %s", what, account, code, msg, v1.AzureSubscription)
		e.Target, e.Err = "spec.cloudAccount", err
		return e
	case code == "AuthorizationFailed" || code == "LinkedAuthorizationFailed" || status == http.StatusForbidden:
		e := failure.Terminal(v1.CodeForbidden, "%s: the application of cloud account %q lacks a role: %s (%s); give it Contributor and User Access Administrator (or Owner) on the subscription", what, account, msg, code)
		e.Target, e.Err = "spec.cloudAccount", err
		return e
	case code == "MissingSubscriptionRegistration":
		return terminal(v1.CodeProviderError, "spec.cloudAccount", "; register the resource provider in the subscription (az provider register)")
	case slices.Contains(cidrCodes, code):
		return terminal(v1.CodeInvalidParameter, "spec.network.nodeCIDR", "; choose another spec.network.nodeCIDR")
	case slices.Contains(regionCodes, code):
		return terminal(v1.CodeInvalidParameter, "spec.region", "; choose another spec.region (or the account's region)")
	case slices.Contains(quotaCodes, code) || strings.HasSuffix(code, "LimitExceeded") || strings.HasSuffix(code, "LimitReached"):
		return terminal(v1.CodeQuotaExceeded, "", "; ask Azure for a higher quota or make fewer clusters in the region")
	case slices.Contains(busyCodes, code):
		return failure.Retryable(v1.CodeProviderError, err, "%s: Azure is still changing it or its group (%s: %s); retrying", what, code, msg)
	case lro:
		return failure.Retryable(v1.CodeProviderError, err, "%s: Azure's operation ended Failed (%s: %s); retrying, which writes it again", what, code, msg)
	case status >= 500:
		return failure.Retryable(v1.CodeProviderError, err, "%s: Azure failed on its side (%s: %s); retrying", what, code, msg)
	}
	return terminal(v1.CodeProviderError, "", "")
}

// notFound reports whether err is ARM's answer that the resource (or its
// group, or its parent) is not there; not that the subscription is unknown.
func notFound(err error) bool {
	var re *azcore.ResponseError
	return errors.As(err, &re) && re.StatusCode == http.StatusNotFound &&
		re.ErrorCode != "SubscriptionNotFound" && re.ErrorCode != "InvalidSubscriptionId"
}
