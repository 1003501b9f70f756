package console

import (
	"cmp"
	"context"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"time"

	"kiln.dev/kiln/api/client"
	v1 "kiln.dev/kiln/api/v1"
)

// nodeSorts are the columns the nodes tab sorts by.
var nodeSorts = []string{"name", "hostname", "state", "role", "pool"}

func nodesURL(project, cluster string) string { return clusterURL(project, cluster) + "/nodes" }

func (c *Console) nodesPage(w http.ResponseWriter, r *http.Request, s *session) error {
	return c.showNodes(w, r, s, http.StatusOK, nil)
}

// showNodes renders the nodes tab, with apiErr when an action failed.
func (c *Console) showNodes(w http.ResponseWriter, r *http.Request, s *session, status int, apiErr *v1.Error) error {
	v, err := c.loadCluster(r.Context(), r, s, false)
	if err != nil {
		return err
	}
	filterNodes(v, r.URL.Query())
	live := url.Values{"view": {"nodes"}, "sort": {v.Sort}}
	if v.Query != "" {
		live.Set("q", v.Query)
	}
	c.render(w, r, status, "nodes.html", page{Title: v.Cluster.Name + ": nodes", Session: s, Project: v.Project,
		Cluster: v.Cluster.Name, Tab: "nodes", Data: v, Error: apiErr, Notice: noticeOf(w, r),
		Live: clusterURL(v.Project, v.Cluster.Name) + "/live?" + live.Encode()})
	return nil
}

// filterNodes applies the nodes tab's search (q) and sort.
func filterNodes(v *clusterView, q url.Values) {
	v.Query, v.Sort = strings.TrimSpace(q.Get("q")), q.Get("sort")
	if !slices.Contains(nodeSorts, v.Sort) {
		v.Sort = "name"
	}
	v.Nodes = slices.DeleteFunc(v.Nodes, func(n v1.Node) bool {
		return !matches(v.Query, n.Name, n.Hostname(), n.State, n.Role, n.Pool, n.Address)
	})
	key := func(n v1.Node) string {
		switch v.Sort {
		case "hostname":
			return n.Hostname()
		case "state":
			return n.State
		case "role":
			return n.Role
		case "pool":
			return n.Pool
		}
		return n.Name
	}
	slices.SortStableFunc(v.Nodes, func(a, b v1.Node) int {
		return cmp.Or(cmp.Compare(key(a), key(b)), cmp.Compare(a.Name, b.Name))
	})
}

// nodeView is a node's page.
type nodeView struct {
	Project, Cluster string
	Node             v1.Node
	Events           []v1.Event // the node's, newest first
	CanOperate       bool
	// HostsJoin: the cluster is made of hosts that join (edge): a host
	// can be removed from it.
	HostsJoin bool
	// Log is the log's filter, as the page's form and its stream take it.
	Log logFilter
}

// logFilter is which lines of a node's log the page shows, as the CLI's
// kiln node logs --component and --since choose them; the server filters.
type logFilter struct {
	Component string // "" for every one
	Since     string // a logSince key; "" for all
}

// logComponents are the streams a node's log has (the CLI's --component).
var logComponents = []string{"agent", "etcd", "apiserver", "controller-manager", "scheduler", "kubelet"}

// logSince are the windows the page offers.
var logSince = map[string]time.Duration{"10m": 10 * time.Minute, "1h": time.Hour, "24h": 24 * time.Hour}

// parseLogFilter reads ?component= and ?since=, ignoring what the form
// never offers.
func parseLogFilter(q url.Values) logFilter {
	f := logFilter{Component: q.Get("component"), Since: q.Get("since")}
	if !slices.Contains(logComponents, f.Component) {
		f.Component = ""
	}
	if _, ok := logSince[f.Since]; !ok {
		f.Since = ""
	}
	return f
}

// query is f as the API's log query, at now.
func (f logFilter) query(now time.Time) client.NodeLogQuery {
	var q client.NodeLogQuery
	if f.Component != "" {
		q.Components = []string{f.Component}
	}
	if d, ok := logSince[f.Since]; ok {
		q.Since = now.Add(-d)
	}
	return q
}

