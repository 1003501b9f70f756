-- Events cost less to write (a fleet's creates write 29 a cluster, each
-- in the transaction of its step's checkpoint): no index on their time.
-- Prune takes the oldest events in id order (ids grow with time), so
-- events_time served nothing else. Kept in step with
-- ../../sqlite/migrations, where the table also lost AUTOINCREMENT (an
-- identity column here never hands out an id twice).

-- +goose Up
DROP INDEX events_time;

-- +goose Down
CREATE INDEX events_time ON events (time);
