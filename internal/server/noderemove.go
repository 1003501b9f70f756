package server

import (
	"context"
	"net/http"

	v1 "kiln.dev/kiln/api/v1"
	"kiln.dev/kiln/internal/store"
	"kiln.dev/kiln/internal/validate"
)

// removeNode takes one host out of an edge cluster that stays (DELETE
// .../clusters/{c}/nodes/{node}, no body): 202 with a remove-node
// operation (drain-nodes, reset-nodes, remove-nodes) and the cluster, the
// operation in the Azure-AsyncOperation and Location headers. 404 for a
// missing cluster or node; 409 for a cluster of another provider, one busy
// with an operation, a worker that is the last of a dedicated cluster
// (NodeCountMismatch on nodes/NAME), or a control-plane node whose removal
// would leave no etcd member or an even number of them (NodeCountMismatch
// on nodes/NAME.role).
func (s *Server) removeNode(w http.ResponseWriter, r *http.Request) error {
	if hasBody(r) {
		return invalidRequest("this request takes no body")
	}
	name := r.PathValue("node")
	cl, op, err := s.beginAction(r, v1.KindRemoveNode, func(cl *store.Cluster) error {
		if !s.hostsJoin(cl.Spec.Provider) {
			return conflict(clusterRef(r), "cluster",
				"is not made of hosts that join: a %s cluster's nodes go with its spec (kiln cluster scale); removing one node is for edge clusters", cl.Spec.Provider)
		}
		return nil
	}, func(ctx context.Context, cl *store.Cluster) error {
		nodes, err := s.allNodes(ctx, cl.Key())
		if err != nil {
			return err
		}
		all := make([]v1.Node, len(nodes))
		for i, n := range nodes {
			all[i] = n.Node
		}
		found := false
		for _, n := range all {
			found = found || n.Name == name
		}
		if !found {
			return toAPIError(store.ErrNotFound, refOf(r, "node"))
		}
		if e := validate.NodeRemoval(&cl.Spec, cl.Status.Endpoint, all, name); e != nil {
			return &apiError{status: http.StatusConflict, body: *e}
		}
		return nil
	}, func(op *store.Operation) { op.Nodes = []string{name} })
	if err != nil {
		return err
	}
	s.accepted(w, r, cl, op, http.StatusAccepted)
	return nil
}
