package plan

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"kiln.dev/kiln/internal/plan/attached"
	"kiln.dev/kiln/internal/plan/profile"
	"kiln.dev/kiln/internal/store"
)

// view is what the step families see of a run: it implements step.Context
// and each family's own interface of what it needs (attached.Run, ...),
// and nothing else of the runner.
type view struct{ x *run }

func (v view) Cluster() *store.Cluster     { return v.x.cl }
func (v view) Operation() *store.Operation { return v.x.op }
func (v view) Log() *slog.Logger           { return v.x.log }
func (v view) Now() time.Time              { return v.x.r.opts.Now() }
func (v view) Note(msg string)             { v.x.note = msg }
func (v view) Canceling() bool             { return v.x.canceling() }
func (v view) Fence() store.Fence          { return v.x.fence }

func (v view) Progress(ctx context.Context, part, what string) { v.x.showProgress(ctx, part, what) }

func (v view) Event(ctx context.Context, typ, reason, msg string) { v.x.event(ctx, typ, reason, msg) }

// SaveStatus writes the cluster's status, fenced. (Its message names
// status.profile, where the profile step was its first user.)
func (v view) SaveStatus(ctx context.Context) error {
	x := v.x
	if err := x.ops.PutClusterStatus(ctx, x.cl, store.Cond{Fence: &x.fence}); err != nil {
		return fmt.Errorf("save status.profile: %w", err)
	}
	return nil
}

func (v view) GetProjectSecret(ctx context.Context, project, name string) (*store.ProjectSecret, error) {
	return v.x.r.opts.Store.GetProjectSecret(ctx, project, name)
}

func (v view) PutClusterSecret(ctx context.Context, k store.Key, name string, value []byte, c store.Cond) error {
	return v.x.secrets.PutClusterSecret(ctx, k, name, value, c)
}

func (v view) Nodes() attached.NodeStore { return v.x.nodeRecords }

func (v view) GetClusterSecret(ctx context.Context, k store.Key, name string) ([]byte, error) {
	return v.x.secrets.GetClusterSecret(ctx, k, name)
}

func (v view) GetProfile(ctx context.Context, project, name string) (*store.Profile, error) {
	return v.x.r.opts.Store.GetProfile(ctx, project, name)
}

// RunsKubernetes: the cluster's nodes run agents that install it, or it
// is an attached cluster.
func (v view) RunsKubernetes() bool                         { return v.x.usesAgents() || v.x.attached() }
func (v view) Packs() profile.PackApplier                   { return v.x.r.opts.Packs }
func (v view) Endpoint(ctx context.Context) (string, error) { return v.x.endpoint(ctx) }

var (
	_ attached.Run = view{}
	_ profile.Run  = view{}
)
