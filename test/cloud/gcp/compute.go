package gcp

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"maps"
	"net/http"
	"regexp"
	"slices"
	"strconv"
	"strings"
)

// Compute Engine's REST protocol as every call gets it: a bearer token
// the local Compute Engine issued (token.go), the caller's permission
// (iam.go), JSON bodies, errors as Google's body (errors.go), lists as
// {"kind","id","items","nextPageToken","selfLink"} paged by maxResults and
// pageToken. URLs are
//
//	/compute/v1/projects/P
//	/compute/v1/projects/P/zones[/Z[/machineTypes[/T]]]
//	/compute/v1/projects/P/regions[/R]
//	/compute/v1/projects/P/regions/R/{subnetworks|routers|operations}[/NAME[/ACTION]]
//	/compute/v1/projects/P/zones/Z/operations[/NAME[/wait]]
//	/compute/v1/projects/P/global/{networks|firewalls|operations}[/NAME[/ACTION]]
//	/compute/v1/projects/P/aggregated/{subnetworks|routers|operations}

// doc is a resource as Compute answers it: kept as the client wrote it,
// with what Compute fills in.
type doc = map[string]any

// call is one Compute call: who makes it and what its URL names.
type call struct {
	account ServiceAccount
	base    string // scheme and host, for links
	project string
	scope   string // "global", "regions/R", "zones/Z"; "" for the project
	coll    string // networks, subnetworks, operations, ...; "" for the project or a region or zone itself
	name    string // the resource; "" for a collection
	action  string // what follows the name (wait, setLabels)
	body    doc    // an insert's body, read before its permission is checked
}

// path is what the call names, under compute/v1.
func (c *call) path() string {
	p := "projects/" + c.project
	if c.scope != "" {
		p += "/" + c.scope
	}
	if c.coll != "" {
		p += "/" + c.coll
		if c.name != "" {
			p += "/" + c.name
		}
	}
	return p
}

// link is the absolute URL of a path under compute/v1.
func (c *call) link(path string) string { return c.base + "/compute/v1/" + path }

// region is the call's region ("" outside one).
func (c *call) region() string {
	r, _ := strings.CutPrefix(c.scope, "regions/")
	if r == c.scope {
		return ""
	}
	return r
}

// parseCall reads a Compute URL's path (after computePrefix).
func parseCall(rest string) (*call, bool) {
	seg := strings.Split(strings.Trim(rest, "/"), "/")
	c := &call{project: seg[0]}
	seg = seg[1:]
	if len(seg) == 0 {
		return c, true
	}
	switch seg[0] {
	case "global":
		if len(seg) < 2 {
			return nil, false
		}
		c.scope, seg = "global", seg[1:]
	case "aggregated":
		if len(seg) != 2 {
			return nil, false
		}
		c.scope, c.coll = "aggregated", seg[1]
		return c, true
	case "regions", "zones":
		if len(seg) == 1 {
			c.coll = seg[0]
			return c, true
		}
		c.scope, seg = seg[0]+"/"+seg[1], seg[2:]
		if len(seg) == 0 {
			return c, true
		}
	default:
		return nil, false
	}
	c.coll = seg[0]
	if len(seg) > 1 {
		c.name = seg[1]
	}
	if len(seg) > 2 {
		c.action = seg[2]
	}
	return c, len(seg) <= 3
}

// serveCompute answers a Compute call.
func (s *Server) serveCompute(w http.ResponseWriter, r *http.Request) {
	c, ok := parseCall(strings.TrimPrefix(r.URL.Path, computePrefix))
	if !ok {
		writeError(w, errorf(http.StatusNotFound, "notFound", "The local Compute Engine has no %s %s", r.Method, r.URL.Path))
		return
	}
	c.base = baseURL(r)
	s.mu.Lock()
	defer s.mu.Unlock()
	s.calls++
	s.dirty = false
	s.pending = pending{}
	v, status, err := s.compute(c, r)
	if err == nil && s.dirty {
		err = s.save()
	}
	if err != nil {
		s.log.Info("refused", "method", r.Method, "path", r.URL.Path, "err", err)
		writeError(w, err)
		return
	}
	if status == http.StatusNoContent {
		w.WriteHeader(status)
		return
	}
	writeJSON(w, status, v)
}

