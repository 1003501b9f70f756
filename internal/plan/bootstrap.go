package plan

import (
	"context"

	v1 "kiln.dev/kiln/api/v1"
	"kiln.dev/kiln/internal/store"
)

// Bootstrapper gives the bootstrap data of a cluster's machines: its
// activation credential and passphrase (the agent gateway's Credentials).
type Bootstrapper interface {
	Credentials(ctx context.Context, k store.Key) (v1.AgentCredentials, string, error)
}
