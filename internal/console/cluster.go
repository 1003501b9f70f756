package console

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"

	"kiln.dev/kiln/api/client"
	v1 "kiln.dev/kiln/api/v1"
)

// clusterView is everything the cluster page and its tabs show.
type clusterView struct {
	Project    string
	Cluster    v1.Cluster
	Current    *v1.Operation  // the running operation, else the latest
	Past       []v1.Operation // the others, newest first
	Nodes      []v1.Node
	Pools      []poolRow
	Events     []v1.Event // newest first
	CanOperate bool
	CanAdmin   bool
	HostsJoin  bool // an edge cluster: hosts join with the installer
	// Nodes tab: its search and sort.
	Query, Sort string
	// Upgrades are the versions the upgrade form offers (operators, the
	// overview only): the API's answer, clusterUpgrades.
	Upgrades *v1.ClusterUpgrades
	// Diagnostics are the cluster's diagnostics bundles, newest first: a
	// failed operation links its own.
	Diagnostics []v1.Diagnostics
	// EventFilter is which events the overview shows (eventFilters).
	EventFilter string
}

// poolRow is a worker pool with its nodes now.
type poolRow struct {
	v1.WorkerPool
	Nodes, Ready int
}

// eventFilters are the events the page can show (?events=): all, the
// warnings only, or all but the steps' starts and successes (the bulk of a
// cluster's events).
var eventFilters = []string{"all", "warnings", "no-steps"}

// keepEvent reports whether filter shows e.
func keepEvent(filter string, e v1.Event) bool {
	switch filter {
	case "warnings":
		return e.Type == "Warning"
	case "no-steps":
		return e.Reason != "StepStarted" && e.Reason != "StepSucceeded"
	}
	return true
}

// maxEvents is how many of the latest events the page shows.
const maxEvents = 100

// loadCluster reads the cluster and its nodes; with history, also its
// operations and latest events (the overview shows them; the nodes tab and
// the installer page need not read them).
func (c *Console) loadCluster(ctx context.Context, r *http.Request, s *session, history bool) (*clusterView, error) {
	project, name := r.PathValue("project"), r.PathValue("cluster")
	api := c.client(r, s.token)
	cl, err := api.GetCluster(ctx, project, name)
	if err != nil {
		return nil, err
	}
	v := &clusterView{Project: project, Cluster: *cl,
		CanOperate: s.Can(project, v1.RoleOperator), CanAdmin: s.Can(project, v1.RoleAdmin),
		HostsJoin: c.hostsJoin != nil && c.hostsJoin(cl.Spec.Provider)}
	if v.Nodes, err = api.ListNodes(ctx, project, name); err != nil {
		return nil, err
	}
	v.Pools = poolRows(cl)
	if !history {
		return v, nil
	}
	ops, err := api.ListOperations(ctx, project, name)
	if err != nil {
		return nil, err
	}
	slices.SortStableFunc(ops, func(a, b v1.Operation) int { return b.StartTime.Compare(a.StartTime) })
	// The cluster's current operation, else the newest.
	cur := slices.IndexFunc(ops, func(op v1.Operation) bool {
		return client.OperationID(op.ID) == client.OperationID(cl.Status.CurrentOperation)
	})
	if cur < 0 && len(ops) > 0 {
		cur = 0
	}
	if cur >= 0 {
		v.Current = &ops[cur]
		v.Past = append(ops[:cur:cur], ops[cur+1:]...)
	}
	if v.Diagnostics, err = api.ListDiagnostics(ctx, project, name); err != nil {
		return nil, err
	}
	events, err := api.ListEvents(ctx, project, name)
	if err != nil {
		return nil, err
	}
	v.EventFilter = r.URL.Query().Get("events")
	if !slices.Contains(eventFilters, v.EventFilter) {
		v.EventFilter = "all"
	}
	events = slices.DeleteFunc(events, func(e v1.Event) bool { return !keepEvent(v.EventFilter, e) })
	if len(events) > maxEvents {
		events = events[len(events)-maxEvents:]
	}
	slices.Reverse(events)
	v.Events = events
	return v, nil
}

func clusterURL(project, cluster string) string {
	return "/projects/" + url.PathEscape(project) + "/clusters/" + url.PathEscape(cluster)
}

