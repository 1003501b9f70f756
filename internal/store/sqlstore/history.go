package sqlstore

import (
	"context"
	"fmt"
	"strings"

	"kiln.dev/kiln/internal/store"
)

// A cluster's history (its operations and events) is filed under its uid,
// not its name: a cluster created again under the name of a deleted one
// starts with none of the old one's. Lists of it are asked for by name, so
// the name is first resolved to a uid (historyUID), and the page tokens
// carry that uid, so that a list goes on with the cluster it began with
// even if the name changed hands in between.

// namedUID is the uid a cluster's name stands for: the cluster that has the
// name now, else the last one deleted under it (its tombstone), else "" (the
// name never had a cluster since uids were given). Its arguments are the
// project and name, twice.
const namedUID = `COALESCE((SELECT uid FROM clusters WHERE project = ? AND name = ?),
	(SELECT uid FROM lease_tombstones WHERE project = ? AND name = ?), '')`

// historyUID resolves the name k to the uid its history is filed under
// (namedUID).
func (s *Store) historyUID(ctx context.Context, k store.Key) (string, error) {
	var uid string
	err := s.read.QueryRowContext(ctx, s.q(`SELECT `+namedUID), k.Project, k.Name, k.Project, k.Name).Scan(&uid)
	if err != nil {
		return "", fmt.Errorf("resolve cluster %s: %w", k, err)
	}
	return uid, nil
}

// historyPage returns the uid and the last key of the previous page of a
// list of k's history: from the page token, or for the first page, the uid
// the name stands for now and "".
func (s *Store) historyPage(ctx context.Context, k store.Key, token string) (uid, after string, err error) {
	if token == "" {
		uid, err = s.historyUID(ctx, k)
		return uid, "", err
	}
	last, err := decodeToken(token)
	if err != nil {
		return "", "", err
	}
	uid, after, ok := strings.Cut(last, "/")
	if !ok || after == "" {
		return "", "", fmt.Errorf("%w %q", store.ErrBadPageToken, token)
	}
	return uid, after, nil
}

// historyKey is what a page token of a history list keeps: the uid and
// the last key.
func historyKey(uid, last string) string { return uid + "/" + last }

// HistoryQueries are the lists of a cluster's operations and of its events
// as the dialect runs them, with ? or $n placeholders (project, cluster,
// cluster uid, after, limit), for EXPLAIN in tests.
func (s *Store) HistoryQueries() []string {
	return []string{s.q(listOperationsQuery), s.q(listEventsQuery)}
}
