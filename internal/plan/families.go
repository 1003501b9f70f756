package plan

import (
	"context"
	"log/slog"
	"time"

	"kiln.dev/kiln/internal/plan/attached"
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

func (v view) SaveStatus(ctx context.Context) error { return v.x.saveStatus(ctx) }

func (v view) GetProjectSecret(ctx context.Context, project, name string) (*store.ProjectSecret, error) {
	return v.x.r.opts.Store.GetProjectSecret(ctx, project, name)
}

func (v view) PutClusterSecret(ctx context.Context, k store.Key, name string, value []byte, c store.Cond) error {
	return v.x.secrets.PutClusterSecret(ctx, k, name, value, c)
}

func (v view) Nodes() attached.NodeStore { return v.x.nodeRecords }

var _ attached.Run = view{}
