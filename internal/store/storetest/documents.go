package storetest

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	v1 "kiln.dev/kiln/api/v1"
	"kiln.dev/kiln/internal/store"
)

// docKind drives the same etag and paging tests through every plain
// resource: projects, cloud accounts, project secrets, profiles and nodes. value is a field
// the test writes and reads back to see the content round-trip.
type docKind struct {
	name  string
	setup func(e *env) // creates the parents
	put   func(ctx context.Context, s store.Store, name, value string, c store.Cond) (string, error)
	get   func(ctx context.Context, s store.Store, name string) (etag, value string, err error)
	del   func(ctx context.Context, s store.Store, name string, c store.Cond) error
	list  func(ctx context.Context, s store.Store, pg store.Page) ([]string, string, error)
}

var nodeKey = store.Key{Project: "p", Name: "c"}

func docKinds() []docKind {
	return []docKind{
		{
			name:  "project",
			setup: func(*env) {},
			put: func(ctx context.Context, s store.Store, name, value string, c store.Cond) (string, error) {
				p := &v1.Project{Name: name, DisplayName: value}
				err := s.PutProject(ctx, p, c)
				return p.ETag, err
			},
			get: func(ctx context.Context, s store.Store, name string) (string, string, error) {
				p, err := s.GetProject(ctx, name)
				if err != nil {
					return "", "", err
				}
				return p.ETag, p.DisplayName, nil
			},
			del: func(ctx context.Context, s store.Store, name string, c store.Cond) error {
				return s.DeleteProject(ctx, name, c)
			},
			list: func(ctx context.Context, s store.Store, pg store.Page) ([]string, string, error) {
				ps, next, err := s.ListProjects(ctx, pg)
				var names []string
				for _, p := range ps {
					names = append(names, p.Name)
				}
				return names, next, err
			},
		},
		{
			name:  "cloud account",
			setup: func(e *env) { e.project("p") },
			put: func(ctx context.Context, s store.Store, name, value string, c store.Cond) (string, error) {
				a := &store.CloudAccount{Project: "p", CloudAccount: v1.CloudAccount{Name: name, Provider: value}}
				err := s.PutCloudAccount(ctx, a, c)
				return a.ETag, err
			},
			get: func(ctx context.Context, s store.Store, name string) (string, string, error) {
				a, err := s.GetCloudAccount(ctx, "p", name)
				if err != nil {
					return "", "", err
				}
				return a.ETag, a.Provider, nil
			},
			del: func(ctx context.Context, s store.Store, name string, c store.Cond) error {
				return s.DeleteCloudAccount(ctx, "p", name, c)
			},
			list: func(ctx context.Context, s store.Store, pg store.Page) ([]string, string, error) {
				as, next, err := s.ListCloudAccounts(ctx, "p", pg)
				var names []string
				for _, a := range as {
					names = append(names, a.Name)
				}
				return names, next, err
			},
		},
		{
			name:  "project secret",
			setup: func(e *env) { e.project("p") },
			put: func(ctx context.Context, s store.Store, name, value string, c store.Cond) (string, error) {
				ps := &store.ProjectSecret{Project: "p", Secret: v1.Secret{Name: name, Data: map[string]string{"k": value}}}
				err := s.PutProjectSecret(ctx, ps, c)
				return ps.ETag, err
			},
			get: func(ctx context.Context, s store.Store, name string) (string, string, error) {
				ps, err := s.GetProjectSecret(ctx, "p", name)
				if err != nil {
					return "", "", err
				}
				return ps.ETag, ps.Data["k"], nil
			},
			del: func(ctx context.Context, s store.Store, name string, c store.Cond) error {
				return s.DeleteProjectSecret(ctx, "p", name, c)
			},
			list: func(ctx context.Context, s store.Store, pg store.Page) ([]string, string, error) {
				pss, next, err := s.ListProjectSecrets(ctx, "p", pg)
				var names []string
				for _, ps := range pss {
					names = append(names, ps.Name)
				}
				return names, next, err
			},
		},
		{
			name:  "profile",
			setup: func(e *env) { e.project("p") },
			put: func(ctx context.Context, s store.Store, name, value string, c store.Cond) (string, error) {
				p := &store.Profile{Project: "p", Profile: v1.Profile{Name: name, KubernetesVersion: value}}
				err := s.PutProfile(ctx, p, c)
				return p.ETag, err
			},
			get: func(ctx context.Context, s store.Store, name string) (string, string, error) {
				p, err := s.GetProfile(ctx, "p", name)
				if err != nil {
					return "", "", err
				}
				return p.ETag, p.KubernetesVersion, nil
			},
			del: func(ctx context.Context, s store.Store, name string, c store.Cond) error {
				return s.DeleteProfile(ctx, "p", name, c)
			},
			list: func(ctx context.Context, s store.Store, pg store.Page) ([]string, string, error) {
				ps, next, err := s.ListProfiles(ctx, "p", pg)
				var names []string
				for _, p := range ps {
					names = append(names, p.Name)
				}
				return names, next, err
			},
		},
		{
			name:  "user",
			setup: func(*env) {},
			put: func(ctx context.Context, s store.Store, name, value string, c store.Cond) (string, error) {
				u := &v1.User{Name: name, DisplayName: value}
				err := s.PutUser(ctx, u, c)
				return u.ETag, err
			},
			get: func(ctx context.Context, s store.Store, name string) (string, string, error) {
				u, err := s.GetUser(ctx, name)
				if err != nil {
					return "", "", err
				}
				return u.ETag, u.DisplayName, nil
			},
			del: func(ctx context.Context, s store.Store, name string, c store.Cond) error {
				return s.DeleteUser(ctx, name, c)
			},
			list: func(ctx context.Context, s store.Store, pg store.Page) ([]string, string, error) {
				us, next, err := s.ListUsers(ctx, pg)
				var names []string
				for _, u := range us {
					names = append(names, u.Name)
				}
				return names, next, err
			},
		},
		{
			name:  "member",
			setup: func(e *env) { e.project("p") },
			put: func(ctx context.Context, s store.Store, name, value string, c store.Cond) (string, error) {
				m := &store.Member{Project: "p", Member: v1.Member{Name: name, Role: value}}
				err := s.PutMember(ctx, m, c)
				return m.ETag, err
			},
			get: func(ctx context.Context, s store.Store, name string) (string, string, error) {
				m, err := s.GetMember(ctx, "p", name)
				if err != nil {
					return "", "", err
				}
				return m.ETag, m.Role, nil
			},
			del: func(ctx context.Context, s store.Store, name string, c store.Cond) error {
				return s.DeleteMember(ctx, "p", name, c)
			},
			list: func(ctx context.Context, s store.Store, pg store.Page) ([]string, string, error) {
				ms, next, err := s.ListMembers(ctx, "p", pg)
				var names []string
				for _, m := range ms {
					names = append(names, m.Name)
				}
				return names, next, err
			},
		},
		{
			name:  "service account",
			setup: func(e *env) { e.project("p") },
			put: func(ctx context.Context, s store.Store, name, value string, c store.Cond) (string, error) {
				sa := &store.ServiceAccount{Project: "p", ServiceAccount: v1.ServiceAccount{Name: name, Role: value}}
				err := s.PutServiceAccount(ctx, sa, c)
				return sa.ETag, err
			},
			get: func(ctx context.Context, s store.Store, name string) (string, string, error) {
				sa, err := s.GetServiceAccount(ctx, "p", name)
				if err != nil {
					return "", "", err
				}
				return sa.ETag, sa.Role, nil
			},
			del: func(ctx context.Context, s store.Store, name string, c store.Cond) error {
				return s.DeleteServiceAccount(ctx, "p", name, c)
			},
			list: func(ctx context.Context, s store.Store, pg store.Page) ([]string, string, error) {
				sas, next, err := s.ListServiceAccounts(ctx, "p", pg)
				var names []string
				for _, sa := range sas {
					names = append(names, sa.Name)
				}
				return names, next, err
			},
		},
		{
			name: "node",
			setup: func(e *env) {
				e.project("p")
				e.begin("p", "c", v1.KindCreate, v1.StateCreating)
			},
			put: func(ctx context.Context, s store.Store, name, value string, c store.Cond) (string, error) {
				n := &store.Node{Project: "p", Node: v1.Node{Name: name, Cluster: "c", Message: value}}
				err := s.PutNode(ctx, n, c)
				return n.ETag, err
			},
			get: func(ctx context.Context, s store.Store, name string) (string, string, error) {
				n, err := s.GetNode(ctx, nodeKey, name)
				if err != nil {
					return "", "", err
				}
				return n.ETag, n.Message, nil
			},
			del: func(ctx context.Context, s store.Store, name string, c store.Cond) error {
				return s.DeleteNode(ctx, nodeKey, name, c)
			},
			list: func(ctx context.Context, s store.Store, pg store.Page) ([]string, string, error) {
				ns, next, err := s.ListNodes(ctx, nodeKey, pg)
				var names []string
				for _, n := range ns {
					names = append(names, n.Name)
				}
				return names, next, err
			},
		},
	}
}

