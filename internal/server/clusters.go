package server

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"

	"github.com/google/uuid"

	v1 "kiln.dev/kiln/api/v1"
	"kiln.dev/kiln/internal/clusterstate"
	"kiln.dev/kiln/internal/cost"
	"kiln.dev/kiln/internal/distro"
	"kiln.dev/kiln/internal/provider"
	"kiln.dev/kiln/internal/store"
	"kiln.dev/kiln/internal/validate"
)

// clusterOut is a cluster as the API answers it: with what its
// distribution installs (status.installed), derived from its spec, and its
// node counts and health (status.nodes, status.health) from its node
// records as they are now (clusterstate), and what it costs (status.cost,
// internal/cost's estimate of its spec). On an error reading the nodes it
// answers the cluster with the error: the counts are those of the spec
// alone.
func (s *Server) clusterOut(ctx context.Context, cl *store.Cluster) (v1.Cluster, error) {
	var nodes []*store.Node
	err := store.Each(func(pg store.Page) ([]*store.Node, string, error) { return s.nodes.ListNodes(ctx, cl.Key(), pg) },
		func(n *store.Node) error { nodes = append(nodes, n); return nil })
	out := s.clusterWithNodes(cl, nodes)
	if err != nil {
		return out, fmt.Errorf("list the nodes of cluster %s: %w", cl.Key(), err)
	}
	return out, nil
}

// clusterWithNodes is clusterOut with the cluster's nodes read already.
func (s *Server) clusterWithNodes(cl *store.Cluster, records []*store.Node) v1.Cluster {
	out := v1.Cluster{
		Name:   cl.Name,
		ID:     clusterPath(cl.Project, cl.Name),
		UID:    cl.UID,
		ETag:   cl.ETag,
		Spec:   cl.Spec,
		Status: cl.Status,
	}
	out.Status.Installed = distro.Installed(&cl.Spec)
	nodes := make([]v1.Node, len(records))
	for i, n := range records {
		nodes[i] = n.Node
	}
	out.Status.Nodes = clusterstate.Counts(&cl.Spec, nodes)
	h := clusterstate.Health(&cl.Spec, cl.Status.ProvisioningState, nodes, clusterstate.Quiet(s.now(), s.started, s.silence))
	h = clusterstate.WithRecorded(h, cl.Status.ProvisioningState, cl.Status.Health)
	if was := cl.Status.Health; was != nil && was.State == h.State && was.Reason == h.Reason {
		h.Since = was.Since
	}
	out.Status.Health = &h
	out.Status.Cost = s.estimate(&cl.Spec, cl.Status.ProvisioningState)
	return out
}

// estimate is status.cost of a cluster of spec in state: the price table's
// estimate, with what it would cost hibernated when it runs and its
// provider can hibernate it (canHibernate, as hibernateCluster asks).
func (s *Server) estimate(spec *v1.ClusterSpec, state string) *v1.ClusterCost {
	c := cost.Default().Estimate(spec, state)
	if c == nil || c.Basis != v1.CostRunning || !s.canHibernate(spec.Provider) {
		return c
	}
	h := cost.Default().Estimate(spec, v1.StateHibernated).PerHour
	c.HibernatedPerHour = &h
	return c
}

// listClusters answers a page of clusters, their nodes read in one query
// for the page.
func (s *Server) listClusters(w http.ResponseWriter, r *http.Request) error {
	pg, err := page(r)
	if err != nil {
		return err
	}
	if err := s.requireProject(r); err != nil {
		return err
	}
	project := r.PathValue("project")
	items, next, err := s.clusters.ListClusters(r.Context(), project, pg)
	if err != nil {
		return err
	}
	names := make([]string, len(items))
	for i, cl := range items {
		names[i] = cl.Name
	}
	nodes, err := s.nodes.ListClustersNodes(r.Context(), project, names)
	if err != nil {
		return err
	}
	list(w, r, pg, items, next, func(cl *store.Cluster) v1.Cluster { return s.clusterWithNodes(cl, nodes[cl.Name]) })
	return nil
}

