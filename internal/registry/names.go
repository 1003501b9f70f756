package registry

import (
	"fmt"
	"strings"
)

// Repository names.
//
// Every repository belongs to a project and is stored as PROJECT/NAME,
// where NAME is the image's name as a container runtime asks a registry
// mirror for it: without a registry host, and with Docker Hub's "library/"
// before a name of one component. An image pushed as nginx:1.27 (or
// library/nginx:1.27, or docker.io/library/nginx:1.27) into project P is
// P/library/nginx:1.27, and that is what a pod of a cluster of P asking for
// nginx:1.27 or docker.io/library/nginx:1.27 gets: containerd normalizes
// both to docker.io/library/nginx and asks the mirror for
// /v2/library/nginx/manifests/1.27 (with ?ns=docker.io, which is ignored:
// the registry host is not part of the name).
//
// How a request's path names a repository depends on who asks:
//
//   - A principal of no single project (a user's or a service account's
//     token) names the project first: /v2/P/nginx/... or
//     /v2/P/library/nginx/..., what `docker push KILND/P/nginx:1.27` sends.
//   - A principal bound to one project (a node of a cluster of P) names
//     the image alone: /v2/library/nginx/... or /v2/nginx/..., read as
//     P/library/nginx.
//
// Either way a NAME of one component gets "library/" before it; a NAME of
// several is kept as it is.

// System is the namespace of the images every cluster's nodes may pull
// whatever their project: pause, CoreDNS, the pod network's agents, built
// by the project and pushed by an owner (kiln image push -p kiln.system).
// It can be no project's name (a project's is a DNS label, without dots).
// A node asking for an image its project does not have gets the system
// image of that name and reference: a project's own image shadows it for
// that project's nodes.
const System = "kiln.system"

// libraryPrefix is what a name of one component is stored under.
const libraryPrefix = "library/"

// requestPath is a /v2/ path split where the repository name ends.
type requestPath struct {
	kind   pathKind
	name   string // the repository name as the client wrote it; empty for base and catalog
	suffix string // what follows the name: manifests/REF, blobs/DIGEST, blobs/uploads/..., tags/list
}

type pathKind int

const (
	pathUnknown pathKind = iota
	pathBase             // /v2/
	pathCatalog          // /v2/_catalog
	pathRepo             // /v2/NAME/...
)

// parsePath splits a request path of the distribution API. The name ends
// before the last "manifests/REF", "blobs/DIGEST", "blobs/uploads[/ID]",
// "tags/list" or "referrers/DIGEST".
func parsePath(p string) requestPath {
	rest, ok := strings.CutPrefix(p, "/v2/")
	switch {
	case p == "/v2":
		return requestPath{kind: pathBase}
	case !ok:
		return requestPath{}
	case rest == "":
		return requestPath{kind: pathBase}
	case rest == "_catalog":
		return requestPath{kind: pathCatalog}
	}
	e := strings.Split(rest, "/")
	n := len(e)
	cut := 0 // how many elements at the end are the suffix
	switch {
	case n >= 4 && e[n-3] == "blobs" && e[n-2] == "uploads":
		cut = 3
	case n >= 3 && e[n-2] == "blobs" && e[n-1] == "uploads":
		cut = 2
	case n >= 3 && e[n-2] == "tags" && e[n-1] == "list":
		cut = 2
	case n >= 3 && (e[n-2] == "manifests" || e[n-2] == "blobs" || e[n-2] == "referrers"):
		cut = 2
	default:
		return requestPath{}
	}
	for _, c := range e[:n-cut] {
		if c == "" || c == "." || c == ".." {
			return requestPath{} // no such name; never a way into another project
		}
	}
	name := strings.Join(e[:n-cut], "/")
	return requestPath{kind: pathRepo, name: name, suffix: strings.Join(e[n-cut:], "/")}
}

// normalize is a name within a project as it is stored: one component gets
// "library/" before it.
func normalize(name string) string {
	if !strings.Contains(name, "/") {
		return libraryPrefix + name
	}
	return name
}

// nameError is a repository name that maps to no project's repository: a
// NAME_INVALID answer.
type nameError struct{ msg string }

func (e *nameError) Error() string { return e.msg }

// resolve maps the name of a request by principal p to its project and its
// name there (normalized).
func resolve(p Principal, name string) (project, repo string, err error) {
	if p.Project != "" {
		return p.Project, normalize(name), nil
	}
	project, repo, ok := strings.Cut(name, "/")
	if !ok || repo == "" {
		return "", "", &nameError{fmt.Sprintf(
			"repository %q names no project: push and pull as PROJECT/NAME (for example %s/%s:TAG, what 'kiln image push' does)",
			name, "PROJECT", name)}
	}
	if project != System && !validProject(project) {
		return "", "", &nameError{fmt.Sprintf("repository %q: %q is not a project name (a lower-case DNS label)", name, project)}
	}
	return project, normalize(repo), nil
}

// validProject reports whether s can be a project's name: a lower-case
// DNS label (the API refuses any other).
func validProject(s string) bool {
	if s == "" || len(s) > 63 || s[0] == '-' || s[len(s)-1] == '-' {
		return false
	}
	for _, c := range s {
		if (c < 'a' || c > 'z') && (c < '0' || c > '9') && c != '-' {
			return false
		}
	}
	return true
}

// displayName is how a repository of a project is shown to a principal:
// without the project to a principal bound to it.
func displayName(p Principal, stored string) string {
	if p.Project != "" {
		return strings.TrimPrefix(stored, p.Project+"/")
	}
	return stored
}