func (s *Server) compute(c *call, r *http.Request) (any, int, error) {
	a, err := s.authenticate(r)
	if err != nil {
		return nil, 0, err
	}
	c.account = a
	if err := s.throttle(); err != nil {
		return nil, 0, err
	}
	if !s.projects[c.project] {
		// Google answers 403 for a project the caller cannot see, which
		// a project that is not there is to everyone.
		return nil, 0, forbidden("compute.projects.get", "projects/"+c.project)
	}
	if slices.Contains(s.opts.ComputeDisabled, c.project) {
		return nil, 0, errorf(http.StatusForbidden, "accessNotConfigured",
			"Compute Engine API has not been used in project %s before or it is disabled. Enable it by visiting https://console.developers.google.com/apis/api/compute.googleapis.com/overview?project=%s then retry.", c.project, c.project)
	}
	if err := s.checkScope(c); err != nil {
		return nil, 0, err
	}
	target := c.path()
	if k, ok := kinds[c.coll]; ok && k.in(c) && c.name == "" && r.Method == http.MethodPost {
		// Compute names the resource an insert would make.
		if c.body, err = readBody(r); err != nil {
			return nil, 0, err
		}
		if n, _ := c.body["name"].(string); n != "" {
			target += "/" + n
		}
	}
	if p := permission(c, r.Method); !allowed(a, c.project, p) {
		return nil, 0, forbidden(p, target)
	}
	if c.scope == "aggregated" {
		return s.aggregated(c, r)
	}
	if c.coll == "operations" {
		return s.operations(c, r)
	}
	if k, ok := kinds[c.coll]; ok && k.in(c) {
		return s.resource(c, k, r)
	}
	if c.coll == "instanceGroups" && strings.HasPrefix(c.scope, "regions/") {
		return s.instanceGroups(c, r)
	}
	if c.coll == "autoscalers" && c.name == "" && r.Method == http.MethodGet && c.scope != "global" {
		// The local Compute Engine has no autoscalers: its lists are
		// empty (gcloud's group lists read them).
		return list(s, c, r, "compute#autoscalerList", func(string) (doc, bool) { return nil, false }, map[string]doc{})
	}
	return s.catalog(c, r)
}

// checkScope refuses a region or zone the project does not have.
func (s *Server) checkScope(c *call) error {
	switch kind, name, _ := strings.Cut(c.scope, "/"); kind {
	case "regions":
		if _, ok := s.regions[name]; !ok {
			return notFound("projects/" + c.project + "/regions/" + name)
		}
	case "zones":
		if _, ok := s.zones[name]; !ok {
			return notFound("projects/" + c.project + "/zones/" + name)
		}
	}
	return nil
}

// permission is the IAM permission a call needs: compute.COLLECTION.VERB
// (compute.networks.create, compute.regionOperations.get, compute.zones.list).
func permission(c *call, method string) string {
	scopeKind, _, _ := strings.Cut(c.scope, "/")
	coll := c.coll
	switch {
	case c.scope == "" && c.coll == "":
		return "compute.projects.get"
	case c.scope == "": // projects/P/regions, projects/P/zones
		return "compute." + c.coll + ".list"
	case c.coll == "": // a region or a zone
		return "compute." + scopeKind + ".get"
	case c.scope == "aggregated":
		return "compute." + c.coll + ".list"
	case c.coll == "operations":
		coll = map[string]string{"global": "globalOperations", "regions": "regionOperations", "zones": "zoneOperations"}[scopeKind]
	}
	verb := "get"
	switch {
	case c.action == "wait":
	case actionVerbs[c.action] != "":
		verb = actionVerbs[c.action]
	case c.action != "":
		verb = c.action
	case c.name == "" && method == http.MethodGet:
		verb = "list"
	case c.name == "" && method == http.MethodPost:
		verb = "create"
	case method == http.MethodDelete:
		verb = "delete"
	case method == http.MethodPatch || method == http.MethodPut:
		verb = "update"
	}
	return "compute." + coll + "." + verb
}

// actionVerbs are the permissions' verbs of methods that are not named
// as their permission: a group's resize is compute.instanceGroupManagers.update.
var actionVerbs = map[string]string{"resize": "update", "deleteInstances": "update", "listManagedInstances": "get"}

func methodNotAllowed(r *http.Request) *apiError {
	return errorf(http.StatusMethodNotAllowed, "httpMethodNotAllowed", "The local Compute Engine does not answer %s %s", r.Method, r.URL.Path)
}

// name is a resource name as Compute allows it (RFC 1035).
var name = regexp.MustCompile(`^[a-z](?:[-a-z0-9]{0,61}[a-z0-9])?$`)