func (s *Server) getCluster(w http.ResponseWriter, r *http.Request) error {
	cl, err := s.readCluster(r)
	if err != nil {
		return err
	}
	out, err := s.clusterOut(r.Context(), cl)
	if err != nil {
		return err
	}
	w.Header().Set("ETag", quoteETag(cl.ETag))
	writeJSON(w, http.StatusOK, out)
	return nil
}

// readCluster reads the cluster of r's path; its errors name the cluster
// (or the project, when that is what is missing), whatever the route.
func (s *Server) readCluster(r *http.Request) (*store.Cluster, error) {
	cl, err := s.clusters.GetCluster(r.Context(), clusterKey(r))
	if errors.Is(err, store.ErrNotFound) {
		// A cluster implies its project; without one, say which is missing.
		if err := s.requireProject(r); err != nil {
			return nil, err
		}
	}
	if err != nil {
		return nil, toAPIError(err, clusterRef(r))
	}
	return cl, nil
}

// putCluster creates (201) or replaces (202) a cluster.
func (s *Server) putCluster(w http.ResponseWriter, r *http.Request) error {
	body, err := readBody(r)
	if err != nil {
		return err
	}
	m, err := parseObject(body)
	if err != nil {
		return err
	}
	return s.writeCluster(w, r, func(existing *store.Cluster) (v1.ClusterSpec, error) {
		return s.clusterSpec(r, m, existing)
	})
}

// patchCluster applies a JSON merge patch (RFC 7386) to the cluster's
// {"name", "spec"} and replaces it with the result (202).
func (s *Server) patchCluster(w http.ResponseWriter, r *http.Request) error {
	body, err := readBody(r)
	if err != nil {
		return err
	}
	patch, err := parseObject(body)
	if err != nil {
		return err
	}
	return s.writeCluster(w, r, func(existing *store.Cluster) (v1.ClusterSpec, error) {
		if existing == nil {
			return v1.ClusterSpec{}, missing(clusterRef(r)).withHint("create it with PUT")
		}
		doc, err := toMap(struct {
			Name string         `json:"name"`
			Spec v1.ClusterSpec `json:"spec"`
		}{existing.Name, existing.Spec})
		if err != nil {
			return v1.ClusterSpec{}, err
		}
		merged, _ := mergePatch(doc, patch).(map[string]any)
		return s.clusterSpec(r, merged, existing)
	})
}

// clusterSpec decodes a cluster body strictly, checks its name, applies
// defaults and validates the spec, and, when the cluster exists, the
// change. Read-only fields (id, uid, etag, status) are ignored.
func (s *Server) clusterSpec(r *http.Request, m map[string]any, existing *store.Cluster) (v1.ClusterSpec, error) {
	m = clone(m)
	delete(m, "id")
	delete(m, "uid")
	delete(m, "etag")
	delete(m, "status")
	var in v1.Cluster
	if err := decodeMap(m, &in); err != nil {
		return v1.ClusterSpec{}, err
	}
	name := r.PathValue("cluster")
	if in.Name != "" && in.Name != name {
		return v1.ClusterSpec{}, badRequest("name", "the body's name %q differs from the URL's %q", in.Name, name)
	}
	if err := s.profileDefaults(r.Context(), r.PathValue("project"), &in.Spec); err != nil {
		return v1.ClusterSpec{}, err
	}
	if existing == nil {
		if err := s.backupDefaults(r.Context(), r.PathValue("project"), &in.Spec); err != nil {
			return v1.ClusterSpec{}, err
		}
	}
	Defaults(&in.Spec, s.defaultProvider)
	failures := validate.Cluster(name, &in.Spec, s.catalog)
	if fr, ok := s.providers[in.Spec.Provider].(provider.FixedRegions); ok && in.Spec.Region != "" && !slices.Contains(fr.Regions(), in.Spec.Region) {
		failures = append(failures, v1.Error{Code: v1.CodeInvalidParameter, Target: "spec.region",
			Message: fmt.Sprintf("spec.region %q is not a region of provider %s: one of %s", in.Spec.Region, in.Spec.Provider, strings.Join(fr.Regions(), ", "))})
	}
	if existing != nil {
		failures = append(failures, validate.Update(&existing.Spec, &in.Spec)...)
		if s.hostsJoin(existing.Spec.Provider) && existing.Spec.KubernetesVersion != in.Spec.KubernetesVersion {
			installed, err := s.hostsInstalled(r.Context(), existing.Key())
			if err != nil {
				return v1.ClusterSpec{}, err
			}
			if len(installed) > 0 {
				failures = append(failures, v1.Error{Code: v1.CodeInvalidParameter, Target: "spec.kubernetesVersion",
					Message: hostsNotUpgraded(&existing.Spec, installed)})
			}
		}
	}
	if len(failures) > 0 {
		return v1.ClusterSpec{}, validationError("cluster", failures)
	}
	return in.Spec, nil
}

