package azure

import (
	"io"
	"net/http"
	"sort"
	"strconv"
	"strings"

	"github.com/google/uuid"
)

// Azure Resource Manager's protocol as every call gets it: a bearer token
// the local Azure issued (token.go), an api-version query parameter (any
// value; the local Azure has one shape per resource type), errors as
// {"error":{"code","message"}}, lists as {"value":[...],"nextLink"}, and
// ids compared case-insensitively.

// target is what an ARM URL names:
//
//	/subscriptions[/SUB]
//	/subscriptions/SUB/resourcegroups[/GROUP]
//	/subscriptions/SUB[/resourcegroups/GROUP]/resources
//	/subscriptions/SUB/providers/NS/locations/LOC/operations|operationResults/ID
//	/subscriptions/SUB[/resourceGroups/GROUP]/providers/NS/TYPE[/NAME[/TYPE[/NAME]]]
type target struct {
	sub       string
	group     string // "" when the URL names no group
	groups    bool   // the collection of the subscription's groups
	resources bool   // the generic list of a group's or subscription's resources
	ns        string
	types     []string
	names     []string // one per type (a resource), or one fewer (a collection)
	opID      string
	opResult  bool // operationResults rather than operations
}

// typ is the full resource type the target names, as the URL spells it.
func (t target) typ() string { return t.ns + "/" + strings.Join(t.types, "/") }

// isResource reports whether the target names one resource rather than a
// collection.
func (t target) isResource() bool { return len(t.names) == len(t.types) }

func parseTarget(path string) (target, bool) {
	seg := strings.Split(strings.Trim(path, "/"), "/")
	var t target
	if len(seg) < 2 || !strings.EqualFold(seg[0], "subscriptions") {
		return t, len(seg) == 1 && strings.EqualFold(seg[0], "subscriptions")
	}
	t.sub, seg = seg[1], seg[2:]
	if len(seg) > 0 && strings.EqualFold(seg[0], "resourcegroups") {
		if len(seg) == 1 {
			t.groups = true
			return t, true
		}
		t.group, seg = seg[1], seg[2:]
	}
	if len(seg) == 1 && strings.EqualFold(seg[0], "resources") {
		t.resources = true
		return t, true
	}
	if len(seg) == 0 {
		return t, true
	}
	if len(seg) < 3 || !strings.EqualFold(seg[0], "providers") {
		return t, false
	}
	t.ns, seg = seg[1], seg[2:]
	if t.group == "" && len(seg) == 4 && strings.EqualFold(seg[0], "locations") {
		switch {
		case strings.EqualFold(seg[2], "operations"):
			t.opID = seg[3]
			return t, true
		case strings.EqualFold(seg[2], "operationResults"):
			t.opID, t.opResult = seg[3], true
			return t, true
		}
	}
	for i, s := range seg {
		if s == "" {
			return t, false
		}
		if i%2 == 0 {
			t.types = append(t.types, s)
		} else {
			t.names = append(t.names, s)
		}
	}
	return t, true
}

// call is one ARM call being answered.
type call struct {
	r          *http.Request
	body       []byte
	base       string // https://HOST, for absolute URLs
	apiVersion string
	t          target
	who        principal
	header     http.Header // headers of the answer
}

// reply is a successful answer: its status and body (nil: none).
type reply struct {
	status int
	body   any
}

func methodNotAllowed(c *call) *armError {
	return errorf(http.StatusMethodNotAllowed, "MethodNotAllowed", "The requested method %s is not allowed for %s.", c.r.Method, c.r.URL.Path)
}

// serveARM answers one ARM call. Every call is serialised.
func (s *Server) serveARM(w http.ResponseWriter, r *http.Request) {
	id := uuid.NewString()
	w.Header().Set("x-ms-request-id", id)
	w.Header().Set("x-ms-correlation-request-id", id)
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxBody))
	if err != nil {
		writeARMError(w, errorf(http.StatusRequestEntityTooLarge, "RequestEntityTooLarge", "The request content is larger than %d bytes.", maxBody))
		return
	}
	c := &call{r: r, body: body, base: baseURL(r), apiVersion: r.URL.Query().Get("api-version"), header: w.Header()}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.calls++
	s.base = c.base
	rep, err := s.arm(c)
	if s.dirty {
		s.dirty = false
		if serr := s.save(); serr != nil {
			s.log.Error("saving the state", "err", serr)
			err = serr
		}
	}
	if err != nil {
		writeARMError(w, err)
		return
	}
	if rep.body == nil {
		w.WriteHeader(rep.status)
		return
	}
	writeJSON(w, rep.status, rep.body)
}

