package v1

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
	CodePackFailed         = "PackFailed"

	// Why a sign-in (POST /v1/auth/oidc) was refused: the code of the
	// answer's details, under Unauthorized (or Unavailable).
	CodeMalformedToken    = "MalformedToken"
	CodeUnknownIssuer     = "UnknownIssuer"
	CodeWrongAudience     = "WrongAudience"
	CodeTokenExpired      = "TokenExpired"
	CodeBadSignature      = "BadSignature"
	CodeBadClaim          = "BadClaim"
	CodeIssuerUnavailable = "IssuerUnavailable"
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
	{CodeInvalidParameter, 400, false},
	{CodeMissingParameter, 400, false},
	{CodeImmutableField, 400, false},
	{CodeUnsupportedVersion, 400, false},
	{CodeInvalidRequest, 400, false},
	{CodeInvalidCredentials, 400, false},
	{CodeQuotaExceeded, 400, false},
	{CodeUnauthorized, 401, false},
	{CodeForbidden, 403, false},
	{CodeNotFound, 404, false},
	{CodeMethodNotAllowed, 405, false},
	{CodeConflict, 409, true},
	{CodeNodeCountMismatch, 409, false},
	{CodePreconditionFailed, 412, false},
	{CodeRequestTooLarge, 413, false},
	{CodeUnsupportedMedia, 415, false},
	{CodeThrottled, 429, true},
	{CodeInternal, 500, true},
	{CodeProviderError, 503, true},
	{CodeUnavailable, 503, true},
	{CodeTimeout, 0, true},
	{CodeMachineStopped, 0, true},
	{CodeDrainTimeout, 0, false},
	{CodePackFailed, 0, true},
	{CodeDequeueLimit, 0, false},
	{CodeCanceled, 0, true},
	{CodeMalformedToken, 0, false},
	{CodeUnknownIssuer, 0, false},
	{CodeWrongAudience, 0, false},
	{CodeTokenExpired, 0, false},
	{CodeBadSignature, 0, false},
	{CodeBadClaim, 0, false},
	{CodeIssuerUnavailable, 0, true},
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
	// Retryable is set on a Failed operation's error that a retry may get
	// past (the step ran out of attempts at a failure that can pass); a
	// permanent failure, without it, fails a retry the same way.
	Retryable bool `json:"retryable,omitempty"`
}

// ErrorResponse is the body of every error response.
type ErrorResponse struct {
	Error Error `json:"error"`
}