func clone(m map[string]any) map[string]any {
	out := make(map[string]any, len(m))
	for k, v := range m {
		out[k] = v
	}
	return out
}

// deleteCluster starts deleting a cluster (202). With ?force=true it starts
// a forced delete, which ignores provider errors and lists what may be
// left behind: allowed only after an operation failed with a terminal
// provider error (checkForce), else 409.
func (s *Server) deleteCluster(w http.ResponseWriter, r *http.Request) error {
	force := false
	switch v := r.URL.Query().Get("force"); v {
	case "", "false":
	case "true":
		force = true
	default:
		return badRequest("force", "force must be true or false, not %q", v)
	}
	if !force {
		return s.writeCluster(w, r, nil)
	}
	return s.writeClusterWith(w, r, nil, func(existing *store.Cluster, op *store.Operation) error {
		if err := checkForce(existing); err != nil {
			return err
		}
		op.Force = true
		return nil
	})
}

// writeCluster runs one cluster change: it reads the cluster, checks the
// request's conditions, builds the new spec (spec == nil means delete) and
// writes the cluster, a new operation and the request's audit entry with
// one BeginOperation, conditional on what it read. A concurrent change
// between the read and the write makes it start again.
func (s *Server) writeCluster(w http.ResponseWriter, r *http.Request, spec func(existing *store.Cluster) (v1.ClusterSpec, error)) error {
	return s.writeClusterWith(w, r, spec, nil)
}

// writeClusterWith is writeCluster with a check of the cluster as read and
// the new operation, before anything is written (nil: none).
func (s *Server) writeClusterWith(w http.ResponseWriter, r *http.Request, spec func(existing *store.Cluster) (v1.ClusterSpec, error),
	check func(existing *store.Cluster, op *store.Operation) error) error {
	conds, err := readConditions(r)
	if err != nil {
		return err
	}
	if err := s.requireProject(r); err != nil {
		return err
	}
	key := clusterKey(r)
	for range attempts(r.Context()) {
		existing, err := s.clusters.GetCluster(r.Context(), key)
		if err != nil && !errors.Is(err, store.ErrNotFound) {
			return err
		}
		if existing == nil && spec == nil {
			return missing(clusterRef(r))
		}
		current := ""
		if existing != nil {
			current = existing.ETag
		}
		if err := conds.check(current, clusterRef(r)); err != nil {
			return err
		}
		if spec != nil && existing != nil && existing.Status.ProvisioningState == v1.StateHibernated {
			return conflict(clusterRef(r), "cluster",
				"is Hibernated: its control plane is stopped and it has no workers; resume it first (kiln cluster resume %s, or POST .../resume), then change it", key.Name)
		}
		cl, op := s.nextOperation(key, existing, spec == nil)
		if spec != nil {
			if cl.Spec, err = spec(existing); err != nil {
				return err
			}
			if err := s.checkSpecRestoreFrom(r.Context(), existing, cl, op); err != nil {
				return err
			}
		}
		op.Steps = s.pendingSteps(op.Kind, &cl.Spec)
		if check != nil {
			if err := check(existing, op); err != nil {
				return err
			}
		}
		status := http.StatusAccepted
		if existing == nil {
			status = http.StatusCreated
		}
		err = s.begin(r, cl, op, writeCond(current), status)
		if raced(err) {
			// The project may be the thing that vanished.
			if err := s.requireProject(r); err != nil {
				return err
			}
			continue
		}
		if err != nil {
			return err
		}
		s.accepted(w, r, cl, op, status)
		return nil
	}
	return errBusy(clusterRef(r))
}