// testDocuments: create, read, replace and delete every plain resource,
// with IfMatch and IfNoneMatch.
func testDocuments(e *env) {
	for _, k := range docKinds() {
		e.t.Run(k.name, func(t *testing.T) {
			e := &env{t: t, ctx: e.ctx, s: e.s, clock: e.clock}
			k.setup(e)
			ctx, s := e.ctx, e.s
			check := func(what string, err, want error) { t.Helper(); wantErr(t, k.name+": "+what, err, want) }

			_, _, err := k.get(ctx, s, "a")
			check("get missing", err, store.ErrNotFound)
			_, err = k.put(ctx, s, "a", "v0", store.Cond{IfMatch: "*"})
			check("put IfMatch * on missing", err, store.ErrPreconditionFailed)
			_, err = k.put(ctx, s, "a", "v0", store.Cond{IfMatch: "nope"})
			check("put IfMatch etag on missing", err, store.ErrPreconditionFailed)

			etag1, err := k.put(ctx, s, "a", "v1", store.Cond{IfNoneMatch: "*"})
			check("create", err, nil)
			if etag1 == "" {
				t.Fatalf("%s: create set no etag", k.name)
			}
			got, value, err := k.get(ctx, s, "a")
			check("get", err, nil)
			if got != etag1 || value != "v1" {
				t.Fatalf("%s: get = etag %q value %q, want %q %q", k.name, got, value, etag1, "v1")
			}

			_, err = k.put(ctx, s, "a", "v2", store.Cond{IfNoneMatch: "*"})
			check("create existing", err, store.ErrExists)
			_, err = k.put(ctx, s, "a", "v2", store.Cond{IfMatch: etag1 + "x"})
			check("replace with stale etag", err, store.ErrPreconditionFailed)
			etag2, err := k.put(ctx, s, "a", "v2", store.Cond{IfMatch: etag1})
			check("replace with etag", err, nil)
			if etag2 == etag1 || etag2 == "" {
				t.Fatalf("%s: replace kept etag %q (new %q)", k.name, etag1, etag2)
			}
			etag3, err := k.put(ctx, s, "a", "v3", store.Cond{IfMatch: "*"})
			check("replace with *", err, nil)
			etag4, err := k.put(ctx, s, "a", "v4", store.Cond{})
			check("replace unconditionally", err, nil)
			if etag3 == etag2 || etag4 == etag3 {
				t.Fatalf("%s: etag did not change on every write: %q %q %q", k.name, etag2, etag3, etag4)
			}
			if _, value, _ := k.get(ctx, s, "a"); value != "v4" {
				t.Fatalf("%s: value %q after replace, want v4", k.name, value)
			}

			check("delete with stale etag", k.del(ctx, s, "a", store.Cond{IfMatch: etag1}), store.ErrPreconditionFailed)
			check("delete with etag", k.del(ctx, s, "a", store.Cond{IfMatch: etag4}), nil)
			_, _, err = k.get(ctx, s, "a")
			check("get deleted", err, store.ErrNotFound)
			check("delete missing", k.del(ctx, s, "a", store.Cond{}), store.ErrNotFound)
			check("delete missing IfMatch *", k.del(ctx, s, "a", store.Cond{IfMatch: "*"}), store.ErrNotFound)

			// Created again, the record gets an etag it never had.
			etag5, err := k.put(ctx, s, "a", "v5", store.Cond{})
			check("create again", err, nil)
			for _, old := range []string{etag1, etag2, etag3, etag4} {
				if etag5 == old {
					t.Fatalf("%s: recreated record reuses etag %q", k.name, old)
				}
			}
			check("delete unconditionally", k.del(ctx, s, "a", store.Cond{}), nil)
		})
	}
}

