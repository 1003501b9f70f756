package sqlstore

import (
	"context"
	"encoding/base64"
	"fmt"
	"strconv"

	"kiln.dev/kiln/internal/store"
)

const (
	defaultLimit = 100
	maxLimit     = 1000
)

func limitOf(pg store.Page) int {
	switch {
	case pg.Limit <= 0:
		return defaultLimit
	case pg.Limit > maxLimit:
		return maxLimit
	}
	return pg.Limit
}

// Page tokens are the base64 of the last key of the previous page, prefixed
// so that a token of one kind of list is not mistaken for another's.

func encodeToken(last string) string {
	return base64.RawURLEncoding.EncodeToString([]byte("k1:" + last))
}

func decodeToken(tok string) (string, error) {
	if tok == "" {
		return "", nil
	}
	b, err := base64.RawURLEncoding.DecodeString(tok)
	if err != nil || len(b) < 3 || string(b[:3]) != "k1:" {
		return "", fmt.Errorf("%w %q", store.ErrBadPageToken, tok)
	}
	return string(b[3:]), nil
}

func decodeIDToken(tok string) (int64, error) {
	s, err := decodeToken(tok)
	if err != nil || s == "" {
		return 0, err
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("%w %q", store.ErrBadPageToken, tok)
	}
	return n, nil
}

// queryPage runs a list query (its last placeholder is the row limit), scans
// up to limit+1 rows with scan and cuts the page with trim.
func queryPage[T any](ctx context.Context, s *Store, query string, args []any, limit int,
	scan func(scanner) (T, error), key func(T) string) ([]T, string, error) {
	rows, err := s.read.QueryContext(ctx, s.q(query), append(args, limit+1)...)
	if err != nil {
		return nil, "", err
	}
	defer rows.Close()
	var out []T
	for rows.Next() {
		v, err := scan(rows)
		if err != nil {
			return nil, "", err
		}
		out = append(out, v)
	}
	if err := rows.Err(); err != nil {
		return nil, "", err
	}
	out, next := trim(out, limit, key)
	return out, next, nil
}

// trim cuts a page fetched with limit+1 rows down to limit and says what the
// next token is: the key of the last row kept, or "" on the last page.
func trim[T any](rows []T, limit int, key func(T) string) ([]T, string) {
	if len(rows) <= limit {
		return rows, ""
	}
	rows = rows[:limit]
	return rows, encodeToken(key(rows[limit-1]))
}
