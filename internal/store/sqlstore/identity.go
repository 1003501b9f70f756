package sqlstore

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	v1 "kiln.dev/kiln/api/v1"
	"kiln.dev/kiln/internal/store"
)

var (
	usersT           = docTable{table: "users", kind: "user"}
	membersT         = docTable{table: "members", kind: "member", parent: []string{"project"}}
	serviceAccountsT = docTable{table: "service_accounts", kind: "service account", parent: []string{"project"}}
	groupBindingsT   = docTable{table: "group_bindings", kind: "group binding", parent: []string{"project"}}
)

// PutUser creates or replaces a user.
func (s *Store) PutUser(ctx context.Context, u *v1.User, c store.Cond) error {
	etag, created, err := s.putDoc(ctx, usersT, nil, u.Name, u.CreatedAt, u, c)
	if err != nil {
		return err
	}
	u.ETag, u.CreatedAt = etag, created
	return nil
}

// GetUser reads a user.
func (s *Store) GetUser(ctx context.Context, name string) (*v1.User, error) {
	d, err := s.getDoc(ctx, usersT, nil, name)
	if err != nil {
		return nil, err
	}
	return decodeUser(d)
}

// ListUsers lists users by name.
func (s *Store) ListUsers(ctx context.Context, pg store.Page) ([]*v1.User, string, error) {
	docs, next, err := s.listDocs(ctx, usersT, nil, pg)
	return decodeAll(docs, next, err, decodeUser)
}

// DeleteUser deletes a user with its memberships and tokens.
func (s *Store) DeleteUser(ctx context.Context, name string, c store.Cond) error {
	return s.deleteDoc(ctx, usersT, nil, name, c, func(ctx context.Context, tx *sql.Tx) error {
		if _, err := tx.ExecContext(ctx, s.q(`DELETE FROM members WHERE name = ?`), name); err != nil {
			return err
		}
		_, err := tx.ExecContext(ctx, s.q(`DELETE FROM tokens WHERE principal = ?`), v1.PrincipalUser+":"+name)
		return err
	})
}

func decodeUser(d doc) (*v1.User, error) {
	u := &v1.User{}
	if err := decodeDoc(usersT, d, u); err != nil {
		return nil, err
	}
	u.Name, u.ETag, u.CreatedAt = d.name, d.etag, d.created
	return u, nil
}

// PutMember creates or replaces a membership.
func (s *Store) PutMember(ctx context.Context, m *store.Member, c store.Cond) error {
	etag, created, err := s.putDoc(ctx, membersT, []string{m.Project}, m.Name, m.CreatedAt, &m.Member, c)
	if err != nil {
		return err
	}
	m.ETag, m.CreatedAt = etag, created
	return nil
}

// GetMember reads a user's membership of a project.
func (s *Store) GetMember(ctx context.Context, project, user string) (*store.Member, error) {
	d, err := s.getDoc(ctx, membersT, []string{project}, user)
	if err != nil {
		return nil, err
	}
	return decodeMember(project)(d)
}

// ListMembers lists a project's members by user name.
func (s *Store) ListMembers(ctx context.Context, project string, pg store.Page) ([]*store.Member, string, error) {
	docs, next, err := s.listDocs(ctx, membersT, []string{project}, pg)
	return decodeAll(docs, next, err, decodeMember(project))
}

// Memberships lists every membership of a user, by project.
func (s *Store) Memberships(ctx context.Context, user string) ([]*store.Member, error) {
	rows, err := s.read.QueryContext(ctx, s.q(`SELECT project, etag, created_at, data FROM members
		WHERE name = ? ORDER BY project`), user)
	if err != nil {
		return nil, fmt.Errorf("list memberships of user %s: %w", user, err)
	}
	defer rows.Close()
	var out []*store.Member
	for rows.Next() {
		d := doc{name: user}
		var project string
		var created int64
		if err := rows.Scan(&project, &d.etag, &created, &d.data); err != nil {
			return nil, fmt.Errorf("list memberships of user %s: %w", user, err)
		}
		d.created = fromNanos(created)
		m, err := decodeMember(project)(d)
		if err != nil {
			return nil, err
		}
		out = append(out, m)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("list memberships of user %s: %w", user, err)
	}
	return out, nil
}

// DeleteMember removes a user from a project.
func (s *Store) DeleteMember(ctx context.Context, project, user string, c store.Cond) error {
	return s.deleteDoc(ctx, membersT, []string{project}, user, c)
}

