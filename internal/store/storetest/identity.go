package storetest

import (
	"errors"
	"time"

	"github.com/google/go-cmp/cmp"

	v1 "kiln.dev/kiln/api/v1"
	"kiln.dev/kiln/internal/store"
)

func testTokens(e *env) {
	tok := &store.Token{ID: "tok1", Hash: "hash1", Principal: "user:alice", Description: "laptop",
		ExpiresAt: epoch.Add(24 * time.Hour), Groups: []string{"eng", "ops/on-call"}}
	if err := e.s.CreateToken(e.ctx, tok); err != nil {
		e.t.Fatalf("CreateToken: %v", err)
	}
	if !tok.CreatedAt.Equal(epoch) {
		e.t.Errorf("CreatedAt = %v, want the store's clock %v", tok.CreatedAt, epoch)
	}
	for _, dup := range []*store.Token{
		{ID: "tok1", Hash: "other", Principal: "user:alice"},
		{ID: "tok2", Hash: "hash1", Principal: "user:bob"},
	} {
		if err := e.s.CreateToken(e.ctx, dup); !errors.Is(err, store.ErrExists) {
			e.t.Errorf("CreateToken(id %s, hash %s) = %v, want ErrExists", dup.ID, dup.Hash, err)
		}
	}
	got, err := e.s.TokenByHash(e.ctx, "hash1")
	if err != nil {
		e.t.Fatalf("TokenByHash: %v", err)
	}
	if diff := cmp.Diff(tok, got); diff != "" {
		e.t.Errorf("TokenByHash (-want +got):\n%s", diff)
	}
	if _, err := e.s.TokenByHash(e.ctx, "nope"); !errors.Is(err, store.ErrNotFound) {
		e.t.Errorf("TokenByHash(unknown) = %v, want ErrNotFound", err)
	}

	used := epoch.Add(time.Minute)
	if err := e.s.TouchToken(e.ctx, "tok1", used); err != nil {
		e.t.Fatalf("TouchToken: %v", err)
	}
	if err := e.s.TouchToken(e.ctx, "tok1", epoch); err != nil { // an older use never goes back
		e.t.Fatalf("TouchToken: %v", err)
	}
	if got, _ := e.s.TokenByHash(e.ctx, "hash1"); !got.LastUsedAt.Equal(used) {
		e.t.Errorf("LastUsedAt = %v, want %v", got.LastUsedAt, used)
	}

	if err := e.s.RevokeToken(e.ctx, "user:bob", "tok1", used); !errors.Is(err, store.ErrNotFound) {
		e.t.Errorf("RevokeToken by another principal = %v, want ErrNotFound", err)
	}
	if got, _ := e.s.TokenByHash(e.ctx, "hash1"); !got.RevokedAt.IsZero() {
		e.t.Fatalf("another principal's revoke took effect")
	}
	if err := e.s.RevokeToken(e.ctx, "user:alice", "tok1", used); err != nil {
		e.t.Fatalf("RevokeToken: %v", err)
	}
	if err := e.s.RevokeToken(e.ctx, "user:alice", "tok1", used.Add(time.Hour)); err != nil {
		e.t.Fatalf("RevokeToken again: %v", err)
	}
	if got, _ := e.s.TokenByHash(e.ctx, "hash1"); !got.RevokedAt.Equal(used) {
		e.t.Errorf("RevokedAt = %v, want the first revocation %v", got.RevokedAt, used)
	}

	for _, id := range []string{"tok3", "tok2"} {
		if err := e.s.CreateToken(e.ctx, &store.Token{ID: id, Hash: "h-" + id, Principal: "user:alice", ExpiresAt: epoch}); err != nil {
			e.t.Fatal(err)
		}
	}
	if err := e.s.CreateToken(e.ctx, &store.Token{ID: "tok0", Hash: "h-bob", Principal: "user:bob", ExpiresAt: epoch}); err != nil {
		e.t.Fatal(err)
	}
	var ids []string
	page := store.Page{Limit: 2}
	for {
		ts, next, err := e.s.ListTokens(e.ctx, "user:alice", page)
		if err != nil {
			e.t.Fatalf("ListTokens: %v", err)
		}
		for _, t := range ts {
			ids = append(ids, t.ID)
		}
		if next == "" {
			break
		}
		page.Token = next
	}
	if diff := cmp.Diff([]string{"tok1", "tok2", "tok3"}, ids); diff != "" {
		e.t.Errorf("ListTokens (-want +got):\n%s", diff)
	}
}