// testDocumentRoundTrip: every field written is read back, and the store
// sets etag and created time.
func testDocumentRoundTrip(e *env) {
	t, ctx, s := e.t, e.ctx, e.s
	e.project("p")
	created := time.Date(2029, 5, 6, 7, 8, 9, 10, time.UTC)

	p := &v1.Project{Name: "q", ID: "/v1/projects/q", DisplayName: "Q team"}
	wantErr(t, "PutProject", s.PutProject(ctx, p, store.Cond{}), nil)
	if !p.CreatedAt.Equal(e.clock.Now()) {
		t.Errorf("project CreatedAt = %v, want the store clock %v", p.CreatedAt, e.clock.Now())
	}
	gotP, err := s.GetProject(ctx, "q")
	wantErr(t, "GetProject", err, nil)
	diff(t, "project", p, gotP)

	// Replacing keeps the created time.
	e.clock.Advance(time.Hour)
	p2 := &v1.Project{Name: "q", ID: "/v1/projects/q", DisplayName: "Q"}
	wantErr(t, "PutProject replace", s.PutProject(ctx, p2, store.Cond{}), nil)
	if !p2.CreatedAt.Equal(p.CreatedAt) {
		t.Errorf("replaced project CreatedAt = %v, want %v", p2.CreatedAt, p.CreatedAt)
	}

	a := &store.CloudAccount{Project: "p", CloudAccount: v1.CloudAccount{
		Name: "acct", ID: "/v1/projects/p/cloudaccounts/acct", Provider: "edge",
		Credentials: map[string]string{"token": "s3cret"}, CreatedAt: created,
	}}
	wantErr(t, "PutCloudAccount", s.PutCloudAccount(ctx, a, store.Cond{}), nil)
	gotA, err := s.GetCloudAccount(ctx, "p", "acct")
	wantErr(t, "GetCloudAccount", err, nil)
	diff(t, "cloud account", a, gotA)
	if !gotA.CreatedAt.Equal(created) {
		t.Errorf("cloud account CreatedAt = %v, want the given %v", gotA.CreatedAt, created)
	}

	ps := &store.ProjectSecret{Project: "p", Secret: v1.Secret{
		Name: "db", ID: "/v1/projects/p/secrets/db",
		Data:      map[string]string{"password": "hunter22", "tls.crt": "-----BEGIN CERTIFICATE-----\nMII\x00é\n", "empty": ""},
		CreatedAt: created,
	}}
	wantErr(t, "PutProjectSecret", s.PutProjectSecret(ctx, ps, store.Cond{}), nil)
	gotPS, err := s.GetProjectSecret(ctx, "p", "db")
	wantErr(t, "GetProjectSecret", err, nil)
	diff(t, "project secret", ps, gotPS)
	if !gotPS.CreatedAt.Equal(created) {
		t.Errorf("project secret CreatedAt = %v, want the given %v", gotPS.CreatedAt, created)
	}
	// Replacing replaces the data, all of it, and keeps the created time.
	ps2 := &store.ProjectSecret{Project: "p", Secret: v1.Secret{Name: "db", Data: map[string]string{"token": "t"}}}
	wantErr(t, "PutProjectSecret replace", s.PutProjectSecret(ctx, ps2, store.Cond{IfMatch: ps.ETag}), nil)
	gotPS, err = s.GetProjectSecret(ctx, "p", "db")
	wantErr(t, "GetProjectSecret after replace", err, nil)
	diff(t, "replaced project secret data", map[string]string{"token": "t"}, gotPS.Data)
	if !gotPS.CreatedAt.Equal(created) || gotPS.ETag == ps.ETag {
		t.Errorf("replaced project secret: CreatedAt %v (want %v), etag %q (was %q)", gotPS.CreatedAt, created, gotPS.ETag, ps.ETag)
	}

	pr := &store.Profile{Project: "p", Profile: v1.Profile{
		Name: "web", ID: "/v1/projects/p/profiles/web", Version: 3, KubernetesVersion: "v1.36.3", CNI: "cilium",
		Packs: []v1.Pack{{Name: "ingress", Version: "1.2.3", Values: map[string]any{"replicas": 2.0, "tls": true}}},
	}}
	wantErr(t, "PutProfile", s.PutProfile(ctx, pr, store.Cond{}), nil)
	gotPr, err := s.GetProfile(ctx, "p", "web")
	wantErr(t, "GetProfile", err, nil)
	diff(t, "profile", pr, gotPr)

	e.begin("p", "c", v1.KindCreate, v1.StateCreating)
	hb := created.Add(time.Minute)
	n := &store.Node{Project: "p", Node: v1.Node{
		Name: "n1", ID: "/v1/projects/p/clusters/c/nodes/n1", Cluster: "c", Role: v1.RoleWorker, Pool: "default",
		State: v1.NodeDiscovered, MachineID: "m-1", Address: "10.0.0.5",
		Facts: &v1.NodeFacts{OS: "linux", Kernel: "6.1", Arch: "amd64", CPUs: 4, MemoryMiB: 8192, Hostname: "n1",
			Interfaces: []v1.Interface{{Name: "eth0", Addresses: []string{"10.0.0.5/24"}}},
			Disks:      []v1.Disk{{Path: "/dev/vda", SizeBytes: 1 << 34}}},
		Prechecks:     []v1.PrecheckResult{{Name: "swap", Result: "pass"}},
		Message:       "registered",
		LastHeartbeat: &hb,
	}}
	wantErr(t, "PutNode", s.PutNode(ctx, n, store.Cond{}), nil)
	gotN, err := s.GetNode(ctx, nodeKey, "n1")
	wantErr(t, "GetNode", err, nil)
	diff(t, "node", n, gotN)
}

