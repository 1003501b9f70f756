package sqlstore

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"strconv"

	"kiln.dev/kiln/internal/store"
)

// AppendEvent adds an event to a cluster's timeline. The store always
// assigns e.ID (increasing); it sets e.Time to now when zero, and
// e.ClusterUID, when empty, to the uid the name stands for (namedUID).
// Events outlive their cluster and need no lease.
func (s *Store) AppendEvent(ctx context.Context, e *store.Event) error {
	err := s.writeOne(ctx, func(ctx context.Context, q execer) error { return s.insertEvent(ctx, q, e) })
	if err != nil {
		return fmt.Errorf("append event to cluster %s/%s: %w", e.Project, e.Cluster, err)
	}
	return nil
}

// insertEvents appends events with the record they are about, in the same
// transaction (q). An event without a cluster uid gets uid, when not
// empty: that of the operation it is about.
func (s *Store) insertEvents(ctx context.Context, q rowQuerier, uid string, events []*store.Event) error {
	for _, e := range events {
		if e.ClusterUID == "" {
			e.ClusterUID = uid
		}
		if err := s.insertEvent(ctx, q, e); err != nil {
			return fmt.Errorf("append event: %w", err)
		}
	}
	return nil
}

// rowQuerier is a *sql.DB or a *sql.Tx.
type rowQuerier interface {
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}

func (s *Store) insertEvent(ctx context.Context, q rowQuerier, e *store.Event) error {
	if e.Time.IsZero() {
		e.Time = s.now().UTC()
	}
	data, err := json.Marshal(&e.Event)
	if err != nil {
		return err
	}
	var (
		id  int64
		uid string
	)
	err = q.QueryRowContext(ctx, s.q(`INSERT INTO events (project, cluster, cluster_uid, time, data)
		VALUES (?, ?, COALESCE(NULLIF(?, ''), `+namedUID+`), ?, ?) RETURNING id, cluster_uid`),
		e.Project, e.Cluster, e.ClusterUID, e.Project, e.Cluster, e.Project, e.Cluster, toNanos(e.Time), string(data)).Scan(&id, &uid)
	if err != nil {
		return err
	}
	e.ID, e.ClusterUID = id, uid
	return nil
}

// listEventsQuery is a page of a cluster's events (project, cluster,
// cluster uid, after, limit), served by the index events_cluster.
const listEventsQuery = `SELECT id, time, data FROM events
	WHERE project = ? AND cluster = ? AND cluster_uid = ? AND id > ? ORDER BY id LIMIT ?`

// ListEvents lists the events of the cluster named k by id (oldest first):
// those of the cluster that has the name now or, when none has, of the
// last one deleted under it (historyUID).
func (s *Store) ListEvents(ctx context.Context, k store.Key, pg store.Page) ([]*store.Event, string, error) {
	wrap := func(err error) error { return fmt.Errorf("list events of cluster %s: %w", k, err) }
	uid, last, err := s.historyPage(ctx, k, pg.Token)
	if err != nil {
		return nil, "", wrap(err)
	}
	var after int64
	if last != "" {
		if after, err = strconv.ParseInt(last, 10, 64); err != nil {
			return nil, "", wrap(fmt.Errorf("%w %q", store.ErrBadPageToken, pg.Token))
		}
	}
	scan := func(r scanner) (*store.Event, error) {
		var id, t int64
		var data string
		if err := r.Scan(&id, &t, &data); err != nil {
			return nil, err
		}
		e := &store.Event{Project: k.Project, Cluster: k.Name, ClusterUID: uid}
		if err := json.Unmarshal([]byte(data), &e.Event); err != nil {
			return nil, fmt.Errorf("decode event %d: %w", id, err)
		}
		e.ID, e.Time = id, fromNanos(t)
		return e, nil
	}
	out, next, err := queryPage(ctx, s, listEventsQuery, []any{k.Project, k.Name, uid, after}, limitOf(pg),
		scan, func(e *store.Event) string { return historyKey(uid, strconv.FormatInt(e.ID, 10)) })
	if err != nil {
		return nil, "", wrap(err)
	}
	return out, next, nil
}
