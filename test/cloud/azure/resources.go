package azure

import (
	"encoding/json"
	"net/http"
	"slices"
	"strings"

	"github.com/google/uuid"
)

// Resources are generic: a document per resource id (id, name, type,
// location, tags, sku, properties, etag) kept as the client wrote it, with
// what ARM fills in (provisioningState, etag, resourceGuid) and what ARM
// computes when answering (a network's subnets, a security group's
// subnets). A kind adds only what ARM checks or computes for its type.

// doc is a resource as ARM answers it (JSON).
type doc map[string]any

func (d doc) str(k string) string { v, _ := d[k].(string); return v }
func (d doc) id() string          { return d.str("id") }
func (d doc) name() string        { return d.str("name") }
func (d doc) typ() string         { return d.str("type") }
func (d doc) location() string    { return d.str("location") }

// props returns the document's properties, made when it has none.
func (d doc) props() map[string]any {
	p, ok := d["properties"].(map[string]any)
	if !ok {
		p = map[string]any{}
		d["properties"] = p
	}
	return p
}

// refID is the id of a reference {"id": ...}; "" when v is none.
func refID(v any) string {
	m, _ := v.(map[string]any)
	id, _ := m["id"].(string)
	return id
}

// clone is a deep copy of d (through JSON: a document is JSON).
func clone(d doc) doc {
	b, _ := json.Marshal(d)
	var out doc
	_ = json.Unmarshal(b, &out)
	return out
}

// kind is what ARM does for one resource type beyond keeping its document.
type kind struct {
	typ string // as ARM spells it: Microsoft.Network/virtualNetworks/subnets
	// parent is a nested resource's parent kind (subnets: virtual
	// networks); inline is the nested kind a parent's document also holds
	// in its properties, under the nested kind's inlineProp.
	parent     *kind
	inline     *kind
	inlineProp string
	// check refuses a document ARM would refuse; parent is the nested
	// resource's parent (nil for a top-level one).
	check func(s *Server, d, parent doc) error
	// checkChildren refuses a parent's nested resources as a whole (a
	// network's subnets overlapping).
	checkChildren func(s *Server, parent doc, kids []doc) error
	// fill sets what ARM sets on a PUT (a public IP's address); old is
	// the document before, nil on create.
	fill func(s *Server, d, old doc)
	// render adds the read-only properties ARM computes when answering.
	render func(s *Server, d doc)
	// inUse refuses a DELETE of a resource others still use.
	inUse func(s *Server, d doc) error
	// machine: the resource is a virtual machine, whose create and delete
	// end when its machine has been made or removed (Options.Machines).
	machine bool
	// sync: ARM writes and deletes the resource at once, with no
	// long-running operation (a managed identity).
	sync bool
	// actions are what the resource answers under its id, by "METHOD
	// name" (lower case): POST .../start, GET .../instanceView.
	actions map[string]action
	// written runs after a PUT stored the document and began its
	// operation (a scale set makes or deletes its virtual machines);
	// deleting after a DELETE began its operation.
	written  func(s *Server, d, old doc, op *operation) error
	deleting func(s *Server, d doc, op *operation)
}

// action answers a call of one of a resource's actions; d is the
// resource.
type action func(s *Server, c *call, d doc) (reply, error)

// actionOf is the kind's action called by method under name.
func (k *kind) actionOf(method, name string) (action, bool) {
	if k == nil {
		return nil, false
	}
	a, ok := k.actions[method+" "+strings.ToLower(name)]
	return a, ok
}

// last is the last part of the kind's type: subnets.
func (k *kind) last() string { return k.typ[strings.LastIndex(k.typ, "/")+1:] }

func newKinds() map[string]*kind {
	m := map[string]*kind{}
	for _, k := range slices.Concat(networkKinds(), computeKinds(), identityKinds(), storageKinds()) {
		m[strings.ToLower(k.typ)] = k
	}
	for _, k := range m {
		if i := strings.LastIndex(k.typ, "/"); strings.Count(k.typ, "/") > 1 {
			k.parent = m[strings.ToLower(k.typ[:i])]
			if k.inlineProp != "" {
				k.parent.inline = k
			}
		}
	}
	return m
}