// values is f as URL parameters.
func (f logFilter) values() url.Values {
	v := url.Values{}
	if f.Component != "" {
		v.Set("component", f.Component)
	}
	if f.Since != "" {
		v.Set("since", f.Since)
	}
	return v
}

// Components are the streams the filter offers.
func (logFilter) Components() []string { return logComponents }

// maxNodeEvents is how many of a node's latest events its page shows.
const maxNodeEvents = 50

// loadNode reads the node of r's path and its latest events.
func (c *Console) loadNode(ctx context.Context, r *http.Request, s *session) (*nodeView, error) {
	project, cluster := r.PathValue("project"), r.PathValue("cluster")
	api := c.client(r, s.token)
	n, err := api.GetNode(ctx, project, cluster, r.PathValue("node"))
	if err != nil {
		return nil, err
	}
	events, err := api.ListEvents(ctx, project, cluster)
	if err != nil {
		return nil, err
	}
	cl, err := api.GetCluster(ctx, project, cluster)
	if err != nil {
		return nil, err
	}
	v := &nodeView{Project: project, Cluster: cluster, Node: *n, CanOperate: s.Can(project, v1.RoleOperator), Log: parseLogFilter(r.URL.Query()),
		HostsJoin: c.hostsJoin != nil && c.hostsJoin(cl.Spec.Provider)}
	for i := len(events) - 1; i >= 0 && len(v.Events) < maxNodeEvents; i-- {
		if events[i].Node == n.Name {
			v.Events = append(v.Events, events[i])
		}
	}
	return v, nil
}

func (c *Console) nodePage(w http.ResponseWriter, r *http.Request, s *session) error {
	v, err := c.loadNode(r.Context(), r, s)
	if err != nil {
		return err
	}
	c.render(w, r, http.StatusOK, "node.html", page{Title: v.Node.Name, Session: s, Project: v.Project, Cluster: v.Cluster,
		Tab: "nodes", Data: v, Live: clusterURL(v.Project, v.Cluster) + "/nodes/" + url.PathEscape(v.Node.Name) + "/logs/live?" + v.Log.values().Encode()})
	return nil
}

func (c *Console) approveNode(w http.ResponseWriter, r *http.Request, s *session) error {
	project, cluster, node := r.PathValue("project"), r.PathValue("cluster"), r.PathValue("node")
	_, err := c.client(r, s.token).ApproveNode(r.Context(), project, cluster, node)
	return c.acted(w, r, s, err, nodesURL(project, cluster), fmt.Sprintf("Approved node %s.", node))
}

// removeNode takes a host out of an edge cluster (kiln node remove): the
// form's confirm must be the node's name.
func (c *Console) removeNode(w http.ResponseWriter, r *http.Request, s *session) error {
	project, cluster, node := r.PathValue("project"), r.PathValue("cluster"), r.PathValue("node")
	if strings.TrimSpace(r.PostFormValue("confirm")) != node {
		refused(w, r, nodesURL(project, cluster)+"/"+url.PathEscape(node), http.StatusBadRequest, &v1.Error{Code: v1.CodeInvalidParameter, Target: "confirm",
			Message: fmt.Sprintf("Type the node's name, %s, to confirm that its host is to be removed.", node)})
		return nil
	}
	_, opID, err := c.client(r, s.token).RemoveNode(r.Context(), project, cluster, node)
	return c.acted(w, r, s, err, nodesURL(project, cluster), fmt.Sprintf("Removing node %s from the cluster (operation %s).", node, opID))
}

func (c *Console) configureNode(w http.ResponseWriter, r *http.Request, s *session) error {
	project, cluster, node := r.PathValue("project"), r.PathValue("cluster"), r.PathValue("node")
	cfg := v1.NodeConfig{Role: r.PostFormValue("role"), Interface: strings.TrimSpace(r.PostFormValue("interface"))}
	for d := range strings.SplitSeq(r.PostFormValue("storageDevices"), ",") {
		if d = strings.TrimSpace(d); d != "" {
			cfg.StorageDevices = append(cfg.StorageDevices, d)
		}
	}
	_, err := c.client(r, s.token).ConfigureNode(r.Context(), project, cluster, node, cfg)
	return c.acted(w, r, s, err, nodesURL(project, cluster), fmt.Sprintf("Node %s will be a %s.", node, cfg.Role))
}