// arm checks a call as ARM does before any resource provider sees it,
// then answers it. Callers hold s.mu.
func (s *Server) arm(c *call) (reply, error) {
	who, err := s.authenticate(c.r)
	if err != nil {
		return reply{}, err
	}
	c.who = who
	if c.apiVersion == "" {
		return reply{}, badRequest("MissingApiVersionParameter", "The api-version query parameter (?api-version=) is required for all requests.")
	}
	if scope, rest, ok := authorizationPath(c.r.URL.Path); ok {
		t, ok := parseTarget(scope)
		if !ok || t.sub == "" {
			return reply{}, badRequest("InvalidScope", "The scope '%s' is not valid for this operation.", scope)
		}
		c.t = t
		if err := s.throttle(c); err != nil {
			return reply{}, err
		}
		if !s.hasSubscription(t.sub) {
			return reply{}, errorf(http.StatusNotFound, "SubscriptionNotFound", "The subscription '%s' could not be found.", t.sub)
		}
		return s.serveAuthorization(c, scope, rest)
	}
	t, ok := parseTarget(c.r.URL.Path)
	if !ok {
		return reply{}, errorf(http.StatusNotFound, "NotFound", "The requested resource path '%s' was not found.", c.r.URL.Path)
	}
	c.t = t
	if err := s.throttle(c); err != nil {
		return reply{}, err
	}
	s.settleDue()
	if t.sub == "" {
		return s.listSubscriptions(c)
	}
	if !s.hasSubscription(t.sub) {
		return reply{}, errorf(http.StatusNotFound, "SubscriptionNotFound", "The subscription '%s' could not be found.", t.sub)
	}
	if err := s.authorize(c); err != nil {
		return reply{}, err
	}
	switch {
	case t.opID != "":
		return s.pollOperation(c)
	case t.groups:
		return s.listGroups(c)
	case t.resources:
		return s.listGroupResources(c)
	case t.ns == "" && t.group != "":
		return s.serveGroup(c)
	case t.ns == "":
		return s.getSubscription(c)
	}
	if t.group == "" && strings.EqualFold(t.ns, "Microsoft.Compute") {
		switch {
		case len(t.types) == 1 && len(t.names) == 0 && strings.EqualFold(t.types[0], "skus"):
			return s.listSKUs(c)
		case len(t.types) == 2 && len(t.names) == 1 && strings.EqualFold(t.types[0], "locations") && strings.EqualFold(t.types[1], "usages"):
			return s.listUsages(c, t.names[0])
		}
	}
	if n := len(t.types); n >= 2 && len(t.names) == n-1 && t.group != "" {
		parent := s.kinds[strings.ToLower(t.ns+"/"+strings.Join(t.types[:n-1], "/"))]
		if a, ok := parent.actionOf(c.r.Method, t.types[n-1]); ok {
			return s.act(c, parent, a)
		}
	}
	k, ok := s.kinds[strings.ToLower(t.typ())]
	if !ok {
		return reply{}, badRequest("InvalidResourceType", "The resource type '%s' could not be found in the namespace '%s' for api version '%s'.",
			strings.Join(t.types, "/"), t.ns, c.apiVersion)
	}
	if !t.isResource() {
		if c.r.Method != http.MethodGet {
			return reply{}, methodNotAllowed(c)
		}
		return s.listResources(c, k)
	}
	if t.group == "" {
		return reply{}, errorf(http.StatusNotFound, "NotFound", "The requested resource path '%s' was not found.", c.r.URL.Path)
	}
	switch c.r.Method {
	case http.MethodGet:
		return s.getResource(c, k)
	case http.MethodPut:
		return s.putResource(c, k)
	case http.MethodPatch:
		return s.patchResource(c, k)
	case http.MethodDelete:
		return s.deleteResource(c, k)
	}
	return reply{}, methodNotAllowed(c)
}

// page answers one page of items, sorted by id, with a nextLink when more
// follow ($skiptoken is the index of the next page's first item).
func (s *Server) page(c *call, items []doc) reply {
	sort.Slice(items, func(i, j int) bool { return key(items[i].id()) < key(items[j].id()) })
	skip, _ := strconv.Atoi(c.r.URL.Query().Get("$skiptoken"))
	skip = min(max(skip, 0), len(items))
	end := min(skip+s.opts.PageSize, len(items))
	body := map[string]any{"value": items[skip:end]}
	if end < len(items) {
		body["nextLink"] = c.base + c.r.URL.Path + "?api-version=" + c.apiVersion + "&$skiptoken=" + strconv.Itoa(end)
	}
	return reply{status: http.StatusOK, body: body}
}

func (s *Server) hasSubscription(sub string) bool {
	for _, x := range s.opts.Subscriptions {
		if strings.EqualFold(x, sub) {
			return true
		}
	}
	return false
}

func (s *Server) subscriptionDoc(sub string) doc {
	return doc{"id": "/subscriptions/" + sub, "subscriptionId": sub, "tenantId": s.opts.Tenant,
		"displayName": "Kiln local " + sub, "state": "Enabled", "authorizationSource": "RoleBased",
		"subscriptionPolicies": map[string]any{"locationPlacementId": "Public_2014-09-01", "quotaId": "PayAsYouGo_2014-09-01", "spendingLimit": "Off"}}
}

func (s *Server) listSubscriptions(c *call) (reply, error) {
	if c.r.Method != http.MethodGet {
		return reply{}, methodNotAllowed(c)
	}
	var out []doc
	for _, sub := range s.opts.Subscriptions {
		out = append(out, s.subscriptionDoc(sub))
	}
	return s.page(c, out), nil
}

func (s *Server) getSubscription(c *call) (reply, error) {
	if c.r.Method != http.MethodGet {
		return reply{}, methodNotAllowed(c)
	}
	for _, sub := range s.opts.Subscriptions {
		if strings.EqualFold(sub, c.t.sub) {
			return reply{status: http.StatusOK, body: s.subscriptionDoc(sub)}, nil
		}
	}
	return reply{}, errorf(http.StatusNotFound, "SubscriptionNotFound", "The subscription '%s' could not be found.", c.t.sub)
}
