package console

import (
	"cmp"
	"context"
	"fmt"
	"maps"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"

	"kiln.dev/kiln/api/client"
	v1 "kiln.dev/kiln/api/v1"
)

// clusterRow is a line of the clusters list.
type clusterRow struct {
	Project   string
	Cluster   v1.Cluster
	Operation *v1.Operation // the running operation, if any
}

// clustersView is the clusters list with its search and sort.
type clustersView struct {
	Rows      []clusterRow
	Query     string
	Sort      string
	Projects  []string
	Project   string // the project filter; "" for all
	CanCreate bool
	Total     int // before the search
	Matching  int // after the search; more than len(Rows) when cut at maxClusterRows
	// Filters are the list's exact filters (state, provider, version,
	// profile: the fleet page's links), those set.
	Filters []clusterFilter
}

// clusterFilter keeps the clusters whose field Name is Value exactly;
// profile "-" keeps those without a profile.
type clusterFilter struct{ Name, Value string }

// clusterFilterNames are the list's exact filters, as URL parameters.
var clusterFilterNames = []string{"state", "provider", "version", "profile"}

// keeps reports whether cl passes f.
func (f clusterFilter) keeps(cl *v1.Cluster) bool {
	switch f.Name {
	case "state":
		return cl.Status.ProvisioningState == f.Value
	case "provider":
		return cl.Spec.Provider == f.Value
	case "version":
		return cl.Spec.KubernetesVersion == f.Value
	case "profile":
		return cl.Spec.Profile.Name == f.Value || f.Value == "-" && cl.Spec.Profile.Name == ""
	}
	return true
}

// maxClusterRows is the most clusters the list shows: a fleet's list is
// narrowed with the search and the project filter.
const maxClusterRows = 500

// clusterSorts are the columns the list sorts by.
var clusterSorts = []string{"name", "project", "state", "provider", "version", "created"}

func (c *Console) clustersPage(w http.ResponseWriter, r *http.Request, s *session) error {
	v, err := c.loadClusters(r.Context(), r, s, r.URL.Query())
	if err != nil {
		return err
	}
	c.render(w, r, http.StatusOK, "clusters.html", page{Title: "Clusters", Session: s, Data: v,
		Notice: noticeOf(w, r), Live: "/clusters/live?" + v.query().Encode()})
	return nil
}

// loadClusters reads the clusters of every project the user is in, with
// the list's search (q), project filter and sort.
func (c *Console) loadClusters(ctx context.Context, r *http.Request, s *session, q url.Values) (*clustersView, error) {
	api := c.client(r, s.token)
	projects, err := api.ListProjects(ctx)
	if err != nil {
		return nil, err
	}
	v := &clustersView{Query: strings.TrimSpace(q.Get("q")), Sort: q.Get("sort"), Project: q.Get("project")}
	if !slices.Contains(clusterSorts, v.Sort) {
		v.Sort = "name"
	}
	for _, name := range clusterFilterNames {
		if value := q.Get(name); value != "" {
			v.Filters = append(v.Filters, clusterFilter{Name: name, Value: value})
		}
	}
	for _, p := range projects {
		v.Projects = append(v.Projects, p.Name)
		if s.Can(p.Name, v1.RoleOperator) {
			v.CanCreate = true
		}
		if v.Project != "" && p.Name != v.Project {
			continue
		}
		cls, err := api.ListClusters(ctx, p.Name)
		if err != nil {
			return nil, err
		}
		for _, cl := range cls {
			v.Total++
			if !v.keeps(&cl) || !matches(v.Query, cl.Name, p.Name, cl.Status.ProvisioningState, cl.Spec.Provider, cl.Spec.KubernetesVersion) {
				continue
			}
			v.Rows = append(v.Rows, clusterRow{Project: p.Name, Cluster: cl})
		}
	}
	sortClusters(v.Rows, v.Sort)
	v.Matching = len(v.Rows)
	if len(v.Rows) > maxClusterRows {
		v.Rows = v.Rows[:maxClusterRows]
	}
	if err := c.runningOperations(ctx, api, v.Rows); err != nil {
		return nil, err
	}
	return v, nil
}

// keeps reports whether cl passes every filter.
func (v *clustersView) keeps(cl *v1.Cluster) bool {
	for _, f := range v.Filters {
		if !f.keeps(cl) {
			return false
		}
	}
	return true
}

