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
	Name        string `json:"name"`
	ID          string `json:"id"`
	ETag        string `json:"etag"`
	DisplayName string `json:"displayName,omitempty"`
	Owner       bool   `json:"owner"`
	// Disabled refuses every token of the user and their next sign-in
	// until an owner clears it; nothing else about them changes.
	Disabled bool `json:"disabled,omitempty"`
	// Source is where the user came from: empty for one an owner made,
	// "oidc:ISSUER" for one made at their first sign-in with an identity
	// provider (read-only).
	Source string `json:"source,omitempty"`
	// Subject is the identity provider's id of a user made at sign-in: a
	// later sign-in is theirs only with the same issuer and subject.
	Subject   string    `json:"subject,omitempty"`
	CreatedAt time.Time `json:"createdAt"`
}

// GroupBinding gives every person an identity provider says is in a group
// a role in a project; Name is the group as the provider spells it. A
// person's role is the highest of their membership and their groups'
// bindings.
type GroupBinding struct {
	Name      string    `json:"name"`
	ID        string    `json:"id"`
	ETag      string    `json:"etag"`
	Role      string    `json:"role"`
	CreatedAt time.Time `json:"createdAt"`
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
	// Groups are the identity provider's groups of a token made by a
	// sign-in (POST /v1/auth/oidc).
	Groups []string `json:"groups,omitempty"`
	Value  string   `json:"value,omitempty"`
}

// Whoami is who the caller's token acts for.
type Whoami struct {
	Principal string `json:"principal"`
	Owner     bool   `json:"owner"`
	// Projects maps each project the caller is in to its role there
	// (every project, as owner, for an owner).
	Projects map[string]string `json:"projects,omitempty"`
	TokenID  string            `json:"tokenId"`
	// Groups are the identity provider's groups the caller signed in with.
	Groups []string `json:"groups,omitempty"`
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

// SignInConfig (GET /v1/auth/oidc) lists the identity providers kilnd
// trusts, for clients starting a sign-in.
type SignInConfig struct {
	Issuers []SignInIssuer `json:"issuers"`
}

// SignInIssuer is one identity provider: its issuer URL, the public client
// the CLI signs in with, and the claims kilnd reads.
type SignInIssuer struct {
	URL           string `json:"url"`
	ClientID      string `json:"clientID"`
	UsernameClaim string `json:"usernameClaim"`
	GroupsClaim   string `json:"groupsClaim"`
}

// SignInRequest (POST /v1/auth/oidc) trades an identity provider's ID
// token for a Kiln token.
type SignInRequest struct {
	IDToken string `json:"idToken"`
	// Description labels the token in 'kiln token list' ("sign-in with
	// ISSUER" by default).
	Description string `json:"description,omitempty"`
}

// SignIn is a sign-in's answer: the new token (its value shown once) and
// the user it acts for.
type SignIn struct {
	Token Token `json:"token"`
	User  User  `json:"user"`
}
