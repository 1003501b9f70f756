package registry

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"

	"github.com/distribution/distribution/v3"
	"github.com/distribution/distribution/v3/registry/api/errcode"
	storagedriver "github.com/distribution/distribution/v3/registry/storage/driver"
	"github.com/distribution/reference"
	"github.com/opencontainers/go-digest"

	"kiln.dev/kiln/internal/auth"
)

// maxCatalog bounds a catalog page (?n=), as Distribution does.
const maxCatalog = 1000

// serveCatalog is GET /v2/_catalog: the repositories of the projects where
// p may pull, sorted, paginated with ?n= and ?last= and a Link header to
// the next page. A principal bound to a project sees names without it.
func (r *Registry) serveCatalog(w http.ResponseWriter, req *http.Request, p Principal) {
	ctx := req.Context()
	q := req.URL.Query()
	n := 100
	if s := q.Get("n"); s != "" {
		v, err := strconv.Atoi(s)
		if err != nil || v < 0 {
			serveError(w, errcode.ErrorCodePaginationNumberInvalid.WithMessage("n must be a number from 0 to 1000"))
			return
		}
		n = min(v, maxCatalog)
	}
	all, err := r.repositories(ctx)
	if err != nil {
		r.log.ErrorContext(ctx, "registry: list repositories", "err", err)
		serveError(w, errcode.ErrorCodeUnavailable.WithMessage("the registry could not list its repositories; try again"))
		return
	}
	roles := map[string]bool{} // by project: may p pull there
	var names []string
	for _, repo := range all {
		project, _, _ := strings.Cut(repo, "/")
		may, seen := roles[project]
		if !seen {
			role, err := p.RoleIn(ctx, project)
			if err != nil && !errors.Is(err, ErrNoProject) {
				r.log.ErrorContext(ctx, "registry: role", "principal", p.Name, "project", project, "err", err)
				serveError(w, errcode.ErrorCodeUnavailable.WithMessage("the registry could not check the role; try again"))
				return
			}
			may = auth.Allows(role, actionRole[actionPull])
			roles[project] = may
		}
		if may {
			names = append(names, displayName(p, repo))
		}
	}
	slices.Sort(names)
	if last := q.Get("last"); last != "" {
		i, _ := slices.BinarySearch(names, last)
		for i < len(names) && names[i] <= last {
			i++
		}
		names = names[i:]
	}
	if len(names) > n {
		names = names[:n]
		next := url.Values{"n": {strconv.Itoa(n)}, "last": {names[len(names)-1]}}
		w.Header().Set("Link", `</v2/_catalog?`+next.Encode()+`>; rel="next"`)
	}
	w.Header().Set("Docker-Distribution-API-Version", "registry/2.0")
	w.Header().Set("Content-Type", "application/json")
	if names == nil {
		names = []string{}
	}
	json.NewEncoder(w).Encode(map[string][]string{"repositories": names})
}

// has reports whether the repository project/repo holds what a pull's
// suffix names: manifests/TAG, manifests/DIGEST or blobs/DIGEST.
func (r *Registry) has(ctx context.Context, project, repo, suffix string) bool {
	named, err := reference.WithName(project + "/" + repo)
	if err != nil {
		return false
	}
	rep, err := r.ns.Repository(ctx, named)
	if err != nil {
		return false
	}
	kind, ref, _ := strings.Cut(suffix, "/")
	switch kind {
	case "manifests":
		if d, err := digest.Parse(ref); err == nil {
			ms, err := rep.Manifests(ctx)
			if err != nil {
				return false
			}
			ok, err := ms.Exists(ctx, d)
			return err == nil && ok
		}
		_, err := rep.Tags(ctx).Get(ctx, ref)
		return err == nil
	case "blobs":
		d, err := digest.Parse(ref)
		if err != nil {
			return false
		}
		_, err = rep.Blobs(ctx).Stat(ctx, d)
		return err == nil
	}
	return false
}

// repositories lists every repository stored (PROJECT/NAME).
func (r *Registry) repositories(ctx context.Context) ([]string, error) {
	var out []string
	err := r.ns.(distribution.RepositoryEnumerator).Enumerate(ctx, func(name string) error {
		out = append(out, name)
		return nil
	})
	if errors.As(err, new(storagedriver.PathNotFoundError)) {
		return nil, nil // nothing pushed yet
	}
	return out, err
}