// query is the list's search, filters and sort as URL parameters.
func (v *clustersView) query() url.Values {
	q := url.Values{"sort": {v.Sort}}
	if v.Query != "" {
		q.Set("q", v.Query)
	}
	if v.Project != "" {
		q.Set("project", v.Project)
	}
	for _, f := range v.Filters {
		q.Set(f.Name, f.Value)
	}
	return q
}

// runningOperations reads the operation of each cluster that is changing,
// for its percent.
func (c *Console) runningOperations(ctx context.Context, api *client.Client, rows []clusterRow) error {
	for i := range rows {
		st := rows[i].Cluster.Status
		if st.CurrentOperation == "" || !changing(st.ProvisioningState) {
			continue
		}
		op, err := api.GetOperation(ctx, st.CurrentOperation)
		if client.IsNotFound(err) {
			continue
		}
		if err != nil {
			return err
		}
		rows[i].Operation = op
	}
	return nil
}

func changing(state string) bool {
	return state == v1.StateCreating || state == v1.StateUpdating || state == v1.StateDeleting
}

// matches reports whether every word of query is in one of fields.
func matches(query string, fields ...string) bool {
	for word := range strings.FieldsSeq(strings.ToLower(query)) {
		found := false
		for _, f := range fields {
			if strings.Contains(strings.ToLower(f), word) {
				found = true
				break
			}
		}
		if !found {
			return false
		}
	}
	return true
}

func sortClusters(rows []clusterRow, by string) {
	key := func(r clusterRow) string {
		switch by {
		case "project":
			return r.Project
		case "state":
			return r.Cluster.Status.ProvisioningState
		case "provider":
			return r.Cluster.Spec.Provider
		case "version":
			return r.Cluster.Spec.KubernetesVersion
		}
		return r.Cluster.Name
	}
	slices.SortStableFunc(rows, func(a, b clusterRow) int {
		if by == "created" { // newest first
			return b.Cluster.Status.CreatedAt.Compare(a.Cluster.Status.CreatedAt)
		}
		return cmp.Or(cmp.Compare(key(a), key(b)), cmp.Compare(a.Cluster.Name, b.Cluster.Name), cmp.Compare(a.Project, b.Project))
	})
}

// createForm is the create form's fields as typed, kept to show again with
// the API's error next to the field at fault.
type createForm struct {
	Project, Name, Provider, Version, Distribution string
	ControlPlane                                   string
	Dedicated                                      bool
	Workers, InstanceType, Region, CloudAccount    string
	NodeApproval, Labels                           string

	Projects  []string // where the user may create clusters
	Providers []providerChoice
	// Distributions are those some provider offers, each with the
	// providers that offer it.
	Distributions []distributionChoice
	Versions      []string // every version a provider offers, for suggestions
	// Checked says, after a dry run the API passed, what it checked, and
	// Cost what the cluster would cost.
	Checked []string
	Cost    *v1.ClusterCost
	// DefaultVersion is the version the API gives a cluster that names none.
	DefaultVersion string
	// FieldErrors maps a form field to the API's message about it.
	FieldErrors map[string]string
}

// providerChoice is a provider the form offers, with what it makes.
type providerChoice struct{ Name, Help string }

// distributionChoice is a distribution, with the providers offering it.
type distributionChoice struct {
	Name, Help string
	Providers  []string
}

// providerHelp says what each provider makes, for the create form.
var providerHelp = map[string]string{
	"docker": "nodes are containers of Kiln's node image on this machine's Docker: real kubelets, pods run",
	"local":  "nodes are processes on this machine with hollow kubelets: no container runs (scale tests, no Docker)",
	"edge":   "hosts you prepare join with an installer (data-center or edge machines); kubeadm installs Kubernetes",
	"aws":    "EC2 instances in a cloud account's VPC, through the AWS API",
	"azure":  "virtual machines (a scale set per pool) in a cloud account's subscription, through Azure Resource Manager",
	"sim":    "simulated machines, no Kubernetes: for tests and trying the API",
}

// distributionHelp says how each distribution installs Kubernetes.
var distributionHelp = map[string]string{
	v1.DistroKiln:    "Kiln's node image: kiln-kube's kubelet on containerd, kube-proxy, a bridge pod network",
	v1.DistroLocal:   "kiln-kube processes with hollow kubelets",
	v1.DistroKubeadm: "containerd and kubeadm on real hosts",
}

