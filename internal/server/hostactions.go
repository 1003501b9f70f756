package server

import (
	"context"
	"fmt"
	"net/http"
	"slices"

	v1 "kiln.dev/kiln/api/v1"
	"kiln.dev/kiln/internal/store"
	"kiln.dev/kiln/internal/validate"
)

// provisionCluster installs Kubernetes on the configured hosts of a cluster
// made of hosts users bring (POST .../clusters/{c}/provision, no body):
// 202 with a provision operation, or 409 when the hosts do not make the
// configuration the spec asks for (NodeCountMismatch, saying what is
// missing), when spec.network.loadBalancerPool is not on their subnet
// (InvalidParameter on the field), or while another operation runs. On a
// cluster provisioned already it joins the hosts configured since: 409
// when there are none, when one of them failed its prechecks (on
// nodes/NAME.prechecks) or when the control-plane hosts added would leave
// an even number of etcd members (NodeCountMismatch on nodes/NAME.role).
func (s *Server) provisionCluster(w http.ResponseWriter, r *http.Request) error {
	return s.hostAction(w, r, v1.KindProvision, func(ctx context.Context, cl *store.Cluster) error {
		nodes, err := s.allNodes(ctx, cl.Key())
		if err != nil {
			return err
		}
		all := make([]v1.Node, len(nodes))
		var installed string
		for i, n := range nodes {
			if validate.Installed(n.Node) && installed == "" {
				installed = fmt.Sprintf("node %s is %s", n.Name, n.State)
			}
			all[i] = n.Node
		}
		added, e := validate.HostsAdded(all)
		if e != nil {
			return &apiError{status: http.StatusConflict, body: *e}
		}
		if installed != "" && len(added) == 0 && cl.Status.ProvisioningState == v1.StateSucceeded {
			return conflict(keyRef(cl.Key()), "nodes",
				"is provisioned already (%s) and no host was configured since: approve and configure a host that joined to add it "+
					"(kiln node configure CLUSTER NODE --role ...), or reset the cluster (kiln cluster reset) to provision it again", installed)
		}
		if e := validate.HostCounts(&cl.Spec, validate.HostsOf(all)); e != nil {
			return &apiError{status: http.StatusConflict, body: *e}
		}
		if e := validate.PoolOnHosts(&cl.Spec, all); e != nil {
			return &apiError{status: http.StatusConflict, body: *e}
		}
		return nil
	})
}

// resetCluster tears Kubernetes down on every host of a cluster made of
// hosts users bring and removes the hosts from it (POST
// .../clusters/{c}/reset, no body). The cluster keeps its settings and its
// activation material, so hosts can join again. Refused (409) while
// another operation runs.
func (s *Server) resetCluster(w http.ResponseWriter, r *http.Request) error {
	return s.hostAction(w, r, v1.KindReset, func(context.Context, *store.Cluster) error { return nil })
}

// hostAction starts an operation of kind on a host cluster after check
// passes: 202, or 404 for a missing cluster, 409 for a cluster of another
// provider, a cluster whose create did not succeed, or one busy with an
// operation.
func (s *Server) hostAction(w http.ResponseWriter, r *http.Request, kind string, check func(context.Context, *store.Cluster) error) error {
	return s.clusterAction(w, r, kind, func(cl *store.Cluster) error {
		if !s.hostsJoin(cl.Spec.Provider) {
			return conflict(clusterRef(r), "cluster",
				"is not made of hosts that join: a %s cluster's provider provisions its machines itself; %s is for edge clusters", cl.Spec.Provider, kind)
		}
		return nil
	}, check)
}

// clusterAction starts an operation of kind on an existing cluster (a POST
// with no body): 202, or 404 for a missing cluster, 409 when first refuses
// the cluster, when it is busy with an operation or its create did not
// succeed, or when check refuses it.
func (s *Server) clusterAction(w http.ResponseWriter, r *http.Request, kind string, first func(*store.Cluster) error, check func(context.Context, *store.Cluster) error) error {
	if hasBody(r) {
		return invalidRequest("this request takes no body")
	}
	cl, op, err := s.beginAction(r, kind, first, check, nil)
	if err != nil {
		return err
	}
	s.accepted(w, r, cl, op, http.StatusAccepted)
	return nil
}

// beginAction is clusterAction's begin, without its answer; prepare, when
// set, fills in what the operation of kind carries besides its steps (a
// backup's name).
func (s *Server) beginAction(r *http.Request, kind string, first func(*store.Cluster) error, check func(context.Context, *store.Cluster) error,
	prepare func(*store.Operation)) (*store.Cluster, *store.Operation, error) {
	if err := s.requireProject(r); err != nil {
		return nil, nil, err
	}
	key, o := clusterKey(r), clusterRef(r)
	for range attempts(r.Context()) {
		cl, err := s.clusters.GetCluster(r.Context(), key)
		if err != nil {
			return nil, nil, toAPIError(err, o)
		}
		if err := first(cl); err != nil {
			return nil, nil, err
		}
		st := cl.Status
		switch {
		case st.CurrentOperation != "" && slices.Contains([]string{v1.StateCreating, v1.StateUpdating, v1.StateDeleting}, st.ProvisioningState):
			return nil, nil, conflictError(o, &store.ConflictError{Operation: st.CurrentOperation, State: st.ProvisioningState})
		case createUnfinished(st):
			return nil, nil, conflict(o, "cluster",
				"did not finish its create (%s): retry it (kiln cluster retry, or PUT the cluster again) or delete it before a %s",
				st.ProvisioningState, kind)
		}
		if err := check(r.Context(), cl); err != nil {
			return nil, nil, err
		}
		next, op := s.nextOperation(key, cl, false)
		op.Kind = kind
		op.Steps = s.pendingSteps(kind, &next.Spec)
		if prepare != nil {
			prepare(op)
		}
		// Every caller answers 202 once the operation has begun.
		err = s.begin(r, next, op, writeCond(cl.ETag), http.StatusAccepted)
		if raced(err) {
			continue
		}
		if err != nil {
			return nil, nil, err
		}
		return next, op, nil
	}
	return nil, nil, errBusy(o)
}

// hostsJoin reports whether the named provider's clusters are made of the
// hosts users bring.
func (s *Server) hostsJoin(name string) bool { return s.providers.HostsJoin(name) }

// allNodes reads every node of cluster k.
func (s *Server) allNodes(ctx context.Context, k store.Key) ([]*store.Node, error) {
	var out []*store.Node
	pg := store.Page{Limit: 1000}
	for {
		ns, next, err := s.nodes.ListNodes(ctx, k, pg)
		if err != nil {
			return nil, fmt.Errorf("list nodes: %w", err)
		}
		out = append(out, ns...)
		if next == "" {
			return out, nil
		}
		pg.Token = next
	}
}

// hostsInstalled names the hosts of cluster k that have Kubernetes
// installed (or being installed).
func (s *Server) hostsInstalled(ctx context.Context, k store.Key) ([]string, error) {
	nodes, err := s.allNodes(ctx, k)
	if err != nil {
		return nil, err
	}
	var out []string
	for _, n := range nodes {
		switch n.State {
		case v1.NodeProvisioning, v1.NodeReady, v1.NodeNotReady:
			out = append(out, n.Name)
		}
	}
	return out, nil
}
