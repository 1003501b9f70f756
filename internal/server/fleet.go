package server

import (
	"maps"
	"net/http"
	"slices"

	"kiln.dev/kiln/internal/store"
)

// getFleet is GET /v1/fleet: the fleet at a glance (v1.Fleet), over the
// projects the caller has a role in (an owner's: every project), added up
// by the store.
func (s *Server) getFleet(w http.ResponseWriter, r *http.Request) error {
	p := info(r.Context()).principal
	q := store.FleetQuery{All: p.Owner, Now: s.now()}
	if !p.Owner {
		roles, err := s.projectsOf(r, p)
		if err != nil {
			return err
		}
		q.Projects = slices.Sorted(maps.Keys(roles))
	}
	f, err := s.fleet.FleetSummary(r.Context(), q)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, f)
	return nil
}
