package server

import (
	"context"
	"errors"
	"net/http"

	v1 "kiln.dev/kiln/api/v1"
	"kiln.dev/kiln/internal/store"
	"kiln.dev/kiln/internal/trust"
)

// Activation reissues and revokes clusters' activation material; the agent
// gateway does it (*gateway.Gateway).
type Activation interface {
	Reissue(ctx context.Context, k store.Key) (v1.AgentCredentials, string, error)
	Revoke(ctx context.Context, k store.Key) error
	// Credentials reads the cluster's activation credential and
	// passphrase, for its installer.
	Credentials(ctx context.Context, k store.Key) (v1.AgentCredentials, string, error)
	// Revoked reports whether the credential is revoked: no installer is
	// made with it.
	Revoked(ctx context.Context, k store.Key) (bool, error)
}

// reissueActivation answers 201 with a new credential and passphrase; the
// old ones are refused from now on.
func (s *Server) reissueActivation(w http.ResponseWriter, r *http.Request) error {
	if err := s.activationTarget(r); err != nil {
		return err
	}
	creds, pass, err := s.activation.Reissue(r.Context(), clusterKey(r))
	if err != nil {
		return activationError(r, err)
	}
	writeJSON(w, http.StatusCreated, v1.Activation{Credentials: creds, Passphrase: pass})
	return nil
}

// revokeActivation answers 204; hosts can no longer join with the
// cluster's credential, nodes that joined keep working.
func (s *Server) revokeActivation(w http.ResponseWriter, r *http.Request) error {
	if err := s.activationTarget(r); err != nil {
		return err
	}
	if err := s.activation.Revoke(r.Context(), clusterKey(r)); err != nil {
		return activationError(r, err)
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

// activationTarget checks the request has no body, this process can
// change activation material and the cluster exists.
func (s *Server) activationTarget(r *http.Request) error {
	if hasBody(r) {
		return invalidRequest("this request takes no body")
	}
	if s.activation == nil {
		return errNoGateway(r)
	}
	if err := s.requireCluster(r); err != nil {
		return err
	}
	return nil
}

// errNoGateway refuses what only a process with an agent gateway can do.
func errNoGateway(r *http.Request) error {
	return conflict(clusterRef(r), "",
		"has activation material only a kilnd with an agent gateway can use, and this one has none (--role backend); send the request to a frontend")
}

// activationError words a missing credential for the client. Every caller
// has read the cluster first, so a record not found is the credential's.
func activationError(r *http.Request, err error) error {
	if errors.Is(err, trust.ErrNoActivation) || errors.Is(err, store.ErrNotFound) {
		return conflict(clusterRef(r), "cluster", "has no activation credential yet: its create makes one; wait for it to start")
	}
	return err
}