// testDocumentPaging: lists are ordered by name, pages follow next tokens,
// the last page's token is empty, and limits default and cap.
func testDocumentPaging(e *env) {
	for _, k := range docKinds() {
		e.t.Run(k.name, func(t *testing.T) {
			e := &env{t: t, ctx: e.ctx, s: e.s, clock: e.clock}
			k.setup(e)
			// Names inserted out of order, with bytes that a locale-aware
			// collation would order differently ("B" < "a" in byte order).
			for _, name := range []string{"m", "B", "a", "z-1", "z_0", "a0", "Z"} {
				if _, err := k.put(e.ctx, e.s, name, "", store.Cond{}); err != nil {
					t.Fatalf("put %s: %v", name, err)
				}
			}
			want := []string{"B", "Z", "a", "a0", "m", "z-1", "z_0"}
			got := pageAll(t, 3, func(pg store.Page) ([]string, string, error) { return k.list(e.ctx, e.s, pg) })
			diff(t, k.name+" names", want, got)
		})
	}

	// Default limit 100.
	t := e.t
	for i := range 101 {
		e.project(fmt.Sprintf("p%03d", i))
	}
	ps, next, err := e.s.ListProjects(e.ctx, store.Page{})
	wantErr(t, "ListProjects", err, nil)
	if len(ps) != 100 || next == "" {
		t.Fatalf("ListProjects default page: %d items, next %q; want 100 and a token", len(ps), next)
	}
	ps, next, err = e.s.ListProjects(e.ctx, store.Page{Token: next, Limit: 5000})
	wantErr(t, "ListProjects page 2", err, nil)
	if len(ps) < 1 || next != "" {
		t.Fatalf("ListProjects last page: %d items, next %q; want the rest and no token", len(ps), next)
	}
}

