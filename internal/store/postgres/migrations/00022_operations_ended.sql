-- Retention prunes the operations that ended before its cutoff (Prune):
-- found by their end, not by reading every operation. Written only when an
-- operation ends, so a step's checkpoint does not touch it. Kept column for
-- column in step with the other store's migrations.

-- +goose Up
CREATE INDEX operations_ended ON operations (end_time);

-- +goose Down
DROP INDEX operations_ended;
