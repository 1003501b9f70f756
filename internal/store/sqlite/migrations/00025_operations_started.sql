-- The fleet page (store.FleetSummary) counts the operations begun in the
-- last two weeks by kind and status, and ranks their durations: found by
-- their start, and read from this index alone (the operation's row, with
-- its steps, is read only for a failure's error). Kept in step with the
-- other store's migrations.

-- +goose Up
CREATE INDEX operations_started ON operations (start_time, kind, status, end_time, project);

-- +goose Down
DROP INDEX operations_started;
