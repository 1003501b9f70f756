package server

import (
	"errors"
	"net/http"

	v1 "kiln.dev/kiln/api/v1"
	"kiln.dev/kiln/internal/failure"
	"kiln.dev/kiln/internal/store"
)

// validateCluster is the dry run of a PUT (POST .../clusters/{c}/validate):
// the body is checked as a PUT would check it, then against the world as
// the validate-dynamic step would, and nothing is written. Every finding is
// in the 400's details; 200 lists what was checked and what the cluster
// would cost (internal/cost's estimate of the spec).
func (s *Server) validateCluster(w http.ResponseWriter, r *http.Request) error {
	body, err := readBody(r)
	if err != nil {
		return err
	}
	m, err := parseObject(body)
	if err != nil {
		return err
	}
	if err := s.requireProject(r); err != nil {
		return err
	}
	key := clusterKey(r)
	existing, err := s.clusters.GetCluster(r.Context(), key)
	switch {
	case errors.Is(err, store.ErrNotFound):
		existing = nil
	case err != nil:
		return err
	}
	spec, err := s.clusterSpec(r, m, existing)
	if err != nil {
		return err
	}
	rep, err := s.checker.Cluster(r.Context(), key.Project, key.Name, &spec)
	if err != nil {
		if fe := failure.From(err); fe.Retryable && fe.Code != v1.CodeInternal && fe.Code != v1.CodeCanceled {
			w.Header().Set("Retry-After", "5")
			return &apiError{status: http.StatusServiceUnavailable, cause: err, body: v1.Error{
				Code: fe.Code, Message: "the provider could not be asked: " + fe.Message + "; try again shortly"}}
		}
		return err
	}
	if len(rep.Findings) > 0 {
		return validationError("cluster", rep.Findings)
	}
	writeJSON(w, http.StatusOK, v1.ClusterValidation{
		Name: key.Name, ID: clusterPath(key.Project, key.Name), Spec: spec, Checks: rep.Checks,
		Cost: s.estimate(&spec, v1.StateSucceeded),
	})
	return nil
}
