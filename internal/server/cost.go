package server

import (
	"maps"
	"net/http"
	"slices"
	"strconv"
	"time"

	"kiln.dev/kiln/internal/store"
)

// Cost history windows (GET /v1/cost?days=N): the retention keeps a cost
// interval at least 31 days after it ended.
const (
	defaultCostDays = 30
	maxCostDays     = 31
)

// getCost is GET /v1/cost: what the estimate said each cluster of the
// projects the caller has a role in (an owner's: every project) cost over
// the last days (30 unless ?days= says, at most 31), deleted clusters
// included, added up by the store from its cost intervals.
func (s *Server) getCost(w http.ResponseWriter, r *http.Request) error {
	days := defaultCostDays
	if v := r.URL.Query().Get("days"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > maxCostDays {
			return badRequest("days", "days must be a whole number of days from 1 to %d, not %q", maxCostDays, v)
		}
		days = n
	}
	p := info(r.Context()).principal
	now := s.now().UTC()
	q := store.CostQuery{All: p.Owner, From: now.Add(-time.Duration(days) * 24 * time.Hour), To: now}
	if !p.Owner {
		roles, err := s.projectsOf(r, p)
		if err != nil {
			return err
		}
		q.Projects = slices.Sorted(maps.Keys(roles))
	}
	h, err := s.costs.CostHistory(r.Context(), q)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, h)
	return nil
}
