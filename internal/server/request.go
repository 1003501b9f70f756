package server

import (
	"net/http"
	"strconv"
	"strings"

	v1 "kiln.dev/kiln/api/v1"
	"kiln.dev/kiln/internal/store"
)

func projectPath(p string) string          { return "/v1/projects/" + p }
func clusterPath(p, c string) string       { return projectPath(p) + "/clusters/" + c }
func nodePath(p, c, n string) string       { return clusterPath(p, c) + "/nodes/" + n }
func operationPath(id string) string       { return "/v1/operations/" + id }
func childPath(p, plural, n string) string { return projectPath(p) + "/" + plural + "/" + n }

func clusterKey(r *http.Request) store.Key {
	return store.Key{Project: r.PathValue("project"), Name: r.PathValue("cluster")}
}

// quoteETag is the ETag header for a stored etag.
func quoteETag(etag string) string { return `"` + etag + `"` }

// unquoteETag accepts an etag as sent in If-Match: quoted, weak or bare.
func unquoteETag(s string) string {
	s = strings.TrimSpace(s)
	s = strings.TrimPrefix(s, "W/")
	return strings.Trim(s, `"`)
}

// conditions reads If-Match and If-None-Match.
type conditions struct {
	ifMatch     string // unquoted; "*" means must exist
	ifNoneMatch bool   // If-None-Match: *
}

func readConditions(r *http.Request) (conditions, error) {
	var c conditions
	if v := r.Header.Get("If-Match"); v != "" {
		c.ifMatch = unquoteETag(v)
		if c.ifMatch == "" {
			return c, badRequest("If-Match", "If-Match must be an etag or *")
		}
	}
	if v := strings.TrimSpace(r.Header.Get("If-None-Match")); v != "" {
		if v != "*" {
			return c, badRequest("If-None-Match", "only If-None-Match: * is supported on writes")
		}
		c.ifNoneMatch = true
	}
	return c, nil
}

// check tests the conditions against the current etag of record o (""
// when it does not exist).
func (c conditions) check(current string, o ref) error {
	if c.ifNoneMatch && current != "" {
		return errExists(o)
	}
	if c.ifMatch != "" && (current == "" || (c.ifMatch != "*" && c.ifMatch != current)) {
		return errStale(o)
	}
	return nil
}

// cond is the store condition for a write after reading the record with
// etag current ("" when absent), so that a change between the read and the
// write is noticed.
func writeCond(current string) store.Cond {
	if current == "" {
		return store.Cond{IfNoneMatch: "*"}
	}
	return store.Cond{IfMatch: current}
}

// page reads ?top=N&skipToken=... .
func page(r *http.Request) (store.Page, error) {
	q := r.URL.Query()
	var pg store.Page
	if v := q.Get("top"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > 1000 {
			return pg, badRequest("top", "top must be an integer from 1 to 1000")
		}
		pg.Limit = n
	}
	pg.Token = q.Get("skipToken")
	return pg, nil
}

// nextLink is the relative URL of the page after this one, or "". The
// query parameters in drop do not go on to it.
func nextLink(r *http.Request, pg store.Page, next string, drop ...string) string {
	if next == "" {
		return ""
	}
	q := r.URL.Query() // filters go on to the next page
	for _, k := range drop {
		q.Del(k)
	}
	q.Del("top")
	if pg.Limit > 0 {
		q.Set("top", strconv.Itoa(pg.Limit))
	}
	q.Set("skipToken", next)
	return r.URL.Path + "?" + q.Encode()
}

// list writes one page of items, converted by conv.
func list[T, W any](w http.ResponseWriter, r *http.Request, pg store.Page, items []T, next string, conv func(T) W) {
	out := v1.List[W]{Value: make([]W, 0, len(items)), NextLink: nextLink(r, pg, next)}
	for _, it := range items {
		out.Value = append(out.Value, conv(it))
	}
	writeJSON(w, http.StatusOK, out)
}

// requireProject answers 404 (target "project") when the project is missing.
func (s *Server) requireProject(r *http.Request) error {
	if _, err := s.projects.GetProject(r.Context(), r.PathValue("project")); err != nil {
		return toAPIError(err, refOf(r, "project"))
	}
	return nil
}
