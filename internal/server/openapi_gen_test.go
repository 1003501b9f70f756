package server_test

// The OpenAPI document (internal/server/openapi.json, served at
// GET /openapi.json, and docs/openapi.json, the same bytes) is generated
// here: each route of the table below, with its wire types' JSON Schemas
// taken from api/v1 by reflection, so a field added to a wire type is in the
// document after `go test ./internal/server -run TestOpenAPIDocument -update`
// and TestOpenAPIDocument fails until then.

import (
	"bytes"
	"encoding/json"
	"maps"
	"net/http"
	"os"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	v1 "kiln.dev/kiln/api/v1"
)

// Where the document lives: the server embeds the first; the second is
// for readers of docs/.
const (
	openAPIFile     = "openapi.json"
	openAPIDocsFile = "../../docs/openapi.json"
)

// apiBody is how a route's request or response body is described.
type apiBody struct {
	t     reflect.Type // a wire type; nil with media other than JSON
	list  bool         // a page of t: {"value": [...], "nextLink"}
	media string       // "" for application/json
	doc   string
}

func of[T any]() reflect.Type { return reflect.TypeFor[T]() }
func oneOf[T any]() *apiBody  { return &apiBody{t: of[T]()} }
func pageOf[T any]() *apiBody { return &apiBody{t: of[T](), list: true} }

// apiRoute documents one route the server registers.
type apiRoute struct {
	pattern string // as registered: "PUT /v1/projects/{project}"
	summary string
	in      *apiBody // request body; nil: none
	inOpt   bool     // the body may be left out
	codes   map[int]*apiBody
	query   []string // query parameters (all strings on the wire)
	// queryDocs say what a query parameter means on this route, where it
	// differs from paramDocs.
	queryDocs map[string]string
	async     bool // answers with Azure-AsyncOperation, Location and Retry-After
	public    bool // no token
}

var (
	noBody     = &apiBody{}
	statusBody = &apiBody{t: of[struct {
		Status string `json:"status"`
	}]()}
	pageQuery = []string{"top", "skipToken"}
)

