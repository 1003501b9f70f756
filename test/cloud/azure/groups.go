package azure

import (
	"encoding/json"
	"net/http"
	"strings"
)

// Resource groups (Microsoft.Resources, armresources' ResourceGroupsClient):
// create or update and update tags at once, get, check existence, list,
// and delete as a long-running operation that deletes everything in the
// group.

const groupType = "Microsoft.Resources/resourceGroups"

// groupKey is the key of a group's document.
func groupKey(sub, name string) string {
	return key("/subscriptions/" + sub + "/resourceGroups/" + name)
}

// groupOf returns the group the call names; ResourceGroupNotFound when it
// does not exist.
func (s *Server) groupOf(c *call) (doc, error) {
	g, ok := s.st.Resources[groupKey(c.t.sub, c.t.group)]
	if !ok {
		return nil, groupNotFound(c.t.group)
	}
	return g, nil
}

func (s *Server) serveGroup(c *call) (reply, error) {
	g, exists := s.st.Resources[groupKey(c.t.sub, c.t.group)]
	switch c.r.Method {
	case http.MethodHead: // CheckExistence
		if !exists {
			return reply{status: http.StatusNotFound}, nil
		}
		return reply{status: http.StatusNoContent}, nil
	case http.MethodGet:
		if !exists {
			return reply{}, groupNotFound(c.t.group)
		}
		return reply{status: http.StatusOK, body: s.render(g)}, nil
	case http.MethodPut:
		return s.putGroup(c, g)
	case http.MethodPatch:
		if !exists {
			return reply{}, groupNotFound(c.t.group)
		}
		var in doc
		if err := json.Unmarshal(c.body, &in); err != nil {
			return reply{}, badRequest("InvalidRequestContent", "The request content was invalid and could not be deserialized: '%v'.", err)
		}
		if tags, ok := in["tags"]; ok {
			g["tags"] = tags
			s.dirty = true
		}
		return reply{status: http.StatusOK, body: s.render(g)}, nil
	case http.MethodDelete:
		if !exists {
			return reply{}, groupNotFound(c.t.group)
		}
		s.log.Info("deleting resource group", "group", g.id())
		s.setState(g.id(), "Deleting")
		s.dirty = true
		s.begin(c, "delete", groupType, g.id(), g.location(), nil)
		return reply{status: http.StatusAccepted}, nil
	}
	return reply{}, methodNotAllowed(c)
}

// putGroup creates or updates a group; unlike other resources, at once.
func (s *Server) putGroup(c *call, old doc) (reply, error) {
	var in doc
	if err := json.Unmarshal(c.body, &in); err != nil {
		return reply{}, badRequest("InvalidRequestContent", "The request content was invalid and could not be deserialized: '%v'.", err)
	}
	raw := in.str("location")
	if raw == "" {
		return reply{}, badRequest("LocationRequired", "The location property is required for this definition.")
	}
	loc := normalizeLocation(raw)
	if !s.regions[loc] {
		return reply{}, badRequest("LocationNotAvailableForResourceGroup",
			"The provided location '%s' is not available for resource group. List of available regions is '%s'.", raw, strings.Join(s.opts.Regions, ","))
	}
	status := http.StatusCreated
	id := "/subscriptions/" + s.canonicalSub(c.t.sub) + "/resourceGroups/" + c.t.group
	if old != nil {
		if old.props()["provisioningState"] == "Deleting" {
			return reply{}, errorf(http.StatusConflict, "ResourceGroupBeingDeleted",
				"The resource group '%s' is in deprovisioning state and cannot perform this operation.", old.name())
		}
		if old.location() != loc {
			return reply{}, errorf(http.StatusConflict, "InvalidResourceGroupLocation",
				"Invalid resource group location '%s'. The Resource group already exists in location '%s'.", loc, old.location())
		}
		status, id = http.StatusOK, old.id()
	}
	g := doc{"id": id, "name": id[strings.LastIndex(id, "/")+1:], "type": groupType, "location": loc,
		"properties": map[string]any{"provisioningState": statusSucceeded}}
	if tags, ok := in["tags"]; ok && tags != nil {
		g["tags"] = tags
	}
	if m, ok := in["managedBy"].(string); ok {
		g["managedBy"] = m
	}
	s.st.Resources[key(id)] = g
	s.dirty = true
	s.log.Info("resource group written", "group", id)
	return reply{status: status, body: s.render(g)}, nil
}

func (s *Server) canonicalSub(sub string) string {
	for _, x := range s.opts.Subscriptions {
		if strings.EqualFold(x, sub) {
			return x
		}
	}
	return sub
}

func (s *Server) listGroups(c *call) (reply, error) {
	if c.r.Method != http.MethodGet {
		return reply{}, methodNotAllowed(c)
	}
	prefix := key("/subscriptions/" + c.t.sub + "/")
	out := []doc{}
	for _, g := range s.ofType(groupType) {
		if strings.HasPrefix(key(g.id()), prefix) {
			out = append(out, s.render(g))
		}
	}
	return s.page(c, out), nil
}

// listGroupResources is ARM's generic list of a group's or a
// subscription's resources (nested ones left out), each as id, name, type,
// location and tags. Of $filter, only "resourceGroup eq 'NAME'" (what
// az resource list -g sends) is understood; others are ignored.
func (s *Server) listGroupResources(c *call) (reply, error) {
	if c.r.Method != http.MethodGet {
		return reply{}, methodNotAllowed(c)
	}
	if f := c.r.URL.Query().Get("$filter"); c.t.group == "" && strings.HasPrefix(f, "resourceGroup eq '") {
		c.t.group = strings.TrimSuffix(strings.TrimPrefix(f, "resourceGroup eq '"), "'")
	}
	prefix := key("/subscriptions/"+c.t.sub) + "/resourcegroups/"
	if c.t.group != "" {
		g, err := s.groupOf(c)
		if err != nil {
			return reply{}, err
		}
		prefix = key(g.id()) + "/providers/"
	}
	out := []doc{}
	for rk, d := range s.st.Resources {
		if !strings.HasPrefix(rk, prefix) || strings.Count(d.typ(), "/") != 1 || d.typ() == groupType {
			continue
		}
		r := doc{"id": d.id(), "name": d.name(), "type": d.typ(), "location": d.location()}
		if t, ok := d["tags"]; ok {
			r["tags"] = t
		}
		out = append(out, r)
	}
	return s.page(c, out), nil
}