// pageAll follows next tokens with the given limit and returns every key,
// checking that no page is longer than the limit or empty but the last.
func pageAll(t *testing.T, limit int, list func(store.Page) ([]string, string, error)) []string {
	t.Helper()
	var all []string
	tok := ""
	for range 1000 {
		keys, next, err := list(store.Page{Limit: limit, Token: tok})
		if err != nil {
			t.Fatalf("list page %q: %v", tok, err)
		}
		if len(keys) > limit {
			t.Fatalf("page of %d items, limit %d", len(keys), limit)
		}
		if next != "" && len(keys) != limit {
			t.Fatalf("short page (%d of %d) with a next token", len(keys), limit)
		}
		all = append(all, keys...)
		if next == "" {
			return all
		}
		tok = next
	}
	t.Fatal("paging did not end")
	return nil
}

// testMissingParents: records of a missing project or cluster are refused
// with ErrNotFound.
func testMissingParents(e *env) {
	t, ctx, s := e.t, e.ctx, e.s
	a := &store.CloudAccount{Project: "nope", CloudAccount: v1.CloudAccount{Name: "a", Provider: "edge"}}
	wantErr(t, "PutCloudAccount in missing project", s.PutCloudAccount(ctx, a, store.Cond{}), store.ErrNotFound)
	p := &store.Profile{Project: "nope", Profile: v1.Profile{Name: "a"}}
	wantErr(t, "PutProfile in missing project", s.PutProfile(ctx, p, store.Cond{}), store.ErrNotFound)
	ps := &store.ProjectSecret{Project: "nope", Secret: v1.Secret{Name: "a", Data: map[string]string{"k": "v"}}}
	wantErr(t, "PutProjectSecret in missing project", s.PutProjectSecret(ctx, ps, store.Cond{}), store.ErrNotFound)
	cl, op := e.newClusterOp("nope", "c", v1.KindCreate, v1.StateCreating)
	wantErr(t, "BeginOperation in missing project", s.BeginOperation(ctx, cl, op, store.Cond{}), store.ErrNotFound)
	if _, err := s.GetOperation(ctx, op.ID); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("refused BeginOperation left operation %s behind (err %v)", op.ID, err)
	}
	e.project("p")
	n := &store.Node{Project: "p", Node: v1.Node{Name: "n", Cluster: "nope"}}
	wantErr(t, "PutNode in missing cluster", s.PutNode(ctx, n, store.Cond{}), store.ErrNotFound)
}