func (c *Console) createPage(w http.ResponseWriter, r *http.Request, s *session) error {
	f := createForm{Provider: c.defaultProvider, ControlPlane: "1", Workers: "1", NodeApproval: "auto", Project: r.URL.Query().Get("project")}
	if err := c.fillCreateChoices(r, s, &f); err != nil {
		return err
	}
	if f.Project == "" && len(f.Projects) > 0 {
		f.Project = f.Projects[0]
		if slices.Contains(f.Projects, "default") {
			f.Project = "default"
		}
	}
	c.render(w, r, http.StatusOK, "create.html", page{Title: "Create a cluster", Session: s, Data: &f})
	return nil
}

func (c *Console) fillCreateChoices(r *http.Request, s *session, f *createForm) error {
	projects, err := c.client(r, s.token).ListProjects(r.Context())
	if err != nil {
		return err
	}
	for _, p := range projects {
		if s.Can(p.Name, v1.RoleOperator) {
			f.Projects = append(f.Projects, p.Name)
		}
	}
	f.DefaultVersion = c.version
	dists := map[string][]string{}
	for _, name := range slices.Sorted(maps.Keys(c.providers)) {
		if c.attached != nil && c.attached(name) {
			continue // made elsewhere: kiln cluster attach
		}
		help := providerHelp[name]
		if help == "" {
			help = "machines from the " + name + " provider"
		}
		f.Providers = append(f.Providers, providerChoice{Name: name, Help: help})
		for d := range c.providers[name] {
			if d != "" {
				dists[d] = append(dists[d], name)
			}
		}
	}
	for _, d := range slices.Sorted(maps.Keys(dists)) {
		f.Distributions = append(f.Distributions, distributionChoice{Name: d, Help: distributionHelp[d], Providers: dists[d]})
	}
	seen := map[string]bool{}
	for _, dists := range c.providers {
		for _, vs := range dists {
			for _, v := range vs {
				if !seen[v] {
					seen[v] = true
					f.Versions = append(f.Versions, v)
				}
			}
		}
	}
	slices.Sort(f.Versions)
	slices.Reverse(f.Versions)
	return nil
}

// createCluster creates the cluster the form describes; the API's refusal
// shows the form again with its message at the field.
func (c *Console) createCluster(w http.ResponseWriter, r *http.Request, s *session) error {
	f := createForm{
		Project: r.PostFormValue("project"), Name: strings.TrimSpace(r.PostFormValue("name")),
		Provider: r.PostFormValue("provider"), Version: strings.TrimSpace(r.PostFormValue("version")),
		Distribution: r.PostFormValue("distribution"),
		ControlPlane: r.PostFormValue("controlPlane"), Dedicated: r.PostFormValue("dedicated") == "on",
		Workers: strings.TrimSpace(r.PostFormValue("workers")), InstanceType: strings.TrimSpace(r.PostFormValue("instanceType")),
		Region: strings.TrimSpace(r.PostFormValue("region")), CloudAccount: strings.TrimSpace(r.PostFormValue("cloudAccount")),
		NodeApproval: r.PostFormValue("nodeApproval"), Labels: r.PostFormValue("labels"),
	}
	again := func(status int, apiErr *v1.Error) error {
		if err := c.fillCreateChoices(r, s, &f); err != nil {
			return err
		}
		f.FieldErrors = fieldErrors(apiErr)
		c.render(w, r, status, "create.html", page{Title: "Create a cluster", Session: s, Data: &f, Error: apiErr})
		return nil
	}
	cl, formErr := f.cluster()
	if formErr != nil {
		return again(http.StatusBadRequest, formErr)
	}
	if f.Project == "" {
		return again(http.StatusBadRequest, &v1.Error{Code: v1.CodeMissingParameter, Target: "project", Message: "choose the project the cluster belongs to"})
	}
	if f.Name == "" {
		return again(http.StatusBadRequest, &v1.Error{Code: v1.CodeMissingParameter, Target: "name", Message: "give the cluster a name"})
	}
	if r.PostFormValue("dryRun") != "" {
		// The API's dry run: nothing is made; its findings at their fields.
		res, err := c.client(r, s.token).ValidateCluster(r.Context(), f.Project, cl)
		if ae, ok := apiError(err); ok && ae.StatusCode != http.StatusUnauthorized {
			return again(ae.StatusCode, &ae.Err)
		}
		if err != nil {
			return err
		}
		f.Checked, f.Cost = res.Checks, res.Cost
		return again(http.StatusOK, nil)
	}
	_, opID, err := c.client(r, s.token).CreateCluster(r.Context(), f.Project, cl)
	if ae, ok := apiError(err); ok && ae.StatusCode == http.StatusPreconditionFailed {
		// If-None-Match: a cluster of that name is there already.
		return again(http.StatusConflict, &v1.Error{Code: v1.CodeConflict, Target: "name",
			Message: fmt.Sprintf("a cluster named %s is in project %s already: choose another name", f.Name, f.Project)})
	}
	if ae, ok := apiError(err); ok && ae.StatusCode != http.StatusUnauthorized {
		return again(ae.StatusCode, &ae.Err)
	}
	if err != nil {
		return err
	}
	redirect(w, r, clusterURL(f.Project, f.Name), fmt.Sprintf("Creating cluster %s (operation %s).", f.Name, opID))
	return nil
}

