package postgres

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"encoding/json"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cenkalti/backoff/v5"
	"github.com/jackc/pgx/v5"

	"kiln.dev/kiln/internal/store"
)

// changesChannel is the NOTIFY channel kilnd processes share;
// listenerName is the application_name of their listening connections (in
// pg_stat_activity).
const (
	changesChannel = "kiln_changes"
	listenerName   = "kiln-changes"
)

const (
	// maxBatch bounds the changes of one NOTIFY, well under PostgreSQL's
	// 8000-byte payload limit (a change is at most a few hundred bytes:
	// names are bounded by validation).
	maxBatch    = 20
	sendTimeout = 5 * time.Second
	queueSize   = 4096
	// linger is how long the sender waits after a change for others to
	// join its batch: without it, a busy worker's every checkpoint was a
	// NOTIFY of its own (a tenth of lease throughput), and a waiter in
	// another process notices 2 ms later.
	linger = 2 * time.Millisecond
)

// relay carries the store's changes to the other kilnd processes on the
// same database and theirs back, with LISTEN/NOTIFY: writers queue their
// changes (never waiting on the network), one goroutine sends them in
// batches with pg_notify, another holds a connection that LISTENs and hands
// what arrives to the store's watchers. Notifications are hints (a process
// that was not listening misses them), so each time the listening
// connection is made again, watchers get store.ChangeResync and read the
// store afresh; and a queue that overflows sends one ChangeResync instead
// of what it dropped.
type relay struct {
	url  string
	db   *sql.DB
	from string // this process's id: its own notifications come back and are skipped

	queue   chan store.Change
	dropped atomic.Bool

	stop    chan struct{} // closed by Close: the sender sends what is queued and ends
	sent    chan struct{} // closed when the sender ended
	ctx     context.Context
	cancel  context.CancelFunc // ends the listener
	wg      sync.WaitGroup
	deliver func(...store.Change)
}

// notice is a NOTIFY payload.
type notice struct {
	From    string         `json:"from"`
	Changes []store.Change `json:"changes"`
}

func newRelay(url string, db *sql.DB) *relay {
	var id [8]byte
	_, _ = rand.Read(id[:])
	ctx, cancel := context.WithCancel(context.Background())
	return &relay{url: url, db: db, from: hex.EncodeToString(id[:]), queue: make(chan store.Change, queueSize),
		stop: make(chan struct{}), sent: make(chan struct{}), ctx: ctx, cancel: cancel}
}

// Start implements sqlstore.Relay.
func (r *relay) Start(deliver func(...store.Change)) {
	r.deliver = deliver
	go func() {
		defer close(r.sent)
		r.send()
	}()
	r.wg.Go(r.listen)
}

// Send implements sqlstore.Relay.
func (r *relay) Send(changes []store.Change) {
	for _, c := range changes {
		select {
		case r.queue <- c:
		default:
			r.dropped.Store(true)
		}
	}
}

// Close implements sqlstore.Relay: what is queued is still sent (the last
// writes of a stopping process, such as the leases it hands back, are what
// the other replicas most need to hear of), then the relay stops.
func (r *relay) Close() error {
	select {
	case <-r.stop:
	default:
		close(r.stop)
	}
	if r.deliver != nil { // started
		<-r.sent
	}
	r.cancel()
	r.wg.Wait()
	return nil
}

// send NOTIFYs queued changes, each batch of them once (a step saved ten
// times while the previous batch was being sent goes out once), until
// Close, and then what is left in the queue, for at most sendTimeout.
func (r *relay) send() {
	flush := context.Background() // until Close
	for {
		var first store.Change
		select {
		case first = <-r.queue:
		case <-r.stop:
			var cancel context.CancelFunc
			flush, cancel = context.WithTimeout(context.Background(), sendTimeout)
			defer cancel()
			for r.sendBatch(flush, r.batch(nil)) {
			}
			return
		}
		if len(r.queue) < maxBatch {
			select {
			case <-time.After(linger):
			case <-r.stop:
			}
		}
		r.sendBatch(flush, r.batch(&first))
	}
}

// batch takes first (if any) and what else is queued, up to maxBatch
// distinct changes, or a ChangeResync if Send dropped some.
func (r *relay) batch(first *store.Change) []store.Change {
	var batch []store.Change
	seen := map[store.Change]bool{}
	add := func(c store.Change) {
		if !seen[c] {
			seen[c] = true
			batch = append(batch, c)
		}
	}
	if first != nil {
		add(*first)
	}
	// Bounded by what a queue holds, so that writers faster than this
	// loop cannot keep it from sending.
take:
	for taken := 0; len(batch) < maxBatch && taken < queueSize; taken++ {
		select {
		case c := <-r.queue:
			add(c)
		default:
			break take
		}
	}
	if r.dropped.Swap(false) {
		batch = []store.Change{{Kind: store.ChangeResync}}
	}
	return batch
}

// sendBatch NOTIFYs batch, and reports whether there was one to send. A
// failure (the database restarting) loses it: the other processes'
// listeners lose their connection too, and resync when it is back.
func (r *relay) sendBatch(ctx context.Context, batch []store.Change) bool {
	if len(batch) == 0 || ctx.Err() != nil {
		return false
	}
	payload, err := json.Marshal(notice{From: r.from, Changes: batch})
	if err != nil {
		return true // cannot happen: plain strings
	}
	ctx, cancel := context.WithTimeout(ctx, sendTimeout)
	defer cancel()
	_, _ = r.db.ExecContext(ctx, `SELECT pg_notify($1, $2)`, changesChannel, string(payload))
	return true
}

// listen holds a LISTEN connection, made again with backoff whenever it
// fails, until Close.
func (r *relay) listen() {
	b := &backoff.ExponentialBackOff{
		InitialInterval:     100 * time.Millisecond,
		RandomizationFactor: 0.5,
		Multiplier:          2,
		MaxInterval:         5 * time.Second,
	}
	b.Reset()
	for r.ctx.Err() == nil {
		r.listenOnce(b)
		select {
		case <-r.ctx.Done():
		case <-time.After(b.NextBackOff()):
		}
	}
}

// listenOnce connects, LISTENs, tells watchers to resync (anything written
// while nobody listened is unseen), and delivers notifications until the
// connection fails or the relay closes.
func (r *relay) listenOnce(b backoff.BackOff) {
	cfg, err := pgx.ParseConfig(r.url)
	if err != nil {
		return // cannot happen: Open parsed it
	}
	cfg.RuntimeParams["application_name"] = listenerName
	conn, err := pgx.ConnectConfig(r.ctx, cfg)
	if err != nil {
		return
	}
	defer conn.Close(context.Background())
	if _, err := conn.Exec(r.ctx, "LISTEN "+changesChannel); err != nil {
		return
	}
	b.Reset()
	r.deliver(store.Change{Kind: store.ChangeResync, Remote: true})
	for {
		n, err := conn.WaitForNotification(r.ctx)
		if err != nil {
			return
		}
		var msg notice
		if json.Unmarshal([]byte(n.Payload), &msg) != nil || msg.From == r.from {
			continue
		}
		for i := range msg.Changes {
			msg.Changes[i].Remote = true
		}
		r.deliver(msg.Changes...)
	}
}