func (c *Console) clusterPage(w http.ResponseWriter, r *http.Request, s *session) error {
	return c.showCluster(w, r, s, http.StatusOK, nil)
}

// showCluster renders the cluster page, with apiErr when an action failed
// (status is then the API's).
func (c *Console) showCluster(w http.ResponseWriter, r *http.Request, s *session, status int, apiErr *v1.Error) error {
	v, err := c.loadCluster(r.Context(), r, s, true)
	if err != nil {
		return err
	}
	if v.CanOperate {
		if v.Upgrades, err = c.client(r, s.token).ClusterUpgrades(r.Context(), v.Project, v.Cluster.Name); err != nil {
			return err
		}
	}
	c.render(w, r, status, "cluster.html", page{Title: v.Cluster.Name, Session: s, Project: v.Project,
		Cluster: v.Cluster.Name, Tab: "overview", Data: v, Error: apiErr, Notice: noticeOf(w, r),
		Live: clusterURL(v.Project, v.Cluster.Name) + "/live?" + url.Values{"view": {"overview"}, "events": {v.EventFilter}}.Encode()})
	return nil
}

// acted ends an action: back to where it came from, with a notice of what
// it did or the API's refusal (its status and message) shown there.
func (c *Console) acted(w http.ResponseWriter, r *http.Request, s *session, err error, back, notice string) error {
	if ae, ok := apiError(err); ok && ae.StatusCode != http.StatusUnauthorized && ae.StatusCode != http.StatusNotFound {
		refused(w, r, back, ae.StatusCode, &ae.Err)
		return nil
	}
	if err != nil {
		return err
	}
	redirect(w, r, back, notice)
	return nil
}

// errUnchanged is a change that changes nothing: said, not written.
type errUnchanged struct{ msg string }

func (e errUnchanged) Error() string { return e.msg }

// changeSpec lets change edit the spec of r's cluster and writes it back
// (client.Client.ChangeCluster: If-Match, again on a 412). It returns the
// operation started.
func (c *Console) changeSpec(r *http.Request, s *session, change func(*v1.ClusterSpec) error) (string, error) {
	_, opID, err := c.client(r, s.token).ChangeCluster(r.Context(), r.PathValue("project"), r.PathValue("cluster"),
		func(cl *v1.Cluster) error { return change(&cl.Spec) })
	return opID, err
}

// changed runs changeSpec and ends the action.
func (c *Console) changed(w http.ResponseWriter, r *http.Request, s *session, doing string, change func(*v1.ClusterSpec) error) error {
	opID, err := c.changeSpec(r, s, change)
	if u, ok := errors.AsType[errUnchanged](err); ok {
		redirect(w, r, clusterURL(r.PathValue("project"), r.PathValue("cluster")), u.msg)
		return nil
	}
	if fe, ok := errors.AsType[*formError](err); ok {
		refused(w, r, clusterURL(r.PathValue("project"), r.PathValue("cluster")), http.StatusBadRequest,
			&v1.Error{Code: v1.CodeInvalidParameter, Target: fe.field, Message: fe.msg})
		return nil
	}
	return c.acted(w, r, s, err, clusterURL(r.PathValue("project"), r.PathValue("cluster")),
		fmt.Sprintf("%s (operation %s).", doing, opID))
}

// formError is a form value the console cannot put in a request at all.
type formError struct{ field, msg string }

func (e *formError) Error() string { return e.field + ": " + e.msg }

func formInt(r *http.Request, field, what string) (int, error) {
	v := strings.TrimSpace(r.PostFormValue(field))
	n, err := strconv.Atoi(v)
	if err != nil {
		return 0, &formError{field, fmt.Sprintf("%s must be a whole number, not %q", what, v)}
	}
	return n, nil
}

func findPool(spec *v1.ClusterSpec, name string) *v1.WorkerPool {
	for i := range spec.WorkerPools {
		if spec.WorkerPools[i].Name == name {
			return &spec.WorkerPools[i]
		}
	}
	return nil
}