// apiRoutes is every route of the API. TestOpenAPICoversEveryRoute fails
// when the server registers one that is not here, or the other way round.
func apiRoutes() []apiRoute {
	const (
		project = "/v1/projects/{project}"
		cluster = project + "/clusters/{cluster}"
		node    = cluster + "/nodes/{node}"
		sa      = project + "/serviceaccounts/{serviceaccount}"
	)
	routes := []apiRoute{
		{pattern: "GET /healthz", summary: "The process is up.", public: true, codes: map[int]*apiBody{200: statusBody}},
		{pattern: "GET /readyz", summary: "The store answers a ping within 2 s.", public: true, codes: map[int]*apiBody{200: statusBody}},
		{pattern: "GET /metrics", summary: "Prometheus metrics.", codes: map[int]*apiBody{200: {media: "text/plain", doc: "Prometheus text exposition format"}}},
		{pattern: "GET /openapi.json", summary: "This document.", codes: map[int]*apiBody{200: {t: of[map[string]any](), doc: "an OpenAPI 3.1 document"}}},
		{pattern: "GET /v1/whoami", summary: "Who the caller is and where it has roles.", codes: map[int]*apiBody{200: oneOf[v1.Whoami]()}},
		{pattern: "GET /v1/auth/oidc", summary: "The identity providers kilnd trusts, for a client starting a sign-in (no secret in it).", public: true, codes: map[int]*apiBody{200: oneOf[v1.SignInConfig]()}},
		{pattern: "POST /v1/auth/oidc", summary: "Sign in: trade an identity provider's ID token for a Kiln token of its person, which lasts as long as the ID token and carries its groups; a refusal is 401 with the reason's code in details.",
			public: true, in: oneOf[v1.SignInRequest](), codes: map[int]*apiBody{201: oneOf[v1.SignIn]()}},
		{pattern: "GET /debug/pprof/{profile}", summary: "A Go runtime profile (net/http/pprof), for owners.", query: []string{"seconds", "debug", "gc"},
			codes: map[int]*apiBody{200: {media: "application/octet-stream,text/plain", doc: "the profile; text with ?debug=1"}}},

		{pattern: "GET /v1/users", summary: "List users.", query: pageQuery, codes: map[int]*apiBody{200: pageOf[v1.User]()}},
		{pattern: "PUT /v1/users/{user}", summary: "Create or replace a user.", in: oneOf[v1.User](), codes: map[int]*apiBody{200: oneOf[v1.User](), 201: oneOf[v1.User]()}},
		{pattern: "GET /v1/users/{user}", summary: "Get a user.", codes: map[int]*apiBody{200: oneOf[v1.User]()}},
		{pattern: "DELETE /v1/users/{user}", summary: "Delete a user.", codes: map[int]*apiBody{204: noBody}},
		{pattern: "POST /v1/users/{user}/tokens", summary: "Create a token; its value is shown this once.", in: oneOf[v1.TokenRequest](), inOpt: true, codes: map[int]*apiBody{201: oneOf[v1.Token]()}},
		{pattern: "GET /v1/users/{user}/tokens", summary: "List a user's tokens (never a value).", query: pageQuery, codes: map[int]*apiBody{200: pageOf[v1.Token]()}},
		{pattern: "DELETE /v1/users/{user}/tokens/{token}", summary: "Revoke a token.", codes: map[int]*apiBody{204: noBody}},
		{pattern: "GET /v1/audit", summary: "The audit log, newest first.", query: append([]string{"project", "actor", "action", "result", "since", "until"}, pageQuery...), codes: map[int]*apiBody{200: pageOf[v1.AuditEntry]()}},

		{pattern: "GET /v1/fleet", summary: "The fleet at a glance, over the projects the caller has a role in: clusters by state, provider, version and profile; operations of the last day, week and the week before by kind and result; durations (p50, p95); the last week's failure codes.",
			codes: map[int]*apiBody{200: oneOf[v1.Fleet]()}},
		{pattern: "GET /v1/cost", summary: "What the cost estimate said each cluster of the caller's projects cost over the last days (30 unless days says, at most 31), by cluster (deleted ones too) and by project, from the store's cost intervals; an estimate's history, not a bill.",
			query: []string{"days"}, codes: map[int]*apiBody{200: oneOf[v1.CostHistory]()}},
		{pattern: "GET /v1/projects", summary: "List projects.", query: pageQuery, codes: map[int]*apiBody{200: pageOf[v1.Project]()}},
		{pattern: "PUT " + project, summary: "Create or replace a project.", in: oneOf[v1.Project](), codes: map[int]*apiBody{200: oneOf[v1.Project](), 201: oneOf[v1.Project]()}},
		{pattern: "GET " + project, summary: "Get a project.", codes: map[int]*apiBody{200: oneOf[v1.Project]()}},
		{pattern: "DELETE " + project, summary: "Delete a project without clusters.", codes: map[int]*apiBody{204: noBody}},
		{pattern: "GET " + project + "/audit", summary: "A project's audit log.", query: append([]string{"actor", "action", "result", "since", "until"}, pageQuery...), codes: map[int]*apiBody{200: pageOf[v1.AuditEntry]()}},

		{pattern: "GET " + project + "/clusters", summary: "List clusters.", query: pageQuery, codes: map[int]*apiBody{200: pageOf[v1.Cluster]()}},
		{pattern: "PUT " + cluster, summary: "Create (201) or replace (202) a cluster; starts an operation.", in: oneOf[v1.Cluster](), async: true,
			codes: map[int]*apiBody{201: oneOf[v1.Cluster](), 202: oneOf[v1.Cluster]()}},
		{pattern: "PATCH " + cluster, summary: "JSON merge patch (RFC 7386) of a cluster's name and spec; starts an update.",
			in:    &apiBody{t: of[map[string]any](), media: "application/merge-patch+json", doc: "a merge patch of {name, spec}; application/json is accepted too"},
			async: true, codes: map[int]*apiBody{202: oneOf[v1.Cluster]()}},
		{pattern: "GET " + cluster, summary: "Get a cluster.", codes: map[int]*apiBody{200: oneOf[v1.Cluster]()}},
		{pattern: "DELETE " + cluster, summary: "Start a cluster's delete.", query: []string{"force"}, async: true, codes: map[int]*apiBody{202: oneOf[v1.Cluster]()}},
		{pattern: "POST " + cluster + "/validate", summary: "Dry run of a PUT: writes nothing.", in: oneOf[v1.Cluster](), codes: map[int]*apiBody{200: oneOf[v1.ClusterValidation]()}},
		{pattern: "GET " + cluster + "/upgrades", summary: "The versions the cluster can be upgraded to.", codes: map[int]*apiBody{200: oneOf[v1.ClusterUpgrades]()}},
		{pattern: "POST " + cluster + "/provision", summary: "Edge clusters: install Kubernetes on the configured hosts, or join those configured since to a provisioned cluster.", async: true, codes: map[int]*apiBody{202: oneOf[v1.Cluster]()}},
		{pattern: "POST " + cluster + "/reset", summary: "Edge clusters: tear Kubernetes down, keep the cluster.", async: true, codes: map[int]*apiBody{202: oneOf[v1.Cluster]()}},
		{pattern: "POST " + cluster + "/rotate-certificates", summary: "Give every node new Kubernetes certificates of the cluster CA, one node at a time, control plane first; with ca begin or finish, replace the cluster CA with an overlap where both are trusted.",
			in: oneOf[v1.RotateCertificatesRequest](), inOpt: true, async: true, codes: map[int]*apiBody{202: oneOf[v1.Cluster]()}},
		{pattern: "POST " + cluster + "/reconcile", summary: "Apply every pack of the cluster's profile again, putting back what was changed or deleted by hand.", async: true, codes: map[int]*apiBody{202: oneOf[v1.Cluster]()}},
		{pattern: "POST " + cluster + "/hibernate", summary: "Drain and remove the workers, stop the control plane keeping its data; the cluster ends Hibernated.", async: true, codes: map[int]*apiBody{202: oneOf[v1.Cluster]()}},
		{pattern: "POST " + cluster + "/resume", summary: "Start a Hibernated cluster's control plane on its data and make its workers again.", async: true, codes: map[int]*apiBody{202: oneOf[v1.Cluster]()}},
		{pattern: "POST " + cluster + "/retry", summary: "Run the failed or canceled operation again from its failed step.", async: true, codes: map[int]*apiBody{202: oneOf[v1.Cluster]()}},
		{pattern: "GET " + cluster + "/kubeconfig", summary: "The caller's kubeconfig: the cluster's endpoint and CA, and a user whose credential comes from kiln credential at each use (an exec plugin); it holds no secret.",
			codes: map[int]*apiBody{200: {media: "application/yaml", doc: "a kubeconfig"}}},
		{pattern: "POST " + cluster + "/admin-kubeconfig", summary: "A break-glass kubeconfig (admins): a system:masters client certificate for at most 24 hours (body {\"ttl\": \"1h\"}, optional), a Warning event on the cluster.",
			in: oneOf[v1.AdminKubeconfigRequest](), inOpt: true, codes: map[int]*apiBody{200: {media: "application/yaml", doc: "a kubeconfig"}}},
		{pattern: "POST " + cluster + "/credential", summary: "The caller's own credential for the cluster's Kubernetes API: a client certificate naming them, with the group of their role in the project, for spec.access.credentialTTL (kubectl's exec plugin, kiln credential); 429 past a rate per person.",
			codes: map[int]*apiBody{200: oneOf[v1.ExecCredential]()}},
		{pattern: "POST " + cluster + "/activation", summary: "Reissue the activation credential and passphrase.", codes: map[int]*apiBody{201: oneOf[v1.Activation]()}},
		{pattern: "DELETE " + cluster + "/activation", summary: "Revoke the activation credential.", codes: map[int]*apiBody{204: noBody}},
		{pattern: "GET " + cluster + "/installer", summary: "Edge clusters: the host installer, a gzipped tar.", query: []string{"arch"},
			codes: map[int]*apiBody{200: {media: "application/gzip", doc: "kiln-agent, credentials.json, passphrase and install.sh"}}},
		{pattern: "GET " + cluster + "/nodes", summary: "List nodes.", query: pageQuery, codes: map[int]*apiBody{200: pageOf[v1.Node]()}},
		{pattern: "GET " + node, summary: "Get a node.", codes: map[int]*apiBody{200: oneOf[v1.Node]()}},
		{pattern: "DELETE " + node, summary: "Edge clusters: take a host out of the cluster (drained, reset, its records removed); starts a remove-node operation.", async: true, codes: map[int]*apiBody{202: oneOf[v1.Cluster]()}},
		{pattern: "POST " + node + "/approve", summary: "Approve a discovered node.", codes: map[int]*apiBody{200: oneOf[v1.Node]()}},
		{pattern: "POST " + node + "/configure", summary: "Give a node its role.", in: oneOf[v1.NodeConfig](), codes: map[int]*apiBody{200: oneOf[v1.Node]()}},
		{pattern: "GET " + node + "/logs", summary: "The node agent's log lines, oldest first; the nextLink reads on.", query: append([]string{"component", "since", "tail", "wait"}, pageQuery...),
			codes: map[int]*apiBody{200: pageOf[v1.LogLine]()}},
		{pattern: "POST " + cluster + "/jobs", summary: "Submit a job (a Kubernetes Job); resumes a Hibernated cluster. The same job again answers 200.", in: oneOf[v1.Job](),
			codes: map[int]*apiBody{200: oneOf[v1.Job](), 201: oneOf[v1.Job]()}},
		{pattern: "GET " + cluster + "/jobs", summary: "List a cluster's jobs.", query: pageQuery, codes: map[int]*apiBody{200: pageOf[v1.Job]()}},
		{pattern: "GET " + cluster + "/jobs/{job}", summary: "Get a job.", codes: map[int]*apiBody{200: oneOf[v1.Job]()}},
		{pattern: "GET " + cluster + "/jobs/{job}/logs", summary: "The log of the job's pod (the end kept when it ended, or live while it runs).",
			codes: map[int]*apiBody{200: {media: "text/plain", doc: "the pod's log"}}},
		{pattern: "POST " + cluster + "/diagnostics", summary: "Gather a diagnostics bundle of the cluster now: its operation, events, nodes' records and logs, and what its API answers, secrets stripped.",
			codes: map[int]*apiBody{201: oneOf[v1.Diagnostics]()}},
		{pattern: "GET " + cluster + "/diagnostics", summary: "A cluster's diagnostics bundles, newest first (the newest 10 are kept).", query: pageQuery, codes: map[int]*apiBody{200: pageOf[v1.Diagnostics]()}},
		{pattern: "GET " + cluster + "/diagnostics/{diagnostics}", summary: "A diagnostics bundle's record.", codes: map[int]*apiBody{200: oneOf[v1.Diagnostics]()}},
		{pattern: "GET " + cluster + "/diagnostics/{diagnostics}/bundle", summary: "A diagnostics bundle: a gzipped tar.",
			codes: map[int]*apiBody{200: {media: "application/gzip", doc: "README.txt, cluster.json, operation.json, events.json, nodes/NAME/{node.json,agent.log}, kubernetes/..."}}},
		{pattern: "DELETE " + cluster + "/diagnostics/{diagnostics}", summary: "Delete a diagnostics bundle.", codes: map[int]*apiBody{204: noBody}},
		{pattern: "POST " + cluster + "/backups", summary: "Take a backup: an etcd snapshot from a control-plane node, checked and sealed in the project's backup location.",
			in: oneOf[struct {
				Name string `json:"name,omitempty"`
			}](), inOpt: true, async: true, codes: map[int]*apiBody{202: oneOf[v1.Backup]()}},
		{pattern: "GET " + cluster + "/backups", summary: "A cluster's backups, newest first (a deleted cluster's too).", query: pageQuery, codes: map[int]*apiBody{200: pageOf[v1.Backup]()}},
		{pattern: "GET " + cluster + "/backups/{backup}", summary: "A backup.", codes: map[int]*apiBody{200: oneOf[v1.Backup]()}},
		{pattern: "DELETE " + cluster + "/backups/{backup}", summary: "Delete a backup: its sealed snapshot and its record.", codes: map[int]*apiBody{204: noBody}},
		{pattern: "POST " + cluster + "/restore", summary: "Restore the cluster's etcd from one of its backups: checked and staged on every control-plane node, then the control plane stopped, restored and started.",
			in: oneOf[struct {
				Backup string `json:"backup"`
			}](), async: true, codes: map[int]*apiBody{202: oneOf[v1.Cluster]()}},
		{pattern: "GET " + cluster + "/operations", summary: "A cluster's operations, oldest first.", query: pageQuery, codes: map[int]*apiBody{200: pageOf[v1.Operation]()}},
		{pattern: "GET " + cluster + "/events", summary: "A cluster's events, oldest first.", query: pageQuery, codes: map[int]*apiBody{200: pageOf[v1.Event]()}},
		{pattern: "GET /v1/operations/{operation}", summary: "An operation: what ARM clients poll; ?wait= long-polls.", query: []string{"wait", "until"}, queryDocs: map[string]string{"until": "end: the long-poll answers when the operation ends, not at every change"}, codes: map[int]*apiBody{200: oneOf[v1.Operation]()}},
		{pattern: "POST /v1/operations/{operation}/cancel", summary: "Ask a running operation to stop at its next safe point.", async: true, codes: map[int]*apiBody{202: oneOf[v1.Operation]()}},

		{pattern: "GET " + project + "/profiles/{profile}/versions/{version}", summary: "Get one version of a profile.", codes: map[int]*apiBody{200: oneOf[v1.Profile]()}},
		{pattern: "POST " + project + "/profiles/{profile}/versions/{version}/publish", summary: "Publish a profile version: immutable from then on, and usable by clusters.", codes: map[int]*apiBody{200: oneOf[v1.Profile]()}},
		{pattern: "DELETE " + project + "/profiles/{profile}/versions/{version}", summary: "Delete a profile version no cluster uses (the last one deletes the profile).", codes: map[int]*apiBody{204: noBody}},

		{pattern: "POST " + sa + "/tokens", summary: "Create a service account token; its value is shown this once.", in: oneOf[v1.TokenRequest](), inOpt: true, codes: map[int]*apiBody{201: oneOf[v1.Token]()}},
		{pattern: "GET " + sa + "/tokens", summary: "List a service account's tokens.", query: pageQuery, codes: map[int]*apiBody{200: pageOf[v1.Token]()}},
		{pattern: "DELETE " + sa + "/tokens/{token}", summary: "Revoke a service account token.", codes: map[int]*apiBody{204: noBody}},
	}
	// The project children written synchronously share one set of routes.
	for _, res := range []struct {
		plural, what, name string
		t                  reflect.Type
	}{
		{"cloudaccounts", "cloudaccount", "cloud account", of[v1.CloudAccount]()},
		{"secrets", "secret", "project secret", of[v1.Secret]()},
		{"profiles", "profile", "cluster profile", of[v1.Profile]()},
		{"members", "member", "project member", of[v1.Member]()},
		{"serviceaccounts", "serviceaccount", "service account", of[v1.ServiceAccount]()},
		{"groupbindings", "groupbinding", "group binding", of[v1.GroupBinding]()},
	} {
		base := project + "/" + res.plural
		one := base + "/{" + res.what + "}"
		b := &apiBody{t: res.t}
		routes = append(routes,
			apiRoute{pattern: "GET " + base, summary: "List " + res.name + "s.", query: pageQuery, codes: map[int]*apiBody{200: {t: res.t, list: true}}},
			apiRoute{pattern: "PUT " + one, summary: "Create or replace a " + res.name + ".", in: b, codes: map[int]*apiBody{200: b, 201: b}},
			apiRoute{pattern: "GET " + one, summary: "Get a " + res.name + ".", codes: map[int]*apiBody{200: b}},
			apiRoute{pattern: "DELETE " + one, summary: "Delete a " + res.name + ".", codes: map[int]*apiBody{204: noBody}},
		)
	}
	return routes
}

