package aws

import "context"

// STUB: owned by the EC2 compute helper; replace whole.

type asgState struct{}

func newASGState() *asgState { return &asgState{} }

func (s *Server) asgActions() map[string]queryAction { return map[string]queryAction{} }

func (s *Server) asgLoop(ctx context.Context) {}
