package sqlstore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"

	"kiln.dev/kiln/internal/secret"
	"kiln.dev/kiln/internal/store"
)

var _ store.Resealer = (*Store)(nil)

const (
	// resealPage is how many rows Reseal reads at a time.
	resealPage = 100
	// resealAttempts bounds how often Reseal tries a row that keeps
	// changing under it.
	resealAttempts = 5
)

// sealedRow is a row of a sealed column: its primary key and stored value.
type sealedRow struct {
	key   []string
	value []byte
}

// Reseal implements store.Resealer over the sealed columns (sealer.go).
func (s *Store) Reseal(ctx context.Context, limit int) (int, error) {
	if s.sealer == nil {
		return 0, errors.New("reseal: the store was opened without a sealer: there is no key to reseal under")
	}
	n := 0
	for _, c := range sealedColumns {
		budget := -1
		if limit > 0 {
			budget = limit - n
		}
		m, err := s.resealColumn(ctx, c, budget)
		n += m
		if err != nil {
			return n, err
		}
		if limit > 0 && n >= limit {
			break
		}
	}
	return n, nil
}

// resealColumn reseals the values of c that are not current, at most budget
// of them (negative: all), reading the table a page at a time in primary
// key order.
func (s *Store) resealColumn(ctx context.Context, c sealedColumn, budget int) (int, error) {
	n := 0
	var after []string
	for {
		page, err := s.readSealedPage(ctx, c, after)
		if err != nil {
			return n, fmt.Errorf("reseal %s.%s: %w", c.table, c.column, err)
		}
		for _, r := range page {
			if budget >= 0 && n >= budget {
				return n, nil
			}
			done, err := s.resealRow(ctx, c, r)
			if err != nil {
				return n, err
			}
			if done {
				n++
			}
		}
		if len(page) < resealPage {
			return n, nil
		}
		after = page[len(page)-1].key
	}
}

// readSealedPage reads up to resealPage rows of c whose primary key is
// after after (from the first row when after is nil).
func (s *Store) readSealedPage(ctx context.Context, c sealedColumn, after []string) ([]sealedRow, error) {
	keys := strings.Join(c.key, ", ")
	query := `SELECT ` + keys + `, ` + c.column + ` FROM ` + c.table
	var args []any
	if after != nil {
		query += ` WHERE (` + keys + `) > (?` + strings.Repeat(", ?", len(c.key)-1) + `)`
		for _, k := range after {
			args = append(args, k)
		}
	}
	query += ` ORDER BY ` + keys + ` LIMIT ?`
	rows, err := s.read.QueryContext(ctx, s.q(query), append(args, resealPage)...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var page []sealedRow
	for rows.Next() {
		r := sealedRow{key: make([]string, len(c.key))}
		dest := make([]any, 0, len(c.key)+1)
		for i := range r.key {
			dest = append(dest, &r.key[i])
		}
		if err := rows.Scan(append(dest, &r.value)...); err != nil {
			return nil, err
		}
		page = append(page, r)
	}
	return page, rows.Err()
}

// resealRow rewrites r's value under the current key unless it is current
// already, with an update conditional on the value read. When a concurrent
// writer changed the row in between, it reads the row again and starts
// over. It reports whether it rewrote the row.
func (s *Store) resealRow(ctx context.Context, c sealedColumn, r sealedRow) (bool, error) {
	where := strings.Join(c.key, " = ? AND ") + " = ?"
	keyArgs := make([]any, len(r.key))
	for i, k := range r.key {
		keyArgs[i] = k
	}
	old := r.value
	for range resealAttempts {
		if s.sealer.Current(old) {
			return false, nil
		}
		plain, err := s.open(c, old, r.key...)
		if err != nil {
			return false, fmt.Errorf("reseal: %w", err)
		}
		fresh, err := s.seal(c, plain, r.key...)
		if err != nil {
			return false, fmt.Errorf("reseal: %w", err)
		}
		args := append(append([]any{c.arg(fresh)}, keyArgs...), c.arg(old))
		res, err := s.write.ExecContext(ctx, s.q(`UPDATE `+c.table+` SET `+c.column+` = ? WHERE `+where+` AND `+c.column+` = ?`), args...)
		if err != nil {
			return false, fmt.Errorf("reseal %s.%s of %s: %w", c.table, c.column, strings.Join(r.key, "/"), err)
		}
		if n, err := res.RowsAffected(); err != nil {
			return false, fmt.Errorf("reseal %s.%s of %s: %w", c.table, c.column, strings.Join(r.key, "/"), err)
		} else if n == 1 {
			return true, nil
		}
		// Written (or deleted) since it was read: read it again.
		err = s.write.QueryRowContext(ctx, s.q(`SELECT `+c.column+` FROM `+c.table+` WHERE `+where), keyArgs...).Scan(&old)
		if errors.Is(err, sql.ErrNoRows) {
			return false, nil
		}
		if err != nil {
			return false, fmt.Errorf("reseal %s.%s of %s: %w", c.table, c.column, strings.Join(r.key, "/"), err)
		}
	}
	return false, fmt.Errorf("reseal %s.%s of %s: the row changed %d times while being resealed; run the reseal again",
		c.table, c.column, strings.Join(r.key, "/"), resealAttempts)
}

// SealedKeys implements store.Resealer. It reads only the start of each
// value, where the key id is.
func (s *Store) SealedKeys(ctx context.Context) (map[string]int, error) {
	counts := map[string]int{}
	for _, c := range sealedColumns {
		if err := s.countKeys(ctx, c, counts); err != nil {
			return nil, fmt.Errorf("count sealed keys of %s.%s: %w", c.table, c.column, err)
		}
	}
	return counts, nil
}

// countKeys adds the key ids of c's values to counts. A value that starts
// like a sealed value but names no key counts under "invalid".
func (s *Store) countKeys(ctx context.Context, c sealedColumn, counts map[string]int) error {
	// 100 bytes hold the prefix, a key id of up to 64 characters and the
	// colon after it.
	rows, err := s.read.QueryContext(ctx, `SELECT substr(`+c.column+`, 1, 100) FROM `+c.table)
	if err != nil {
		return err
	}
	defer rows.Close()
	for rows.Next() {
		var head []byte
		if err := rows.Scan(&head); err != nil {
			return err
		}
		id, ok := secret.KeyID(head)
		switch {
		case ok:
			counts[id]++
		case secret.IsSealed(head):
			counts["invalid"]++
		default:
			counts[""]++
		}
	}
	return rows.Err()
}