// TestOpenAPIDocument: the document the server embeds and the one in docs/
// are what the generator makes of the route table and the wire types, byte
// for byte. Run with -update to write both.
func TestOpenAPIDocument(t *testing.T) {
	want := generateOpenAPI(t)
	if *update {
		for _, f := range []string{openAPIFile, openAPIDocsFile} {
			if err := os.WriteFile(f, want, 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
	for _, f := range []string{openAPIFile, openAPIDocsFile} {
		got, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, want) {
			t.Errorf("%s is not what the route table and api/v1 make (go test ./internal/server -run TestOpenAPIDocument -update):\n%s",
				f, cmp.Diff(string(want), string(got)))
		}
	}
}

type obj = map[string]any

// schemaGen turns Go wire types into JSON Schemas (2020-12, as OpenAPI 3.1
// has them), as encoding/json writes and reads them.
type schemaGen struct {
	components obj
}

// ref returns the schema of t. Named structs become components: an answer's
// (out) with every field encoding/json always writes required and no other
// property allowed; a request's (in, named NameInput) with nothing
// required and null allowed anywhere (the server fills in defaults).
func (g *schemaGen) ref(t reflect.Type, out bool) obj {
	switch {
	case t == of[time.Time]():
		return obj{"type": "string", "format": "date-time"}
	case t.Kind() == reflect.Pointer:
		return g.ref(t.Elem(), out)
	case t.Kind() == reflect.Struct && t.Name() != "" && !strings.Contains(t.Name(), "["):
		name := t.Name()
		if !out {
			name += "Input"
		}
		if _, ok := g.components[name]; !ok {
			g.components[name] = obj{} // a placeholder against recursion
			g.components[name] = g.object(t, out)
		}
		return obj{"$ref": "#/components/schemas/" + name}
	case t.Kind() == reflect.Struct:
		return g.object(t, out)
	case t.Kind() == reflect.Slice && t.Elem().Kind() == reflect.Uint8:
		return obj{"type": "string", "contentEncoding": "base64"}
	case t.Kind() == reflect.Slice || t.Kind() == reflect.Array:
		return obj{"type": "array", "items": g.field(t.Elem(), out, false)}
	case t.Kind() == reflect.Map:
		return obj{"type": "object", "additionalProperties": g.field(t.Elem(), out, false)}
	case t.Kind() == reflect.Interface:
		return obj{}
	case t.Kind() == reflect.String:
		return obj{"type": "string"}
	case t.Kind() == reflect.Bool:
		return obj{"type": "boolean"}
	case t.Kind() >= reflect.Int && t.Kind() <= reflect.Uint64:
		return obj{"type": "integer"}
	case t.Kind() == reflect.Float32 || t.Kind() == reflect.Float64:
		return obj{"type": "number"}
	}
	panic("openapi: no schema for " + t.String())
}

// field is the schema of a value of type t inside an object or a
// container: null is allowed where encoding/json may write it (a nil
// pointer, slice or map that is not omitted), and in requests anywhere
// encoding/json reads it.
func (g *schemaGen) field(t reflect.Type, out, omitted bool) obj {
	s := g.ref(t, out)
	nullable := !out
	switch t.Kind() {
	case reflect.Pointer, reflect.Slice, reflect.Map, reflect.Interface:
		nullable = nullable || !omitted
	}
	if t.Kind() == reflect.Interface || !nullable {
		return s
	}
	if typ, ok := s["type"].(string); ok {
		c := maps.Clone(s)
		c["type"] = []string{typ, "null"}
		return c
	}
	return obj{"anyOf": []obj{s, {"type": "null"}}}
}

func (g *schemaGen) object(t reflect.Type, out bool) obj {
	props := obj{}
	var required []string
	for f := range fields(t) {
		tag := f.Tag.Get("json")
		if tag == "-" {
			continue
		}
		name, opts, _ := strings.Cut(tag, ",")
		if name == "" {
			name = f.Name
		}
		omitempty := slices.Contains(strings.Split(opts, ","), "omitempty")
		// encoding/json's omitempty leaves a zero time.Time or struct in.
		if omitempty && f.Type.Kind() == reflect.Struct {
			omitempty = false
		}
		props[name] = g.field(f.Type, out, omitempty)
		if e, ok := enums[t.Name()+"."+name]; ok && out {
			props[name].(obj)["enum"] = e
		}
		if out && !omitempty {
			required = append(required, name)
		}
	}
	s := obj{"type": "object", "properties": props, "additionalProperties": false}
	if len(required) > 0 {
		slices.Sort(required)
		s["required"] = required
	}
	return s
}

// fields yields t's exported fields, those of embedded structs in their
// place, as encoding/json sees them.
func fields(t reflect.Type) func(func(reflect.StructField) bool) {
	return func(yield func(reflect.StructField) bool) {
		for i := range t.NumField() {
			f := t.Field(i)
			if f.Anonymous && f.Tag.Get("json") == "" {
				ft := f.Type
				if ft.Kind() == reflect.Pointer {
					ft = ft.Elem()
				}
				for ef := range fields(ft) {
					if !yield(ef) {
						return
					}
				}
				continue
			}
			if !f.IsExported() {
				continue
			}
			if !yield(f) {
				return
			}
		}
	}
}

// enums are the values a field of an answer takes: the states clients
// branch on.
var enums = map[string][]string{
	"Operation.status":                {v1.OpInProgress, v1.OpSucceeded, v1.OpFailed, v1.OpCanceled},
	"ClusterStatus.provisioningState": {v1.StateCreating, v1.StateUpdating, v1.StateDeleting, v1.StateSucceeded, v1.StateFailed, v1.StateCanceled, v1.StateHibernated},
	"Step.state":                      {v1.StepPending, v1.StepRunning, v1.StepSucceeded, v1.StepFailed, v1.StepSkipped, v1.StepCanceled},
	"JobStatus.phase":                 {v1.JobPending, v1.JobRunning, v1.JobSucceeded, v1.JobFailed},
	"ClusterCost.basis":               {v1.CostRunning, v1.CostHibernated},
	"OperationProperties.kind":        {v1.KindCreate, v1.KindUpdate, v1.KindDelete, v1.KindProvision, v1.KindReset, v1.KindRemoveNode, v1.KindRepair, v1.KindAutoscale, v1.KindHibernate, v1.KindResume},
	"Node.state": {v1.NodeDiscovered, v1.NodePrecheckFailed, v1.NodeApproved, v1.NodeConfigured, v1.NodeProvisioning,
		v1.NodeReady, v1.NodeNotReady, v1.NodeDeleting, v1.NodeFailed},
	"Member.role":         {v1.RoleViewer, v1.RoleOperator, v1.RoleAdmin},
	"ServiceAccount.role": {v1.RoleViewer, v1.RoleOperator, v1.RoleAdmin},
}

var pathParam = regexp.MustCompile(`\{([a-z]+)\}`)

// paramDocs say what a path or query parameter is.
var paramDocs = map[string]string{
	"project": "a project's name", "cluster": "a cluster's name", "node": "a node's name",
	"operation": "an operation's id", "cloudaccount": "a cloud account's name", "profile": "a cluster profile's name",
	"user": "a user's name", "member": "a member's user name", "serviceaccount": "a service account's name",
	"token":     "a token's id",
	"top":       "at most this many items (1 to 1000)",
	"skipToken": "where the page goes on: from the nextLink of the page before",
	"wait":      "long-poll: a Go duration, at most 60s; the answer comes when the resource changes or the time is up",
	"force":     "true: a forced delete (only after a terminal provider error)",
	"arch":      "amd64 or arm64",
	"since":     "an RFC 3339 time", "until": "an RFC 3339 time",
	"tail": "the last N lines", "component": "the agent component whose lines to show",
	"days": "how many days back the window begins (1 to 31; 30 when absent)",
}

func generateOpenAPI(t testing.TB) []byte {
	t.Helper()
	g := &schemaGen{components: obj{}}
	errRef := g.ref(of[v1.ErrorResponse](), true)
	paths := obj{}
	for _, rt := range apiRoutes() {
		method, path, _ := strings.Cut(rt.pattern, " ")
		item, _ := paths[path].(obj)
		if item == nil {
			item = obj{}
			paths[path] = item
		}
		op := obj{
			"operationId": operationID(method, path),
			"summary":     rt.summary,
		}
		if rt.public {
			op["security"] = []obj{}
		}
		var params []obj
		for _, m := range pathParam.FindAllStringSubmatch(path, -1) {
			params = append(params, obj{"name": m[1], "in": "path", "required": true,
				"description": paramDocs[m[1]], "schema": obj{"type": "string"}})
		}
		for _, q := range rt.query {
			doc, ok := rt.queryDocs[q]
			if !ok {
				doc = paramDocs[q]
			}
			params = append(params, obj{"name": q, "in": "query", "description": doc, "schema": obj{"type": "string"}})
		}
		if method == "PUT" || method == "PATCH" || method == "DELETE" {
			params = append(params, obj{"name": "If-Match", "in": "header",
				"description": "the etag the change expects; 412 when stale", "schema": obj{"type": "string"}})
		}
		if len(params) > 0 {
			op["parameters"] = params
		}
		if rt.in != nil {
			media := rt.in.media
			if media == "" {
				media = "application/json"
			}
			content := obj{media: obj{"schema": g.ref(rt.in.t, false)}}
			if media != "application/json" {
				content["application/json"] = content[media]
			}
			rb := obj{"required": !rt.inOpt, "content": content}
			if rt.in.doc != "" {
				rb["description"] = rt.in.doc
			}
			op["requestBody"] = rb
		}
		responses := obj{"default": obj{
			"description": "an error: {\"error\": {\"code\", \"message\", \"target\", \"details\"}}",
			"content":     obj{"application/json": obj{"schema": errRef}},
		}}
		for code, b := range rt.codes {
			r := obj{"description": http.StatusText(code)}
			if b.doc != "" {
				r["description"] = b.doc
			}
			switch {
			case b.t == nil && b.media != "":
				content := obj{}
				for _, media := range strings.Split(b.media, ",") {
					content[media] = obj{"schema": mediaSchema(media)}
				}
				r["content"] = content
			case b.list:
				r["content"] = obj{"application/json": obj{"schema": g.list(b.t)}}
			case b.t != nil:
				r["content"] = obj{"application/json": obj{"schema": g.ref(b.t, true)}}
			}
			if rt.async {
				r["headers"] = asyncHeaders
			}
			responses[strconv.Itoa(code)] = r
		}
		op["responses"] = responses
		if rt.async && !strings.HasSuffix(path, "/cancel") {
			// What ARM code generators (autorest) read to make a poller;
			// a cancel answers with the URL of the operation it asks to
			// stop, not of one it starts.
			op["x-ms-long-running-operation"] = true
			via := "azure-async-operation"
			if method == "PUT" || method == "PATCH" {
				via = "original-uri"
			}
			op["x-ms-long-running-operation-options"] = obj{"final-state-via": via}
		}
		item[strings.ToLower(method)] = op
	}
	doc := obj{
		"openapi":           "3.1.0",
		"jsonSchemaDialect": "https://spec.openapis.org/oas/3.1/dialect/base",
		"info": obj{
			"title":   "Kiln API",
			"version": "v1",
			"description": "Kiln's control plane API. Every change to a cluster is asynchronous: it answers at once with the " +
				"operation's absolute URL in Azure-AsyncOperation and Location, as Azure Resource Manager's long-running " +
				"operations do. Generated from the server's route table and api/v1 (internal/server/openapi_gen_test.go); see docs/api.md.",
		},
		"servers":    []obj{{"url": "/", "description": "the kilnd serving this document"}},
		"security":   []obj{{"bearer": []string{}}},
		"paths":      paths,
		"components": obj{"schemas": g.components, "securitySchemes": obj{"bearer": obj{"type": "http", "scheme": "bearer", "description": "a Kiln token (kilnd --dev writes the admin's to DATA_DIR/admin.token)"}}},
	}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	enc.SetIndent("", "  ")
	if err := enc.Encode(doc); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

var asyncHeaders = obj{
	"Azure-AsyncOperation": obj{"description": "the operation's absolute URL, to poll", "required": true, "schema": obj{"type": "string", "format": "uri"}},
	"Location":             obj{"description": "the operation's absolute URL", "required": true, "schema": obj{"type": "string", "format": "uri"}},
	"Retry-After":          obj{"description": "seconds to wait before polling", "schema": obj{"type": "string"}},
}

// list is the schema of a page of t.
func (g *schemaGen) list(t reflect.Type) obj {
	return obj{"type": "object", "required": []string{"value"}, "additionalProperties": false,
		"properties": obj{
			"value":    obj{"type": "array", "items": g.ref(t, true)},
			"nextLink": obj{"type": "string", "description": "the next page's URL (a path), absent on the last page"},
		}}
}

// operationID is a name for a route: "put_v1_projects_project_clusters_cluster".
func operationID(method, path string) string {
	var b strings.Builder
	b.WriteString(strings.ToLower(method))
	for _, seg := range strings.Split(path, "/") {
		seg = strings.Trim(seg, "{}")
		if seg == "" {
			continue
		}
		b.WriteByte('_')
		b.WriteString(strings.NewReplacer(".", "_", "-", "_").Replace(seg))
	}
	return b.String()
}

// mediaSchema is the schema of a body that is not JSON.
func mediaSchema(media string) obj {
	switch media {
	case "application/yaml":
		return obj{"type": "object", "description": "YAML"}
	case "text/plain":
		return obj{"type": "string"}
	}
	return obj{"type": "string", "contentMediaType": media}
}
