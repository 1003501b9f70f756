package sqlstore

import "kiln.dev/kiln/internal/store"

// Relay carries changes between processes that share a database
// (PostgreSQL's LISTEN/NOTIFY: internal/store/postgres).
type Relay interface {
	// Start begins delivering other processes' changes, and ChangeResync
	// whenever some may have been missed, to deliver.
	Start(deliver func(...store.Change))
	// Send hands changes this process committed to the others. It must
	// not block the writer: a relay that cannot keep up sends a
	// ChangeResync instead.
	Send(changes []store.Change)
	// Close stops the relay.
	Close() error
}

// Watch implements store.Watcher: fn sees every change this store commits
// and, with a relay, every change other processes commit.
func (s *Store) Watch(fn func(store.Change)) (stop func()) { return s.changes.Watch(fn) }

// changed tells watchers, here and through the relay, about a committed
// write. Call it after the commit, never inside the transaction.
func (s *Store) changed(changes ...store.Change) {
	s.changes.Publish(changes...)
	if s.relay != nil {
		s.relay.Send(changes)
	}
}

func operationChanged(op *store.Operation) store.Change {
	return store.Change{Kind: store.ChangeOperation, Project: op.Project, Cluster: op.Cluster, Operation: op.ID}
}