func decodeMember(project string) func(doc) (*store.Member, error) {
	return func(d doc) (*store.Member, error) {
		m := &store.Member{Project: project}
		if err := decodeDoc(membersT, d, &m.Member); err != nil {
			return nil, err
		}
		m.Name, m.ETag, m.CreatedAt = d.name, d.etag, d.created
		return m, nil
	}
}

// PutServiceAccount creates or replaces a service account.
func (s *Store) PutServiceAccount(ctx context.Context, sa *store.ServiceAccount, c store.Cond) error {
	etag, created, err := s.putDoc(ctx, serviceAccountsT, []string{sa.Project}, sa.Name, sa.CreatedAt, &sa.ServiceAccount, c)
	if err != nil {
		return err
	}
	sa.ETag, sa.CreatedAt = etag, created
	return nil
}

// GetServiceAccount reads a service account.
func (s *Store) GetServiceAccount(ctx context.Context, project, name string) (*store.ServiceAccount, error) {
	d, err := s.getDoc(ctx, serviceAccountsT, []string{project}, name)
	if err != nil {
		return nil, err
	}
	return decodeServiceAccount(project)(d)
}

// ListServiceAccounts lists a project's service accounts by name.
func (s *Store) ListServiceAccounts(ctx context.Context, project string, pg store.Page) ([]*store.ServiceAccount, string, error) {
	docs, next, err := s.listDocs(ctx, serviceAccountsT, []string{project}, pg)
	return decodeAll(docs, next, err, decodeServiceAccount(project))
}

// DeleteServiceAccount deletes a service account and its tokens.
func (s *Store) DeleteServiceAccount(ctx context.Context, project, name string, c store.Cond) error {
	return s.deleteDoc(ctx, serviceAccountsT, []string{project}, name, c, func(ctx context.Context, tx *sql.Tx) error {
		_, err := tx.ExecContext(ctx, s.q(`DELETE FROM tokens WHERE principal = ?`),
			v1.PrincipalServiceAccount+":"+project+"/"+name)
		return err
	})
}

func decodeServiceAccount(project string) func(doc) (*store.ServiceAccount, error) {
	return func(d doc) (*store.ServiceAccount, error) {
		sa := &store.ServiceAccount{Project: project}
		if err := decodeDoc(serviceAccountsT, d, &sa.ServiceAccount); err != nil {
			return nil, err
		}
		sa.Name, sa.ETag, sa.CreatedAt = d.name, d.etag, d.created
		return sa, nil
	}
}

// PutGroupBinding creates or replaces a group's binding in a project.
func (s *Store) PutGroupBinding(ctx context.Context, b *store.GroupBinding, c store.Cond) error {
	etag, created, err := s.putDoc(ctx, groupBindingsT, []string{b.Project}, b.Name, b.CreatedAt, &b.GroupBinding, c)
	if err != nil {
		return err
	}
	b.ETag, b.CreatedAt = etag, created
	return nil
}

// GetGroupBinding reads a group's binding in a project.
func (s *Store) GetGroupBinding(ctx context.Context, project, group string) (*store.GroupBinding, error) {
	d, err := s.getDoc(ctx, groupBindingsT, []string{project}, group)
	if err != nil {
		return nil, err
	}
	return decodeGroupBinding(project)(d)
}

// ListGroupBindings lists a project's group bindings by group.
func (s *Store) ListGroupBindings(ctx context.Context, project string, pg store.Page) ([]*store.GroupBinding, string, error) {
	docs, next, err := s.listDocs(ctx, groupBindingsT, []string{project}, pg)
	return decodeAll(docs, next, err, decodeGroupBinding(project))
}

// BindingsOf lists the bindings of any of groups in project (every project
// when ""), by project then group.
func (s *Store) BindingsOf(ctx context.Context, project string, groups []string) ([]*store.GroupBinding, error) {
	if len(groups) == 0 {
		return nil, nil
	}
	args := make([]any, 0, len(groups)+1)
	for _, g := range groups {
		args = append(args, g)
	}
	where := "name IN (" + strings.TrimSuffix(strings.Repeat("?, ", len(groups)), ", ") + ")"
	if project != "" {
		where += " AND project = ?"
		args = append(args, project)
	}
	rows, err := s.read.QueryContext(ctx, s.q(`SELECT project, name, etag, created_at, data FROM group_bindings
		WHERE `+where+` ORDER BY project, name`), args...)
	if err != nil {
		return nil, fmt.Errorf("list the bindings of groups %v: %w", groups, err)
	}
	defer rows.Close()
	var out []*store.GroupBinding
	for rows.Next() {
		var d doc
		var project string
		var created int64
		if err := rows.Scan(&project, &d.name, &d.etag, &created, &d.data); err != nil {
			return nil, fmt.Errorf("list the bindings of groups %v: %w", groups, err)
		}
		d.created = fromNanos(created)
		b, err := decodeGroupBinding(project)(d)
		if err != nil {
			return nil, err
		}
		out = append(out, b)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("list the bindings of groups %v: %w", groups, err)
	}
	return out, nil
}