// scale sets a worker pool's size, or the control plane's (pool
// "control-plane").
func (c *Console) scale(w http.ResponseWriter, r *http.Request, s *session) error {
	pool := r.PostFormValue("pool")
	size, err := formInt(r, "size", "the size")
	if err != nil {
		return c.changed(w, r, s, "", func(*v1.ClusterSpec) error { return err })
	}
	if pool == v1.RoleControlPlane {
		return c.changed(w, r, s, fmt.Sprintf("Scaling the control plane to %d", size), func(spec *v1.ClusterSpec) error {
			if spec.ControlPlane.Size == size {
				return errUnchanged{fmt.Sprintf("The control plane already has %d nodes.", size)}
			}
			spec.ControlPlane.Size = size
			return nil
		})
	}
	return c.changed(w, r, s, fmt.Sprintf("Scaling pool %s to %d", pool, size), func(spec *v1.ClusterSpec) error {
		p := findPool(spec, pool)
		if p == nil {
			return &formError{"pool", fmt.Sprintf("the cluster has no worker pool %q", pool)}
		}
		if p.Size == size {
			return errUnchanged{fmt.Sprintf("Pool %s already has size %d.", pool, size)}
		}
		p.Size = size
		return nil
	})
}

func (c *Console) addPool(w http.ResponseWriter, r *http.Request, s *session) error {
	name := strings.TrimSpace(r.PostFormValue("name"))
	size, err := formInt(r, "size", "the size")
	if err != nil {
		return c.changed(w, r, s, "", func(*v1.ClusterSpec) error { return err })
	}
	labels, lerr := parseLabels(r.PostFormValue("labels"), "labels")
	var taints []string
	for t := range strings.SplitSeq(r.PostFormValue("taints"), ",") {
		if t = strings.TrimSpace(t); t != "" {
			taints = append(taints, t)
		}
	}
	return c.changed(w, r, s, fmt.Sprintf("Adding pool %s", name), func(spec *v1.ClusterSpec) error {
		if lerr != nil {
			return &formError{"labels", lerr.Message}
		}
		if findPool(spec, name) != nil {
			return &formError{"name", fmt.Sprintf("the cluster already has a worker pool %q", name)}
		}
		spec.WorkerPools = append(spec.WorkerPools, v1.WorkerPool{Name: name, Size: size,
			InstanceType: strings.TrimSpace(r.PostFormValue("instanceType")), Labels: labels, Taints: taints})
		return nil
	})
}

func (c *Console) removePool(w http.ResponseWriter, r *http.Request, s *session) error {
	name := r.PathValue("pool")
	return c.changed(w, r, s, fmt.Sprintf("Removing pool %s", name), func(spec *v1.ClusterSpec) error {
		i := slices.IndexFunc(spec.WorkerPools, func(p v1.WorkerPool) bool { return p.Name == name })
		if i < 0 {
			return errUnchanged{fmt.Sprintf("The cluster has no pool %s.", name)}
		}
		spec.WorkerPools = slices.Delete(spec.WorkerPools, i, i+1)
		return nil
	})
}

func (c *Console) upgrade(w http.ResponseWriter, r *http.Request, s *session) error {
	version := strings.TrimSpace(r.PostFormValue("version"))
	return c.changed(w, r, s, "Upgrading to "+version, func(spec *v1.ClusterSpec) error {
		if spec.KubernetesVersion == version {
			return errUnchanged{"The cluster already runs " + version + "."}
		}
		spec.KubernetesVersion = version
		return nil
	})
}

// clusterAction runs one of the API's cluster actions.
func (c *Console) clusterAction(w http.ResponseWriter, r *http.Request, s *session, doing string,
	call func(api *client.Client, project, name string) (*v1.Cluster, string, error)) error {
	project, name := r.PathValue("project"), r.PathValue("cluster")
	_, opID, err := call(c.client(r, s.token), project, name)
	return c.acted(w, r, s, err, clusterURL(project, name), fmt.Sprintf("%s (operation %s).", doing, opID))
}

func (c *Console) provision(w http.ResponseWriter, r *http.Request, s *session) error {
	return c.clusterAction(w, r, s, "Provisioning the hosts", func(api *client.Client, p, n string) (*v1.Cluster, string, error) {
		return api.ProvisionCluster(r.Context(), p, n)
	})
}

