package server

import (
	"net/http"

	v1 "kiln.dev/kiln/api/v1"
	"kiln.dev/kiln/internal/store"
)

// listEvents lists a cluster's timeline, oldest first. The project must
// exist; the cluster need not, so the history of a deleted cluster stays
// readable for as long as the store keeps it, until a cluster is created
// again under its name: that one's timeline is its own.
func (s *Server) listEvents(w http.ResponseWriter, r *http.Request) error {
	pg, err := page(r)
	if err != nil {
		return err
	}
	if err := s.requireProject(r); err != nil {
		return err
	}
	items, next, err := s.events.ListEvents(r.Context(), clusterKey(r), pg)
	if err != nil {
		return err
	}
	list(w, r, pg, items, next, func(e *store.Event) v1.Event { return e.Event })
	return nil
}