// accepted answers a request that started operation op on cluster cl:
// the cluster, with the operation's URL to poll in the headers.
func (s *Server) accepted(w http.ResponseWriter, r *http.Request, cl *store.Cluster, op *store.Operation, status int) {
	s.log.InfoContext(r.Context(), "operation started", "requestId", requestID(r.Context()),
		"cluster", cl.Key().String(), "operation", op.ID, "kind", op.Kind)
	h := w.Header()
	h.Set("Azure-AsyncOperation", s.operationURL(r, op.ID))
	h.Set("Location", s.operationURL(r, op.ID))
	h.Set("Retry-After", "1")
	h.Set("ETag", quoteETag(cl.ETag))
	out, err := s.clusterOut(r.Context(), cl)
	if err != nil {
		// The operation is begun: answer it, with the counts of the spec.
		s.log.WarnContext(r.Context(), "answering a cluster without its node counts", "cluster", cl.Key().String(), "err", err)
	}
	writeJSON(w, status, out)
}

// pendingSteps are the steps of a new operation of kind on a cluster with
// spec, each Pending.
func (s *Server) pendingSteps(kind string, spec *v1.ClusterSpec) []v1.Step {
	var steps []v1.Step
	for _, name := range s.steps(kind, spec) {
		steps = append(steps, v1.Step{Name: name, State: v1.StepPending})
	}
	return steps
}

// nextOperation builds the cluster record (spec not yet set, except on
// delete) and the operation of the change that follows existing (nil when
// the cluster is new). A PUT or PATCH on a cluster whose create failed or
// was canceled starts the create again.
func (s *Server) nextOperation(key store.Key, existing *store.Cluster, del bool) (*store.Cluster, *store.Operation) {
	now := s.now().UTC()
	kind, state := v1.KindCreate, v1.StateCreating
	cl := &store.Cluster{Project: key.Project, Name: key.Name}
	if existing != nil {
		cl.Spec = existing.Spec
		cl.Status = existing.Status
		failedCreate := createUnfinished(existing.Status)
		switch {
		case del:
			kind, state = v1.KindDelete, v1.StateDeleting
		case !failedCreate:
			kind, state = v1.KindUpdate, v1.StateUpdating
		}
	} else {
		cl.Status.CreatedAt = now
	}
	id := newOperationID()
	cl.Status.ProvisioningState = state
	cl.Status.FailedProvisioningState = ""
	cl.Status.CurrentOperation = id
	cl.Status.UpdatedAt = now
	op := &store.Operation{
		ID: id, Project: key.Project, Cluster: key.Name,
		Kind: kind, Status: v1.OpInProgress, StartTime: now,
	}
	return cl, op
}

// createUnfinished reports whether a cluster's create failed or was
// canceled: it has no cluster yet to update.
func createUnfinished(st v1.ClusterStatus) bool {
	return (st.ProvisioningState == v1.StateFailed || st.ProvisioningState == v1.StateCanceled) &&
		st.FailedProvisioningState == v1.StateCreating
}

// newOperationID is a UUIDv7, so ids sort by creation time.
func newOperationID() string {
	id, err := uuid.NewV7()
	if err != nil {
		// NewV7 fails only when the system's randomness does; a v4 id
		// still identifies the operation.
		return uuid.NewString()
	}
	return id.String()
}
