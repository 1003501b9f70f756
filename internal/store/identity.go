package store

import (
	"context"
	"time"

	v1 "kiln.dev/kiln/api/v1"
)

// Member is a user's role in a project.
type Member struct {
	Project string
	v1.Member
}

// ServiceAccount is a project's non-human identity.
type ServiceAccount struct {
	Project string
	v1.ServiceAccount
}

// GroupBinding gives an identity provider's group a role in a project.
type GroupBinding struct {
	Project string
	v1.GroupBinding
}

// Token is an API token as stored: its hash, never its value.
type Token struct {
	ID          string
	Hash        string // hex SHA-256 of the value
	Principal   string // "user:NAME" or "serviceaccount:PROJECT/NAME"
	Description string
	CreatedAt   time.Time // set by the store when zero
	ExpiresAt   time.Time
	LastUsedAt  time.Time // zero: never
	RevokedAt   time.Time // zero: not revoked
	// Groups are the identity provider's groups of a token made by a
	// sign-in; nil for others.
	Groups []string
}

// AuditFilter narrows ListAudit; zero fields match everything.
type AuditFilter struct {
	Project string
	Actor   string
	Action  string // substring of the action
	Result  string
	Since   time.Time // inclusive
	Until   time.Time // exclusive
}

// Identities are users, project members, service accounts and their
// tokens.
type Identities interface {
	PutUser(ctx context.Context, u *v1.User, c Cond) error
	GetUser(ctx context.Context, name string) (*v1.User, error)
	ListUsers(ctx context.Context, pg Page) ([]*v1.User, string, error)
	// DeleteUser deletes the user, its memberships and its tokens in one
	// transaction.
	DeleteUser(ctx context.Context, name string, c Cond) error

	PutMember(ctx context.Context, m *Member, c Cond) error
	GetMember(ctx context.Context, project, user string) (*Member, error)
	ListMembers(ctx context.Context, project string, pg Page) ([]*Member, string, error)
	// Memberships lists every project membership of a user.
	Memberships(ctx context.Context, user string) ([]*Member, error)
	DeleteMember(ctx context.Context, project, user string, c Cond) error

	PutServiceAccount(ctx context.Context, sa *ServiceAccount, c Cond) error
	GetServiceAccount(ctx context.Context, project, name string) (*ServiceAccount, error)
	ListServiceAccounts(ctx context.Context, project string, pg Page) ([]*ServiceAccount, string, error)
	// DeleteServiceAccount deletes the account and its tokens in one
	// transaction.
	DeleteServiceAccount(ctx context.Context, project, name string, c Cond) error

	PutGroupBinding(ctx context.Context, b *GroupBinding, c Cond) error
	GetGroupBinding(ctx context.Context, project, group string) (*GroupBinding, error)
	ListGroupBindings(ctx context.Context, project string, pg Page) ([]*GroupBinding, string, error)
	// BindingsOf lists the bindings of any of groups in project (every
	// project when ""), by project then group: one query however many
	// groups a person is in.
	BindingsOf(ctx context.Context, project string, groups []string) ([]*GroupBinding, error)
	DeleteGroupBinding(ctx context.Context, project, group string, c Cond) error

	// CreateToken inserts t; an id or hash that exists is ErrExists.
	CreateToken(ctx context.Context, t *Token) error
	// TokenByHash finds the token with this hash, revoked or expired ones
	// included (the caller decides), or ErrNotFound.
	TokenByHash(ctx context.Context, hash string) (*Token, error)
	// ListTokens lists a principal's tokens by id.
	ListTokens(ctx context.Context, principal string, pg Page) ([]*Token, string, error)
	// RevokeToken marks the principal's token id revoked at the given time
	// (revoking twice keeps the first time); another principal's token is
	// ErrNotFound.
	RevokeToken(ctx context.Context, principal, id string, at time.Time) error
	// TouchToken records a use of the token.
	TouchToken(ctx context.Context, id string, at time.Time) error
}

// Audit is the audit log: who did what, and what came of it.
type Audit interface {
	// AppendAudit adds an entry; the store sets its ID (increasing) and, when
	// zero, its Time.
	AppendAudit(ctx context.Context, e *v1.AuditEntry) error
	// ListAudit lists entries newest first.
	ListAudit(ctx context.Context, f AuditFilter, pg Page) ([]*v1.AuditEntry, string, error)
}
