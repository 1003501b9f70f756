package daemon

import "kiln.dev/kiln/internal/store"

// watch routes the store's changes to what waits for them in this process,
// so nothing waits for its next poll: a begun operation or a lease handed
// back wakes the worker; a written operation wakes its long-polls; a resync
// wakes both. On PostgreSQL the other replicas' changes arrive too
// (LISTEN/NOTIFY), so an operation a frontend records is claimed by another
// replica's worker at once, and a step a backend saves reaches the
// long-polls of every frontend. Agent sessions are woken by the gateway's
// own watch (gateway.Run).
func (d *Daemon) watch() {
	w, ok := d.Store.(store.Watcher)
	if !ok {
		return
	}
	d.stopWatch = w.Watch(func(c store.Change) {
		switch c.Kind {
		case store.ChangeWork:
			d.wakeWorker()
		case store.ChangeOperation:
			if d.front != nil {
				d.front.api.Notify(c.Operation)
			}
		case store.ChangeResync:
			d.wakeWorker()
			if d.front != nil {
				d.front.api.NotifyAll()
			}
		}
	})
}
