package plan

import (
	"context"
	"fmt"

	"kiln.dev/kiln/internal/provider"
	"kiln.dev/kiln/internal/store"
)

// checkpoint is a step's provider.Checkpoint: its values are in the
// operation's stored step record (store.Operation.Checkpoints, never in an
// API response), and each Set is saved at once with the run's fence, so a
// worker that lost its lease cannot overwrite the new owner's. A step run
// again, by this worker or the next, reads what its earlier attempts kept;
// the step's success drops it (dropCheckpoints), and so does the
// operation's end.
//
// Providers call it from goroutines of their own: the run's progressMu
// guards the values and orders the saves, as it does Progress's.
type checkpoint struct {
	x    *run
	step string
}

var _ provider.Checkpoint = checkpoint{}

func (c checkpoint) Get(key string) string {
	c.x.progressMu.Lock()
	defer c.x.progressMu.Unlock()
	return c.x.op.Checkpoints[c.step][key]
}

func (c checkpoint) Set(ctx context.Context, key, value string) error {
	x := c.x
	x.progressMu.Lock()
	defer x.progressMu.Unlock()
	cp := x.op.Checkpoints[c.step]
	if cp[key] == value {
		return nil
	}
	switch {
	case value == "":
		delete(cp, key)
		if len(cp) == 0 {
			delete(x.op.Checkpoints, c.step)
		}
	case cp == nil:
		if x.op.Checkpoints == nil {
			x.op.Checkpoints = map[string]map[string]string{}
		}
		x.op.Checkpoints[c.step] = map[string]string{key: value}
	default:
		cp[key] = value
	}
	if err := x.save(ctx, false); err != nil {
		return fmt.Errorf("keep step %s's checkpoint %s: %w", c.step, key, err)
	}
	return nil
}

// dropCheckpoint forgets step's checkpoint, to be saved with the next
// write: the step is done.
func (x *run) dropCheckpoint(step string) {
	x.progressMu.Lock()
	defer x.progressMu.Unlock()
	delete(x.op.Checkpoints, step)
}

// finishOperation ends the operation as x.op says (FinishOperation, with
// deleteCluster and events), every step's checkpoint dropped: nothing
// resumes an operation that ended.
func (x *run) finishOperation(ctx context.Context, deleteCluster bool, events ...*store.Event) error {
	x.progressMu.Lock()
	x.op.Checkpoints = nil
	x.progressMu.Unlock()
	return x.ops.FinishOperation(ctx, x.cl, x.op, x.fence, deleteCluster, events...)
}