// render is d as ARM answers it.
func (s *Server) render(d doc) doc {
	out := clone(d)
	k, ok := s.kinds[strings.ToLower(d.typ())]
	if !ok {
		return out
	}
	if k.inline != nil {
		kids := []any{}
		for _, c := range s.children(d.id(), k.inline) {
			kids = append(kids, s.render(c))
		}
		out.props()[k.inline.inlineProp] = kids
	}
	if k.render != nil {
		k.render(s, out)
	}
	s.renderIdentities(out)
	return out
}

// children returns the nested resources of kind k under parent, by id.
// (ARM keeps a network's subnets in the order they were made; the local
// Azure sorts them.)
func (s *Server) children(parent string, k *kind) []doc {
	prefix := key(parent) + "/" + strings.ToLower(k.last()) + "/"
	var out []doc
	for rk, d := range s.st.Resources {
		if strings.HasPrefix(rk, prefix) && !strings.Contains(rk[len(prefix):], "/") {
			out = append(out, d)
		}
	}
	slices.SortFunc(out, func(a, b doc) int { return strings.Compare(key(a.id()), key(b.id())) })
	return out
}

// ofType returns every resource of type typ.
func (s *Server) ofType(typ string) []doc {
	var out []doc
	for _, d := range s.st.Resources {
		if strings.EqualFold(d.typ(), typ) {
			out = append(out, d)
		}
	}
	return out
}

// resourceID is the id the call names: as first written when the resource
// exists, else built from its group's id and the kind's spelling.
func (s *Server) resourceID(c *call, k *kind, group doc) string {
	parts := strings.Split(k.typ, "/")
	id := group.id() + "/providers/" + parts[0]
	for i, t := range parts[1:] {
		id += "/" + t + "/" + c.t.names[i]
		if d, ok := s.st.Resources[key(id)]; ok {
			id = d.id()
		}
	}
	return id
}

func parentID(id string) string {
	id = id[:strings.LastIndex(id, "/")]
	return id[:strings.LastIndex(id, "/")]
}

// lookup is the resource the call names, of kind k.
func (s *Server) lookup(c *call, k *kind) (doc, error) {
	g, err := s.groupOf(c)
	if err != nil {
		return nil, err
	}
	id := s.resourceID(c, k, g)
	d, ok := s.st.Resources[key(id)]
	if !ok {
		return nil, s.notFound(k, id, g)
	}
	return d, nil
}

func (s *Server) getResource(c *call, k *kind) (reply, error) {
	d, err := s.lookup(c, k)
	if err != nil {
		return reply{}, err
	}
	out := s.render(d)
	if k.typ == typeVM && strings.EqualFold(c.r.URL.Query().Get("$expand"), "instanceView") {
		out.props()["instanceView"] = s.instanceView(d)
	}
	return reply{status: http.StatusOK, body: out}, nil
}

// act answers a call of a resource's action (a virtual machine's start).
func (s *Server) act(c *call, k *kind, a action) (reply, error) {
	d, err := s.lookup(c, k)
	if err != nil {
		return reply{}, err
	}
	return a(s, c, d)
}

func (s *Server) notFound(k *kind, id string, group doc) error {
	if k.parent != nil {
		return childNotFound(id)
	}
	return resourceNotFound(k.typ, id[strings.LastIndex(id, "/")+1:], group.name())
}

func (s *Server) listResources(c *call, k *kind) (reply, error) {
	prefix := "/subscriptions/" + strings.ToLower(c.t.sub) + "/"
	if c.t.group != "" {
		g, err := s.groupOf(c)
		if err != nil {
			return reply{}, err
		}
		prefix = key(g.id()) + "/providers/"
		if k.parent != nil {
			pid := s.resourceID(c, k.parent, g)
			if _, ok := s.st.Resources[key(pid)]; !ok {
				return reply{}, s.notFound(k.parent, pid, g)
			}
			prefix = key(pid) + "/"
		}
	}
	out := []doc{}
	for _, d := range s.ofType(k.typ) {
		if strings.HasPrefix(key(d.id()), prefix) {
			out = append(out, s.render(d))
		}
	}
	return s.page(c, out), nil
}

