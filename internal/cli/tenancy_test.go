package cli

import (
	"bytes"
	"errors"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"kiln.dev/kiln/api/client"
	v1 "kiln.dev/kiln/api/v1"
)

func TestParseTimeFlag(t *testing.T) {
	tests := []struct {
		name    string
		value   string
		want    time.Time
		wantErr bool
	}{
		{"empty is none", "", time.Time{}, false},
		{"minutes", "30m", now.Add(-30 * time.Minute), false},
		{"hours and minutes", "1h30m", now.Add(-90 * time.Minute), false},
		{"days", "7d", now.Add(-7 * 24 * time.Hour), false},
		{"zero", "0s", now, false},
		{"RFC 3339", "2026-03-01T10:00:00Z", t0.Add(-2 * time.Hour), false},
		{"RFC 3339 with offset", "2026-03-01T13:00:00+01:00", t0, false},
		{"date", "2026-03-01", t0.Add(-12 * time.Hour), false},
		{"negative duration", "-1h", time.Time{}, true},
		{"negative days", "-2d", time.Time{}, true},
		{"days past a Duration", "1000000d", time.Time{}, true},
		{"fractional days", "1.5d", time.Time{}, true},
		{"no unit", "10", time.Time{}, true},
		{"words", "yesterday", time.Time{}, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := parseTimeFlag("since", tt.value, now)
			if tt.wantErr {
				var ue usageError
				if !errors.As(err, &ue) || ue.arg != "--since" {
					t.Fatalf("parseTimeFlag(%q) = %v, %v; want a usage error of --since", tt.value, got, err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !got.Equal(tt.want) {
				t.Errorf("parseTimeFlag(%q) = %v, want %v", tt.value, got, tt.want)
			}
		})
	}
}

func TestAuditFilter(t *testing.T) {
	tests := []struct {
		name    string
		flags   auditFlags
		project string
		want    client.AuditFilter
		wantErr string // the flag of the usage error
	}{
		{name: "nothing: every project", want: client.AuditFilter{}},
		{name: "project from -p", project: "team-a", want: client.AuditFilter{Project: "team-a"}},
		{
			name:  "all filters",
			flags: auditFlags{actor: "serviceaccount:team-a/ci", action: "DELETE", result: "denied", since: "2h", until: "1h", limit: 5},
			want: client.AuditFilter{Actor: "serviceaccount:team-a/ci", Action: "DELETE", Result: v1.AuditDenied,
				Since: now.Add(-2 * time.Hour), Until: now.Add(-time.Hour), Limit: 5},
		},
		{name: "a bare actor is a user", flags: auditFlags{actor: "alice"}, want: client.AuditFilter{Actor: "user:alice"}},
		{name: "anonymous stays", flags: auditFlags{actor: "anonymous"}, want: client.AuditFilter{Actor: "anonymous"}},
		{name: "bad result", flags: auditFlags{result: "ok"}, wantErr: "--result"},
		{name: "negative limit", flags: auditFlags{limit: -1}, wantErr: "--limit"},
		{name: "bad until", flags: auditFlags{until: "soon"}, wantErr: "--until"},
		{name: "until before since", flags: auditFlags{since: "1h", until: "2h"}, wantErr: "--until"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := tt.flags.filter(tt.project, now)
			if tt.wantErr != "" {
				var ue usageError
				if !errors.As(err, &ue) || ue.arg != tt.wantErr {
					t.Fatalf("err = %v, want a usage error of %s", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("filter (-want +got):\n%s", diff)
			}
		})
	}
}

func TestPrincipalOwner(t *testing.T) {
	tests := []struct {
		principal string
		want      client.TokenOwner
		wantErr   bool
	}{
		{"user:alice", client.TokenOwner{User: "alice"}, false},
		{"serviceaccount:team-a/ci", client.TokenOwner{Project: "team-a", ServiceAccount: "ci"}, false},
		{"serviceaccount:ci", client.TokenOwner{}, true},
		{"user:", client.TokenOwner{}, true},
		{"anonymous", client.TokenOwner{}, true},
		{"robot:r2", client.TokenOwner{}, true},
	}
	for _, tt := range tests {
		got, err := principalOwner(tt.principal)
		if (err != nil) != tt.wantErr {
			t.Errorf("principalOwner(%q) error %v, want error %t", tt.principal, err, tt.wantErr)
			continue
		}
		if got != tt.want {
			t.Errorf("principalOwner(%q) = %+v, want %+v", tt.principal, got, tt.want)
		}
	}
}

// TestTenancyUsageErrors: wrong flags are refused before any request
// (no server is configured here, which would be exit 1).
func TestTenancyUsageErrors(t *testing.T) {
	env := []string{"HOME=" + t.TempDir()}
	tests := []struct {
		name string
		args []string
		want string
	}{
		{"member add without role", []string{"member", "add", "alice"}, "--role is required"},
		{"member add as owner", []string{"member", "add", "alice", "--role", "owner"}, "not a project role"},
		{"member add bad role", []string{"member", "add", "alice", "--role", "boss"}, `not "boss"`},
		{"sa create without role", []string{"sa", "create", "ci"}, "--role is required"},
		{"token for two owners", []string{"token", "create", "--user", "a", "--service-account", "b"}, "not both"},
		{"token list for two owners", []string{"token", "list", "--user", "a", "--service-account", "b"}, "not both"},
		{"token revoke without id", []string{"token", "revoke"}, "ID"},
		{"token negative lifetime", []string{"token", "create", "--expires-in-days", "-1"}, "--expires-in-days"},
		{"audit bad since", []string{"audit", "list", "--since", "last week"}, "--since"},
		{"audit bad result", []string{"audit", "list", "--result", "ok"}, "--result"},
		{"project create without name", []string{"project", "create"}, "NAME"},
		{"user get two names", []string{"user", "get", "a", "b"}, "NAME"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			code, _, stderr := runCLI(t, env, "", tt.args...)
			if code != ExitUsage || !strings.Contains(stderr, tt.want) {
				t.Errorf("kiln %v: exit %d, stderr:\n%s\nwant exit %d and %q", tt.args, code, stderr, ExitUsage, tt.want)
			}
		})
	}
}

func TestAuthErrorHints(t *testing.T) {
	tests := []struct {
		name string
		err  error
		want []string
	}{
		{
			name: "401",
			err: runtimeError{&client.APIError{StatusCode: 401, Err: v1.Error{Code: v1.CodeUnauthorized,
				Message: "the token tok_1 was revoked"}}},
			want: []string{"error: Unauthorized: the token tok_1 was revoked\n", "kiln login", "KILN_TOKEN"},
		},
		{
			name: "403",
			err: runtimeError{&client.APIError{StatusCode: 403, Err: v1.Error{Code: v1.CodeForbidden,
				Message: "user:val is viewer in project p; this needs operator"}}},
			want: []string{"error: Forbidden: user:val is viewer in project p; this needs operator\n", "kiln whoami"},
		},
		{
			name: "a command's own hint wins",
			err: runtimeError{&hintError{"read a project's log with -p", &client.APIError{StatusCode: 403,
				Err: v1.Error{Code: v1.CodeForbidden, Message: "not an owner"}}}},
			want: []string{"error: Forbidden: not an owner\n  read a project's log with -p\n"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var b bytes.Buffer
			if code := reportError(&b, nil, tt.err); code != ExitError {
				t.Errorf("exit %d, want %d", code, ExitError)
			}
			for _, w := range tt.want {
				if !strings.Contains(b.String(), w) {
					t.Errorf("output does not contain %q:\n%s", w, b.String())
				}
			}
			if strings.Count(b.String(), "\n") != 2 {
				t.Errorf("want the error and one hint line, got:\n%s", b.String())
			}
		})
	}
}

func TestRenderTenancy(t *testing.T) {
	tokens := []v1.Token{
		{ID: "tok_1", Principal: "user:alice", Description: "laptop", CreatedAt: t0, ExpiresAt: t0.Add(90 * 24 * time.Hour),
			LastUsedAt: at(time.Hour)},
		{ID: "tok_2", Principal: "user:alice", CreatedAt: t0, ExpiresAt: t0.Add(time.Hour)},
		{ID: "tok_3", Principal: "user:alice", CreatedAt: t0, ExpiresAt: t0.Add(24 * time.Hour), RevokedAt: at(time.Minute)},
	}
	audit := []v1.AuditEntry{
		{ID: "2", Time: t0.Add(time.Minute), Actor: "user:val", Action: "PUT /v1/projects/{project}/clusters/{cluster}",
			Path: "/v1/projects/team-a/clusters/x", Project: "team-a", Source: "10.0.0.9", Status: 403, Result: v1.AuditDenied,
			Code: v1.CodeForbidden, RequestID: "r2"},
		{ID: "1", Time: t0, Actor: "user:admin", Action: "PUT /v1/users/{user}", Path: "/v1/users/val",
			Source: "127.0.0.1", Status: 201, Result: v1.AuditSuccess, RequestID: "r1"},
	}
	tests := []struct {
		name  string
		table func(io.Writer) error
	}{
		{"whoami-owner.table", func(w io.Writer) error {
			return renderWhoami(w, &v1.Whoami{Principal: "user:admin", Owner: true, TokenID: "tok_0"})
		}},
		{"whoami.table", func(w io.Writer) error {
			return renderWhoami(w, &v1.Whoami{Principal: "user:val", TokenID: "tok_1",
				Projects: map[string]string{"team-b": v1.RoleAdmin, "team-a": v1.RoleViewer}})
		}},
		{"whoami-none.table", func(w io.Writer) error {
			return renderWhoami(w, &v1.Whoami{Principal: "user:new", TokenID: "tok_9"})
		}},
		{"tokens.table", func(w io.Writer) error { return renderTokens(w, tokens, now) }},
		{"audit.table", func(w io.Writer) error { return renderAudit(w, audit) }},
		{"users.table", func(w io.Writer) error {
			return renderUsers(w, []v1.User{{Name: "admin", Owner: true, CreatedAt: t0}, {Name: "val", DisplayName: "Val", CreatedAt: t0}}, now)
		}},
		{"members.table", func(w io.Writer) error {
			return renderMembers(w, []v1.Member{{Name: "val", Role: v1.RoleViewer, CreatedAt: t0}}, now)
		}},
		{"serviceaccounts.table", func(w io.Writer) error {
			return renderServiceAccounts(w, []v1.ServiceAccount{{Name: "ci", Role: v1.RoleOperator, CreatedAt: t0}}, now)
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var b bytes.Buffer
			if err := tt.table(&b); err != nil {
				t.Fatal(err)
			}
			golden(t, tt.name, b.Bytes())
		})
	}
}
