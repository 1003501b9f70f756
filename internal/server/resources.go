package server

import (
	"context"
	"net/http"
	"strings"

	v1 "kiln.dev/kiln/api/v1"
	"kiln.dev/kiln/internal/store"
	"kiln.dev/kiln/internal/validate"
)

// syncResource describes a project child written synchronously (no
// operation): cloud accounts and profiles share one set of handlers.
type syncResource[R any, W any] struct {
	what   string // singular, also the path wildcard: "cloudaccount"
	plural string // path segment: "cloudaccounts"
	// read and write are the least project roles that may read and write.
	read, write string
	get         func(ctx context.Context, project, name string) (R, error)
	list        func(ctx context.Context, project string, pg store.Page) ([]R, string, error)
	put         func(ctx context.Context, rec R, c store.Cond) error
	del         func(ctx context.Context, project, name string, c store.Cond) error
	// build decodes and validates a PUT body into the record to write;
	// existing is the stored record, or the zero R when there is none.
	build func(r *http.Request, project, name string, body []byte, existing R, exists bool) (R, error)
	// out is the wire form: it sets the id and leaves out every secret.
	out  func(R) W
	etag func(R) string
	// usedBy names what a cluster's spec says of this kind of record
	// (its cloud account, its profile): a record a cluster names is not
	// deleted, and unused says what to do instead. nil: nothing refers
	// to it.
	usedBy func(spec *v1.ClusterSpec) string
	unused string
}

func registerResource[R, W any](s *Server, res syncResource[R, W]) {
	base := "/v1/projects/{project}/" + res.plural
	one := base + "/{" + res.what + "}"
	s.handle("GET "+base, "project", inProject(res.read), func(w http.ResponseWriter, r *http.Request) error {
		pg, err := page(r)
		if err != nil {
			return err
		}
		if err := s.requireProject(r); err != nil {
			return err
		}
		items, next, err := res.list(r.Context(), r.PathValue("project"), pg)
		if err != nil {
			return err
		}
		list(w, r, pg, items, next, res.out)
		return nil
	})
	s.handle("GET "+one, res.what, inProject(res.read), func(w http.ResponseWriter, r *http.Request) error {
		if err := s.requireProject(r); err != nil {
			return err
		}
		rec, err := res.get(r.Context(), r.PathValue("project"), r.PathValue(res.what))
		if err != nil {
			return err
		}
		w.Header().Set("ETag", quoteETag(res.etag(rec)))
		writeJSON(w, http.StatusOK, res.out(rec))
		return nil
	})
	s.handle("PUT "+one, res.what, inProject(res.write), func(w http.ResponseWriter, r *http.Request) error {
		return putResource(s, res, w, r)
	})
	s.handle("DELETE "+one, res.what, inProject(res.write), func(w http.ResponseWriter, r *http.Request) error {
		conds, err := readConditions(r)
		if err != nil {
			return err
		}
		if err := s.requireProject(r); err != nil {
			return err
		}
		if res.usedBy != nil {
			// A stale If-Match is answered as such (412) before whether
			// the record is in use; the delete checks it again.
			rec, err := res.get(r.Context(), r.PathValue("project"), r.PathValue(res.what))
			if err != nil {
				return err
			}
			if err := conds.check(res.etag(rec), refOf(r, res.what)); err != nil {
				return err
			}
			if err := s.notInUse(r, res.what, res.usedBy, res.unused); err != nil {
				return err
			}
		}
		err = res.del(r.Context(), r.PathValue("project"), r.PathValue(res.what), store.Cond{IfMatch: conds.ifMatch})
		if err != nil {
			return err
		}
		w.WriteHeader(http.StatusNoContent)
		return nil
	})
}

