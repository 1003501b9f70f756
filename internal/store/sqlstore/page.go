package sqlstore

import (
	"encoding/base64"
	"errors"
	"fmt"
	"strconv"

	"kiln.dev/kiln/internal/store"
)

const (
	defaultLimit = 100
	maxLimit     = 1000
)

// errBadToken is returned for a page token this store did not hand out.
var errBadToken = errors.New("invalid page token")

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
		return "", fmt.Errorf("%w %q", errBadToken, tok)
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
		return 0, fmt.Errorf("%w %q", errBadToken, tok)
	}
	return n, nil
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
