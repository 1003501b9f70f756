package server

import (
	"context"
	"errors"
	"maps"
	"net/http"
	"slices"

	v1 "kiln.dev/kiln/api/v1"
	"kiln.dev/kiln/internal/auth"
	"kiln.dev/kiln/internal/store"
)

func projectOut(p *v1.Project) v1.Project {
	out := *p
	out.ID = projectPath(p.Name)
	return out
}

func (s *Server) listProjects(w http.ResponseWriter, r *http.Request) error {
	pg, err := page(r)
	if err != nil {
		return err
	}
	p := info(r.Context()).principal
	if !p.Owner {
		return s.listOwnProjects(w, r, p)
	}
	items, next, err := s.projects.ListProjects(r.Context(), pg)
	if err != nil {
		return err
	}
	list(w, r, pg, items, next, projectOut)
	return nil
}

// listOwnProjects lists, in one page, the projects p has a role in: a
// caller sees no other tenant's project.
func (s *Server) listOwnProjects(w http.ResponseWriter, r *http.Request, p auth.Principal) error {
	roles, err := s.projectsOf(r, p)
	if err != nil {
		return err
	}
	names := slices.Sorted(maps.Keys(roles))
	items := make([]*v1.Project, 0, len(names))
	for _, name := range names {
		proj, err := s.projects.GetProject(r.Context(), name)
		if errors.Is(err, store.ErrNotFound) {
			continue
		}
		if err != nil {
			return err
		}
		items = append(items, proj)
	}
	list(w, r, store.Page{}, items, "", projectOut)
	return nil
}

func (s *Server) getProject(w http.ResponseWriter, r *http.Request) error {
	p, err := s.projects.GetProject(r.Context(), r.PathValue("project"))
	if err != nil {
		return err
	}
	w.Header().Set("ETag", quoteETag(p.ETag))
	writeJSON(w, http.StatusOK, projectOut(p))
	return nil
}

// putProject creates (201) or replaces (200) a project.
func (s *Server) putProject(w http.ResponseWriter, r *http.Request) error {
	name := r.PathValue("project")
	conds, err := readConditions(r)
	if err != nil {
		return err
	}
	body, err := readBody(r)
	if err != nil {
		return err
	}
	var in v1.Project
	if err := decodeStrict(body, &in); err != nil {
		return err
	}
	if in.Name != "" && in.Name != name {
		return badRequest("name", "the body's name %q differs from the URL's %q", in.Name, name)
	}
	if err := s.checkBackupLocation(r.Context(), name, in.BackupLocation); err != nil {
		return err
	}
	return putRecord(w, r, conds, putLoop[*v1.Project, v1.Project]{
		what: "project",
		get:  func(ctx context.Context) (*v1.Project, error) { return s.projects.GetProject(ctx, name) },
		build: func(existing *v1.Project, exists bool) (*v1.Project, error) {
			p := &v1.Project{Name: name, DisplayName: in.DisplayName, BackupLocation: in.BackupLocation, CreatedAt: s.now().UTC()}
			if exists {
				p.CreatedAt = existing.CreatedAt
			}
			return p, nil
		},
		put:  s.projects.PutProject,
		etag: func(p *v1.Project) string { return p.ETag },
		out:  projectOut,
	})
}

func (s *Server) deleteProject(w http.ResponseWriter, r *http.Request) error {
	conds, err := readConditions(r)
	if err != nil {
		return err
	}
	c := store.Cond{IfMatch: conds.ifMatch}
	if err := s.projects.DeleteProject(r.Context(), r.PathValue("project"), c); err != nil {
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

// raced reports whether a conditional write failed only because the record
// changed (or appeared, or vanished) after it was read.
func raced(err error) bool {
	return errors.Is(err, store.ErrExists) || errors.Is(err, store.ErrPreconditionFailed) ||
		errors.Is(err, store.ErrNotFound)
}
