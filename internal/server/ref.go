package server

import (
	"fmt"
	"net/http"

	"kiln.dev/kiln/internal/store"
)

// ref names a record in an error message: its kind, its name and where it
// is, so that every NotFound and Conflict says which record (`cluster
// "nope" not found in project "default"`), not only which kind.
type ref struct {
	kind    string // a route's kind: "project", "cluster", "node", "cloudaccount", ...
	name    string
	project string // "" for what is not in a project: users, projects, operations
	cluster string // a node's cluster
	owner   *ref   // a token's user or service account
}

// kindNames are the words for kinds whose path wildcard is not one.
var kindNames = map[string]string{"cloudaccount": "cloud account", "serviceaccount": "service account"}

// refOf names the record of kind that r's path names; kind is a path
// wildcard ("cluster" names {cluster} of {project}).
func refOf(r *http.Request, kind string) ref {
	o := ref{kind: kind, name: r.PathValue(kind)}
	switch kind {
	case "", "project", "user", "operation":
	case "token":
		owner := refOf(r, "serviceaccount")
		if r.PathValue("user") != "" {
			owner = refOf(r, "user")
		}
		o.owner = &owner
	default:
		o.project = r.PathValue("project")
		if kind == "node" || kind == "job" || kind == "backup" {
			o.cluster = r.PathValue("cluster")
		}
	}
	return o
}

// clusterRef names the cluster of r's path.
func clusterRef(r *http.Request) ref { return refOf(r, "cluster") }

// keyRef names the cluster of k.
func keyRef(k store.Key) ref { return ref{kind: "cluster", name: k.Name, project: k.Project} }

// noun is the record alone: `cluster "dev"`.
func (o ref) noun() string {
	if o.kind == "" {
		return "the record"
	}
	word := o.kind
	if w, ok := kindNames[o.kind]; ok {
		word = w
	}
	return fmt.Sprintf("%s %q", word, o.name)
}

// where is where the record is, with a leading space: ` in project "p"`,
// ` in cluster "c" of project "p"`, ` for user "u"`; "" for records that
// are not in anything.
func (o ref) where() string {
	switch {
	case o.owner != nil:
		return " for " + o.owner.String()
	case o.cluster != "":
		return fmt.Sprintf(" in cluster %q of project %q", o.cluster, o.project)
	case o.project != "":
		return fmt.Sprintf(" in project %q", o.project)
	}
	return ""
}

// String is the record and where it is: `cluster "dev" in project "p"`.
func (o ref) String() string { return o.noun() + o.where() }