// putResource creates or replaces a resource, as a long-running operation.
func (s *Server) putResource(c *call, k *kind) (reply, error) {
	g, err := s.groupOf(c)
	if err != nil {
		return reply{}, err
	}
	if g.props()["provisioningState"] == "Deleting" {
		return reply{}, errorf(http.StatusConflict, "ResourceGroupBeingDeleted",
			"The resource group '%s' is in deprovisioning state and cannot perform this operation.", g.name())
	}
	var in doc
	if err := json.Unmarshal(c.body, &in); err != nil {
		return reply{}, badRequest("InvalidRequestContent", "The request content was invalid and could not be deserialized: '%v'.", err)
	}
	id := s.resourceID(c, k, g)
	old := s.st.Resources[key(id)]
	var parent doc
	location := ""
	if k.parent != nil {
		pid := parentID(id)
		if parent = s.st.Resources[key(pid)]; parent == nil {
			return reply{}, parentNotFound(pid[strings.LastIndex(pid, "/")+1:])
		}
		location = parent.location()
	} else if location, err = s.location(k.typ, in, old); err != nil {
		return reply{}, err
	}
	d := compose(k, id, location, in, old)
	var kids []doc
	if k.inline != nil {
		if kids, err = s.inlineKids(k, d); err != nil {
			return reply{}, err
		}
	}
	if err := s.checkPut(k, d, parent, kids); err != nil {
		return reply{}, err
	}
	if k.sync {
		return s.putSync(k, d, old), nil
	}

	state, status := "Creating", http.StatusCreated
	if old != nil {
		state, status = "Updating", http.StatusOK
	}
	s.store(k, d, old, state)
	ids := []string{id}
	if k.inline != nil {
		keep := map[string]bool{}
		for _, kid := range kids {
			keep[key(kid.id())] = true
		}
		for _, was := range s.children(id, k.inline) {
			if !keep[key(was.id())] {
				s.remove(was.id())
			}
		}
		for _, kid := range kids {
			kidOld := s.st.Resources[key(kid.id())]
			kidState := "Creating"
			if kidOld != nil {
				kidState = "Updating"
			}
			s.store(k.inline, kid, kidOld, kidState)
			ids = append(ids, kid.id())
		}
	}
	s.log.Info("resource written", "resource", id, "state", state)
	op := s.begin(c, "put", k.typ, id, location, ids)
	if k.machine && old == nil {
		op.Wait = powerRunning
	}
	if k.written != nil {
		if err := k.written(s, d, old, op); err != nil {
			return reply{}, err
		}
	}
	return reply{status: status, body: s.render(d)}, nil
}

// compose is the document a PUT writes: what ARM keeps of the body (tags,
// sku, zones, properties but the read-only ones) under the call's id.
func compose(k *kind, id, location string, in, old doc) doc {
	d := doc{"id": id, "name": id[strings.LastIndex(id, "/")+1:], "type": k.typ}
	if k.parent == nil {
		d["location"] = location
		for _, f := range []string{"tags", "sku", "zones", "extendedLocation", "identity"} {
			if v, ok := in[f]; ok && v != nil {
				d[f] = v
			}
		}
	}
	props, _ := in["properties"].(map[string]any)
	if props == nil {
		props = map[string]any{}
	}
	d["properties"] = props
	delete(props, "provisioningState")
	delete(props, "resourceGuid")
	if old != nil {
		if g, ok := old.props()["resourceGuid"]; ok {
			props["resourceGuid"] = g
		}
	}
	return d
}

// inlineKids takes the nested resources out of a parent's properties (a
// network's subnets) as documents of their own.
func (s *Server) inlineKids(k *kind, d doc) ([]doc, error) {
	raw, _ := d.props()[k.inline.inlineProp].([]any)
	delete(d.props(), k.inline.inlineProp)
	var kids []doc
	seen := map[string]bool{}
	for _, r := range raw {
		m, _ := r.(map[string]any)
		name, _ := m["name"].(string)
		if name == "" {
			return nil, badRequest("InvalidRequestFormat", "Cannot parse the request: an item of %s has no name.", k.inline.inlineProp)
		}
		id := d.id() + "/" + k.inline.last() + "/" + name
		if was, ok := s.st.Resources[key(id)]; ok {
			id = was.id()
		}
		if seen[key(id)] {
			return nil, badRequest("InvalidRequestFormat", "Cannot parse the request: %s '%s' is given twice.", k.inline.inlineProp, name)
		}
		seen[key(id)] = true
		kids = append(kids, compose(k.inline, id, "", doc(m), s.st.Resources[key(id)]))
	}
	return kids, nil
}