// testDeleteProjectNotEmpty: a project with clusters cannot be deleted; one
// with only cloud accounts, secrets and profiles can, and takes them with
// it: a project made again under the name has none of them.
func testDeleteProjectNotEmpty(e *env) {
	t, ctx, s := e.t, e.ctx, e.s
	e.project("p")
	wantErr(t, "PutCloudAccount", s.PutCloudAccount(ctx, &store.CloudAccount{Project: "p",
		CloudAccount: v1.CloudAccount{Name: "a", Provider: "edge"}}, store.Cond{}), nil)
	wantErr(t, "PutProfile", s.PutProfile(ctx, &store.Profile{Project: "p",
		Profile: v1.Profile{Name: "prof"}}, store.Cond{}), nil)
	wantErr(t, "PutProjectSecret", s.PutProjectSecret(ctx, &store.ProjectSecret{Project: "p",
		Secret: v1.Secret{Name: "db", Data: map[string]string{"password": "x"}}}, store.Cond{}), nil)
	e.begin("p", "c", v1.KindCreate, v1.StateCreating)

	wantErr(t, "DeleteProject with a cluster", s.DeleteProject(ctx, "p", store.Cond{}), store.ErrNotEmpty)
	if _, err := s.GetProject(ctx, "p"); err != nil {
		t.Fatalf("GetProject after refused delete: %v", err)
	}

	cl := e.claim("w", time.Minute)
	op := e.getOp(cl.Status.CurrentOperation)
	op.Status = v1.OpSucceeded
	wantErr(t, "FinishOperation delete", s.FinishOperation(ctx, nil, op, cl.Lease.Fence(), true), nil)

	wantErr(t, "DeleteProject", s.DeleteProject(ctx, "p", store.Cond{}), nil)
	if _, err := s.GetCloudAccount(ctx, "p", "a"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("cloud account of deleted project: %v, want ErrNotFound", err)
	}
	if _, err := s.GetProfile(ctx, "p", "prof"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("profile of deleted project: %v, want ErrNotFound", err)
	}
	if _, err := s.GetProjectSecret(ctx, "p", "db"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("secret of deleted project: %v, want ErrNotFound", err)
	}
	e.project("p")
	if pss, _, err := s.ListProjectSecrets(ctx, "p", store.Page{}); err != nil || len(pss) != 0 {
		t.Errorf("secrets of a project made again under the name: %d, %v; want none", len(pss), err)
	}
}

// testBadPageToken: a token the store did not hand out is ErrBadPageToken
// (a client's mistake, not a store failure).
func testBadPageToken(e *env) {
	e.project("p")
	if _, _, err := e.s.ListProjects(e.ctx, store.Page{Token: "!!not a token!!"}); !errors.Is(err, store.ErrBadPageToken) {
		e.t.Errorf("ListProjects with a bad token: %v, want ErrBadPageToken", err)
	}
	if _, _, err := e.s.ListEvents(e.ctx, store.Key{Project: "p", Name: "c"}, store.Page{Token: "Zm9v"}); !errors.Is(err, store.ErrBadPageToken) {
		e.t.Errorf("ListEvents with a bad token: %v, want ErrBadPageToken", err)
	}
	if _, _, err := e.s.ListClusters(e.ctx, "p", store.Page{Token: "Zm9v"}); !errors.Is(err, store.ErrBadPageToken) {
		e.t.Errorf("ListClusters with a bad token: %v, want ErrBadPageToken", err)
	}
}