// testGroupBindings: a group's bindings are found by group across
// projects, and go with their project.
func testGroupBindings(e *env) {
	e.project("p")
	e.project("q")
	bind := func(project, group, role string) {
		e.t.Helper()
		b := &store.GroupBinding{Project: project, GroupBinding: v1.GroupBinding{Name: group, Role: role}}
		if err := e.s.PutGroupBinding(e.ctx, b, store.Cond{IfNoneMatch: "*"}); err != nil {
			e.t.Fatalf("PutGroupBinding %s/%s: %v", project, group, err)
		}
	}
	bind("q", "eng", v1.RoleViewer)
	bind("p", "eng", v1.RoleOperator)
	bind("p", "ops/on-call", v1.RoleAdmin)
	bind("p", "sales", v1.RoleViewer)
	b, err := e.s.GetGroupBinding(e.ctx, "p", "ops/on-call")
	if err != nil || b.Role != v1.RoleAdmin || b.ETag == "" {
		e.t.Fatalf("GetGroupBinding = %+v, %v; want admin with an etag", b, err)
	}
	bindings := func(project string, groups ...string) []string {
		e.t.Helper()
		bs, err := e.s.BindingsOf(e.ctx, project, groups)
		if err != nil {
			e.t.Fatalf("BindingsOf(%v): %v", groups, err)
		}
		var out []string
		for _, b := range bs {
			out = append(out, b.Project+"/"+b.Name+"="+b.Role)
		}
		return out
	}
	if diff := cmp.Diff([]string{"p/eng=operator", "p/ops/on-call=admin", "q/eng=viewer"},
		bindings("", "ops/on-call", "eng", "nobody")); diff != "" {
		e.t.Errorf("BindingsOf (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]string{"q/eng=viewer"}, bindings("q", "ops/on-call", "eng")); diff != "" {
		e.t.Errorf("BindingsOf in q (-want +got):\n%s", diff)
	}
	if got := bindings(""); got != nil {
		e.t.Errorf("BindingsOf() = %v, want none", got)
	}
	list, _, err := e.s.ListGroupBindings(e.ctx, "p", store.Page{})
	if err != nil || len(list) != 3 {
		e.t.Errorf("ListGroupBindings(p) = %d bindings, %v; want 3", len(list), err)
	}
	if err := e.s.DeleteGroupBinding(e.ctx, "p", "sales", store.Cond{}); err != nil {
		e.t.Fatalf("DeleteGroupBinding: %v", err)
	}
	if _, err := e.s.GetGroupBinding(e.ctx, "p", "sales"); !errors.Is(err, store.ErrNotFound) {
		e.t.Errorf("a deleted binding: %v, want ErrNotFound", err)
	}
	if err := e.s.DeleteProject(e.ctx, "q", store.Cond{}); err != nil {
		e.t.Fatal(err)
	}
	if diff := cmp.Diff([]string{"p/eng=operator"}, bindings("", "eng")); diff != "" {
		e.t.Errorf("BindingsOf after project q's deletion (-want +got):\n%s", diff)
	}
}

// testIdentityCascades: deleting a user takes its memberships and tokens
// with it; deleting a service account its tokens; deleting a project its
// members and service accounts.
func testIdentityCascades(e *env) {
	e.project("p")
	e.project("q")
	put := func(err error) {
		e.t.Helper()
		if err != nil {
			e.t.Fatal(err)
		}
	}
	put(e.s.PutUser(e.ctx, &v1.User{Name: "alice"}, store.Cond{}))
	for _, p := range []string{"p", "q"} {
		put(e.s.PutMember(e.ctx, &store.Member{Project: p, Member: v1.Member{Name: "alice", Role: v1.RoleViewer}}, store.Cond{}))
	}
	put(e.s.PutMember(e.ctx, &store.Member{Project: "p", Member: v1.Member{Name: "bob", Role: v1.RoleAdmin}}, store.Cond{}))
	put(e.s.PutServiceAccount(e.ctx, &store.ServiceAccount{Project: "p", ServiceAccount: v1.ServiceAccount{Name: "ci", Role: v1.RoleOperator}}, store.Cond{}))
	put(e.s.CreateToken(e.ctx, &store.Token{ID: "a", Hash: "ha", Principal: "user:alice", ExpiresAt: epoch}))
	put(e.s.CreateToken(e.ctx, &store.Token{ID: "ci", Hash: "hci", Principal: "serviceaccount:p/ci", ExpiresAt: epoch}))

	ms, err := e.s.Memberships(e.ctx, "alice")
	if err != nil {
		e.t.Fatalf("Memberships: %v", err)
	}
	var projects []string
	for _, m := range ms {
		projects = append(projects, m.Project+"="+m.Role)
	}
	if diff := cmp.Diff([]string{"p=viewer", "q=viewer"}, projects); diff != "" {
		e.t.Errorf("Memberships (-want +got):\n%s", diff)
	}

	put(e.s.DeleteUser(e.ctx, "alice", store.Cond{}))
	if ms, _ := e.s.Memberships(e.ctx, "alice"); len(ms) != 0 {
		e.t.Errorf("memberships of a deleted user remain: %v", ms)
	}
	if _, err := e.s.TokenByHash(e.ctx, "ha"); !errors.Is(err, store.ErrNotFound) {
		e.t.Errorf("token of a deleted user: %v, want ErrNotFound", err)
	}
	if _, err := e.s.GetMember(e.ctx, "p", "bob"); err != nil {
		e.t.Errorf("another user's membership went too: %v", err)
	}

	put(e.s.DeleteServiceAccount(e.ctx, "p", "ci", store.Cond{}))
	if _, err := e.s.TokenByHash(e.ctx, "hci"); !errors.Is(err, store.ErrNotFound) {
		e.t.Errorf("token of a deleted service account: %v, want ErrNotFound", err)
	}

	put(e.s.DeleteProject(e.ctx, "p", store.Cond{}))
	if _, err := e.s.GetMember(e.ctx, "p", "bob"); !errors.Is(err, store.ErrNotFound) {
		e.t.Errorf("member of a deleted project: %v, want ErrNotFound", err)
	}
}

func testAudit(e *env) {
	entries := []v1.AuditEntry{
		{Actor: "user:alice", Action: "PUT /v1/projects/{project}/clusters/{cluster}", Project: "p", Result: v1.AuditSuccess, Status: 201},
		{Actor: "user:bob", Action: "DELETE /v1/projects/{project}/clusters/{cluster}", Project: "q", Result: v1.AuditDenied, Status: 403},
		{Actor: "user:alice", Action: "GET /v1/projects/{project}/clusters/{cluster}/kubeconfig", Project: "p", Result: v1.AuditSuccess, Status: 200},
		{Actor: "user:alice", Action: "PUT /v1/users/{user}", Result: v1.AuditFailed, Status: 400, Code: "InvalidParameter"},
	}
	for i := range entries {
		e.clock.Advance(time.Second)
		if err := e.s.AppendAudit(e.ctx, &entries[i]); err != nil {
			e.t.Fatalf("AppendAudit: %v", err)
		}
		if entries[i].ID == "" || !entries[i].Time.Equal(e.clock.Now()) {
			e.t.Errorf("AppendAudit set id %q time %v; want an id and the store's clock %v", entries[i].ID, entries[i].Time, e.clock.Now())
		}
	}
	list := func(f store.AuditFilter) []int {
		e.t.Helper()
		var out []int
		page := store.Page{Limit: 1}
		for {
			es, next, err := e.s.ListAudit(e.ctx, f, page)
			if err != nil {
				e.t.Fatalf("ListAudit(%+v): %v", f, err)
			}
			for _, got := range es {
				for i := range entries {
					if entries[i].ID == got.ID {
						if diff := cmp.Diff(entries[i], *got); diff != "" {
							e.t.Errorf("entry %s (-want +got):\n%s", got.ID, diff)
						}
						out = append(out, i)
					}
				}
			}
			if next == "" {
				return out
			}
			page.Token = next
		}
	}
	for _, tc := range []struct {
		f    store.AuditFilter
		want []int
	}{
		{store.AuditFilter{}, []int{3, 2, 1, 0}},
		{store.AuditFilter{Project: "p"}, []int{2, 0}},
		{store.AuditFilter{Actor: "user:alice"}, []int{3, 2, 0}},
		{store.AuditFilter{Action: "kubeconfig"}, []int{2}},
		{store.AuditFilter{Action: "delete"}, []int{1}},
		{store.AuditFilter{Action: "%"}, nil},
		{store.AuditFilter{Result: v1.AuditDenied}, []int{1}},
		{store.AuditFilter{Since: entries[1].Time, Until: entries[3].Time}, []int{2, 1}},
	} {
		if diff := cmp.Diff(tc.want, list(tc.f)); diff != "" {
			e.t.Errorf("ListAudit(%+v) entries (-want +got):\n%s", tc.f, diff)
		}
	}
}