// DeleteGroupBinding removes a group's binding from a project.
func (s *Store) DeleteGroupBinding(ctx context.Context, project, group string, c store.Cond) error {
	return s.deleteDoc(ctx, groupBindingsT, []string{project}, group, c)
}

func decodeGroupBinding(project string) func(doc) (*store.GroupBinding, error) {
	return func(d doc) (*store.GroupBinding, error) {
		b := &store.GroupBinding{Project: project}
		if err := decodeDoc(groupBindingsT, d, &b.GroupBinding); err != nil {
			return nil, err
		}
		b.Name, b.ETag, b.CreatedAt = d.name, d.etag, d.created
		return b, nil
	}
}

const tokenColumns = `id, hash, principal, description, created_at, expires_at, last_used_at, revoked_at, claim_groups`

// CreateToken inserts a token.
func (s *Store) CreateToken(ctx context.Context, t *store.Token) error {
	if t.ID == "" || t.Hash == "" || t.Principal == "" {
		return fmt.Errorf("create token: id, hash and principal are required")
	}
	if t.CreatedAt.IsZero() {
		t.CreatedAt = s.now().UTC()
	}
	groups, err := json.Marshal(t.Groups)
	if err != nil {
		return fmt.Errorf("create token %s: %w", t.ID, err)
	}
	if t.Groups == nil {
		groups = []byte("[]")
	}
	_, err = s.write.ExecContext(ctx, s.q(`INSERT INTO tokens (`+tokenColumns+`) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)`),
		t.ID, t.Hash, t.Principal, t.Description, toNanos(t.CreatedAt), toNanos(t.ExpiresAt),
		toNanos(t.LastUsedAt), toNanos(t.RevokedAt), string(groups))
	if s.constraint(err) == Unique {
		err = store.ErrExists
	}
	if err != nil {
		return fmt.Errorf("create token %s: %w", t.ID, err)
	}
	return nil
}

func scanToken(r scanner) (*store.Token, error) {
	t := &store.Token{}
	var created, expires, used, revoked int64
	var groups string
	if err := r.Scan(&t.ID, &t.Hash, &t.Principal, &t.Description, &created, &expires, &used, &revoked, &groups); err != nil {
		return nil, err
	}
	if groups != "[]" {
		if err := json.Unmarshal([]byte(groups), &t.Groups); err != nil {
			return nil, fmt.Errorf("decode the groups of token %s: %w", t.ID, err)
		}
	}
	t.CreatedAt, t.ExpiresAt, t.LastUsedAt, t.RevokedAt = fromNanos(created), fromNanos(expires), fromNanos(used), fromNanos(revoked)
	return t, nil
}

// TokenByHash finds a token by the hash of its value.
func (s *Store) TokenByHash(ctx context.Context, hash string) (*store.Token, error) {
	t, err := scanToken(s.read.QueryRowContext(ctx, s.q(`SELECT `+tokenColumns+` FROM tokens WHERE hash = ?`), hash))
	if errors.Is(err, sql.ErrNoRows) {
		return nil, store.ErrNotFound
	}
	if err != nil {
		return nil, fmt.Errorf("find token: %w", err)
	}
	return t, nil
}

// ListTokens lists a principal's tokens by id.
func (s *Store) ListTokens(ctx context.Context, principal string, pg store.Page) ([]*store.Token, string, error) {
	wrap := func(err error) error { return fmt.Errorf("list tokens of %s: %w", principal, err) }
	after, err := decodeToken(pg.Token)
	if err != nil {
		return nil, "", wrap(err)
	}
	out, next, err := queryPage(ctx, s, `SELECT `+tokenColumns+` FROM tokens
		WHERE principal = ? AND id > ? ORDER BY id LIMIT ?`, []any{principal, after}, limitOf(pg),
		scanToken, func(t *store.Token) string { return t.ID })
	if err != nil {
		return nil, "", wrap(err)
	}
	return out, next, nil
}