// cluster makes the cluster to create. Only what the form cannot say in
// JSON (a number that is not one, a label without =) is checked here; the
// API checks the rest and its messages are shown as they are.
func (f *createForm) cluster() (*v1.Cluster, *v1.Error) {
	cl := &v1.Cluster{Name: f.Name, Spec: v1.ClusterSpec{
		Provider: f.Provider, KubernetesVersion: f.Version, Distribution: f.Distribution,
		Region: f.Region, CloudAccount: f.CloudAccount, NodeApproval: f.NodeApproval,
		ControlPlane: v1.ControlPlane{Dedicated: f.Dedicated, InstanceType: f.InstanceType},
	}}
	if f.ControlPlane != "" {
		n, err := strconv.Atoi(f.ControlPlane)
		if err != nil {
			return nil, &v1.Error{Code: v1.CodeInvalidParameter, Target: "spec.controlPlane.size", Message: "the control plane's size must be a whole number"}
		}
		cl.Spec.ControlPlane.Size = n
	}
	if f.Workers != "" {
		n, err := strconv.Atoi(f.Workers)
		if err != nil {
			return nil, &v1.Error{Code: v1.CodeInvalidParameter, Target: "spec.workerPools[0].size", Message: "the number of workers must be a whole number"}
		}
		cl.Spec.WorkerPools = []v1.WorkerPool{{Name: "default", Size: n, InstanceType: f.InstanceType}}
	}
	labels, err := parseLabels(f.Labels, "spec.labels")
	if err != nil {
		return nil, err
	}
	cl.Spec.Labels = labels
	return cl, nil
}

// parseLabels reads key=value pairs, one a line or separated by commas.
func parseLabels(text, target string) (map[string]string, *v1.Error) {
	var out map[string]string
	for _, kv := range strings.FieldsFunc(text, func(r rune) bool { return r == '\n' || r == ',' }) {
		kv = strings.TrimSpace(kv)
		if kv == "" {
			continue
		}
		k, v, ok := strings.Cut(kv, "=")
		if !ok || strings.TrimSpace(k) == "" {
			return nil, &v1.Error{Code: v1.CodeInvalidParameter, Target: target, Message: fmt.Sprintf("label %q must be key=value", kv)}
		}
		if out == nil {
			out = map[string]string{}
		}
		out[strings.TrimSpace(k)] = strings.TrimSpace(v)
	}
	return out, nil
}

// formFields maps the API's field names (an error's target) to the create
// form's inputs.
var formFields = []struct{ prefix, input string }{
	{"name", "name"},
	{"cluster", "name"}, // the name in the API's path
	{"spec.provider", "provider"},
	{"spec.kubernetesVersion", "version"},
	{"spec.distribution", "distribution"},
	{"spec.controlPlane.size", "controlPlane"},
	{"spec.controlPlane.dedicated", "dedicated"},
	{"spec.controlPlane.instanceType", "instanceType"},
	{"spec.workerPools[0].instanceType", "instanceType"},
	{"spec.workerPools", "workers"},
	{"spec.region", "region"},
	{"spec.cloudAccount", "cloudAccount"},
	{"spec.nodeApproval", "nodeApproval"},
	{"spec.labels", "labels"},
	{"project", "project"},
}

// fieldErrors places an API error and its details at the form's inputs.
func fieldErrors(e *v1.Error) map[string]string {
	out := map[string]string{}
	if e == nil {
		return out
	}
	place := func(target, msg string) {
		for _, f := range formFields {
			if target == f.prefix || strings.HasPrefix(target, f.prefix+".") || strings.HasPrefix(target, f.prefix+"[") {
				if out[f.input] == "" {
					out[f.input] = msg
				}
				return
			}
		}
	}
	place(e.Target, e.Message)
	for _, d := range e.Details {
		place(d.Target, d.Message)
	}
	return out
}