// checkPut runs ARM's checks of a PUT: the document's own, its inline
// nested resources', and its siblings' as a whole.
func (s *Server) checkPut(k *kind, d, parent doc, kids []doc) error {
	if k.check != nil {
		if err := k.check(s, d, parent); err != nil {
			return err
		}
	}
	if k.inline != nil {
		for _, kid := range kids {
			if k.inline.check != nil {
				if err := k.inline.check(s, kid, d); err != nil {
					return err
				}
			}
		}
		if k.checkChildren != nil {
			return k.checkChildren(s, d, kids)
		}
	}
	if k.parent != nil && k.parent.checkChildren != nil {
		// The document checked comes last: ARM names it in a conflict.
		var siblings []doc
		for _, sib := range s.children(parent.id(), k) {
			if key(sib.id()) != key(d.id()) {
				siblings = append(siblings, sib)
			}
		}
		return k.parent.checkChildren(s, parent, append(siblings, d))
	}
	return nil
}

// store writes d with its provisioningState, a new etag and what the kind
// fills in.
func (s *Server) store(k *kind, d, old doc, state string) {
	if k.fill != nil {
		k.fill(s, d, old)
	}
	d.props()["provisioningState"] = state
	d["etag"] = `W/"` + uuid.NewString() + `"`
	s.st.Resources[key(d.id())] = d
	s.dirty = true
}

// patchResource updates a top-level resource's tags, at once (UpdateTags).
func (s *Server) patchResource(c *call, k *kind) (reply, error) {
	if k.parent != nil {
		return reply{}, methodNotAllowed(c)
	}
	g, err := s.groupOf(c)
	if err != nil {
		return reply{}, err
	}
	id := s.resourceID(c, k, g)
	d, ok := s.st.Resources[key(id)]
	if !ok {
		return reply{}, s.notFound(k, id, g)
	}
	var in doc
	if err := json.Unmarshal(c.body, &in); err != nil {
		return reply{}, badRequest("InvalidRequestContent", "The request content was invalid and could not be deserialized: '%v'.", err)
	}
	if tags, ok := in["tags"]; ok {
		d["tags"] = tags
		d["etag"] = `W/"` + uuid.NewString() + `"`
		s.dirty = true
	}
	return reply{status: http.StatusOK, body: s.render(d)}, nil
}

// deleteResource deletes a resource (and what is nested in it) as a
// long-running operation; 204 when there is none.
func (s *Server) deleteResource(c *call, k *kind) (reply, error) {
	g, err := s.groupOf(c)
	if err != nil {
		return reply{}, err
	}
	id := s.resourceID(c, k, g)
	d, ok := s.st.Resources[key(id)]
	if !ok {
		return reply{status: http.StatusNoContent}, nil
	}
	if k.inUse != nil {
		if err := k.inUse(s, d); err != nil {
			return reply{}, err
		}
	}
	if k.sync {
		s.log.Info("resource deleted", "resource", id)
		s.remove(id)
		return reply{status: http.StatusOK}, nil
	}
	location := d.location()
	if k.parent != nil {
		location = s.st.Resources[key(parentID(id))].location()
	}
	s.log.Info("deleting resource", "resource", id)
	s.setState(id, "Deleting")
	s.dirty = true
	op := s.begin(c, "delete", k.typ, d.id(), location, nil)
	if k.machine {
		op.Wait = waitRemoved
	}
	if k.deleting != nil {
		k.deleting(s, d, op)
	}
	return reply{status: http.StatusAccepted}, nil
}

// location is the location of a top-level resource's PUT, as ARM checks
// it: given, one of the regions, and not another than the resource's.
func (s *Server) location(typ string, in, old doc) (string, error) {
	raw := in.str("location")
	if raw == "" {
		return "", badRequest("LocationRequired", "The location property is required for this definition.")
	}
	loc := normalizeLocation(raw)
	if !s.regions[loc] {
		return "", badRequest("LocationNotAvailableForResourceType",
			"The provided location '%s' is not available for resource type '%s'. List of available regions for the resource type is '%s'.",
			raw, typ, strings.Join(s.opts.Regions, ","))
	}
	if old != nil && old.location() != loc {
		return "", badRequest("InvalidResourceLocation",
			"The resource '%s' already exists in location '%s' in resource group. A resource with the same name cannot be created in location '%s'. Please select a new resource name.",
			old.name(), old.location(), loc)
	}
	return loc, nil
}
