package server

import (
	"fmt"
	"net/http"
	"strconv"

	v1 "kiln.dev/kiln/api/v1"
	"kiln.dev/kiln/internal/store"
)

// createDiagnostics gathers a diagnostics bundle of the cluster now (POST
// .../diagnostics, no body) and answers its record (201): the cluster's
// current or last operation, its events, its nodes' records and logs, and
// what its Kubernetes API answers, secrets stripped. A failed operation
// gathers one by itself.
func (s *Server) createDiagnostics(w http.ResponseWriter, r *http.Request) error {
	if hasBody(r) {
		return invalidRequest("this request takes no body")
	}
	cl, err := s.readCluster(r)
	if err != nil {
		return err
	}
	if s.diagnose == nil {
		return newError(http.StatusServiceUnavailable, v1.CodeUnavailable, "",
			"this kilnd process gathers no diagnostics (it has no role that reaches clusters); ask a process of role all or frontend")
	}
	d, err := s.diagnose(r.Context(), cl, "requested by "+info(r.Context()).principal.Name)
	if err != nil {
		return fmt.Errorf("gather diagnostics: %w", err)
	}
	w.Header().Set("Location", clusterPath(cl.Project, cl.Name)+"/diagnostics/"+d.ID)
	writeJSON(w, http.StatusCreated, d.Diagnostics)
	return nil
}

// listDiagnostics lists the cluster's bundles, newest first (at most
// store.MaxDiagnostics are kept).
func (s *Server) listDiagnostics(w http.ResponseWriter, r *http.Request) error {
	pg, err := page(r)
	if err != nil {
		return err
	}
	if err := s.requireCluster(r); err != nil {
		return err
	}
	items, next, err := s.diagnostics.ListDiagnostics(r.Context(), clusterKey(r), pg)
	if err != nil {
		return err
	}
	list(w, r, pg, items, next, func(d *store.Diagnostics) v1.Diagnostics { return d.Diagnostics })
	return nil
}

// readDiagnostics reads the bundle's record the path names; one of another
// cluster is not found.
func (s *Server) readDiagnostics(r *http.Request) (*store.Diagnostics, error) {
	if err := s.requireCluster(r); err != nil {
		return nil, err
	}
	k := clusterKey(r)
	d, err := s.diagnostics.GetDiagnostics(r.Context(), r.PathValue("diagnostics"))
	if err == nil && (d.Project != k.Project || d.Cluster != k.Name) {
		err = store.ErrNotFound
	}
	if err != nil {
		return nil, toAPIError(err, refOf(r, "diagnostics"))
	}
	return d, nil
}

func (s *Server) getDiagnostics(w http.ResponseWriter, r *http.Request) error {
	d, err := s.readDiagnostics(r)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, d.Diagnostics)
	return nil
}

// getDiagnosticsBundle answers the bundle: application/gzip, a tar.
func (s *Server) getDiagnosticsBundle(w http.ResponseWriter, r *http.Request) error {
	d, err := s.readDiagnostics(r)
	if err != nil {
		return err
	}
	b, err := s.diagnostics.GetDiagnosticsBundle(r.Context(), d.ID)
	if err != nil {
		return toAPIError(err, refOf(r, "diagnostics"))
	}
	w.Header().Set("Content-Type", "application/gzip")
	w.Header().Set("Content-Length", strconv.Itoa(len(b)))
	w.Header().Set("Content-Disposition", fmt.Sprintf("attachment; filename=%q", "diagnostics-"+d.ID+".tar.gz"))
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(b)
	return nil
}

func (s *Server) deleteDiagnostics(w http.ResponseWriter, r *http.Request) error {
	if hasBody(r) {
		return invalidRequest("this request takes no body")
	}
	d, err := s.readDiagnostics(r)
	if err != nil {
		return err
	}
	if err := s.diagnostics.DeleteDiagnostics(r.Context(), d.ID); err != nil {
		return toAPIError(err, refOf(r, "diagnostics"))
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}
