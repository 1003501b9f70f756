package v1

import "time"

// Roles. A project member or service account has one of viewer, operator
// or admin in its project; owner is system-wide and can do everything.
const (
	RoleViewer   = "viewer"   // read everything in the project (never a secret)
	RoleOperator = "operator" // plus change clusters and nodes, read kubeconfigs
	RoleAdmin    = "admin"    // plus cloud accounts, members, service accounts, activation material, audit
	RoleOwner    = "owner"    // system-wide: users, projects, every project
)

// Principal kinds, the prefix of Token.Principal and AuditEntry.Actor.
const (
	PrincipalUser           = "user"
	PrincipalServiceAccount = "serviceaccount"
)

// User is a person (or anything holding a user's token). Owner users may
// do everything; others act through project memberships.
type User struct {
	Name        string    `json:"name"`
	ID          string    `json:"id"`
	ETag        string    `json:"etag"`
	DisplayName string    `json:"displayName,omitempty"`
	Owner       bool      `json:"owner"`
	CreatedAt   time.Time `json:"createdAt"`
}

// Member gives a user a role in a project; Name is the user's name.
type Member struct {
	Name      string    `json:"name"`
	ID        string    `json:"id"`
	ETag      string    `json:"etag"`
	Role      string    `json:"role"`
	CreatedAt time.Time `json:"createdAt"`
}

// ServiceAccount is a non-human identity of one project, with a role in
// it: what CI systems and automation use.
type ServiceAccount struct {
	Name        string    `json:"name"`
	ID          string    `json:"id"`
	ETag        string    `json:"etag"`
	Role        string    `json:"role"`
	Description string    `json:"description,omitempty"`
	CreatedAt   time.Time `json:"createdAt"`
}

// TokenRequest asks for a new API token.
type TokenRequest struct {
	// Description says what the token is for.
	Description string `json:"description,omitempty"`
	// ExpiresInDays is the token's lifetime; 0 means 90 days, at most 3650.
	ExpiresInDays int `json:"expiresInDays,omitempty"`
}

// Token is an API token as listed. Its value is in Value only in the
// answer to its creation: the server keeps a hash and cannot show it again.
type Token struct {
	ID          string     `json:"id"`
	Principal   string     `json:"principal"` // "user:alice" or "serviceaccount:project/name"
	Description string     `json:"description,omitempty"`
	CreatedAt   time.Time  `json:"createdAt"`
	ExpiresAt   time.Time  `json:"expiresAt"`
	LastUsedAt  *time.Time `json:"lastUsedAt,omitempty"`
	RevokedAt   *time.Time `json:"revokedAt,omitempty"`
	Value       string     `json:"value,omitempty"`
}

// Whoami is who the caller's token acts for.
type Whoami struct {
	Principal string `json:"principal"`
	Owner     bool   `json:"owner"`
	// Projects maps each project the caller is in to its role there
	// (empty for owners, who are in every project as owner).
	Projects map[string]string `json:"projects,omitempty"`
	TokenID  string            `json:"tokenId"`
}

// AuditEntry records one mutating request or one read of a secret.
type AuditEntry struct {
	ID        string    `json:"id"`
	Time      time.Time `json:"time"`
	Actor     string    `json:"actor"`  // principal, or "anonymous"
	Action    string    `json:"action"` // method and route, "PUT /v1/projects/{project}/clusters/{cluster}"
	Path      string    `json:"path"`   // the request's path
	Project   string    `json:"project,omitempty"`
	Source    string    `json:"source"`         // the client's address
	Status    int       `json:"status"`         // the HTTP status answered
	Result    string    `json:"result"`         // success, denied or failed
	Code      string    `json:"code,omitempty"` // the error code when not a success
	RequestID string    `json:"requestId"`
}

// Audit results.
const (
	AuditSuccess = "success" // 2xx
	AuditDenied  = "denied"  // 401, 403
	AuditFailed  = "failed"  // any other status
)

// AuditResult is the audit result of an answer with HTTP status.
func AuditResult(status int) string {
	switch {
	case status < 300:
		return AuditSuccess
	case status == 401 || status == 403:
		return AuditDenied
	default:
		return AuditFailed
	}
}
