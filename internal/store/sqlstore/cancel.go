package sqlstore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	v1 "kiln.dev/kiln/api/v1"
	"kiln.dev/kiln/internal/store"
)

// CancelRequest reads only whether operation id's cancel was requested
// (nil if not): a plan asks before every step, and reading the whole
// operation for it was a tenth of the worker's time.
func (s *Store) CancelRequest(ctx context.Context, id string) (*v1.CancelRequest, error) {
	var at int64
	var by string
	err := s.read.QueryRowContext(ctx, s.q(`SELECT cancel_requested_at, cancel_requested_by FROM operations WHERE id = ?`), id).Scan(&at, &by)
	if errors.Is(err, sql.ErrNoRows) {
		err = store.ErrNotFound
	}
	if err != nil {
		return nil, fmt.Errorf("read the cancel request of operation %s: %w", id, err)
	}
	if at == 0 {
		return nil, nil
	}
	return &v1.CancelRequest{By: by, Time: fromNanos(at)}, nil
}