// resource answers a collection of kind k or one of its resources.
func (s *Server) resource(c *call, k *kind, r *http.Request) (any, int, error) {
	path := c.path()
	if c.name != "" && c.action != "" {
		return s.action(c, r)
	}
	switch {
	case c.name == "" && r.Method == http.MethodGet:
		return list(s, c, r, k.kind+"List", func(p string) (doc, bool) { d, ok := s.st.Resources[p]; return d, ok }, s.st.Resources)
	case c.name == "" && r.Method == http.MethodPost:
		body := c.body
		n, _ := body["name"].(string)
		if !name.MatchString(n) {
			return nil, 0, invalid("Invalid value for field 'resource.name': '%s'. Must be a match of regex '(?:[a-z](?:[-a-z0-9]{0,61}[a-z0-9])?)'", n)
		}
		c.name = n
		path = c.path()
		if _, ok := s.st.Resources[path]; ok {
			return nil, 0, alreadyExists(path)
		}
		if err := k.prepare(s, c, body, nil); err != nil {
			return nil, 0, err
		}
		s.st.Seq++
		id := fmt.Sprint(resIDBase + s.st.Seq)
		body["kind"], body["id"], body["selfLink"] = k.kind, id, c.link(path)
		body["creationTimestamp"] = stamp(s.opts.Now().UTC())
		fail := s.takeFailure(c.coll)
		if fail == nil && k.admit != nil {
			fail = k.admit(s, c, body)
		}
		if fail == nil {
			s.st.Resources[path] = body
			if k.inserted != nil {
				k.inserted(s, c, body)
			}
		}
		s.dirty = true
		return s.newOperation(c, "insert", path, id, fail), http.StatusOK, nil
	case c.name != "" && c.action == "" && r.Method == http.MethodGet:
		d, ok := s.st.Resources[path]
		if !ok {
			return nil, 0, notFound(path)
		}
		return d, http.StatusOK, nil
	case c.name != "" && c.action == "" && r.Method == http.MethodDelete:
		d, ok := s.st.Resources[path]
		if !ok {
			return nil, 0, notFound(path)
		}
		if k.inUse != nil {
			if by := k.inUse(s, c); by != "" {
				return nil, 0, inUse(k.noun, path, by)
			}
		}
		fail := s.takeFailure(c.coll)
		if fail == nil {
			delete(s.st.Resources, path)
			if k.deleted != nil {
				k.deleted(s, c, d)
			}
		}
		s.dirty = true
		return s.newOperation(c, "delete", path, d["id"], fail), http.StatusOK, nil
	case c.name != "" && c.action == "" && (r.Method == http.MethodPatch || r.Method == http.MethodPut):
		old, ok := s.st.Resources[path]
		if !ok {
			return nil, 0, notFound(path)
		}
		body, err := readBody(r)
		if err != nil {
			return nil, 0, err
		}
		if n, ok := body["name"].(string); ok && n != c.name {
			return nil, 0, invalid("Invalid value for field 'resource.name': '%s'. The name of a resource cannot be changed.", n)
		}
		next := body
		if r.Method == http.MethodPatch {
			next = maps.Clone(old)
			maps.Copy(next, body)
		}
		next["name"] = c.name
		if err := k.prepare(s, c, next, old); err != nil {
			return nil, 0, err
		}
		for _, f := range []string{"kind", "id", "selfLink", "creationTimestamp"} {
			next[f] = old[f]
		}
		opType := map[string]string{http.MethodPatch: "patch", http.MethodPut: "update"}[r.Method]
		fail := s.takeFailure(c.coll)
		if fail == nil {
			s.st.Resources[path] = next
		}
		s.dirty = true
		return s.newOperation(c, opType, path, old["id"], fail), http.StatusOK, nil
	}
	return nil, 0, methodNotAllowed(r)
}

// resIDBase makes resources' ids look as Compute's.
const resIDBase = 1_000_000_000_000_000_000

// readBody reads a JSON object.
func readBody(r *http.Request) (doc, error) {
	var d doc
	dec := json.NewDecoder(http.MaxBytesReader(nil, r.Body, maxBody))
	dec.UseNumber()
	if err := dec.Decode(&d); err != nil || d == nil {
		return nil, errorf(http.StatusBadRequest, "parseError", "Invalid JSON payload received. %v", err)
	}
	return d, nil
}