func (c *Console) reset(w http.ResponseWriter, r *http.Request, s *session) error {
	return c.clusterAction(w, r, s, "Resetting the hosts", func(api *client.Client, p, n string) (*v1.Cluster, string, error) {
		return api.ResetCluster(r.Context(), p, n)
	})
}

func (c *Console) retry(w http.ResponseWriter, r *http.Request, s *session) error {
	return c.clusterAction(w, r, s, "Retrying", func(api *client.Client, p, n string) (*v1.Cluster, string, error) {
		return api.RetryCluster(r.Context(), p, n)
	})
}

// hibernate begins the cluster's hibernation.
func (c *Console) hibernate(w http.ResponseWriter, r *http.Request, s *session) error {
	return c.clusterAction(w, r, s, "Hibernating", func(api *client.Client, p, n string) (*v1.Cluster, string, error) {
		return api.HibernateCluster(r.Context(), p, n)
	})
}

// resume brings a hibernated cluster back.
func (c *Console) resume(w http.ResponseWriter, r *http.Request, s *session) error {
	return c.clusterAction(w, r, s, "Resuming", func(api *client.Client, p, n string) (*v1.Cluster, string, error) {
		return api.ResumeCluster(r.Context(), p, n)
	})
}

// cancel asks the cluster's running operation to stop.
func (c *Console) cancel(w http.ResponseWriter, r *http.Request, s *session) error {
	project, name := r.PathValue("project"), r.PathValue("cluster")
	api := c.client(r, s.token)
	id := r.PostFormValue("operation")
	if id == "" {
		cl, err := api.GetCluster(r.Context(), project, name)
		if err != nil {
			return err
		}
		id = cl.Status.CurrentOperation
	}
	_, err := api.CancelOperation(r.Context(), id)
	return c.acted(w, r, s, err, clusterURL(project, name),
		fmt.Sprintf("Asked operation %s to stop; it stops at its next safe point.", id))
}

// deleteCluster deletes the cluster once its name has been typed.
func (c *Console) deleteCluster(w http.ResponseWriter, r *http.Request, s *session) error {
	project, name := r.PathValue("project"), r.PathValue("cluster")
	if strings.TrimSpace(r.PostFormValue("confirm")) != name {
		refused(w, r, clusterURL(project, name), http.StatusBadRequest, &v1.Error{Code: v1.CodeInvalidParameter, Target: "confirm",
			Message: fmt.Sprintf("Type the cluster's name, %s, to confirm that it is to be deleted.", name)})
		return nil
	}
	del := c.client(r, s.token).DeleteCluster
	if r.PostFormValue("force") == "true" {
		del = c.client(r, s.token).ForceDeleteCluster
	}
	opID, err := del(r.Context(), project, name)
	return c.acted(w, r, s, err, clusterURL(project, name), fmt.Sprintf("Deleting cluster %s (operation %s).", name, opID))
}

// kubeconfig downloads the person's kubeconfig (viewers and up): it holds
// no secret; kubectl runs kiln credential for a credential at each use.
func (c *Console) kubeconfig(w http.ResponseWriter, r *http.Request, s *session) error {
	project, name := r.PathValue("project"), r.PathValue("cluster")
	return c.download(w, r, s.token, "/v1/projects/"+url.PathEscape(project)+"/clusters/"+url.PathEscape(name)+"/kubeconfig", nil)
}

// diagnosticsBundle downloads a diagnostics bundle (a tar.gz).
func (c *Console) diagnosticsBundle(w http.ResponseWriter, r *http.Request, s *session) error {
	project, name := r.PathValue("project"), r.PathValue("cluster")
	return c.download(w, r, s.token, "/v1/projects/"+url.PathEscape(project)+"/clusters/"+url.PathEscape(name)+
		"/diagnostics/"+url.PathEscape(r.PathValue("diagnostics"))+"/bundle", nil)
}

// poolRows are cl's worker pools with their nodes present and ready, as
// the API counted them.
func poolRows(cl *v1.Cluster) []poolRow {
	rows := make([]poolRow, len(cl.Spec.WorkerPools))
	for i, p := range cl.Spec.WorkerPools {
		pc := cl.Status.Nodes.Pool(p.Name)
		rows[i] = poolRow{WorkerPool: p, Nodes: pc.Present, Ready: pc.Ready}
	}
	return rows
}
