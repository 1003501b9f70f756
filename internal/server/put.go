package server

import (
	"context"
	"errors"
	"net/http"

	"kiln.dev/kiln/internal/store"
)

// putLoop describes a synchronous PUT (projects, users, project children)
// to putRecord.
type putLoop[R, W any] struct {
	what  string                                   // the kind, for errors: "project", "user", ... (refOf)
	get   func(ctx context.Context) (R, error)     // store.ErrNotFound: no record yet
	build func(existing R, exists bool) (R, error) // the record to write
	put   func(ctx context.Context, rec R, c store.Cond) error
	etag  func(R) string
	out   func(R) W
	// raced, when set, runs after a write lost a race, before trying again
	// (a parent that vanished ends the loop with its error).
	raced func() error
}

// putRecord runs a synchronous PUT: read the record, check the request's
// conditions against it, build the record to write and write it on the
// condition that the stored one did not change meanwhile (trying again
// when it did), then answer 201 created or 200 replaced with the record.
func putRecord[R, W any](w http.ResponseWriter, r *http.Request, conds conditions, l putLoop[R, W]) error {
	for range attempts(r.Context()) {
		existing, err := l.get(r.Context())
		exists := err == nil
		if err != nil && !errors.Is(err, store.ErrNotFound) {
			return err
		}
		current := ""
		if exists {
			current = l.etag(existing)
		}
		if err := conds.check(current, refOf(r, l.what)); err != nil {
			return err
		}
		rec, err := l.build(existing, exists)
		if err != nil {
			return err
		}
		err = l.put(r.Context(), rec, writeCond(current))
		if raced(err) {
			if l.raced != nil {
				if err := l.raced(); err != nil {
					return err
				}
			}
			continue
		}
		if err != nil {
			return err
		}
		status := http.StatusOK
		if !exists {
			status = http.StatusCreated
		}
		w.Header().Set("ETag", quoteETag(l.etag(rec)))
		writeJSON(w, status, l.out(rec))
		return nil
	}
	return errBusy(refOf(r, l.what))
}