// list answers a page of the documents under the call's path, in name
// order: maxResults (at most 500, default 500) of them from pageToken, a
// nextPageToken when more follow.
func list[V any](s *Server, c *call, r *http.Request, kind string, get func(string) (doc, bool), all map[string]V) (any, int, error) {
	q := r.URL.Query()
	if q.Get("filter") != "" {
		return nil, 0, invalid("Invalid value for field 'filter': '%s'. The local Compute Engine does not filter lists.", q.Get("filter"))
	}
	start, size, err := page(r)
	if err != nil {
		return nil, 0, err
	}
	prefix := c.path() + "/"
	var paths []string
	for p := range all {
		if strings.HasPrefix(p, prefix) && !strings.Contains(p[len(prefix):], "/") {
			paths = append(paths, p)
		}
	}
	slices.Sort(paths)
	out := map[string]any{"kind": kind, "id": c.path(), "selfLink": c.link(c.path())}
	var items []doc
	for i := start; i < len(paths) && i < start+size; i++ {
		if d, ok := get(paths[i]); ok {
			items = append(items, d)
		}
	}
	if len(items) > 0 {
		out["items"] = items
	}
	if start+size < len(paths) {
		out["nextPageToken"] = pageToken(start + size)
	}
	return out, http.StatusOK, nil
}

// aggregated answers an aggregated list (projects/P/aggregated/COLL, what
// gcloud's lists read): the regional collection's items of every region,
// as {"items": {"regions/R": {"COLL": [...]}}}, paged as a list is over
// them all in path order. A region with none is left out (Compute answers
// it with a warning NO_RESULTS_ON_PAGE).
func (s *Server) aggregated(c *call, r *http.Request) (any, int, error) {
	if r.Method != http.MethodGet {
		return nil, 0, methodNotAllowed(r)
	}
	if f := r.URL.Query().Get("filter"); f != "" {
		return nil, 0, invalid("Invalid value for field 'filter': '%s'. The local Compute Engine does not filter lists.", f)
	}
	k, ok := kinds[c.coll]
	// Compute aggregates its regional and zonal kinds, and instance
	// templates (global and regional); not networks nor firewalls.
	if c.coll != "operations" && (!ok || (k.scope == "global" && c.coll != "instanceTemplates")) {
		return nil, 0, errorf(http.StatusNotFound, "notFound", "The local Compute Engine has no aggregated list of %s", c.coll)
	}
	var paths []string
	for p := range s.st.Resources {
		if ok && inCollection(p, c.project, c.coll) {
			paths = append(paths, p)
		}
	}
	if c.coll == "operations" {
		for p := range s.st.Operations {
			if strings.HasPrefix(p, "projects/"+c.project+"/") {
				paths = append(paths, p)
			}
		}
	}
	slices.Sort(paths)
	start, size, err := page(r)
	if err != nil {
		return nil, 0, err
	}
	items := map[string]any{}
	for i := start; i < len(paths) && i < start+size; i++ {
		d := s.st.Resources[paths[i]]
		if op, ok := s.st.Operations[paths[i]]; ok {
			d = op.Doc
		}
		rest := strings.TrimPrefix(paths[i], "projects/"+c.project+"/")
		scope := rest[:strings.Index(rest, "/"+c.coll+"/")]
		group, _ := items[scope].(map[string]any)
		if group == nil {
			group = map[string]any{}
			items[scope] = group
		}
		list, _ := group[c.coll].([]doc)
		group[c.coll] = append(list, d)
	}
	kind := "compute#operationAggregatedList"
	if ok {
		kind = k.kind + "AggregatedList"
	}
	out := map[string]any{"kind": kind, "id": c.path(), "selfLink": c.link(c.path()), "items": items}
	if start+size < len(paths) {
		out["nextPageToken"] = pageToken(start + size)
	}
	return out, http.StatusOK, nil
}

// inCollection reports whether path is a resource of coll in project.
func inCollection(path, project, coll string) bool {
	return strings.HasPrefix(path, "projects/"+project+"/") && strings.Contains(path, "/"+coll+"/")
}

// page reads a list's maxResults (at most 500, default 500) and pageToken
// (where the page starts).
func page(r *http.Request) (start, size int, err error) {
	q := r.URL.Query()
	size = DefaultPageSize
	if v := q.Get("maxResults"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 0 || n > DefaultPageSize {
			return 0, 0, invalid("Invalid value for field 'maxResults': '%s'. Must be less than or equal to 500", v)
		}
		if n > 0 {
			size = n
		}
	}
	if t := q.Get("pageToken"); t != "" {
		b, _ := base64.RawURLEncoding.DecodeString(t)
		n, ok := strings.CutPrefix(string(b), "from:")
		var err error
		if start, err = strconv.Atoi(n); err != nil || !ok || start < 0 {
			return 0, 0, invalid("Invalid value for field 'pageToken': '%s'. Invalid page token.", t)
		}
	}
	return start, size, nil
}

// pageToken is the token of the page starting at start.
func pageToken(start int) string {
	return base64.RawURLEncoding.EncodeToString([]byte("from:" + strconv.Itoa(start)))
}
