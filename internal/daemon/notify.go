package daemon

import (
	"context"

	"kiln.dev/kiln/internal/server"
	"kiln.dev/kiln/internal/store"
)

// wakingStore wakes an idle backend in the same process as soon as the
// frontend records a new operation, instead of at the backend's next poll.
type wakingStore struct {
	server.Store
	wake func()
}

func (s wakingStore) BeginOperation(ctx context.Context, cl *store.Cluster, op *store.Operation, c store.Cond) error {
	err := s.Store.BeginOperation(ctx, cl, op, c)
	if err == nil {
		s.wake()
	}
	return err
}

// notifyingStore wakes the frontend's long-polls in the same process as soon
// as the backend writes an operation, instead of at the frontend's next store
// re-read (which still serves backends in other processes).
type notifyingStore struct {
	store.Store
	notify func(opID string)
}

func (s notifyingStore) SaveOperation(ctx context.Context, op *store.Operation, f store.Fence, progress bool) error {
	err := s.Store.SaveOperation(ctx, op, f, progress)
	if err == nil {
		s.notify(op.ID)
	}
	return err
}

func (s notifyingStore) FinishOperation(ctx context.Context, cl *store.Cluster, op *store.Operation, f store.Fence, deleteCluster bool, events ...*store.Event) error {
	err := s.Store.FinishOperation(ctx, cl, op, f, deleteCluster, events...)
	if err == nil {
		s.notify(op.ID)
	}
	return err
}