// RevokeToken revokes a principal's token.
func (s *Store) RevokeToken(ctx context.Context, principal, id string, at time.Time) error {
	res, err := s.write.ExecContext(ctx, s.q(`UPDATE tokens
		SET revoked_at = CASE WHEN revoked_at = 0 THEN ? ELSE revoked_at END
		WHERE principal = ? AND id = ?`), toNanos(at), principal, id)
	if err == nil {
		var n int64
		if n, err = res.RowsAffected(); err == nil && n == 0 {
			err = store.ErrNotFound
		}
	}
	if err != nil {
		return fmt.Errorf("revoke token %s of %s: %w", id, principal, err)
	}
	return nil
}

// TouchToken records the time a token was last used.
func (s *Store) TouchToken(ctx context.Context, id string, at time.Time) error {
	_, err := s.write.ExecContext(ctx, s.q(`UPDATE tokens SET last_used_at = ? WHERE id = ? AND last_used_at < ?`),
		toNanos(at), id, toNanos(at))
	if err != nil {
		return fmt.Errorf("touch token %s: %w", id, err)
	}
	return nil
}

// AppendAudit adds an audit entry.
func (s *Store) AppendAudit(ctx context.Context, e *v1.AuditEntry) error {
	var id int64
	err := s.writeOne(ctx, func(ctx context.Context, q execer) (err error) {
		id, err = s.insertAudit(ctx, q, e)
		return err
	})
	if err != nil {
		return fmt.Errorf("append audit entry: %w", err)
	}
	e.ID = strconv.FormatInt(id, 10)
	return nil
}

// insertAudit inserts e, its time set to now when zero, and returns its
// id; e.ID is the caller's to set once the write committed.
func (s *Store) insertAudit(ctx context.Context, q rowQuerier, e *v1.AuditEntry) (int64, error) {
	if e.Time.IsZero() {
		e.Time = s.now().UTC()
	}
	e.ID = ""
	data, err := json.Marshal(e)
	if err != nil {
		return 0, err
	}
	var id int64
	err = q.QueryRowContext(ctx, s.q(`INSERT INTO audit (time, actor, action, project, result, data)
		VALUES (?, ?, ?, ?, ?, ?) RETURNING id`),
		toNanos(e.Time), e.Actor, e.Action, e.Project, e.Result, string(data)).Scan(&id)
	return id, err
}

// ListAudit lists audit entries newest first.
func (s *Store) ListAudit(ctx context.Context, f store.AuditFilter, pg store.Page) ([]*v1.AuditEntry, string, error) {
	wrap := func(err error) error { return fmt.Errorf("list audit entries: %w", err) }
	before, err := decodeIDToken(pg.Token)
	if err != nil {
		return nil, "", wrap(err)
	}
	if before == 0 {
		before = math.MaxInt64
	}
	where := []string{"id < ?"}
	args := []any{before}
	eq := func(col, v string) {
		if v != "" {
			where = append(where, col+" = ?")
			args = append(args, v)
		}
	}
	eq("project", f.Project)
	eq("actor", f.Actor)
	eq("result", f.Result)
	if f.Action != "" {
		// LIKE's wildcards in the filter match themselves.
		esc := strings.NewReplacer(`\`, `\\`, `%`, `\%`, `_`, `\_`).Replace(f.Action)
		where = append(where, `LOWER(action) LIKE LOWER(?) ESCAPE '\'`)
		args = append(args, "%"+esc+"%")
	}
	if !f.Since.IsZero() {
		where = append(where, "time >= ?")
		args = append(args, toNanos(f.Since))
	}
	if !f.Until.IsZero() {
		where = append(where, "time < ?")
		args = append(args, toNanos(f.Until))
	}
	scan := func(r scanner) (*v1.AuditEntry, error) {
		var id, t int64
		var data string
		if err := r.Scan(&id, &t, &data); err != nil {
			return nil, err
		}
		e := &v1.AuditEntry{}
		if err := json.Unmarshal([]byte(data), e); err != nil {
			return nil, fmt.Errorf("decode audit entry %d: %w", id, err)
		}
		e.ID, e.Time = strconv.FormatInt(id, 10), fromNanos(t)
		return e, nil
	}
	out, next, err := queryPage(ctx, s, `SELECT id, time, data FROM audit WHERE `+strings.Join(where, " AND ")+
		` ORDER BY id DESC LIMIT ?`, args, limitOf(pg), scan, func(e *v1.AuditEntry) string { return e.ID })
	if err != nil {
		return nil, "", wrap(err)
	}
	return out, next, nil
}
