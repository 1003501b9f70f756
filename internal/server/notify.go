package server

import "sync"

// notifier wakes long-polls of an operation. Each watch gets a channel that
// is closed by the next Notify of that operation; a waiter watches again
// after each wake-up.
type notifier struct {
	mu      sync.Mutex
	watches map[string]*watch
}

type watch struct {
	ch      chan struct{}
	waiters int
}

// watch returns a channel closed at the next notify(id), and a release
// function the caller must call when it stops waiting.
func (n *notifier) watch(id string) (<-chan struct{}, func()) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.watches == nil {
		n.watches = map[string]*watch{}
	}
	w, ok := n.watches[id]
	if !ok {
		w = &watch{ch: make(chan struct{})}
		n.watches[id] = w
	}
	w.waiters++
	var once sync.Once
	return w.ch, func() {
		once.Do(func() {
			n.mu.Lock()
			defer n.mu.Unlock()
			w.waiters--
			if w.waiters == 0 && n.watches[id] == w {
				delete(n.watches, id)
			}
		})
	}
}

func (n *notifier) notifyAll() {
	n.mu.Lock()
	defer n.mu.Unlock()
	for id, w := range n.watches {
		close(w.ch)
		delete(n.watches, id)
	}
}

func (n *notifier) notify(id string) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if w, ok := n.watches[id]; ok {
		close(w.ch)
		delete(n.watches, id)
	}
}
