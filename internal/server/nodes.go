package server

import (
	"net/http"

	v1 "kiln.dev/kiln/api/v1"
	"kiln.dev/kiln/internal/store"
)

func nodeOut(n *store.Node) v1.Node {
	out := n.Node
	out.ID = nodePath(n.Project, n.Cluster, n.Name)
	return out
}

// requireCluster answers 404 for a missing project (target "project") or
// cluster (target "cluster").
func (s *Server) requireCluster(r *http.Request) error {
	_, err := s.readCluster(r)
	return err
}

func (s *Server) listNodes(w http.ResponseWriter, r *http.Request) error {
	pg, err := page(r)
	if err != nil {
		return err
	}
	if err := s.requireCluster(r); err != nil {
		return err
	}
	items, next, err := s.nodes.ListNodes(r.Context(), clusterKey(r), pg)
	if err != nil {
		return err
	}
	list(w, r, pg, items, next, nodeOut)
	return nil
}

func (s *Server) getNode(w http.ResponseWriter, r *http.Request) error {
	if err := s.requireCluster(r); err != nil {
		return err
	}
	n, err := s.nodes.GetNode(r.Context(), clusterKey(r), r.PathValue("node"))
	if err != nil {
		return err
	}
	w.Header().Set("ETag", quoteETag(n.ETag))
	writeJSON(w, http.StatusOK, nodeOut(n))
	return nil
}