// notInUse refuses (409) to delete the record of r's path while a cluster
// of its project names it: the cluster's next operation would fail for
// want of it. (A cluster created in the moment between this check and the
// delete fails its first step, validate-dynamic, saying the record is
// missing.)
func (s *Server) notInUse(r *http.Request, what string, usedBy func(*v1.ClusterSpec) string, unused string) error {
	project, name := r.PathValue("project"), r.PathValue(what)
	var users []string
	pg := store.Page{Limit: 500}
	for {
		cls, next, err := s.clusters.ListClusters(r.Context(), project, pg)
		if err != nil {
			return err
		}
		for _, cl := range cls {
			if usedBy(&cl.Spec) == name {
				users = append(users, cl.Name)
			}
		}
		if next == "" {
			break
		}
		pg.Token = next
	}
	if len(users) > 0 {
		return conflict(refOf(r, what), what, "is used by %d cluster(s): %s; %s", len(users), strings.Join(users, ", "), unused)
	}
	return nil
}

// putResource creates (201) or replaces (200) a synchronous resource.
func putResource[R, W any](s *Server, res syncResource[R, W], w http.ResponseWriter, r *http.Request) error {
	project, name := r.PathValue("project"), r.PathValue(res.what)
	conds, err := readConditions(r)
	if err != nil {
		return err
	}
	body, err := readBody(r)
	if err != nil {
		return err
	}
	if err := s.requireProject(r); err != nil {
		return err
	}
	return putRecord(w, r, conds, putLoop[R, W]{
		what: res.what,
		get:  func(ctx context.Context) (R, error) { return res.get(ctx, project, name) },
		build: func(existing R, exists bool) (R, error) {
			return res.build(r, project, name, body, existing, exists)
		},
		put: res.put, etag: res.etag, out: res.out,
		// The project may be the thing that vanished.
		raced: func() error { return s.requireProject(r) },
	})
}

// checkName refuses a body whose name differs from the URL's.
func checkName(body, url string) error {
	if body != "" && body != url {
		return badRequest("name", "the body's name %q differs from the URL's %q", body, url)
	}
	return nil
}

// cloudAccounts: credentials are accepted on PUT and never returned. A PUT
// without credentials keeps the stored ones.
func cloudAccounts(s *Server) syncResource[*store.CloudAccount, v1.CloudAccount] {
	return syncResource[*store.CloudAccount, v1.CloudAccount]{
		what: "cloudaccount", plural: "cloudaccounts",
		read: v1.RoleViewer, write: v1.RoleAdmin,
		get: s.accounts.GetCloudAccount, list: s.accounts.ListCloudAccounts,
		put: s.accounts.PutCloudAccount, del: s.accounts.DeleteCloudAccount,
		usedBy: func(spec *v1.ClusterSpec) string { return spec.CloudAccount },
		unused: "delete them first (a cluster's cloud account cannot change)",
		build: func(r *http.Request, project, name string, body []byte, existing *store.CloudAccount, exists bool) (*store.CloudAccount, error) {
			var in v1.CloudAccount
			if err := decodeStrict(body, &in); err != nil {
				return nil, err
			}
			if err := checkName(in.Name, name); err != nil {
				return nil, err
			}
			if failures := validate.CloudAccount(name, &in, s.catalog); len(failures) > 0 {
				return nil, validationError("cloud account", failures)
			}
			a := &store.CloudAccount{Project: project, CloudAccount: v1.CloudAccount{
				Name: name, Provider: in.Provider, Credentials: in.Credentials, Quotas: in.Quotas, CreatedAt: s.now().UTC(),
			}}
			if exists {
				a.CreatedAt = existing.CreatedAt
				if a.Credentials == nil {
					a.Credentials = existing.Credentials
				}
			}
			return a, nil
		},
		out: func(a *store.CloudAccount) v1.CloudAccount {
			out := a.CloudAccount
			out.ID = childPath(a.Project, "cloudaccounts", a.Name)
			out.Credentials = nil
			return out
		},
		etag: func(a *store.CloudAccount) string { return a.ETag },
	}
}
