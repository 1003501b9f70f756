package store

import "sync"

// A Change says that a write someone may be waiting for was committed, so
// that the waiter reads the store now instead of at its next poll: a worker
// claims an operation just begun, a long-poll answers a step just saved, an
// agent's session sends an instruction just written. A Change carries names,
// never data: the waiter reads the record itself. Changes are hints; a lost
// one costs a poll interval, never correctness, and ChangeResync says some
// may have been lost.
type Change struct {
	Kind      ChangeKind `json:"k"`
	Project   string     `json:"p,omitempty"`
	Cluster   string     `json:"c,omitempty"`
	Node      string     `json:"n,omitempty"` // ChangeInstruction
	Operation string     `json:"o,omitempty"` // ChangeOperation
	Secret    string     `json:"s,omitempty"` // ChangeSecret
	// Remote: another process committed it (a relay brought it).
	Remote bool `json:"-"`
}

// ChangeKind is what a Change is about.
type ChangeKind string

const (
	// ChangeWork: an operation may have become claimable (one was begun,
	// or a lease was handed back).
	ChangeWork ChangeKind = "work"
	// ChangeOperation: operation Operation of cluster Project/Cluster was
	// written (a step, its progress, its end, a cancel request).
	ChangeOperation ChangeKind = "operation"
	// ChangeInstruction: an instruction for node Node of the cluster was
	// written.
	ChangeInstruction ChangeKind = "instruction"
	// ChangeSecret: the cluster secret named Secret was written.
	ChangeSecret ChangeKind = "secret"
	// ChangeResync: changes may have been missed (the connection that
	// brings other processes' changes was lost and is back): every waiter
	// reads the store again.
	ChangeResync ChangeKind = "resync"
)

// Key is the cluster a Change is about.
func (c Change) Key() Key { return Key{Project: c.Project, Name: c.Cluster} }

// Watcher is a store that tells about its changes: the writes of this
// process always, and those of other processes where the database can carry
// them (PostgreSQL's LISTEN/NOTIFY).
type Watcher interface {
	// Watch calls fn with each change from now on until stop is called. fn
	// runs on the writer's goroutine or the store's listener: it must not
	// block (wake a goroutine, do not read the store).
	Watch(fn func(Change)) (stop func())
}

// Hub is an in-process Watcher: Publish hands a change to every watcher.
// The zero Hub is ready to use.
type Hub struct {
	mu   sync.RWMutex
	next int
	fns  map[int]func(Change)
}

// Watch implements Watcher.
func (h *Hub) Watch(fn func(Change)) (stop func()) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.fns == nil {
		h.fns = map[int]func(Change){}
	}
	id := h.next
	h.next++
	h.fns[id] = fn
	return func() {
		h.mu.Lock()
		delete(h.fns, id)
		h.mu.Unlock()
	}
}

// Publish calls every watcher with each change.
func (h *Hub) Publish(changes ...Change) {
	h.mu.RLock()
	defer h.mu.RUnlock()
	for _, c := range changes {
		for _, fn := range h.fns {
			fn(c)
		}
	}
}
